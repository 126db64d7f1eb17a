// Only the functions marked H2OKV_AVX2 use AVX2/FMA/F16C instructions, so the rest of this file (and any
// inline library code it instantiates) stays valid on every x86-64; the table is used only after
// core::cpu_supports(core::cpu_isa::avx2).
#include "kernels/x86/avx2.h"

#include "kernels/blocks.h"
#include "kernels/dispatch.h"
#include "kernels/half.h"
#include "kernels/x86/q6_k_avx2.h"

#ifdef H2OKV_KERNELS_X86

#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>

#define H2OKV_AVX2 __attribute__((target("avx2,fma,f16c")))
#define H2OKV_TILE_TARGET H2OKV_AVX2
#include "kernels/x86/matmul_tiles.h"
#define H2OKV_KQ_TARGET H2OKV_AVX2
#include "kernels/x86/kquant_tiles.h"

namespace h2okv::kernels::avx2 {
namespace {

using core::tensor_type;

constexpr int64_t q8_0_block = detail::q8_0_elems;
constexpr size_t q8_0_block_bytes = detail::q8_0_bytes;

H2OKV_AVX2 inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

H2OKV_AVX2 inline float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Lanes [0, n) set, n in [0, 8]: the mask for maskload/maskstore of a row tail.
H2OKV_AVX2 inline __m256i tail_mask(int64_t n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lane);
}

// exp(x) for x <= 0 (softmax arguments after max subtraction): Cody-Waite reduction x = n ln2 + r,
// |r| <= ln2/2, and Cephes' degree-6 polynomial for exp(r) (relative error about 2^-23 in float). Arguments
// below -87 give 0 instead of a value under 1.7e-38, far below anything a softmax sum of >= 1 can see.
H2OKV_AVX2 inline __m256 exp_nonpositive(__m256 x) {
    const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(underflow, y);
}

// Loaders of 8 consecutive weights as floats: full (load8) and a zero-padded tail of n < 8 (load_tail).
struct f32_loader {
    H2OKV_AVX2 static __m256 load8(const std::byte* row, int64_t i) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
    }
    H2OKV_AVX2 static __m256 load_tail(const std::byte* row, int64_t i, int64_t n) {
        return _mm256_maskload_ps(reinterpret_cast<const float*>(row) + i, tail_mask(n));
    }
};

struct f16_loader {
    H2OKV_AVX2 static __m256 load8(const std::byte* row, int64_t i) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    }
    H2OKV_AVX2 static __m256 load_tail(const std::byte* row, int64_t i, int64_t n) {
        uint16_t buf[8] = {};
        std::memcpy(buf, row + 2 * i, static_cast<size_t>(n) * 2);
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(buf)));
    }
};

struct bf16_loader {
    H2OKV_AVX2 static __m256 widen(__m128i h) {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    H2OKV_AVX2 static __m256 load8(const std::byte* row, int64_t i) {
        return widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    }
    H2OKV_AVX2 static __m256 load_tail(const std::byte* row, int64_t i, int64_t n) {
        uint16_t buf[8] = {};
        std::memcpy(buf, row + 2 * i, static_cast<size_t>(n) * 2);
        return widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(buf)));
    }
};

// Decoders of the block types, one group of 32 consecutive elements at a time into four registers. Each
// performs the reference's float operations in the same order (the build disables fma contraction), so they
// reproduce ref::dequantize_row bit for bit, and matmul multiplies exactly those values.

// 8 bytes (the low 8 of `v`) as floats.
H2OKV_AVX2 inline __m256 u8_to_ps(__m128i v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
}
H2OKV_AVX2 inline __m256 i8_to_ps(__m128i v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

struct q4_0_codec {
    static constexpr int64_t elems = detail::q4_0_elems;
    static constexpr size_t bytes = detail::q4_0_bytes;
    // The whole block (one group): elements 0..15 are the low nibbles, 16..31 the high ones.
    H2OKV_AVX2 static void group(const std::byte* block, int64_t /*g*/, __m256* w) {
        uint16_t dh;
        std::memcpy(&dh, block, 2);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(dh));
        const __m128i low4 = _mm_set1_epi8(0x0F);
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
        const __m128i lo = _mm_and_si128(qs, low4);
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(qs, 4), low4);
        const __m256i eight = _mm256_set1_epi32(8);
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) {
            const __m256i q = _mm256_sub_epi32(_mm256_cvtepu8_epi32(parts[u]), eight);
            w[u] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(q));
        }
    }
};

// Q4_1 (a KV-cache type): d * q + m, one fused multiply-add that rounds where the reference's addition does
// (d * q is exact in float).
struct q4_1_codec {
    static constexpr int64_t elems = detail::q4_1_elems;
    static constexpr size_t bytes = detail::q4_1_bytes;
    H2OKV_AVX2 static void group(const std::byte* block, int64_t /*g*/, __m256* w) {
        uint16_t dm[2];
        std::memcpy(dm, block, 4);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(dm[0]));
        const __m256 m = _mm256_set1_ps(_cvtsh_ss(dm[1]));
        const __m128i low4 = _mm_set1_epi8(0x0F);
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + detail::q4_1_qs_offset));
        const __m128i lo = _mm_and_si128(qs, low4);
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(qs, 4), low4);
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) w[u] = _mm256_fmadd_ps(d, u8_to_ps(parts[u]), m);
    }
};

struct q4_k_codec {
    static constexpr int64_t elems = detail::q4_k_elems;
    static constexpr size_t bytes = detail::q4_k_bytes;
    // Sub-block g (0..7): nibbles (low for even g, high for odd) of qs[32*(g/2) ..+32].
    H2OKV_AVX2 static void group(const std::byte* block, int64_t g, __m256* w) {
        uint16_t dh[2];
        std::memcpy(dh, block, 4);
        uint8_t sc;
        uint8_t m;
        detail::scale_min_k4(static_cast<int>(g),
                             reinterpret_cast<const uint8_t*>(block + detail::q4_k_scales_offset), &sc, &m);
        const __m256 d1 = _mm256_set1_ps(_cvtsh_ss(dh[0]) * static_cast<float>(sc));
        const __m256 m1 = _mm256_set1_ps(_cvtsh_ss(dh[1]) * static_cast<float>(m));
        const __m256i q = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(block + detail::q4_k_qs_offset + 32 * (g / 2)));
        const __m256i nib =
            _mm256_and_si256(_mm256_srli_epi16(q, static_cast<int>(4 * (g % 2))), _mm256_set1_epi8(0x0F));
        const __m128i lo = _mm256_castsi256_si128(nib);
        const __m128i hi = _mm256_extracti128_si256(nib, 1);
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) w[u] = _mm256_sub_ps(_mm256_mul_ps(d1, u8_to_ps(parts[u])), m1);
    }
};

struct q6_k_codec {
    static constexpr int64_t elems = detail::q6_k_elems;
    static constexpr size_t bytes = detail::q6_k_bytes;
    // Group g (0..7) = elements 32g ..+32: two sub-blocks of 16 with their own scales.
    H2OKV_AVX2 static void group(const std::byte* block, int64_t g, __m256* w) {
        uint16_t dh;
        std::memcpy(&dh, block + detail::q6_k_d_offset, 2);
        const float d = _cvtsh_ss(dh);
        const auto* scales = reinterpret_cast<const int8_t*>(block + detail::q6_k_scales_offset);
        const __m256i q = x86::q6_k_group_i8(block, static_cast<int>(g));
        const __m128i lo = _mm256_castsi256_si128(q);
        const __m128i hi = _mm256_extracti128_si256(q, 1);
        const __m256 s0 = _mm256_set1_ps(d * static_cast<float>(scales[2 * g]));
        const __m256 s1 = _mm256_set1_ps(d * static_cast<float>(scales[2 * g + 1]));
        w[0] = _mm256_mul_ps(s0, i8_to_ps(lo));
        w[1] = _mm256_mul_ps(s0, i8_to_ps(_mm_srli_si128(lo, 8)));
        w[2] = _mm256_mul_ps(s1, i8_to_ps(hi));
        w[3] = _mm256_mul_ps(s1, i8_to_ps(_mm_srli_si128(hi, 8)));
    }
};

template <typename C>
H2OKV_AVX2 void dequantize_blocks(const std::byte* src, int64_t n, float* dst) {
    constexpr int64_t groups_per_block = C::elems / 32;
    for (int64_t g = 0; g < n / 32; ++g) {
        __m256 w[4];
        C::group(src + static_cast<size_t>(g / groups_per_block) * C::bytes, g % groups_per_block, w);
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) _mm256_storeu_ps(dst + 32 * g + 8 * u, w[u]);
    }
}

// Q8_0 for the matmul tiles: d * q (exact in float: 11 x 8 significant bits), as dequantize_q8_0.
struct q8_0_codec {
    static constexpr int64_t step = 32;
    static constexpr bool dense = false;
    H2OKV_AVX2 static void decode(const std::byte* row, int64_t i, __m256* w) {
        const std::byte* block = row + static_cast<size_t>(i / q8_0_block) * q8_0_block_bytes;
        uint16_t dh;
        std::memcpy(&dh, block, 2);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(dh));
        const auto* qs = reinterpret_cast<const int8_t*>(block + 2);
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) {
            w[u] = _mm256_mul_ps(d, i8_to_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * u))));
        }
    }
};

// A dense loader as a matmul-tile codec: 8 elements per decode, the row's last partial vector through
// load_tail.
template <typename L>
struct dense_codec {
    static constexpr int64_t step = 8;
    static constexpr bool dense = true;
    static constexpr bool tile_in_place = true;
    H2OKV_AVX2 static void decode(const std::byte* row, int64_t i, __m256* w) { w[0] = L::load8(row, i); }
    H2OKV_AVX2 static void decode_tail(const std::byte* row, int64_t i, int64_t n, __m256* w) {
        w[0] = L::load_tail(row, i, n);
    }
};

// A block type's group decoder as a matmul-tile codec: elements [i, i + 32) are group i % elems / 32 of
// block i / elems.
template <typename G>
struct group_codec {
    static constexpr int64_t step = 32;
    static constexpr bool dense = false;
    H2OKV_AVX2 static void decode(const std::byte* row, int64_t i, __m256* w) {
        G::group(row + static_cast<size_t>(i / G::elems) * G::bytes, i % G::elems / 32, w);
    }
};

struct v256 {
    using reg = __m256;
    static constexpr int64_t lanes = 8;
    // 12 accumulators + 3 activation vectors + 1 weight vector: all 16 ymm registers.
    static constexpr int panel_rows = 4;
    static constexpr int panel_tokens = 3;
    static constexpr int direct_rows = 4;

    H2OKV_AVX2 static reg zero() { return _mm256_setzero_ps(); }
    H2OKV_AVX2 static reg load(const float* p) { return _mm256_loadu_ps(p); }
    H2OKV_AVX2 static reg load_tail(const float* p, int64_t n) { return _mm256_maskload_ps(p, tail_mask(n)); }
    H2OKV_AVX2 static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
    H2OKV_AVX2 static void store_tail(float* p, int64_t n, reg v) { _mm256_maskstore_ps(p, tail_mask(n), v); }
    H2OKV_AVX2 static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
    H2OKV_AVX2 static float hsum(reg v) { return avx2::hsum(v); }
    H2OKV_AVX2 static void hsum_many(const reg* v, int n, float* out) {
        for (int i = 0; i < n; ++i) out[i] = hsum(v[i]);
    }
};

// Integer lanes for kquant_tiles.h: 8 rows x 4 tokens (4 float + 8 integer accumulators, the weights and
// the constant ones); the u8 x s8 dot product is emulated with vpmaddubsw + vpmaddwd (no pair of products
// can saturate: 2 * 63 * 127 < 2^15).
struct vi256 {
    using ireg = __m256i;
    using freg = __m256;
    static constexpr int64_t lanes = 8;
    static constexpr int tokens = 4;
    H2OKV_AVX2 static ireg izero() { return _mm256_setzero_si256(); }
    H2OKV_AVX2 static ireg iload(const int32_t* p) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    }
    H2OKV_AVX2 static ireg ibcast(const void* p) {
        int32_t v;
        std::memcpy(&v, p, 4);
        return _mm256_set1_epi32(v);
    }
    H2OKV_AVX2 static ireg iadd(ireg a, ireg b) { return _mm256_add_epi32(a, b); }
    H2OKV_AVX2 static ireg imul(ireg a, ireg b) { return _mm256_mullo_epi32(a, b); }
    H2OKV_AVX2 static ireg dot4(ireg acc, ireg w, ireg x) {
        return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
    }
    H2OKV_AVX2 static ireg madd16(ireg acc, ireg a, ireg b) {
        return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
    }
    H2OKV_AVX2 static freg to_float(ireg v) { return _mm256_cvtepi32_ps(v); }
    H2OKV_AVX2 static freg fzero() { return _mm256_setzero_ps(); }
    H2OKV_AVX2 static freg fload(const int32_t* p) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    }
    H2OKV_AVX2 static freg fbcast(float f) { return _mm256_set1_ps(f); }
    H2OKV_AVX2 static freg fmul(freg a, freg b) { return _mm256_mul_ps(a, b); }
    H2OKV_AVX2 static freg ffma(freg a, freg b, freg c) { return _mm256_fmadd_ps(a, b, c); }
    H2OKV_AVX2 static void fstore(float* p, freg v) { _mm256_storeu_ps(p, v); }
    // For q4_k_x16_tiles.h: half a group x 2 tokens (8 integer + 2 float accumulators of the 16 ymm
    // registers).
    static constexpr int x16_tokens = 2;
    static constexpr int x16_row_vectors = 1;
    H2OKV_AVX2 static ireg ibcast_value(int32_t v) { return _mm256_set1_epi32(v); }
    H2OKV_AVX2 static ireg iand(ireg a, ireg b) { return _mm256_and_si256(a, b); }
    H2OKV_AVX2 static ireg isrl4(ireg a) { return _mm256_srli_epi16(a, 4); }
    H2OKV_AVX2 static ireg u8_to_i32(const uint8_t* p) {
        return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    }
    H2OKV_AVX2 static ireg u8_to_i16(const uint8_t* p) {
        return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    H2OKV_AVX2 static freg f16_load(const std::byte* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    static void direct_rows(const matrix_view& w, const detail::q8k_block* xq, int n_tok, float* y,
                            int64_t r0, int64_t r1) {
        avx2::kquant_direct_rows(w, xq, n_tok, y, r0, r1);
    }
};

H2OKV_AVX2 void dequantize_q8_0(const std::byte* src, int64_t n, float* dst) {
    for (int64_t b = 0; b < n / q8_0_block; ++b) {
        const std::byte* block = src + static_cast<size_t>(b) * q8_0_block_bytes;
        uint16_t dh;
        std::memcpy(&dh, block, 2);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(dh));
        const auto* qs = reinterpret_cast<const int8_t*>(block + 2);
        for (int u = 0; u < 4; ++u) {
            const __m256 q = _mm256_cvtepi32_ps(
                _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * u))));
            _mm256_storeu_ps(dst + b * q8_0_block + 8 * u, _mm256_mul_ps(d, q));
        }
    }
}

template <typename L>
H2OKV_AVX2 void dequantize_dense(const std::byte* src, int64_t n, float* dst) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, L::load8(src, i));
    if (i < n) _mm256_maskstore_ps(dst + i, tail_mask(n - i), L::load_tail(src, i, n - i));
}

// Sum of exp(x[j] - m), each term stored back in x; lanes past n are masked out.
H2OKV_AVX2 float exp_shifted_sum(float* x, int n, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    __m256 s0 = _mm256_setzero_ps();
    __m256 s1 = _mm256_setzero_ps();
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m256 e0 = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + j), mv));
        const __m256 e1 = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + j + 8), mv));
        _mm256_storeu_ps(x + j, e0);
        _mm256_storeu_ps(x + j + 8, e1);
        s0 = _mm256_add_ps(s0, e0);
        s1 = _mm256_add_ps(s1, e1);
    }
    for (; j < n; j += 8) {
        const __m256i mask = tail_mask(n - j);
        const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_maskload_ps(x + j, mask), mv));
        const __m256 e_masked = _mm256_and_ps(e, _mm256_castsi256_ps(mask));
        _mm256_maskstore_ps(x + j, mask, e_masked);
        s0 = _mm256_add_ps(s0, e_masked);
    }
    return hsum(_mm256_add_ps(s0, s1));
}

H2OKV_AVX2 float max_of(const float* x, int n) {
    __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    int j = 0;
    for (; j + 8 <= n; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + j));
    float r = hmax(m);
    for (; j < n; ++j) r = std::max(r, x[j]);
    return r;
}

H2OKV_AVX2 void scale_in_place(float* x, int n, float s) {
    const __m256 sv = _mm256_set1_ps(s);
    int j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), sv));
    for (; j < n; ++j) x[j] *= s;
}

// silu(g) * u for 8 lanes. The polynomial exp takes non-positive arguments, so the sigmoid is formed from
// e = exp(-|g|): 1 / (1 + e) for g >= 0 and e / (1 + e) for g < 0 (chosen by g's sign bit).
H2OKV_AVX2 inline __m256 swiglu8(__m256 g, __m256 up) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = exp_nonpositive(_mm256_or_ps(g, _mm256_set1_ps(-0.0f)));
    const __m256 sigmoid = _mm256_div_ps(_mm256_blendv_ps(one, e, g), _mm256_add_ps(one, e));
    return _mm256_mul_ps(_mm256_mul_ps(g, sigmoid), up);
}

}  // namespace

H2OKV_AVX2 void matmul_rows(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0,
                            int64_t r1) {
    using x86::matmul_tiled;
    switch (w.type) {
        case tensor_type::f32: matmul_tiled<v256, x86::f32_rows<v256>>(w, x, n_tok, y, r0, r1); return;
        case tensor_type::f16: matmul_tiled<v256, dense_codec<f16_loader>>(w, x, n_tok, y, r0, r1); return;
        case tensor_type::bf16: matmul_tiled<v256, dense_codec<bf16_loader>>(w, x, n_tok, y, r0, r1); return;
        case tensor_type::q8_0:
            // Integer products over quantised activations (kernels/q8_0_act.h).
            assert(w.cols % q8_0_block == 0);
            matmul_q8_0_rows(w, x, n_tok, y, r0, r1);
            return;
        case tensor_type::q4_0:
            assert(w.cols % detail::q4_0_elems == 0);
            matmul_tiled<v256, group_codec<q4_0_codec>>(w, x, n_tok, y, r0, r1);
            return;
        case tensor_type::q4_k:
        case tensor_type::q6_k:
            assert(w.cols % detail::q8k_elems == 0);
            x86::matmul_kquant<vi256>(w, x, n_tok, y, r0, r1);
            return;
        default: assert(false && "matmul: unsupported tensor type"); return;
    }
}

H2OKV_AVX2 void matmul_q8_0_f32_rows(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0,
                                     int64_t r1) {
    assert(w.layout == weight_layout::rows);
    x86::matmul_tiled<v256, q8_0_codec>(w, x, n_tok, y, r0, r1);
}

H2OKV_AVX2 void kquant_rows(const matrix_view& w, const detail::q8k_block* xq, int n_tok, float* y,
                            int64_t r0, int64_t r1) {
    x86::kquant_rows<vi256>(w, xq, n_tok, y, r0, r1);
}

H2OKV_AVX2 void dequantize_row(tensor_type t, const std::byte* src, int64_t n, float* dst) {
    switch (t) {
        case tensor_type::f32: dequantize_dense<f32_loader>(src, n, dst); return;
        case tensor_type::f16: dequantize_dense<f16_loader>(src, n, dst); return;
        case tensor_type::bf16: dequantize_dense<bf16_loader>(src, n, dst); return;
        case tensor_type::q8_0:
            assert(n % q8_0_block == 0);
            dequantize_q8_0(src, n, dst);
            return;
        case tensor_type::q4_0: dequantize_blocks<q4_0_codec>(src, n, dst); return;
        case tensor_type::q4_1: dequantize_blocks<q4_1_codec>(src, n, dst); return;
        case tensor_type::q4_k: dequantize_blocks<q4_k_codec>(src, n, dst); return;
        case tensor_type::q6_k: dequantize_blocks<q6_k_codec>(src, n, dst); return;
        default: assert(false && "dequantize_row: unsupported tensor type"); return;
    }
}

H2OKV_AVX2 void rmsnorm(const float* x, const float* w, int n, float eps, float* out) {
    // Squares of floats are exact in double, so only the order of the double additions differs from the
    // reference.
    __m256d acc0 = _mm256_setzero_pd();
    __m256d acc1 = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        acc0 = _mm256_fmadd_pd(lo, lo, acc0);
        acc1 = _mm256_fmadd_pd(hi, hi, acc1);
    }
    const __m256d acc = _mm256_add_pd(acc0, acc1);
    __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(acc), _mm256_extractf128_pd(acc, 1));
    double ss = _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
    for (int j = i; j < n; ++j) ss += static_cast<double>(x[j]) * static_cast<double>(x[j]);
    const auto s = static_cast<float>(1.0 / std::sqrt(ss / n + static_cast<double>(eps)));
    const __m256 sv = _mm256_set1_ps(s);
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 y = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv), _mm256_loadu_ps(w + i));
        _mm256_storeu_ps(out + i, y);
    }
    for (; i < n; ++i) out[i] = x[i] * s * w[i];
}

H2OKV_AVX2 void swiglu(const float* gate, const float* up, int n, float* out) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, swiglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        const __m256i mask = tail_mask(n - i);
        _mm256_maskstore_ps(out + i, mask,
                            swiglu8(_mm256_maskload_ps(gate + i, mask), _mm256_maskload_ps(up + i, mask)));
    }
}

// Pair i's cosine and sine at cos_sin[2i], cos_sin[2i + 1], as ref::rope_apply: x0 * c - x1 * s and
// x0 * s + x1 * c, each a product pair and one addition (no fused multiply-add), so the bits are the
// reference's. Pairs past the last full vector go the reference's way.
H2OKV_AVX2 void rope_apply(float* x, int n_heads, int head_dim, int rope_dim, const float* cos_sin,
                           rope_pairing p) {
    const int half = rope_dim / 2;
    for (int h = 0; h < n_heads; ++h) {
        float* v = x + static_cast<size_t>(h) * static_cast<size_t>(head_dim);
        int i = 0;  // pairs done
        if (p == rope_pairing::normal) {
            // Pairs (2i, 2i + 1): the table's lanes line up with the row's.
            for (; 2 * i + 8 <= rope_dim; i += 4) {
                const __m256 t = _mm256_loadu_ps(cos_sin + 2 * i);
                const __m256 xv = _mm256_loadu_ps(v + 2 * i);
                const __m256 sw = _mm256_permute_ps(xv, 0xB1);  // x1 x0 x3 x2 ...
                // Even lanes x0 * c - x1 * s, odd lanes x1 * c + x0 * s.
                _mm256_storeu_ps(v + 2 * i, _mm256_addsub_ps(_mm256_mul_ps(xv, _mm256_moveldup_ps(t)),
                                                             _mm256_mul_ps(sw, _mm256_movehdup_ps(t))));
            }
        } else {
            // Pairs (i, i + half): the table's cosines and sines taken apart.
            for (; i + 8 <= half; i += 8) {
                const __m256 t0 = _mm256_loadu_ps(cos_sin + 2 * i);
                const __m256 t1 = _mm256_loadu_ps(cos_sin + 2 * i + 8);
                const __m256 c = _mm256_castpd_ps(_mm256_permute4x64_pd(
                    _mm256_castps_pd(_mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0))),
                    _MM_SHUFFLE(3, 1, 2, 0)));
                const __m256 s = _mm256_castpd_ps(_mm256_permute4x64_pd(
                    _mm256_castps_pd(_mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1))),
                    _MM_SHUFFLE(3, 1, 2, 0)));
                const __m256 x0 = _mm256_loadu_ps(v + i);
                const __m256 x1 = _mm256_loadu_ps(v + i + half);
                _mm256_storeu_ps(v + i, _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, s)));
                _mm256_storeu_ps(v + i + half, _mm256_add_ps(_mm256_mul_ps(x0, s), _mm256_mul_ps(x1, c)));
            }
        }
        for (; i < half; ++i) {
            const int a = p == rope_pairing::normal ? 2 * i : i;
            const int b = p == rope_pairing::normal ? 2 * i + 1 : i + half;
            const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
            const float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

H2OKV_AVX2 void to_f16(const float* src, int64_t n, std::byte* dst) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h =
            _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), h);
    }
    for (; i < n; ++i) {
        const uint16_t h = detail::float_to_half(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
    }
}

H2OKV_AVX2 void exp_nonpositive(const float* x, int n, float* out) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, exp_nonpositive(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i mask = tail_mask(n - i);
        _mm256_maskstore_ps(out + i, mask, exp_nonpositive(_mm256_maskload_ps(x + i, mask)));
    }
}

H2OKV_AVX2 void softmax(float* x, int n) {
    if (n <= 0) return;
    const float m = max_of(x, n);
    const float sum = exp_shifted_sum(x, n, m);
    scale_in_place(x, n, 1.0f / sum);
}

}  // namespace h2okv::kernels::avx2

namespace h2okv::kernels::detail {
const kernel_table& avx2_table() {
    static const kernel_table t{isa::avx2,
                                &avx2::matmul_rows,
                                &avx2::dequantize_row,
                                &avx2::softmax,
                                &avx2::attend,
                                &avx2::rmsnorm,
                                &avx2::swiglu,
                                &avx2::quantize_q8k,
                                &avx2::kquant_rows,
                                &avx2::turn_rows,
                                &avx2::quantize_q8_0_act,
                                &avx2::q8_0_dot_rows,
                                &avx2::to_f16,
                                &avx2::attend_turned,
                                &avx2::rope_apply};
    return t;
}

}  // namespace h2okv::kernels::detail

#endif  // H2OKV_KERNELS_X86
