// The k-quant products with quantised activations (src/kernels/q8k.h): the activation quantiser against
// its definition, the reference product against an exact oracle over the quantised activations, and every
// SIMD variant (one-token and panel paths, AVX2 emulation and AVX-512 VNNI) against the reference bit for
// bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "h2okv/core/cpu_isa.h"
#include "h2okv/kernels/kernels.h"
#include "kernel_test_util.h"
#include "kernels/dispatch.h"
#include "kernels/q8k.h"
#include "kernels/ref/ref.h"
#ifdef H2OKV_KERNELS_X86
#include "kernels/x86/avx2.h"
#include "kernels/x86/avx512.h"
#endif

namespace h2okv::kernels {
namespace {

using core::tensor_type;
using detail::q8k_block;
using test_support::encode_matrix;
using test_support::encoded_matrix;
using test_support::random_floats;

using rows_fn = void (*)(const matrix_view&, const float*, int, float*, int64_t, int64_t);
using quantize_fn = void (*)(const float*, int64_t, q8k_block*);

struct variant {
    const char* name;
    rows_fn rows;
};

std::vector<variant> fast_variants() {
    std::vector<variant> v;
#ifdef H2OKV_KERNELS_X86
    if (core::cpu_supports(core::cpu_isa::avx2)) v.push_back({"avx2", &avx2::matmul_rows});
    if (core::cpu_supports(core::cpu_isa::avx512)) v.push_back({"avx512", &avx512::matmul_rows});
#endif
    return v;
}

std::vector<std::pair<const char*, quantize_fn>> quantizers() {
    std::vector<std::pair<const char*, quantize_fn>> q = {{"reference", &detail::quantize_q8k}};
#ifdef H2OKV_KERNELS_X86
    if (core::cpu_supports(core::cpu_isa::avx2)) q.push_back({"avx2", &avx2::quantize_q8k});
#endif
    return q;
}

// Activations with the cases the definition singles out: a zero block, exact halves after scaling (ties
// go to even), and values spanning many magnitudes.
std::vector<float> test_activations() {
    std::vector<float> x = random_floats(256 * 6, 21);
    for (int i = 0; i < 256; ++i) x[256 + i] = 0.0f;
    // Block 2: amax 127 so iscale is exactly 1, and every other value a tie k + 0.5.
    for (int i = 0; i < 256; ++i) x[512 + i] = static_cast<float>(i % 200 - 100) + 0.5f;
    x[512] = 127.0f;
    for (int i = 0; i < 256; ++i) x[768 + i] *= std::ldexp(1.0f, i % 40 - 20);
    return x;
}

TEST(Q8K, QuantisationFollowsTheDefinition) {
    const std::vector<float> x = test_activations();
    const int64_t nb = static_cast<int64_t>(x.size()) / 256;
    std::vector<q8k_block> q(static_cast<size_t>(nb));
    detail::quantize_q8k(x.data(), static_cast<int64_t>(x.size()), q.data());
    for (int64_t b = 0; b < nb; ++b) {
        float amax = 0.0f;
        for (int i = 0; i < 256; ++i) amax = std::max(amax, std::fabs(x[b * 256 + i]));
        ASSERT_EQ(q[b].d, amax / 127.0f) << "block " << b;
        int sum16 = 0;
        for (int i = 0; i < 256; ++i) {
            const float xi = x[b * 256 + i];
            const int qi = q[b].qs[i];
            ASSERT_LE(std::abs(qi), 127);
            // Round to nearest: the grid point chosen is at most half a step from x * iscale.
            const float scaled = amax > 0.0f ? xi * (127.0f / amax) : 0.0f;
            ASSERT_LE(std::fabs(scaled - static_cast<float>(qi)), 0.5f) << "block " << b << " element " << i;
            if (std::fabs(scaled - std::trunc(scaled)) == 0.5f) {
                ASSERT_EQ(qi % 2, 0) << "ties go to even";
            }
            sum16 += qi;
            if (i % 16 == 15) {
                ASSERT_EQ(q[b].bsum16[i / 16], sum16);
                ASSERT_EQ(q[b].q6_bias[i / 16], -32 * sum16);
                sum16 = 0;
            }
        }
        for (int j = 0; j < 8; ++j) ASSERT_EQ(q[b].bsum32[j], q[b].bsum16[2 * j] + q[b].bsum16[2 * j + 1]);
    }
    // Block 2's largest element maps to 127, and its ties 0.5 -> 0, 1.5 -> 2, -0.5 -> 0.
    EXPECT_EQ(q[2].qs[0], 127);
    EXPECT_EQ(q[2].qs[100], 0);  // 0.5
    EXPECT_EQ(q[2].qs[101], 2);  // 1.5
    EXPECT_EQ(q[2].qs[99], 0);   // -0.5
    EXPECT_EQ(q[1].d, 0.0f);     // a zero block
}

TEST(Q8K, NonFiniteActivationsGiveNonFiniteScale) {
    std::vector<float> x = random_floats(512, 3);
    x[7] = std::numeric_limits<float>::quiet_NaN();
    x[300] = std::numeric_limits<float>::infinity();
    for (const auto& [name, fn] : quantizers()) {
        std::vector<q8k_block> q(2);
        fn(x.data(), 512, q.data());
        EXPECT_TRUE(std::isnan(q[0].d)) << name;
        EXPECT_TRUE(std::isinf(q[1].d)) << name;
    }
}

TEST(Q8K, VariantsQuantiseBitForBit) {
    std::vector<float> x = test_activations();
    x[1300] = std::numeric_limits<float>::quiet_NaN();
    x[1500] = -std::numeric_limits<float>::infinity();
    const auto n = static_cast<int64_t>(x.size());
    std::vector<q8k_block> want(static_cast<size_t>(n / 256));
    detail::quantize_q8k(x.data(), n, want.data());
    for (const auto& [name, fn] : quantizers()) {
        std::vector<q8k_block> got(want.size());
        std::memset(got.data(), 0x5a, got.size() * sizeof(q8k_block));
        fn(x.data(), n, got.data());
        for (size_t b = 0; b < want.size(); ++b) {
            EXPECT_EQ(std::memcmp(want[b].qs, got[b].qs, 256), 0) << name << " block " << b;
            EXPECT_EQ(std::memcmp(&want[b].d, &got[b].d, 4), 0) << name << " block " << b;
            EXPECT_EQ(std::memcmp(want[b].bsum16, got[b].bsum16, sizeof want[b].bsum16), 0) << name;
            EXPECT_EQ(std::memcmp(want[b].bsum32, got[b].bsum32, sizeof want[b].bsum32), 0) << name;
            EXPECT_EQ(std::memcmp(want[b].q6_bias, got[b].q6_bias, sizeof want[b].q6_bias), 0) << name;
        }
    }
}

// The reference product against sum_i w_i * (d * q_i) in long double, where w are the exact decoded weights
// and d * q the quantised activations: each block's term passes through at most 3 roundings (the int to
// float conversion, d_w * d_x, its fma) and the accumulator through one per later block. The terms' sizes are
// bounded through the weights' own range: |d sc q| and |dmin m| are each at most about the sub-block's
// range, so 4 * sum |w x~| bounds sum of |terms| for these random rows.
TEST(Q8K, ReferenceProductMatchesExactSumOverQuantisedActivations) {
    for (tensor_type type : {tensor_type::q4_k, tensor_type::q6_k}) {
        for (int64_t cols : {256, 768, 2048}) {
            const int64_t rows = 7;
            const encoded_matrix m = encode_matrix(type, rows, cols, static_cast<uint32_t>(cols));
            const std::vector<float> x = random_floats(static_cast<size_t>(cols), 5);
            std::vector<q8k_block> q(static_cast<size_t>(cols / 256));
            detail::quantize_q8k(x.data(), cols, q.data());
            std::vector<float> y(static_cast<size_t>(rows));
            ref::matmul(m.view(), x.data(), 1, y.data());
            const double k = static_cast<double>(cols / 256) + 3;
            for (int64_t r = 0; r < rows; ++r) {
                long double exact = 0;
                long double abs_sum = 0;
                for (int64_t i = 0; i < cols; ++i) {
                    const long double xq = static_cast<long double>(q[i / 256].d) * q[i / 256].qs[i % 256];
                    const long double p = static_cast<long double>(m.values[r * cols + i]) * xq;
                    exact += p;
                    abs_sum += std::fabs(p);
                }
                const double bound = test_support::gamma_k(k) * 4.0 * static_cast<double>(abs_sum) +
                                     test_support::unit_roundoff * std::fabs(static_cast<double>(exact));
                EXPECT_LE(std::fabs(y[r] - static_cast<double>(exact)), bound)
                    << core::tensor_type_label(type) << " cols " << cols << " row " << r;
            }
        }
    }
}

// Every variant gives the reference's bits: up to seven tokens take the row-walking kernels (AVX-512: in
// groups of up to four tokens per decode of a row), eight and more the repacked panels (16 or 8 rows) with
// partial token tiles and a tail of rows.
TEST(Q8K, VariantsMatchReferenceBitForBit) {
    int compared = 0;
    uint32_t seed = 40;
    for (tensor_type type : {tensor_type::q4_k, tensor_type::q6_k}) {
        for (int64_t cols : {256, 512, 1280}) {
            for (int64_t rows : {1, 5, 16, 37}) {
                for (int n_tok : {1, 2, 3, 4, 5, 7, 8, 9, 17, 26}) {
                    const encoded_matrix m = encode_matrix(type, rows, cols, seed++, /*row_padding=*/6);
                    const std::vector<float> x = random_floats(static_cast<size_t>(n_tok * cols), seed++);
                    std::vector<float> want(static_cast<size_t>(n_tok * rows), -1.0f);
                    ref::matmul(m.view(), x.data(), n_tok, want.data());
                    for (const variant& v : fast_variants()) {
                        std::vector<float> got(want.size(), -1.0f);
                        v.rows(m.view(), x.data(), n_tok, got.data(), 0, rows);
                        ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
                            << v.name << " " << core::tensor_type_label(type) << " rows " << rows << " cols "
                            << cols << " n_tok " << n_tok;
                        ++compared;
                    }
                }
            }
        }
    }
    if (fast_variants().empty()) GTEST_SKIP() << "no SIMD variant on this CPU";
    EXPECT_GE(compared, 192);
}

// The fallback used when the activation buffer cannot be allocated gives the same bits.
TEST(Q8K, UnbufferedFallbackMatchesReference) {
    for (tensor_type type : {tensor_type::q4_k, tensor_type::q6_k}) {
        const encoded_matrix m = encode_matrix(type, 9, 512, 77);
        const std::vector<float> x = random_floats(3 * 512, 78);
        std::vector<float> want(27);
        std::vector<float> got(27);
        ref::matmul(m.view(), x.data(), 3, want.data());
        detail::matmul_kquant_unbuffered(m.view(), x.data(), 3, got.data(), 0, 9);
        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
    }
}

}  // namespace
}  // namespace h2okv::kernels
