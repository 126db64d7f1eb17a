// The Q8_0 products with quantised activations (src/kernels/q8_0_act.h): the activation quantiser against
// its definition, the reference product against an exact oracle over the quantised activations, and every
// SIMD variant (AVX2's vpmaddubsw, AVX-512's vpdpbusd; plain rows and the q8_0_x16 packing) against the
// reference bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "h2okv/core/cpu_isa.h"
#include "h2okv/kernels/kernels.h"
#include "kernel_test_util.h"
#include "kernels/dispatch.h"
#include "kernels/half.h"
#include "kernels/q8_0_act.h"
#include "kernels/q8_0_x16.h"
#include "kernels/ref/ref.h"
#ifdef H2OKV_KERNELS_X86
#include "kernels/x86/avx2.h"
#include "kernels/x86/avx512.h"
#endif

namespace h2okv::kernels {
namespace {

using core::tensor_type;
using detail::q8_0_act;
using test_support::encode_matrix;
using test_support::encoded_matrix;
using test_support::random_floats;

using rows_fn = void (*)(const matrix_view&, const float*, int, float*, int64_t, int64_t);
using dot_rows_fn = void (*)(const matrix_view&, const q8_0_act*, int, float*, int64_t, int64_t);
using quantize_fn = void (*)(const float*, int64_t, q8_0_act*);

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

// The kernel_table::q8_0_rows variants one by one, so that a CPU with VNNI still checks the AVX2 kernel
// without it.
std::vector<std::pair<const char*, dot_rows_fn>> dot_variants() {
    std::vector<std::pair<const char*, dot_rows_fn>> v;
#ifdef H2OKV_KERNELS_X86
    if (core::cpu_supports(core::cpu_isa::avx2))
        v.emplace_back("avx2 without VNNI", &avx2::q8_0_dot_rows_no_vnni);
    if (core::cpu_supports(core::cpu_isa::avx2) && avx2::cpu_has_avx_vnni())
        v.emplace_back("avx2 with AVX-VNNI", &avx2::q8_0_dot_rows_avx_vnni);
    if (core::cpu_supports(core::cpu_isa::avx512)) v.emplace_back("avx512", &avx512::q8_0_dot_rows);
#endif
    return v;
}

std::vector<std::pair<const char*, quantize_fn>> quantizers() {
    std::vector<std::pair<const char*, quantize_fn>> q = {{"reference", &detail::quantize_q8_0_act}};
#ifdef H2OKV_KERNELS_X86
    if (core::cpu_supports(core::cpu_isa::avx2)) q.emplace_back("avx2", &avx2::quantize_q8_0_act);
#endif
    return q;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Blocks of random normals, a zero block, a block with exact ties (amax 127: iscale is 1), and a block of
// values spread over 40 binades.
std::vector<float> test_activations() {
    std::vector<float> x = random_floats(32 * 12, 21);
    for (int i = 0; i < 32; ++i) x[32 + i] = 0.0f;
    for (int i = 0; i < 32; ++i) x[64 + i] = static_cast<float>(i * 7 % 200 - 100) + 0.5f;
    x[64] = 127.0f;
    for (int i = 0; i < 32; ++i) x[96 + i] *= std::ldexp(1.0f, i % 40 - 20);
    return x;
}

// A Q8_0 matrix with every int8 value, -128 included (which llama.cpp's quantiser never writes but a file may
// hold), and fp16 scales over several binades.
encoded_matrix full_range_q8_0(int64_t rows, int64_t cols, uint32_t seed) {
    encoded_matrix m = encode_matrix(tensor_type::q8_0, rows, cols, seed);
    std::mt19937 rng(seed);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < cols / 32; ++b) {
            std::byte* block = m.bytes.data() + static_cast<size_t>(r) * m.row_bytes + b * 34;
            const uint16_t d = fp32_to_fp16(std::ldexp(1.0f + static_cast<float>(rng() % 100) / 100.0f,
                                                       static_cast<int>(rng() % 12) - 14));
            std::memcpy(block, &d, 2);
            for (int i = 0; i < 32; ++i) block[2 + i] = static_cast<std::byte>(rng() & 0xFF);
        }
    }
    return m;
}

TEST(Q8_0Act, QuantisationFollowsTheDefinition) {
    const std::vector<float> x = test_activations();
    const int64_t nb = static_cast<int64_t>(x.size()) / 32;
    std::vector<q8_0_act> q(static_cast<size_t>(nb));
    detail::quantize_q8_0_act(x.data(), static_cast<int64_t>(x.size()), q.data());
    for (int64_t b = 0; b < nb; ++b) {
        float amax = 0.0f;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
        // The scale is amax / 127 rounded to fp16, as llama.cpp stores it.
        ASSERT_EQ(q[b].d, fp16_to_fp32(fp32_to_fp16(amax / 127.0f))) << "block " << b;
        int sum = 0;
        for (int i = 0; i < 32; ++i) {
            const float xi = x[b * 32 + i];
            const int qi = q[b].qs[i];
            ASSERT_LE(std::abs(qi), 127);
            const float scaled = amax > 0.0f ? xi * (127.0f / amax) : 0.0f;
            ASSERT_LE(std::fabs(scaled - static_cast<float>(qi)), 0.5f) << "block " << b << " element " << i;
            if (std::fabs(scaled - std::trunc(scaled)) == 0.5f) {
                ASSERT_EQ(qi % 2, 0) << "ties go to even";
            }
            sum += qi;
        }
        ASSERT_EQ(q[b].bias, -128 * sum);
    }
    EXPECT_EQ(q[2].qs[0], 127);
    EXPECT_EQ(q[2].qs[1], -92);  // -92.5 -> -92
    EXPECT_EQ(q[2].qs[3], -78);  // -78.5 -> -78
    EXPECT_EQ(q[1].d, 0.0f);     // a zero block
}

TEST(Q8_0Act, VariantsQuantiseBitForBit) {
    std::vector<float> x = test_activations();
    x[200] = std::numeric_limits<float>::quiet_NaN();
    x[300] = -std::numeric_limits<float>::infinity();
    const auto n = static_cast<int64_t>(x.size());
    std::vector<q8_0_act> want(static_cast<size_t>(n / 32));
    detail::quantize_q8_0_act(x.data(), n, want.data());
    EXPECT_TRUE(std::isnan(want[200 / 32].d));
    EXPECT_TRUE(std::isinf(want[300 / 32].d));
    for (const auto& [name, fn] : quantizers()) {
        std::vector<q8_0_act> got(want.size());
        std::memset(got.data(), 0x5a, got.size() * sizeof(q8_0_act));
        fn(x.data(), n, got.data());
        for (size_t b = 0; b < want.size(); ++b) {
            EXPECT_EQ(std::memcmp(want[b].qs, got[b].qs, 32), 0) << name << " block " << b;
            EXPECT_EQ(std::memcmp(&want[b].d, &got[b].d, 4), 0) << name << " block " << b;
            EXPECT_EQ(want[b].bias, got[b].bias) << name << " block " << b;
        }
    }
}

// The reference product against sum_i w_i * (d_x * q_i) in long double: the integer sums are exact, each
// block's term is rounded once by its fma and the accumulator once per later block.
TEST(Q8_0Act, ReferenceProductMatchesExactSumOverQuantisedActivations) {
    const int64_t rows = 9;
    const int64_t cols = 1536;
    const encoded_matrix m = full_range_q8_0(rows, cols, 5);
    const std::vector<float> x = random_floats(static_cast<size_t>(2 * cols), 6);
    std::vector<q8_0_act> xq(static_cast<size_t>(2 * cols / 32));
    detail::quantize_q8_0_act(x.data(), 2 * cols, xq.data());
    std::vector<float> y(static_cast<size_t>(2 * rows));
    ref::q8_0_rows(m.view(), xq.data(), 2, y.data(), 0, rows);
    for (int t = 0; t < 2; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
            long double exact = 0;
            long double abs_sum = 0;
            const std::byte* row = m.bytes.data() + static_cast<size_t>(r) * m.row_bytes;
            for (int64_t b = 0; b < cols / 32; ++b) {
                uint16_t dh;
                std::memcpy(&dh, row + b * 34, 2);
                const q8_0_act& xb = xq[static_cast<size_t>(t * cols / 32 + b)];
                for (int i = 0; i < 32; ++i) {
                    const auto qw = static_cast<int8_t>(row[b * 34 + 2 + i]);
                    const long double term =
                        static_cast<long double>(fp16_to_fp32(dh)) * qw * xb.d * xb.qs[i];
                    exact += term;
                    abs_sum += std::fabs(term);
                }
            }
            const double bound =
                2.0 * static_cast<double>(cols / 32 + 1) * 0x1p-24 * static_cast<double>(abs_sum);
            EXPECT_LE(std::fabs(static_cast<double>(y[static_cast<size_t>(t * rows + r)]) -
                                static_cast<double>(exact)),
                      bound)
                << "token " << t << " row " << r;
        }
    }
}

// The product is a good approximation of the f32 one: the activation rounding (half a step of each block's
// scale) bounds the difference from the exact dot product of the decoded weights with x.
TEST(Q8_0Act, ProductIsCloseToTheFloatProduct) {
    const encoded_matrix m = encode_matrix(tensor_type::q8_0, 16, 576, 11);
    const std::vector<float> x = random_floats(576, 12);
    std::vector<float> y(16);
    ref::matmul(m.view(), x.data(), 1, y.data());
    for (int64_t r = 0; r < 16; ++r) {
        double exact = 0;
        double bound = 0;
        for (int64_t b = 0; b < 576 / 32; ++b) {
            double amax = 0;
            for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[b * 32 + i])));
            for (int i = 0; i < 32; ++i) {
                const double wv = m.values[static_cast<size_t>(r * 576 + b * 32 + i)];
                exact += wv * x[b * 32 + i];
                bound += std::fabs(wv) * (amax / 127.0 * 0.5 + amax * 0x1p-10);
            }
        }
        EXPECT_LE(std::fabs(y[r] - exact), bound + 1e-5) << "row " << r;
    }
}

// The row ranges a test hands a kernel in one pass over a matrix: all rows at once, and for the packed layout
// also one 16-row group at a time (as the threaded matmul may split them). Whole ranges of 3 or 5 groups take
// the tiles that span several groups and the one-group tiles of the groups left over.
std::vector<int64_t> row_steps(const matrix_view& w) {
    if (w.layout == weight_layout::q8_0_x16) return {w.rows, 16};
    return {w.rows};
}

// Every variant, on plain rows and packed, with token counts that take full and partial token tiles (one and
// several row vectors) and row ranges whole or split at group boundaries; the reference on the packed layout
// too. 1..9 tokens, 13, 16 and 26.
TEST(Q8_0Act, VariantsMatchReferenceBitForBit) {
    int compared = 0;
    uint32_t seed = 30;
    for (int64_t cols : {32, 96, 576}) {
        for (int64_t rows : {16, 48, 80, 5, 17}) {
            const encoded_matrix m = full_range_q8_0(rows, cols, seed++);
            packed_weights packed;
            bool did = false;
            const matrix_view pw = packed.pack(m.view(), &did);
            ASSERT_EQ(did, rows % 16 == 0);
            for (int n_tok : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 26}) {
                const std::vector<float> x = random_floats(static_cast<size_t>(n_tok * cols), seed++);
                std::vector<float> want(static_cast<size_t>(n_tok * rows), -1.0f);
                ref::matmul(m.view(), x.data(), n_tok, want.data());
                std::vector<float> ref_packed(want.size(), -1.0f);
                ref::matmul(pw, x.data(), n_tok, ref_packed.data());
                ASSERT_TRUE(same_bits(want, ref_packed)) << "reference packed, n_tok " << n_tok;
                for (const variant& v : fast_variants()) {
                    for (const matrix_view& w : {m.view(), pw}) {
                        for (const int64_t step : row_steps(w)) {
                            std::vector<float> got(want.size(), -1.0f);
                            for (int64_t r0 = 0; r0 < rows; r0 += step)
                                v.rows(w, x.data(), n_tok, got.data(), r0, std::min(rows, r0 + step));
                            ASSERT_TRUE(same_bits(want, got))
                                << v.name << (w.layout == weight_layout::rows ? " plain" : " packed")
                                << " rows " << rows << " cols " << cols << " n_tok " << n_tok << " step "
                                << step;
                            ++compared;
                        }
                    }
                }
                std::vector<float> got(want.size(), -1.0f);
                matmul(pw, x.data(), n_tok, got.data());
                ASSERT_TRUE(same_bits(want, got)) << "matmul, n_tok " << n_tok;
            }
        }
    }
    if (fast_variants().empty()) GTEST_SKIP() << "no SIMD variant on this CPU; the reference was checked";
    EXPECT_GE(compared, 200);
}

// Each integer kernel over the same quantised activations, packed and plain, row ranges split at groups.
TEST(Q8_0Act, EveryKernelMatchesReferenceBitForBit) {
    int compared = 0;
    uint32_t seed = 60;
    for (int64_t cols : {64, 576}) {
        for (int64_t rows : {32, 48, 7}) {
            const encoded_matrix m = full_range_q8_0(rows, cols, seed++);
            packed_weights packed;
            const matrix_view pw = packed.pack(m.view());
            for (int n_tok : {1, 2, 3, 4, 5, 6, 7, 8, 11, 13, 16}) {
                const std::vector<float> x = random_floats(static_cast<size_t>(n_tok * cols), seed++);
                std::vector<q8_0_act> xq(static_cast<size_t>(n_tok * cols / 32));
                detail::quantize_q8_0_act(x.data(), n_tok * cols, xq.data());
                std::vector<float> want(static_cast<size_t>(n_tok * rows), -1.0f);
                ref::q8_0_rows(m.view(), xq.data(), n_tok, want.data(), 0, rows);
                for (const auto& [name, fn] : dot_variants()) {
                    for (const matrix_view& w : {m.view(), pw}) {
                        for (const int64_t step : row_steps(w)) {
                            std::vector<float> got(want.size(), -1.0f);
                            for (int64_t r0 = 0; r0 < rows; r0 += step)
                                fn(w, xq.data(), n_tok, got.data(), r0, std::min(rows, r0 + step));
                            ASSERT_TRUE(same_bits(want, got))
                                << name << (w.layout == weight_layout::rows ? " plain" : " packed")
                                << " rows " << rows << " cols " << cols << " n_tok " << n_tok << " step "
                                << step;
                            ++compared;
                        }
                    }
                }
            }
        }
    }
    if (dot_variants().empty()) GTEST_SKIP() << "no SIMD variant on this CPU";
    EXPECT_GE(compared, 88);
}

TEST(Q8_0Act, PackingIsLossless) {
    const encoded_matrix m = full_range_q8_0(32, 96, 40);
    packed_weights packed;
    const matrix_view w = packed.pack(m.view());
    ASSERT_EQ(w.layout, weight_layout::q8_0_x16);
    EXPECT_EQ(w.row_bytes, 3u * 34u);
    for (int64_t r = 0; r < 32; ++r) {
        for (int64_t b = 0; b < 3; ++b) {
            std::byte block[34];
            detail::unpack_q8_0_x16_block(w, r, b, block);
            ASSERT_EQ(std::memcmp(block, m.bytes.data() + r * m.row_bytes + b * 34, 34), 0)
                << "row " << r << " block " << b;
        }
    }
}

TEST(Q8_0Act, UnbufferedFallbackMatchesReference) {
    const encoded_matrix m = full_range_q8_0(32, 256, 7);
    packed_weights packed;
    const matrix_view w = packed.pack(m.view());
    const std::vector<float> x = random_floats(3 * 256, 8);
    std::vector<float> want(96);
    std::vector<float> got(96);
    ref::matmul(m.view(), x.data(), 3, want.data());
    detail::matmul_q8_0_unbuffered(w, x.data(), 3, got.data(), 0, 32);
    EXPECT_TRUE(same_bits(want, got));
}

}  // namespace
}  // namespace h2okv::kernels
