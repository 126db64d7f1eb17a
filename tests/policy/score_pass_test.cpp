// The score pass's SIMD variants against its scalar reference (and the scalar against a brute-force minimum),
// over odd sizes, free slots, exact ties, NaN scores and empty or full evictable ranges.
#include "policy/score_pass.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "h2okv/core/cpu_isa.h"

namespace h2okv::policy::detail {
namespace {

struct slot_arrays {
    std::vector<double> score, row;
    std::vector<int64_t> pos;
};

slot_arrays random_arrays(int32_t n, std::mt19937_64& rng, bool ties, bool nans) {
    slot_arrays a;
    a.score.resize(n);
    a.row.resize(n);
    a.pos.resize(n);
    // Unique positions in shuffled slots, about a fifth of the slots free.
    std::vector<int64_t> perm(n);
    std::iota(perm.begin(), perm.end(), 1000);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int32_t s = 0; s < n; ++s) {
        const bool free_slot = u(rng) < 0.2;
        a.pos[s] = free_slot ? -1 : perm[s];
        a.score[s] = free_slot ? 0.0 : (ties ? std::floor(u(rng) * 3) * 0.25 : u(rng));
        a.row[s] = free_slot ? 0.0 : (ties ? std::floor(u(rng) * 2) * 0.125 : u(rng) * 0.01);
        if (nans && !free_slot && u(rng) < 0.1) a.score[s] = std::nan("");
    }
    return a;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
    return a.size() == b.size() &&
           (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

// The lowest (score, position) among lo <= pos < hi, NaN never winning, written the obvious way.
int32_t brute_force_lowest(const slot_arrays& a, int64_t lo, int64_t hi) {
    int32_t best = -1;
    for (int32_t s = 0; s < static_cast<int32_t>(a.pos.size()); ++s) {
        if (a.pos[s] < lo || a.pos[s] >= hi || std::isnan(a.score[s])) continue;
        if (best < 0 || a.score[s] < a.score[best] ||
            (a.score[s] == a.score[best] && a.pos[s] < a.pos[best])) {
            best = s;
        }
    }
    return best;
}

TEST(policy_score_pass, ScalarFindsTheBruteForceMinimum) {
    std::mt19937_64 rng(1);
    const auto& scalar = *score_pass_variants().front();
    ASSERT_STREQ(scalar.isa, "scalar");
    for (int trial = 0; trial < 300; ++trial) {
        const auto n = static_cast<int32_t>(rng() % 200);
        const slot_arrays a = random_arrays(n, rng, trial % 2 == 0, trial % 5 == 0);
        const int64_t lo = 1000 + static_cast<int64_t>(rng() % 50),
                      hi = lo + static_cast<int64_t>(rng() % 200);
        EXPECT_EQ(scalar.find_lowest(a.score.data(), a.pos.data(), n, lo, hi), brute_force_lowest(a, lo, hi));
    }
}

TEST(policy_score_pass, ScalarCountsEveryNewerPositionOnce) {
    std::mt19937_64 rng(3);
    const auto& scalar = *score_pass_variants().front();
    for (int trial = 0; trial < 100; ++trial) {
        const auto n = static_cast<int32_t>(rng() % 100);
        const slot_arrays a = random_arrays(n, rng, false, false);
        const int64_t victim = 1000 + static_cast<int64_t>(rng() % (n + 1));
        std::vector<int32_t> drop(n, 7);
        scalar.count_older(a.pos.data(), n, victim, drop.data());
        for (int32_t s = 0; s < n; ++s) EXPECT_EQ(drop[s], a.pos[s] > victim ? 8 : 7) << "slot " << s;
    }
}

// The policies use the variant of the process's one ISA decision (H2OKV_ISA when set), as the kernels do.
// Without H2OKV_ISA that is the fastest variant, the last.
TEST(policy_score_pass, PolicyPassIsTheSelectedIsas) {
    EXPECT_STREQ(score_pass().isa, core::cpu_isa_name(core::selected_isa()));
    auto requested = core::requested_isa();
    ASSERT_TRUE(requested.ok()) << requested.error().to_string();
    if (!requested->has_value()) {
        EXPECT_EQ(&score_pass(), score_pass_variants().back());
    }
}

TEST(policy_score_pass, EveryVariantMatchesTheScalarReference) {
    const auto variants = score_pass_variants();
    const auto& scalar = *variants.front();
    std::mt19937_64 rng(2);
    int compared = 0;
    for (const score_pass_fns* v : variants.subspan(1)) {
        SCOPED_TRACE(v->isa);
        std::vector<int32_t> sizes;
        for (int32_t n = 0; n <= 70; ++n) sizes.push_back(n);
        for (int32_t n : {127, 128, 129, 1000, 4097}) sizes.push_back(n);
        for (int32_t n : sizes) {
            for (int trial = 0; trial < 6; ++trial) {
                const bool ties = trial % 2 == 0, nans = trial == 5;
                const slot_arrays a = random_arrays(n, rng, ties, nans);
                const int64_t lo = trial == 3 ? 0 : 1000 + static_cast<int64_t>(rng() % 20);
                const int64_t hi = trial == 4 ? lo - 1 : lo + static_cast<int64_t>(rng() % (n + 20));
                const double decay = std::vector<double>{1.0, 0.98, 0.5, 0.0}[trial % 4];
                SCOPED_TRACE(::testing::Message() << "n " << n << " trial " << trial << " decay " << decay);

                EXPECT_EQ(v->find_lowest(a.score.data(), a.pos.data(), n, lo, hi),
                          scalar.find_lowest(a.score.data(), a.pos.data(), n, lo, hi));

                slot_arrays want = a, got = a;
                scalar.add_row(want.score.data(), want.row.data(), n, decay);
                v->add_row(got.score.data(), got.row.data(), n, decay);
                EXPECT_TRUE(same_bits(want.score, got.score)) << "add_row";

                want = a;
                got = a;
                const int32_t w = scalar.add_row_find_lowest(want.score.data(), want.row.data(),
                                                             want.pos.data(), n, decay, lo, hi);
                const int32_t g = v->add_row_find_lowest(got.score.data(), got.row.data(), got.pos.data(), n,
                                                         decay, lo, hi);
                EXPECT_EQ(g, w) << "add_row_find_lowest";
                EXPECT_TRUE(same_bits(want.score, got.score)) << "add_row_find_lowest";

                // The victim: a held position, a free slot's -1, or below or above every position.
                const int64_t victim = n > 0 && trial < 3
                                           ? a.pos[rng() % n]
                                           : std::vector<int64_t>{-1, 0, 999, 1 << 20}[trial % 4];
                std::vector<int32_t> drop_want(n), drop_got(n);
                for (int32_t s = 0; s < n; ++s)
                    drop_want[s] = drop_got[s] = static_cast<int32_t>(rng() % 1000);
                scalar.count_older(a.pos.data(), n, victim, drop_want.data());
                v->count_older(a.pos.data(), n, victim, drop_got.data());
                EXPECT_EQ(drop_got, drop_want) << "count_older";
                ++compared;
            }
        }
    }
    RecordProperty("compared", compared);
    if (variants.size() == 1) GTEST_SKIP() << "this CPU runs only the scalar variant";
}

TEST(policy_score_pass, UpdateIsMultiplyThenAddWithTwoRoundings) {
    // a * d + r rounds twice; a fused multiply-add rounds once and differs in the last bit here: the exact
    // product 1 + 2^-26 + 2^-54 rounds to 1 + 2^-26, and adding 2^-53 is then a tie that stays even.
    const double a = 1.0 + std::ldexp(1.0, -27), d = a, r = std::ldexp(1.0, -53);
    const double two_roundings = [&] {
        volatile double product = a * d;
        return product + r;
    }();
    ASSERT_NE(two_roundings, std::fma(a, d, r)) << "the constants must separate the two";
    for (const score_pass_fns* v : score_pass_variants()) {
        std::vector<double> score(37, a), row(37, r);
        v->add_row(score.data(), row.data(), 37, d);
        for (double s : score) EXPECT_EQ(s, two_roundings) << v->isa;
    }
}

}  // namespace
}  // namespace h2okv::policy::detail
