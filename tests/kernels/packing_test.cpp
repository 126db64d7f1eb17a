// Weights packed at load time (kernels::packed_weights, src/kernels/q4_k_x16.h): the packing is lossless,
// and every product over a packed Q4_K matrix (the reference, each SIMD variant, any token count and row
// split, the unbuffered fallback, the threaded entry point) gives the bits of the plain rows.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "h2okv/core/cpu_isa.h"
#include "h2okv/kernels/kernels.h"
#include "kernel_test_util.h"
#include "kernels/blocks.h"
#include "kernels/dispatch.h"
#include "kernels/q4_k_x16.h"
#include "kernels/q8k.h"
#include "kernels/ref/ref.h"
#ifdef H2OKV_KERNELS_X86
#include "kernels/x86/avx2.h"
#include "kernels/x86/avx512.h"
#endif

namespace h2okv::kernels {
namespace {

using core::tensor_type;
using test_support::encode_matrix;
using test_support::encoded_matrix;
using test_support::random_floats;

using rows_fn = void (*)(const matrix_view&, const float*, int, float*, int64_t, int64_t);

struct variant {
    const char* name;
    rows_fn rows;
};

std::vector<variant> variants() {
    std::vector<variant> v = {{"reference", &ref::matmul_rows}};
#ifdef H2OKV_KERNELS_X86
    if (core::cpu_supports(core::cpu_isa::avx2)) v.push_back({"avx2", &avx2::matmul_rows});
    if (core::cpu_supports(core::cpu_isa::avx512)) v.push_back({"avx512", &avx512::matmul_rows});
#endif
    return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(PackedWeights, Q4KPackingIsLossless) {
    const encoded_matrix m = encode_matrix(tensor_type::q4_k, 32, 768, 3, /*row_padding=*/6);
    packed_weights packed;
    bool did = false;
    const matrix_view w = packed.pack(m.view(), &did);
    ASSERT_TRUE(did);
    EXPECT_EQ(w.layout, weight_layout::q4_k_x16);
    EXPECT_EQ(packed.bytes(), static_cast<int64_t>(detail::q4_k_x16_bytes(32, 768)));
    EXPECT_EQ(packed.bytes(), 32 * 3 * 148);
    for (int64_t r = 0; r < 32; ++r) {
        for (int64_t b = 0; b < 3; ++b) {
            std::byte block[detail::q4_k_bytes];
            detail::unpack_q4_k_x16_block(w, r, b, block);
            const std::byte* plain = m.bytes.data() + r * m.row_bytes + b * detail::q4_k_bytes;
            ASSERT_EQ(std::memcmp(block, plain, detail::q4_k_bytes), 0) << "row " << r << " block " << b;
        }
    }
}

TEST(PackedWeights, OnlyQ4KAndQ8_0WithWholeGroupsOfRowsArePacked) {
    packed_weights packed;
    bool did = true;
    const encoded_matrix f16 = encode_matrix(tensor_type::f16, 32, 256, 1);
    EXPECT_EQ(packed.pack(f16.view(), &did).data, f16.bytes.data());
    EXPECT_FALSE(did);
    const encoded_matrix q8 = encode_matrix(tensor_type::q8_0, 40, 256, 1);  // 40 rows: not whole groups
    EXPECT_EQ(packed.pack(q8.view(), &did).data, q8.bytes.data());
    EXPECT_FALSE(did);
    const encoded_matrix odd = encode_matrix(tensor_type::q4_k, 24, 256, 2);  // 24 rows: not whole groups
    const matrix_view w = packed.pack(odd.view(), &did);
    EXPECT_FALSE(did);
    EXPECT_EQ(w.data, odd.bytes.data());
    EXPECT_EQ(w.layout, weight_layout::rows);
    EXPECT_EQ(packed.bytes(), 0);
}

// Up to x16_tokens tokens take one tile per group, more take several tiles over the cached group (partial
// last tiles included); from 8 tokens on the AVX-512 tiles span two groups, the group left over of a range of
// 3 or 5 taking the one-group tiles. Rows go in whole ranges and split between calls at group boundaries, as
// the threaded matmul may split them.
TEST(PackedWeights, Q4KProductsMatchThePlainRowsBitForBit) {
    int compared = 0;
    uint32_t seed = 90;
    for (int64_t cols : {256, 1280}) {
        for (int64_t rows : {16, 32, 48, 80}) {
            const encoded_matrix m = encode_matrix(tensor_type::q4_k, rows, cols, seed++, /*row_padding=*/6);
            packed_weights packed;
            const matrix_view w = packed.pack(m.view());
            ASSERT_EQ(w.layout, weight_layout::q4_k_x16);
            for (int n_tok : {1, 2, 3, 4, 5, 6, 7, 8, 13, 16, 26}) {
                const std::vector<float> x = random_floats(static_cast<size_t>(n_tok * cols), seed++);
                std::vector<float> want(static_cast<size_t>(n_tok * rows), -1.0f);
                ref::matmul(m.view(), x.data(), n_tok, want.data());
                for (const variant& v : variants()) {
                    for (int64_t step : {rows, int64_t{16}}) {
                        std::vector<float> got(want.size(), -1.0f);
                        for (int64_t r0 = 0; r0 < rows; r0 += step)
                            v.rows(w, x.data(), n_tok, got.data(), r0, r0 + step);
                        ASSERT_TRUE(same_bits(want, got)) << v.name << " rows " << rows << " in calls of "
                                                          << step << " cols " << cols << " n_tok " << n_tok;
                        ++compared;
                    }
                }
                std::vector<float> got(want.size(), -1.0f);
                matmul(w, x.data(), n_tok, got.data());
                ASSERT_TRUE(same_bits(want, got)) << "matmul, n_tok " << n_tok;
            }
        }
    }
    EXPECT_GE(compared, 176);
}

TEST(PackedWeights, Q4KUnbufferedFallbackMatchesThePlainRows) {
    const encoded_matrix m = encode_matrix(tensor_type::q4_k, 32, 512, 7);
    packed_weights packed;
    const matrix_view w = packed.pack(m.view());
    ASSERT_EQ(w.layout, weight_layout::q4_k_x16);
    const std::vector<float> x = random_floats(3 * 512, 8);
    std::vector<float> want(96);
    std::vector<float> got(96);
    ref::matmul(m.view(), x.data(), 3, want.data());
    detail::matmul_kquant_unbuffered(w, x.data(), 3, got.data(), 0, 32);
    EXPECT_TRUE(same_bits(want, got));
}

}  // namespace
}  // namespace h2okv::kernels
