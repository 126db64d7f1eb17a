// The victim selections of unit_table.h on hand-built tables, against a sort of the candidates.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "policy/unit_table.h"

namespace h2okv::policy::detail {
namespace {

// A table of n slots: positions shuffled over the slots (-1 for about a quarter, free), evictable range
// [lo, hi); its selection scratch (n entries, shared by a policy's tables) is a buffer of the test's.
std::vector<int32_t> g_scratch(1024);

unit_table make_table(int32_t n, int64_t lo, int64_t hi, std::mt19937_64& rng) {
    unit_table t;
    t.pos.assign(n, -1);
    t.score.assign(n, 0.0);
    g_scratch.assign(static_cast<size_t>(n), 0);
    t.scratch = g_scratch.data();
    t.victim_slot.resize(n);
    t.victim_pos.resize(n);
    std::vector<int64_t> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int32_t s = 0; s < n; ++s) {
        if (rng() % 4 != 0) t.pos[s] = perm[s];
        if (t.pos[s] >= 0) t.score[s] = static_cast<double>(rng() % 5) * 0.5;  // many exact ties
    }
    t.high_water = n;
    t.evictable_lo = lo;
    t.evictable_hi = hi;
    return t;
}

// The first `count` evictable slots by key, sorted the plain way; their positions ascending.
template <class Less>
std::vector<int64_t> expected(const unit_table& t, int count, Less less) {
    std::vector<int32_t> c;
    for (int32_t s = 0; s < t.high_water; ++s) {
        if (t.pos[s] >= t.evictable_lo && t.pos[s] < t.evictable_hi) c.push_back(s);
    }
    std::sort(c.begin(), c.end(), less);
    std::vector<int64_t> out;
    for (int k = 0; k < count; ++k) out.push_back(t.pos[c[k]]);
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<int64_t> chosen(const unit_table& t) {
    std::vector<int64_t> out(t.victim_pos.begin(), t.victim_pos.begin() + t.n_victims);
    for (int k = 0; k < t.n_victims; ++k)
        EXPECT_EQ(t.pos[t.victim_slot[k]], out[k]) << "slot of victim " << k;
    return out;
}

TEST(policy_victims, LowestScoresMatchASortOfTheCandidates) {
    std::mt19937_64 rng(8);
    for (int trial = 0; trial < 300; ++trial) {
        const auto n = static_cast<int32_t>(20 + rng() % 100);
        unit_table t = make_table(n, 3, n - 5, rng);
        const int count = 1 + static_cast<int>(rng() % 6);
        const auto want = expected(t, count, [&](int32_t a, int32_t b) {
            return t.score[a] < t.score[b] || (t.score[a] == t.score[b] && t.pos[a] < t.pos[b]);
        });
        pick_lowest_scores(t, count);
        EXPECT_EQ(chosen(t), want) << "count " << count;
    }
}

TEST(policy_victims, OldestMatchesASortOfTheCandidates) {
    std::mt19937_64 rng(9);
    for (int trial = 0; trial < 300; ++trial) {
        const auto n = static_cast<int32_t>(20 + rng() % 100);
        unit_table t = make_table(n, 2, n - 3, rng);
        t.scores_all_zero = trial % 2 == 0;
        if (t.scores_all_zero) std::fill(t.score.begin(), t.score.end(), 0.0);
        const int count = 1 + static_cast<int>(rng() % 6);
        const auto want = expected(t, count, [&](int32_t a, int32_t b) { return t.pos[a] < t.pos[b]; });
        pick_oldest(t, count);
        EXPECT_EQ(chosen(t), want) << "count " << count << (t.scores_all_zero ? " (scores all zero)" : "");
    }
}

TEST(policy_victims, NanScoresRankLast) {
    std::mt19937_64 rng(10);
    unit_table t = make_table(40, 0, 40, rng);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (int32_t s = 0; s < 40; ++s) {
        if (t.pos[s] >= 0) t.score[s] = t.pos[s] < 30 ? nan : 1.0;
    }
    const auto finite_first = expected(t, 2, [&](int32_t a, int32_t b) {
        const double ka = std::isnan(t.score[a]) ? INFINITY : t.score[a];
        const double kb = std::isnan(t.score[b]) ? INFINITY : t.score[b];
        return ka < kb || (ka == kb && t.pos[a] < t.pos[b]);
    });
    pick_lowest_scores(t, 1);
    ASSERT_EQ(t.n_victims, 1);
    EXPECT_GE(t.victim_pos[0], 30) << "a NaN score never wins";
    pick_lowest_scores(t, 2);
    EXPECT_EQ(chosen(t), finite_first);
    for (double& v : t.score) v = nan;
    pick_lowest_scores(t, 1);
    ASSERT_EQ(t.n_victims, 1) << "all NaN still yields a victim: the oldest";
    EXPECT_EQ(chosen(t), expected(t, 1, [&](int32_t a, int32_t b) { return t.pos[a] < t.pos[b]; }));
}

}  // namespace
}  // namespace h2okv::policy::detail
