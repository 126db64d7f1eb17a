// Q4_0, Q4_1, Q4_K and Q6_K: hand-built blocks with known values pin the reference dequantisers to ggml's
// layouts; every variant reproduces the reference bit for bit on arbitrary block contents; the quantisers
// stay within their documented error bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "h2okv/core/cpu_isa.h"
#include "h2okv/kernels/kernels.h"
#include "kernel_test_util.h"
#include "kernels/dispatch.h"
#include "kernels/ref/ref.h"
#ifdef H2OKV_KERNELS_X86
#include "kernels/x86/avx2.h"
#include "kernels/x86/avx512.h"
#endif

namespace h2okv::kernels {
namespace {

using core::tensor_type;
using test_support::random_floats;

using deq_fn = void (*)(tensor_type, const std::byte*, int64_t, float*);

std::vector<std::pair<const char*, deq_fn>> dequantizers() {
    std::vector<std::pair<const char*, deq_fn>> fns = {{"reference", &ref::dequantize_row},
                                                       {"dispatched", &dequantize_row}};
#ifdef H2OKV_KERNELS_X86
    if (core::cpu_supports(core::cpu_isa::avx2)) fns.push_back({"avx2", &avx2::dequantize_row});
    if (core::cpu_supports(core::cpu_isa::avx512)) fns.push_back({"avx512", &avx512::dequantize_row});
#endif
    return fns;
}

void put_half(std::vector<uint8_t>& b, size_t at, uint16_t h) {
    b[at] = static_cast<uint8_t>(h & 0xFF);
    b[at + 1] = static_cast<uint8_t>(h >> 8);
}

void expect_decodes_to(tensor_type t, const std::vector<uint8_t>& block, const std::vector<float>& expected) {
    for (const auto& [name, fn] : dequantizers()) {
        std::vector<float> out(expected.size());
        fn(t, reinterpret_cast<const std::byte*>(block.data()), static_cast<int64_t>(expected.size()),
           out.data());
        for (size_t i = 0; i < expected.size(); ++i) {
            ASSERT_EQ(out[i], expected[i]) << name << " " << core::tensor_type_label(t) << " element " << i;
        }
    }
}

TEST(QuantBlocks, Q4_0HandBuilt) {
    // d = 0.5; byte i holds element i (low nibble i) and element 16 + i (high nibble 15 - i).
    std::vector<uint8_t> block(18);
    put_half(block, 0, 0x3800);
    for (int i = 0; i < 16; ++i) block[2 + i] = static_cast<uint8_t>(i | ((15 - i) << 4));
    std::vector<float> expected(32);
    for (int i = 0; i < 16; ++i) {
        expected[i] = 0.5f * static_cast<float>(i - 8);
        expected[16 + i] = 0.5f * static_cast<float>(7 - i);
    }
    expect_decodes_to(tensor_type::q4_0, block, expected);
}

TEST(QuantBlocks, Q4_1HandBuilt) {
    // d = 0.5, m = -2 (ggml's block_q4_1: d, m, then the nibbles as Q4_0's).
    std::vector<uint8_t> block(20);
    put_half(block, 0, 0x3800);
    put_half(block, 2, 0xC000);
    for (int i = 0; i < 16; ++i) block[4 + i] = static_cast<uint8_t>(i | ((15 - i) << 4));
    std::vector<float> expected(32);
    for (int i = 0; i < 16; ++i) {
        expected[i] = 0.5f * static_cast<float>(i) - 2.0f;
        expected[16 + i] = 0.5f * static_cast<float>(15 - i) - 2.0f;
    }
    expect_decodes_to(tensor_type::q4_1, block, expected);
}

TEST(QuantBlocks, Q4_KHandBuilt) {
    // d = 1, dmin = 0.5. Sub-block scales and mins chosen so every packed bit field is exercised: the
    // 12 bytes below are ggml's packing of sc = {1, 2, 3, 4, 5, 6, 7, 63}, m = {0, 1, 2, 3, 60, 17, 32, 63}
    // (sub-blocks 4..7 keep their low nibbles in bytes 8..11 and their top two bits in bytes 0..7).
    const int sc[8] = {1, 2, 3, 4, 5, 6, 7, 63};
    const int m[8] = {0, 1, 2, 3, 60, 17, 32, 63};
    const uint8_t scales[12] = {1,
                                2,
                                3,
                                4 | (3 << 6),
                                0 | (3 << 6),
                                1 | (1 << 6),
                                2 | (2 << 6),
                                3 | (3 << 6),
                                5 | (12 << 4),
                                6 | (1 << 4),
                                7 | (0 << 4),
                                15 | (15 << 4)};
    std::vector<uint8_t> block(144);
    put_half(block, 0, 0x3C00);
    put_half(block, 2, 0x3800);
    std::memcpy(block.data() + 4, scales, 12);
    // qs[32p + l]: low nibble l % 16 (sub-block 2p), high nibble 15 - l % 16 (sub-block 2p + 1).
    for (int p = 0; p < 4; ++p) {
        for (int l = 0; l < 32; ++l)
            block[16 + 32 * p + l] = static_cast<uint8_t>((l % 16) | ((15 - l % 16) << 4));
    }
    std::vector<float> expected(256);
    for (int j = 0; j < 8; ++j) {
        for (int l = 0; l < 32; ++l) {
            const int q = j % 2 == 0 ? l % 16 : 15 - l % 16;
            expected[32 * j + l] =
                1.0f * static_cast<float>(sc[j]) * static_cast<float>(q) - 0.5f * static_cast<float>(m[j]);
        }
    }
    expect_decodes_to(tensor_type::q4_k, block, expected);
}

TEST(QuantBlocks, Q6_KHandBuilt) {
    // d = 0.25 at byte 208; scales[j] = j - 8 (negative ones included); element e has the 6-bit code
    // (7 e + 3) % 64, stored per ggml: in half h, element 32k + l has its low 4 bits in ql[64h + l + 32(k%2)]
    // (low nibble for k < 2, high for k >= 2) and its top 2 bits at bit 2k of qh[32h + l].
    std::vector<uint8_t> block(210, 0);
    put_half(block, 208, 0x3400);
    for (int j = 0; j < 16; ++j) block[192 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 8));
    std::vector<float> expected(256);
    for (int e = 0; e < 256; ++e) {
        const int code = (7 * e + 3) % 64;
        const int h = e / 128;
        const int k = (e % 128) / 32;
        const int l = e % 32;
        block[64 * h + l + 32 * (k % 2)] |= static_cast<uint8_t>((code & 0xF) << (k < 2 ? 0 : 4));
        block[128 + 32 * h + l] |= static_cast<uint8_t>((code >> 4) << (2 * k));
        expected[e] = 0.25f * static_cast<float>(e / 16 - 8) * static_cast<float>(code - 32);
    }
    expect_decodes_to(tensor_type::q6_k, block, expected);
}

// Random bytes everywhere except the fp16 scales (kept finite): every variant must match the reference.
TEST(QuantBlocks, VariantsMatchReferenceOnArbitraryBlocks) {
    std::mt19937 rng(42);
    struct geometry {
        tensor_type t;
        int64_t elems;
        size_t bytes;
        std::vector<size_t> half_at;
    };
    const geometry types[] = {{tensor_type::q4_0, 32, 18, {0}},
                              {tensor_type::q4_1, 32, 20, {0, 2}},
                              {tensor_type::q4_k, 256, 144, {0, 2}},
                              {tensor_type::q6_k, 256, 210, {208}}};
    for (const geometry& g : types) {
        for (int n_blocks : {1, 2, 3, 9}) {
            std::vector<uint8_t> bytes(g.bytes * static_cast<size_t>(n_blocks));
            for (auto& b : bytes) b = static_cast<uint8_t>(rng());
            std::uniform_real_distribution<float> scale(-2.0f, 2.0f);
            for (int b = 0; b < n_blocks; ++b) {
                for (size_t at : g.half_at) put_half(bytes, g.bytes * b + at, fp32_to_fp16(scale(rng)));
            }
            const int64_t n = g.elems * n_blocks;
            std::vector<float> want(static_cast<size_t>(n));
            ref::dequantize_row(g.t, reinterpret_cast<const std::byte*>(bytes.data()), n, want.data());
            for (const auto& [name, fn] : dequantizers()) {
                std::vector<float> got(static_cast<size_t>(n) + 8, 99.0f);
                fn(g.t, reinterpret_cast<const std::byte*>(bytes.data()), n, got.data());
                ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
                    << name << " " << core::tensor_type_label(g.t) << " blocks " << n_blocks;
                for (size_t i = want.size(); i < got.size(); ++i) ASSERT_EQ(got[i], 99.0f) << name;
            }
        }
    }
}

// The quantisers' documented per-element bounds, recomputed from each block's stored scales.
float step_of(tensor_type t, const std::byte* row, int64_t e) {
    uint16_t h;
    if (t == tensor_type::q4_0) {
        std::memcpy(&h, row + e / 32 * 18, 2);
        return std::fabs(fp16_to_fp32(h));  // the clamped side can be off by a whole step
    }
    if (t == tensor_type::q4_1) {
        // Half a step, plus the fp16 rounding of m and of d (which q, up to 15, multiplies).
        uint16_t dm[2];
        std::memcpy(dm, row + e / 32 * 20, 4);
        const float d = fp16_to_fp32(dm[0]);
        return 0.5f * d + 0x1p-11f * (std::fabs(fp16_to_fp32(dm[1])) + 15.0f * d);
    }
    if (t == tensor_type::q4_k) {
        const std::byte* block = row + e / 256 * 144;
        std::memcpy(&h, block, 2);
        const auto* q = reinterpret_cast<const uint8_t*>(block + 4);
        const int j = static_cast<int>(e % 256) / 32;
        const int sc = j < 4 ? q[j] & 63 : (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        return 0.5f * fp16_to_fp32(h) * static_cast<float>(sc);
    }
    const std::byte* block = row + e / 256 * 210;
    std::memcpy(&h, block + 208, 2);
    const auto sc = static_cast<int8_t>(block[192 + (e % 256) / 16]);
    return 0.5f * fp16_to_fp32(h) * static_cast<float>(sc);
}

TEST(QuantizeRow, RoundTripWithinBounds) {
    for (tensor_type t : {tensor_type::q4_0, tensor_type::q4_1, tensor_type::q4_k, tensor_type::q6_k}) {
        const int64_t n = 1024;
        // Mixed magnitudes per sub-block and an all-positive / all-zero stretch, so offsets and zero scales
        // are exercised.
        std::vector<float> x = random_floats(static_cast<size_t>(n), 7);
        for (int64_t i = 0; i < n; ++i) x[i] *= 1.0f + static_cast<float>((i / 32) % 5);
        for (int64_t i = 256; i < 320; ++i) x[i] = std::fabs(x[i]) + 0.5f;
        for (int64_t i = 512; i < 544; ++i) x[i] = 0.0f;
        std::vector<std::byte> q(row_size(t, n));
        ASSERT_TRUE(quantize_row(t, x.data(), n, q.data()));
        std::vector<float> y(static_cast<size_t>(n));
        ref::dequantize_row(t, q.data(), n, y.data());
        double err2 = 0.0;
        double sig2 = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            const float bound = step_of(t, q.data(), i) * (1.0f + 1e-5f) + 1e-6f * std::fabs(x[i]);
            ASSERT_LE(std::fabs(y[i] - x[i]), bound) << core::tensor_type_label(t) << " element " << i;
            err2 += (y[i] - x[i]) * (y[i] - x[i]);
            sig2 += x[i] * x[i];
        }
        for (int64_t i = 512; i < 544; ++i) EXPECT_EQ(y[i], 0.0f) << core::tensor_type_label(t);
        // Signal-to-noise of a 4-bit (resp. 6-bit) grid over each block's range: 4-bit types keep the
        // error under about 12% of the signal RMS, Q6_K under 3%.
        const double rel = std::sqrt(err2 / sig2);
        EXPECT_LT(rel, t == tensor_type::q6_k ? 0.03 : 0.12) << core::tensor_type_label(t);
    }
}

// ggml's quantize_row_q4_1_ref (ggml-quants.c), transcribed: a q4_1 KV cache holds llama.cpp's bits.
void ggml_quantize_q4_1(const float* x, int64_t k, std::vector<uint8_t>& y) {
    const int qk = 32;
    for (int64_t i = 0; i < k / qk; i++) {
        float min = INFINITY;
        float max = -INFINITY;
        for (int j = 0; j < qk; j++) {
            const float v = x[i * qk + j];
            if (v < min) min = v;
            if (v > max) max = v;
        }
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        uint8_t* blk = y.data() + i * 20;
        const uint16_t dh = fp32_to_fp16(d);
        const uint16_t mh = fp32_to_fp16(min);
        std::memcpy(blk, &dh, 2);
        std::memcpy(blk + 2, &mh, 2);
        for (int j = 0; j < qk / 2; ++j) {
            const float x0 = (x[i * qk + 0 + j] - min) * id;
            const float x1 = (x[i * qk + qk / 2 + j] - min) * id;
            const uint8_t xi0 = std::min<int8_t>(15, static_cast<int8_t>(x0 + 0.5f));
            const uint8_t xi1 = std::min<int8_t>(15, static_cast<int8_t>(x1 + 0.5f));
            blk[4 + j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
        }
    }
}

TEST(QuantizeRow, Q4_1IsGgmlsRounding) {
    const int64_t n = 32 * 64;
    std::vector<float> x = random_floats(static_cast<size_t>(n), 11);
    for (int64_t i = 0; i < n; ++i) x[i] *= 1.0f + static_cast<float>((i / 32) % 7);
    for (int64_t i = 64; i < 96; ++i) x[i] = 0.25f;                            // constant block: d = 0
    for (int64_t i = 96; i < 128; ++i) x[i] = static_cast<float>(i % 16) / 4;  // values on the grid (ties)
    std::vector<std::byte> ours(row_size(tensor_type::q4_1, n));
    ASSERT_EQ(ours.size(), static_cast<size_t>(n / 32 * 20));
    ASSERT_TRUE(quantize_row(tensor_type::q4_1, x.data(), n, ours.data()));
    std::vector<uint8_t> theirs(ours.size());
    ggml_quantize_q4_1(x.data(), n, theirs);
    EXPECT_EQ(std::memcmp(ours.data(), theirs.data(), ours.size()), 0);
}

TEST(QuantizeRow, RefusesPartialBlocks) {
    std::vector<float> x(300, 1.0f);
    std::vector<std::byte> out(1024);
    EXPECT_FALSE(quantize_row(tensor_type::q4_0, x.data(), 40, out.data()));
    EXPECT_FALSE(quantize_row(tensor_type::q4_1, x.data(), 48, out.data()));
    EXPECT_FALSE(quantize_row(tensor_type::q4_k, x.data(), 288, out.data()));
    EXPECT_FALSE(quantize_row(tensor_type::q6_k, x.data(), 128, out.data()));
    EXPECT_TRUE(quantize_row(tensor_type::q4_0, x.data(), 64, out.data()));
}

}  // namespace
}  // namespace h2okv::kernels
