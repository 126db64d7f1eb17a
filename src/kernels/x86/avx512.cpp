// AVX-512 (F/BW/DQ/VL) + FMA + F16C matmul: 16-lane codecs for every weight type and the register tiles of
// matmul_tiles.h with 4 rows x 6 tokens of zmm accumulators. Only the functions marked H2OKV_AVX512 use
// those instructions; the table is used only after
// core::cpu_supports(core::cpu_isa::avx512).
#include "kernels/x86/avx512.h"

#include "kernels/blocks.h"
#include "kernels/dispatch.h"
#include "kernels/x86/q6_k_avx2.h"

#ifdef H2OKV_KERNELS_X86

#include <cpuid.h>
#include <immintrin.h>

#include <cassert>
#include <cstring>

#include "kernels/x86/avx2.h"

// GCC 12's AVX-512 intrinsics pass `_mm512_undefined_*()` (a self-initialised variable) as the ignored
// source of their unmasked forms, which -Wuninitialized and -Wmaybe-uninitialized report at every use.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define H2OKV_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))
#define H2OKV_TILE_TARGET H2OKV_AVX512
#include "kernels/x86/matmul_tiles.h"
#define H2OKV_AVX512_VNNI \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c")))
#define H2OKV_KQ_TARGET H2OKV_AVX512_VNNI
#include "kernels/x86/kquant_tiles.h"

namespace h2okv::kernels::avx512 {
namespace {

using core::tensor_type;

struct v512 {
    using reg = __m512;
    static constexpr int64_t lanes = 16;
    // 24 accumulators + 6 activation vectors + 1 weight vector of the 32 zmm registers.
    static constexpr int panel_rows = 4;
    static constexpr int panel_tokens = 6;
    // 16 rows side by side when a single token streams the weights: independent chains hide the fma latency,
    // and with the next group prefetched, 16 rows keep more of memory's bandwidth busy than 8 (Sapphire
    // Rapids, smollm Q8_0 decode, 2 threads: +2-12 %, F16 unchanged).
    static constexpr int direct_rows = 16;

    H2OKV_AVX512 static __mmask16 mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
    H2OKV_AVX512 static reg zero() { return _mm512_setzero_ps(); }
    H2OKV_AVX512 static reg load(const float* p) { return _mm512_loadu_ps(p); }
    H2OKV_AVX512 static reg load_tail(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(mask(n), p); }
    H2OKV_AVX512 static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
    H2OKV_AVX512 static void store_tail(float* p, int64_t n, reg v) { _mm512_mask_storeu_ps(p, mask(n), v); }
    H2OKV_AVX512 static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
    // 16 -> 8 -> 4 -> 2 -> 1 by adding halves.
    H2OKV_AVX512 static float hsum(reg v) {
        const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }
    // out[i] = hsum(v[i]) for i < n <= 16, the same bits: four rounds of shuffles and adds reduce the vectors
    // together, each lane's sum formed from hsum's pairs in hsum's order (a tile's 24 outputs: 69 instead of
    // ~190 instructions, a quarter of a 576-wide row's tile on Sapphire Rapids).
    H2OKV_AVX512 static void hsum_many(const reg* v, int n, float* out) {
        const reg zero = _mm512_setzero_ps();
        reg c[8], f[4], g[2];
        for (int k = 0; k < 8; ++k) {  // 16 -> 8: lanes i and i + 8 (two vectors per result)
            const reg a = 2 * k < n ? v[2 * k] : zero;
            const reg b = 2 * k + 1 < n ? v[2 * k + 1] : zero;
            c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
        }
        for (int k = 0; k < 4; ++k) {  // 8 -> 4: lanes i and i + 4 (four vectors per result)
            f[k] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], 0x88),
                                 _mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], 0xDD));
        }
        for (int k = 0; k < 2; ++k) {  // 4 -> 2: lanes i and i + 2 of each 128-bit block
            g[k] = _mm512_add_ps(_mm512_shuffle_ps(f[2 * k], f[2 * k + 1], 0x44),
                                 _mm512_shuffle_ps(f[2 * k], f[2 * k + 1], 0xEE));
        }
        // 2 -> 1: lanes 0 and 1; lane 4j + m then holds the sum of v[4m + j].
        const reg h = _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], 0x88), _mm512_shuffle_ps(g[0], g[1], 0xDD));
        alignas(64) float sums[16];
        _mm512_store_ps(sums, h);
        for (int i = 0; i < n; ++i) out[i] = sums[4 * (i % 4) + i / 4];
    }
};

using reg = __m512;

H2OKV_AVX512 inline float half_at(const std::byte* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

// NT outputs of a Q4_K row (kernels/q8k.h), one per token, with 512-bit vectors: each block's scales and
// 64-element chunks (two sub-blocks) are decoded once for all NT tokens; per token each chunk is one
// vpmaddubsw and one vpdpwssd with its sub-blocks' scales as 16-bit words, then the block's integer sums
// and its two float steps, as the AVX2 kernel. Each token's arithmetic is the same whatever NT is.
template <int NT>
H2OKV_AVX512_VNNI void q4_k_direct(const std::byte* row, const detail::q8k_block* const* x, int64_t nb,
                                   float* out) {
    float acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; ++b) {
        const std::byte* block = row + b * detail::q4_k_bytes;
        uint32_t words[4];
        detail::unpack_scale_min_k4(reinterpret_cast<const uint8_t*>(block + detail::q4_k_scales_offset),
                                    words);
        // Words 0..7: the scales, 8..15: the mins.
        const __m256i scm = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(words)));
        const __m512i sc = _mm512_castsi256_si512(scm);
        __m512i w[4], scales[4];
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
            const __m256i raw =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + detail::q4_k_qs_offset + 32 * p));
            w[p] = _mm512_and_si512(
                _mm512_inserti64x4(_mm512_castsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1), low4);
            const __m512i pick = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(2 * p)),
                                                    _mm256_set1_epi16(static_cast<int16_t>(2 * p + 1)), 1);
            scales[p] = _mm512_permutexvar_epi16(pick, sc);
        }
        const float d = half_at(block);
        const float dmin = half_at(block + 2);
        const __m128i mins = _mm256_extracti128_si256(scm, 1);
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
            const detail::q8k_block& xb = x[t][b];
            __m512i iacc = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int p = 0; p < 4; ++p) {
                const __m512i prod = _mm512_maddubs_epi16(w[p], _mm512_loadu_si512(xb.qs + 64 * p));
                iacc = _mm512_dpwssd_epi32(iacc, prod, scales[p]);
            }
            const __m128i mprod =
                _mm_madd_epi16(mins, _mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.bsum32)));
            const __m256i i8 =
                _mm256_add_epi32(_mm512_castsi512_si256(iacc), _mm512_extracti32x8_epi32(iacc, 1));
            const __m128i i4 = _mm_add_epi32(_mm256_castsi256_si128(i8), _mm256_extracti128_si256(i8, 1));
            __m128i h = _mm_hadd_epi32(i4, mprod);
            h = _mm_hadd_epi32(h, h);
            const float dx = xb.d;
            acc[t] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(static_cast<float>(_mm_cvtsi128_si32(h))),
                                                _mm_set_ss(d * dx), _mm_set_ss(acc[t])));
            acc[t] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(static_cast<float>(_mm_extract_epi32(h, 1))),
                                                _mm_set_ss(-(dmin * dx)), _mm_set_ss(acc[t])));
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = acc[t];
}

// The few-token k-quant kernel: Q4_K with VNNI, Q6_K (already at the memory's speed) as AVX2.
H2OKV_AVX512_VNNI void kquant_direct_rows(const matrix_view& w, const detail::q8k_block* xq, int n_tok,
                                          float* y, int64_t r0, int64_t r1) {
    if (w.type != tensor_type::q4_k) {
        avx2::kquant_direct_rows(w, xq, n_tok, y, r0, r1);
        return;
    }
    const int64_t nb = w.cols / detail::q8k_elems;
    // Rows are walked one at a time (side by side they defeat the hardware prefetcher); on Sapphire Rapids
    // the prefetcher alone still leaves DRAM idle between rows, so each row also asks for the bytes 1 KiB
    // ahead (tinyllama-1.1b Q4_K decode, 2 threads: 13.7 -> 25.3 tokens/s; 0.5-2 KiB within 5 % of each
    // other).
    constexpr size_t ahead = 1024;
    const std::byte* end = w.data + static_cast<size_t>(r1) * w.row_bytes;
    constexpr int group = 4;  // tokens sharing one decode of the row
    const detail::q8k_block* xt[group];
    float out[group];
    for (int64_t r = r0; r < r1; ++r) {
        const std::byte* row = w.data + static_cast<size_t>(r) * w.row_bytes;
        for (const std::byte* p = row + ahead; p < row + ahead + w.row_bytes && p < end; p += 64)
            __builtin_prefetch(p);
        for (int t0 = 0; t0 < n_tok; t0 += group) {
            const int nt = std::min(group, n_tok - t0);
            for (int j = 0; j < nt; ++j) xt[j] = xq + (t0 + j) * nb;
            switch (nt) {
                case 4: q4_k_direct<4>(row, xt, nb, out); break;
                case 3: q4_k_direct<3>(row, xt, nb, out); break;
                case 2: q4_k_direct<2>(row, xt, nb, out); break;
                default: q4_k_direct<1>(row, xt, nb, out); break;
            }
            for (int j = 0; j < nt; ++j) y[(t0 + j) * w.rows + r] = out[j];
        }
    }
}

// Integer lanes for kquant_tiles.h with AVX512-VNNI: 16 rows x 8 tokens (8 float, 8 block and 8 sub-block
// integer accumulators, the weights and a scale vector of the 32 zmm registers).
struct vi512 {
    using ireg = __m512i;
    using freg = __m512;
    static constexpr int64_t lanes = 16;
    static constexpr int tokens = 8;
    H2OKV_AVX512_VNNI static ireg izero() { return _mm512_setzero_si512(); }
    H2OKV_AVX512_VNNI static ireg iload(const int32_t* p) { return _mm512_loadu_si512(p); }
    H2OKV_AVX512_VNNI static ireg ibcast(const void* p) {
        int32_t v;
        std::memcpy(&v, p, 4);
        return _mm512_set1_epi32(v);
    }
    H2OKV_AVX512_VNNI static ireg iadd(ireg a, ireg b) { return _mm512_add_epi32(a, b); }
    H2OKV_AVX512_VNNI static ireg imul(ireg a, ireg b) { return _mm512_mullo_epi32(a, b); }
    H2OKV_AVX512_VNNI static ireg dot4(ireg acc, ireg w, ireg x) { return _mm512_dpbusd_epi32(acc, w, x); }
    H2OKV_AVX512_VNNI static ireg madd16(ireg acc, ireg a, ireg b) { return _mm512_dpwssd_epi32(acc, a, b); }
    H2OKV_AVX512_VNNI static freg to_float(ireg v) { return _mm512_cvtepi32_ps(v); }
    H2OKV_AVX512_VNNI static freg fzero() { return _mm512_setzero_ps(); }
    H2OKV_AVX512_VNNI static freg fload(const int32_t* p) { return _mm512_loadu_ps(p); }
    H2OKV_AVX512_VNNI static freg fbcast(float f) { return _mm512_set1_ps(f); }
    H2OKV_AVX512_VNNI static freg fmul(freg a, freg b) { return _mm512_mul_ps(a, b); }
    H2OKV_AVX512_VNNI static freg ffma(freg a, freg b, freg c) { return _mm512_fmadd_ps(a, b, c); }
    H2OKV_AVX512_VNNI static void fstore(float* p, freg v) { _mm512_storeu_ps(p, v); }
    // For q4_k_x16_tiles.h: one group x 6 tokens (24 integer + 6 float accumulators, with the weights, of the
    // 32 zmm registers) below 8 tokens and for a group left over; from 8 tokens on two groups x 3 tokens, so
    // that each broadcast activation word feeds two vpdpbusd (the float accumulators spill at the block's
    // end). TinyLlama's 16-token products, `bench_stream_bench tinyllama`: see docs/PERFORMANCE.md.
    static constexpr int x16_tokens = 6;
    static constexpr int x16_row_vectors = 2;
    static constexpr int x16_wide_tokens = 3;
    static constexpr int x16_wide_from = 8;
    H2OKV_AVX512_VNNI static ireg ibcast_value(int32_t v) { return _mm512_set1_epi32(v); }
    H2OKV_AVX512_VNNI static ireg iand(ireg a, ireg b) { return _mm512_and_si512(a, b); }
    H2OKV_AVX512_VNNI static ireg isrl4(ireg a) { return _mm512_srli_epi16(a, 4); }
    H2OKV_AVX512_VNNI static ireg u8_to_i32(const uint8_t* p) {
        return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    H2OKV_AVX512_VNNI static ireg u8_to_i16(const uint8_t* p) {
        return _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    H2OKV_AVX512_VNNI static freg f16_load(const std::byte* p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    static void direct_rows(const matrix_view& w, const detail::q8k_block* xq, int n_tok, float* y,
                            int64_t r0, int64_t r1) {
        kquant_direct_rows(w, xq, n_tok, y, r0, r1);
    }
};

bool cpu_has_vnni() {
    static const bool has = [] {
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
        return (ecx & bit_AVX512VNNI) != 0;
    }();
    return has;
}

struct f16_codec {
    static constexpr int64_t step = 16;
    static constexpr bool dense = true;
    static constexpr bool tile_in_place = true;
    H2OKV_AVX512 static void decode(const std::byte* row, int64_t i, reg* w) {
        w[0] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
    }
    H2OKV_AVX512 static void decode_tail(const std::byte* row, int64_t i, int64_t n, reg* w) {
        w[0] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(v512::mask(n), row + 2 * i));
    }
};

struct bf16_codec {
    static constexpr int64_t step = 16;
    static constexpr bool dense = true;
    static constexpr bool tile_in_place = true;
    H2OKV_AVX512 static reg widen(__m256i h) {
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    H2OKV_AVX512 static void decode(const std::byte* row, int64_t i, reg* w) {
        w[0] = widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
    }
    H2OKV_AVX512 static void decode_tail(const std::byte* row, int64_t i, int64_t n, reg* w) {
        w[0] = widen(_mm256_maskz_loadu_epi16(v512::mask(n), row + 2 * i));
    }
};

// 16 bytes as floats, signed or unsigned.
H2OKV_AVX512 inline reg i8x16_to_ps(__m128i v) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v));
}
H2OKV_AVX512 inline reg u8x16_to_ps(__m128i v) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
}

// Q8_0: d * q (exact in float: 11 x 8 significant bits).
struct q8_0_codec {
    static constexpr int64_t step = 32;
    static constexpr bool dense = false;
    H2OKV_AVX512 static void decode(const std::byte* row, int64_t i, reg* w) {
        const std::byte* block = row + static_cast<size_t>(i / detail::q8_0_elems) * detail::q8_0_bytes;
        const reg d = _mm512_set1_ps(half_at(block));
        const auto* qs = reinterpret_cast<const __m128i*>(block + 2);
        w[0] = _mm512_mul_ps(d, i8x16_to_ps(_mm_loadu_si128(qs)));
        w[1] = _mm512_mul_ps(d, i8x16_to_ps(_mm_loadu_si128(qs + 1)));
    }
};

// Q4_0: d * (nibble - 8); elements 0..15 are the low nibbles, 16..31 the high ones.
struct q4_0_codec {
    static constexpr int64_t step = 32;
    static constexpr bool dense = false;
    // The block's 16 possible values d * (q - 8), each the product the reference computes, picked by each
    // nibble (vpermps reads only the low 4 bits of an index, so the high nibbles need no mask).
    H2OKV_AVX512 static void decode(const std::byte* row, int64_t i, reg* w) {
        const std::byte* block = row + static_cast<size_t>(i / detail::q4_0_elems) * detail::q4_0_bytes;
        const reg values =
            _mm512_mul_ps(_mm512_set1_ps(half_at(block)),
                          _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7));
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
        w[0] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(qs), values);
        w[1] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_srli_epi16(qs, 4)), values);
    }
};

// Q4_1 (a KV-cache type): the block's 16 values d * q + m, as q4_0_codec picks its own. d * q is exact in
// float, so the fused multiply-add rounds where the reference's addition does.
struct q4_1_codec {
    static constexpr int64_t step = 32;
    static constexpr bool dense = false;
    H2OKV_AVX512 static void decode(const std::byte* row, int64_t i, reg* w) {
        const std::byte* block = row + static_cast<size_t>(i / detail::q4_1_elems) * detail::q4_1_bytes;
        const reg values =
            _mm512_fmadd_ps(_mm512_set1_ps(half_at(block)),
                            _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                            _mm512_set1_ps(half_at(block + 2)));
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + detail::q4_1_qs_offset));
        w[0] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(qs), values);
        w[1] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_srli_epi16(qs, 4)), values);
    }
};

// Q4_K sub-block g: (d*sc) * q - dmin*m. d*sc (11 x 6 bits) and (d*sc) * q (17 x 4 bits) are exact in
// float, so one fused multiply-subtract rounds exactly where the reference's subtraction does.
struct q4_k_codec {
    static constexpr int64_t step = 32;
    static constexpr bool dense = false;
    H2OKV_AVX512 static void decode(const std::byte* row, int64_t i, reg* w) {
        const std::byte* block = row + static_cast<size_t>(i / detail::q4_k_elems) * detail::q4_k_bytes;
        const int g = static_cast<int>(i % detail::q4_k_elems) / 32;
        uint8_t sc;
        uint8_t m;
        detail::scale_min_k4(g, reinterpret_cast<const uint8_t*>(block + detail::q4_k_scales_offset), &sc,
                             &m);
        const reg d1 = _mm512_set1_ps(half_at(block) * static_cast<float>(sc));
        const reg m1 = _mm512_set1_ps(half_at(block + 2) * static_cast<float>(m));
        const __m256i q = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(block + detail::q4_k_qs_offset + 32 * (g / 2)));
        const __m256i nib = _mm256_and_si256(_mm256_srli_epi16(q, 4 * (g % 2)), _mm256_set1_epi8(0x0F));
        w[0] = _mm512_fmsub_ps(d1, u8x16_to_ps(_mm256_castsi256_si128(nib)), m1);
        w[1] = _mm512_fmsub_ps(d1, u8x16_to_ps(_mm256_extracti128_si256(nib, 1)), m1);
    }
};

// Q6_K group g (elements 32g ..+32, two sub-blocks of 16): (d * scale) * (bits - 32); the bit layout is
// described in blocks.h.
struct q6_k_codec {
    static constexpr int64_t step = 32;
    static constexpr bool dense = false;
    H2OKV_AVX512 static void decode(const std::byte* row, int64_t i, reg* w) {
        const std::byte* block = row + static_cast<size_t>(i / detail::q6_k_elems) * detail::q6_k_bytes;
        const int g = static_cast<int>(i % detail::q6_k_elems) / 32;
        const float d = half_at(block + detail::q6_k_d_offset);
        const auto* scales = reinterpret_cast<const int8_t*>(block + detail::q6_k_scales_offset);
        const __m256i q = x86::q6_k_group_i8(block, g);
        w[0] = _mm512_mul_ps(_mm512_set1_ps(d * static_cast<float>(scales[2 * g])),
                             i8x16_to_ps(_mm256_castsi256_si128(q)));
        w[1] = _mm512_mul_ps(_mm512_set1_ps(d * static_cast<float>(scales[2 * g + 1])),
                             i8x16_to_ps(_mm256_extracti128_si256(q, 1)));
    }
};

}  // namespace

H2OKV_AVX512 void matmul_rows(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0,
                              int64_t r1) {
    using x86::matmul_tiled;
    switch (w.type) {
        case tensor_type::f32: matmul_tiled<v512, x86::f32_rows<v512>>(w, x, n_tok, y, r0, r1); return;
        case tensor_type::f16: matmul_tiled<v512, f16_codec>(w, x, n_tok, y, r0, r1); return;
        case tensor_type::bf16: matmul_tiled<v512, bf16_codec>(w, x, n_tok, y, r0, r1); return;
        case tensor_type::q8_0: {
            // Integer products over quantised activations (kernels/q8_0_act.h).
            assert(w.cols % detail::q8_0_elems == 0);
            const detail::q8_0_act* xq =
                detail::quantize_q8_0_tokens(x, n_tok, w.cols, &avx2::quantize_q8_0_act);
            if (xq == nullptr) {
                detail::matmul_q8_0_unbuffered(w, x, n_tok, y, r0, r1);
            } else {
                q8_0_dot_rows(w, xq, n_tok, y, r0, r1);
            }
            return;
        }
        case tensor_type::q4_0:
            assert(w.cols % detail::q4_0_elems == 0);
            matmul_tiled<v512, q4_0_codec>(w, x, n_tok, y, r0, r1);
            return;
        case tensor_type::q4_k:
        case tensor_type::q6_k:
            // Integer products (kernels/q8k.h): the same bits with or without VNNI.
            assert(w.cols % detail::q8k_elems == 0);
            if (cpu_has_vnni()) {
                x86::matmul_kquant<vi512>(w, x, n_tok, y, r0, r1);
            } else {
                avx2::matmul_rows(w, x, n_tok, y, r0, r1);
            }
            return;
        default: assert(false && "matmul: unsupported tensor type"); return;
    }
}

H2OKV_AVX512 void matmul_q8_0_f32_rows(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0,
                                       int64_t r1) {
    assert(w.layout == weight_layout::rows);
    x86::matmul_tiled<v512, q8_0_codec>(w, x, n_tok, y, r0, r1);
}

void q8_0_dot_rows(const matrix_view& w, const detail::q8_0_act* xq, int n_tok, float* y, int64_t r0,
                   int64_t r1) {
    if (cpu_has_vnni()) {
        q8_0_dot_rows_vnni(w, xq, n_tok, y, r0, r1);
    } else {
        avx2::q8_0_dot_rows(w, xq, n_tok, y, r0, r1);
    }
}

void kquant_rows(const matrix_view& w, const detail::q8k_block* xq, int n_tok, float* y, int64_t r0,
                 int64_t r1) {
    if (cpu_has_vnni()) {
        x86::kquant_rows<vi512>(w, xq, n_tok, y, r0, r1);
    } else {
        avx2::kquant_rows(w, xq, n_tok, y, r0, r1);
    }
}

H2OKV_AVX512 void dequantize_row(tensor_type t, const std::byte* src, int64_t n, float* dst) {
    switch (t) {
        case tensor_type::f32: x86::decode_row<v512, x86::f32_rows<v512>>(src, n, dst); return;
        case tensor_type::f16: x86::decode_row<v512, f16_codec>(src, n, dst); return;
        case tensor_type::bf16: x86::decode_row<v512, bf16_codec>(src, n, dst); return;
        case tensor_type::q8_0: x86::decode_row<v512, q8_0_codec>(src, n, dst); return;
        case tensor_type::q4_0: x86::decode_row<v512, q4_0_codec>(src, n, dst); return;
        case tensor_type::q4_1: x86::decode_row<v512, q4_1_codec>(src, n, dst); return;
        case tensor_type::q4_k: x86::decode_row<v512, q4_k_codec>(src, n, dst); return;
        case tensor_type::q6_k: x86::decode_row<v512, q6_k_codec>(src, n, dst); return;
        default: assert(false && "dequantize_row: unsupported tensor type"); return;
    }
}

}  // namespace h2okv::kernels::avx512

namespace h2okv::kernels::detail {

const kernel_table& avx512_table() {
    // Softmax is latency-bound at the sizes the engine uses, rope too short to gain: the AVX2 versions.
    static const kernel_table t{isa::avx512,      &avx512::matmul_rows,     &avx512::dequantize_row,
                                &avx2::softmax,   &avx512::attend,          &avx2::rmsnorm,
                                &avx2::swiglu,    &avx2::quantize_q8k,      &avx512::kquant_rows,
                                &avx2::turn_rows, &avx2::quantize_q8_0_act, &avx512::q8_0_dot_rows,
                                &avx2::to_f16,    &avx512::attend_turned,   &avx2::rope_apply};
    return t;
}

}  // namespace h2okv::kernels::detail

#endif  // H2OKV_KERNELS_X86
