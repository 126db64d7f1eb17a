// Gemma's kernels against long-double formulas: GeGLU with the tanh GELU, logit soft-capping, and attention
// over soft-capped scores (outputs, weights and the fused score row) on every K/V type; a cap far above the
// scores gives plain attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "h2okv/kernels/kernels.h"
#include "kernel_test_util.h"

namespace h2okv::kernels {
namespace {

using core::tensor_type;
using test_support::encode_matrix;
using test_support::random_floats;

TEST(Gemma, GeluTanhGluMatchesFormula) {
    const auto g = random_floats(1000, 1, 3.0f);
    const auto u = random_floats(1000, 2, 1.0f);
    std::vector<float> out(1000);
    gelu_tanh_glu(g.data(), u.data(), 1000, out.data());
    for (size_t i = 0; i < g.size(); ++i) {
        const long double x = g[i];
        const long double want =
            0.5L * x * (1.0L + std::tanh(std::sqrt(2.0L / M_PIl) * (x + 0.044715L * x * x * x))) * u[i];
        EXPECT_NEAR(out[i], static_cast<double>(want), 1e-6 * (1.0 + std::fabs(static_cast<double>(want))))
            << i;
    }
    std::vector<float> alias = g;
    gelu_tanh_glu(alias.data(), u.data(), 1000, alias.data());
    EXPECT_EQ(alias, out) << "out may alias gate";
}

TEST(Gemma, SoftcapMatchesFormula) {
    auto x = random_floats(500, 3, 20.0f);
    const auto orig = x;
    softcap(x.data(), 500, 5.0f);
    for (size_t i = 0; i < x.size(); ++i) {
        const double want = 5.0 * std::tanh(static_cast<double>(orig[i]) / 5.0);
        EXPECT_NEAR(x[i], want, 1e-6) << i;
        EXPECT_LT(std::fabs(x[i]), 5.0f + 1e-6f);
    }
}

TEST(Gemma, AttendSoftcapMatchesFormula) {
    for (tensor_type type : {tensor_type::f32, tensor_type::f16, tensor_type::q8_0}) {
        const int hd = 32, n_q = 3, n_slots = 40, n = 29;
        const auto q = random_floats(static_cast<size_t>(n_q * hd), 7, 2.0f);
        const auto k = encode_matrix(type, n_slots, hd, 8, 6);
        const auto v = encode_matrix(type, n_slots, hd, 9, 6);
        std::vector<int32_t> slots(static_cast<size_t>(n_slots));
        std::iota(slots.begin(), slots.end(), 0);
        std::mt19937 rng(10);
        std::shuffle(slots.begin(), slots.end(), rng);
        slots.resize(n);
        const kv_rows kr{k.type, k.bytes.data(), k.row_bytes}, vr{v.type, v.bytes.data(), v.row_bytes};
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        const float cap = 2.0f;
        std::vector<float> out(static_cast<size_t>(n_q * hd)), w(static_cast<size_t>(n_q * n));
        std::vector<double> row(n_slots, 0.0);
        attend_softcap(q.data(), n_q, kr, vr, hd, slots.data(), n, scale, cap, out.data(), w.data(),
                       static_cast<size_t>(n), row.data());
        std::vector<long double> row_want(n_slots, 0.0L);
        for (int h = 0; h < n_q; ++h) {
            std::vector<long double> s(static_cast<size_t>(n));
            long double top = -INFINITY, sum = 0;
            for (int j = 0; j < n; ++j) {
                long double d = 0;
                for (int i = 0; i < hd; ++i)
                    d += static_cast<long double>(q[h * hd + i]) * k.values[slots[j] * hd + i];
                s[j] = cap * std::tanh(d * scale / cap);
                top = std::max(top, s[j]);
            }
            for (int j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - top));
            for (int j = 0; j < n; ++j) {
                EXPECT_NEAR(w[h * n + j], static_cast<double>(s[j] / sum), 1e-6);
                row_want[slots[j]] += s[j] / sum;
            }
            for (int i = 0; i < hd; ++i) {
                long double o = 0;
                for (int j = 0; j < n; ++j) o += s[j] / sum * v.values[slots[j] * hd + i];
                EXPECT_NEAR(out[h * hd + i], static_cast<double>(o), 1e-5);
            }
        }
        for (int s = 0; s < n_slots; ++s) EXPECT_NEAR(row[s], static_cast<double>(row_want[s]), 1e-6);
        // A cap far above every score is plain attention.
        std::vector<float> plain(out.size()), pw(w.size()), capped(out.size()), cw(w.size());
        attend(q.data(), n_q, kr, vr, hd, slots.data(), n, scale, plain.data(), pw.data(), n, nullptr);
        attend_softcap(q.data(), n_q, kr, vr, hd, slots.data(), n, scale, 1e6f, capped.data(), cw.data(), n,
                       nullptr);
        for (size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(capped[i], plain[i], 1e-5);
    }
}

}  // namespace
}  // namespace h2okv::kernels
