// attend: variants against the reference (and the reference against a long-double formula) over head sizes
// with tails and slot counts, the fused score_row bookkeeping, and edge cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "h2okv/kernels/kernels.h"
#include "kernel_test_util.h"
#include "kernels/dispatch.h"
#include "kernels/ref/ref.h"
#ifdef H2OKV_KERNELS_X86
#include "kernels/x86/avx2.h"
#endif

namespace h2okv::kernels {
namespace {

using test_support::gamma_k;
using test_support::random_floats;
constexpr double u = test_support::unit_roundoff;

using attend_fn = void (*)(const float*, const float*, const float*, int, const int32_t*, int, float, float*,
                           float*, double*);

struct variant {
    const char* name;
    attend_fn fn;
};

std::vector<variant> all_variants() {
    std::vector<variant> v = {{"reference", &ref::attend}, {"dispatched", &attend}};
#ifdef H2OKV_KERNELS_X86
    if (detail::cpu_has_avx2()) v.push_back({"avx2", &avx2::attend});
#endif
    return v;
}

// A K/V store of n_slots rows and a random subset of n slots in random order.
struct store {
    int head_dim = 0;
    std::vector<float> q, k, v;
    std::vector<int32_t> slots;
};

store make_store(int head_dim, int n_slots, int n, uint32_t seed, float q_scale = 1.0f) {
    store s;
    s.head_dim = head_dim;
    s.q = random_floats(static_cast<size_t>(head_dim), seed, q_scale);
    s.k = random_floats(static_cast<size_t>(n_slots) * head_dim, seed + 1);
    s.v = random_floats(static_cast<size_t>(n_slots) * head_dim, seed + 2);
    std::vector<int32_t> all(static_cast<size_t>(n_slots));
    std::iota(all.begin(), all.end(), 0);
    std::mt19937 rng(seed + 3);
    std::shuffle(all.begin(), all.end(), rng);
    s.slots.assign(all.begin(), all.begin() + n);
    return s;
}

TEST(Attend, ReferenceMatchesFormula) {
    for (int head_dim : {1, 8, 13, 64}) {
        for (int n : {1, 2, 9, 300}) {
            const store s = make_store(head_dim, n + 5, n, static_cast<uint32_t>(head_dim * 1000 + n), 2.0f);
            const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
            std::vector<float> out(static_cast<size_t>(head_dim));
            std::vector<float> w(static_cast<size_t>(n));
            ref::attend(s.q.data(), s.k.data(), s.v.data(), head_dim, s.slots.data(), n, scale, out.data(),
                        w.data(), nullptr);
            std::vector<long double> sc(static_cast<size_t>(n));
            long double mx = -INFINITY;
            for (int j = 0; j < n; ++j) {
                long double d = 0;
                for (int i = 0; i < head_dim; ++i) {
                    d += static_cast<long double>(s.q[i]) * s.k[s.slots[j] * head_dim + i];
                }
                sc[j] = d * scale;
                mx = std::max(mx, sc[j]);
            }
            long double sum = 0;
            double arg_error = 0;
            for (int j = 0; j < n; ++j) {
                sum += std::exp(sc[j] - mx);
                // The score rounds to float (u|s_j|), so do the max (u|m|) and s_j - m (u|s_j - m|): each
                // shifts exp's argument.
                arg_error =
                    std::max(arg_error, static_cast<double>(2 * u * (std::fabs(sc[j]) + std::fabs(mx))));
            }
            for (int j = 0; j < n; ++j) {
                const long double wj = std::exp(sc[j] - mx) / sum;
                // Argument errors of numerator and sum, then expf (1u each), the product and its rounding.
                ASSERT_LE(std::fabs(w[j] - wj), (2 * arg_error + gamma_k(4)) * wj + 1e-40)
                    << "hd " << head_dim << " n " << n << " weight " << j;
            }
        }
    }
}

// Bound on |fast - ref| for the weights and the output, from the operations of the fast path (see the
// derivation in each step below).
struct attend_bounds {
    std::vector<double> weight;  // per j
    std::vector<double> out;     // per d
};

attend_bounds bounds_for(const store& s, int n, float scale, const std::vector<float>& w_ref) {
    const int hd = s.head_dim;
    // Scores: the fast dot keeps one accumulator per slot, so each product passes through up to ceil(hd/8)
    // FMAs (the masked tail included) and a 3-level add tree, then the scale product; the reference rounds
    // once. So |ds_j| <= gamma(hd/8 + 5) * scale * sum_i |q_i k_ji| + 2u |s_j|.
    double ds = 0;
    double s_max = 0;
    for (int j = 0; j < n; ++j) {
        double a = 0;
        double dot = 0;
        for (int i = 0; i < hd; ++i) {
            a += std::fabs(static_cast<double>(s.q[i]) * s.k[s.slots[j] * hd + i]);
            dot += static_cast<double>(s.q[i]) * s.k[s.slots[j] * hd + i];
        }
        s_max = std::max(s_max, std::fabs(dot * scale));
        ds = std::max(ds, gamma_k(hd / 8.0 + 5) * scale * a + 2 * u * std::fabs(dot * scale));
    }
    // s_j - max shifts by at most 2 * ds, and its float rounding (u * |s_j - max| <= 2u * s_max in each path)
    // differs; exp turns an absolute argument error into the same relative error, plus the vector exp's own
    // 3u (bounded in ops_test.cpp) and the reference's 1u. Normalising doubles the worst relative error
    // (numerator and sum), the float lane sum adds gamma(n/16 + 5), the reciprocal and product 2u, the
    // reference's rounding u.
    const double arg = 2 * ds + 4 * u * s_max;
    const double rel_w = 2 * (arg + 4 * u) + gamma_k(n / 16.0 + 5) + 3 * u;
    attend_bounds b;
    b.weight.resize(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) b.weight[j] = rel_w * w_ref[j] + 2e-38;  // the vector exp flushes below e^-87
    // Output: sum_j w_j v_jd with the weights' error, plus the fast path's float accumulation over n slots
    // (one fma per slot: gamma(n + 1)), plus the reference's final rounding.
    b.out.resize(static_cast<size_t>(hd));
    for (int d = 0; d < hd; ++d) {
        double m = 0;
        for (int j = 0; j < n; ++j) m += w_ref[j] * std::fabs(s.v[s.slots[j] * hd + d]);
        b.out[d] = (rel_w + gamma_k(n + 2)) * m + 1e-37;
    }
    return b;
}

TEST(Attend, VariantsMatchReference) {
    int compared = 0;
    for (int head_dim : {1, 3, 8, 12, 16, 24, 64, 80, 128}) {
        for (int n : {1, 2, 7, 8, 9, 17, 64, 1000, 4096}) {
            for (float q_scale : {0.5f, 4.0f}) {
                const store s =
                    make_store(head_dim, n + 3, n, static_cast<uint32_t>(head_dim * 7919 + n), q_scale);
                const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
                std::vector<float> out_ref(static_cast<size_t>(head_dim));
                std::vector<float> w_ref(static_cast<size_t>(n));
                ref::attend(s.q.data(), s.k.data(), s.v.data(), head_dim, s.slots.data(), n, scale,
                            out_ref.data(), w_ref.data(), nullptr);
                const attend_bounds b = bounds_for(s, n, scale, w_ref);
                for (const variant& v : all_variants()) {
                    std::vector<float> out(static_cast<size_t>(head_dim) + 1, 9.0f);
                    std::vector<float> w(static_cast<size_t>(n) + 1, 9.0f);
                    v.fn(s.q.data(), s.k.data(), s.v.data(), head_dim, s.slots.data(), n, scale, out.data(),
                         w.data(), nullptr);
                    ASSERT_EQ(out[head_dim], 9.0f) << v.name << " wrote past out";
                    ASSERT_EQ(w[n], 9.0f) << v.name << " wrote past scratch";
                    for (int j = 0; j < n; ++j) {
                        ASSERT_LE(std::fabs(w[j] - w_ref[j]), b.weight[j])
                            << v.name << " hd " << head_dim << " n " << n << " weight " << j;
                    }
                    for (int d = 0; d < head_dim; ++d) {
                        ASSERT_LE(std::fabs(out[d] - out_ref[d]), b.out[d])
                            << v.name << " hd " << head_dim << " n " << n << " out " << d;
                    }
                    ++compared;
                }
            }
        }
    }
    EXPECT_GE(compared, 9 * 9 * 2 * 2);
}

TEST(Attend, ScoreRowReceivesExactlyTheReturnedWeights) {
    for (const variant& v : all_variants()) {
        const int n_slots = 50;
        const store s = make_store(16, n_slots, 31, 77);
        std::vector<double> row(static_cast<size_t>(n_slots));
        for (int i = 0; i < n_slots; ++i) row[i] = 0.125 * i + 1e-3;  // prior scores: += must keep them
        const std::vector<double> before = row;
        std::vector<float> out(16), w(31), out_null(16), w_null(31);
        v.fn(s.q.data(), s.k.data(), s.v.data(), 16, s.slots.data(), 31, 0.25f, out.data(), w.data(),
             row.data());
        v.fn(s.q.data(), s.k.data(), s.v.data(), 16, s.slots.data(), 31, 0.25f, out_null.data(),
             w_null.data(), nullptr);
        // The bookkeeping must not change the attention itself.
        EXPECT_EQ(std::memcmp(out.data(), out_null.data(), 16 * 4), 0) << v.name;
        EXPECT_EQ(std::memcmp(w.data(), w_null.data(), 31 * 4), 0) << v.name;
        std::vector<bool> attended(static_cast<size_t>(n_slots), false);
        for (int j = 0; j < 31; ++j) {
            attended[s.slots[j]] = true;
            EXPECT_EQ(row[s.slots[j]], before[s.slots[j]] + static_cast<double>(w[j]))
                << v.name << " slot " << j;
        }
        for (int i = 0; i < n_slots; ++i) {
            if (!attended[i]) {
                EXPECT_EQ(row[i], before[i]) << v.name << " slot " << i << " was not attended";
            }
        }
        // A second head of the same GQA group accumulates on top, in call order.
        const std::vector<double> after_first = row;
        const store s2 = make_store(16, n_slots, 31, 78);
        std::vector<float> w2(31);
        v.fn(s2.q.data(), s.k.data(), s.v.data(), 16, s.slots.data(), 31, 0.25f, out.data(), w2.data(),
             row.data());
        for (int j = 0; j < 31; ++j) {
            EXPECT_EQ(row[s.slots[j]], after_first[s.slots[j]] + static_cast<double>(w2[j])) << v.name;
        }
    }
}

TEST(Attend, EdgeCases) {
    for (const variant& v : all_variants()) {
        // No slots: zero output, scratch and score_row untouched.
        std::vector<float> out(8, 5.0f);
        double row = 3.0;
        const float q[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        v.fn(q, q, q, 8, nullptr, 0, 1.0f, out.data(), nullptr, &row);
        for (float o : out) EXPECT_EQ(o, 0.0f) << v.name;
        EXPECT_EQ(row, 3.0) << v.name;
        // One slot: weight exactly 1, output exactly v.
        const store s = make_store(13, 4, 1, 5);
        std::vector<float> o13(13), w1(1);
        std::vector<double> r(4, 0.0);
        v.fn(s.q.data(), s.k.data(), s.v.data(), 13, s.slots.data(), 1, 0.3f, o13.data(), w1.data(),
             r.data());
        EXPECT_EQ(w1[0], 1.0f) << v.name;
        EXPECT_EQ(r[s.slots[0]], 1.0) << v.name;
        for (int d = 0; d < 13; ++d) EXPECT_EQ(o13[d], s.v[s.slots[0] * 13 + d]) << v.name;
        // Scores far apart: the losers underflow to 0 and the winner takes everything, without NaN.
        const store big = make_store(8, 16, 16, 6, 400.0f);
        std::vector<float> ob(8), wb(16);
        v.fn(big.q.data(), big.k.data(), big.v.data(), 8, big.slots.data(), 16, 1.0f, ob.data(), wb.data(),
             nullptr);
        float sum = 0;
        for (float x : wb) {
            ASSERT_FALSE(std::isnan(x)) << v.name;
            sum += x;
        }
        EXPECT_NEAR(sum, 1.0f, 1e-5f) << v.name;
    }
}

}  // namespace
}  // namespace h2okv::kernels
