// The AVX2 parts of the k-quant products with quantised activations (kernels/q8k.h), shared by the avx2 and
// avx512 tables: activation quantisation and the few-token kernels, which walk each weight row in its GGUF
// layout (integer dot products per block, then the block's two float steps). Decoding is bound by memory,
// so 256-bit vectors suffice on AVX-512 machines too.
#include "kernels/dispatch.h"
#include "kernels/x86/avx2.h"

#ifdef H2OKV_KERNELS_X86

#include <immintrin.h>

#include <cstring>
#include <limits>

#include "kernels/blocks.h"
#include "kernels/q8k.h"
#include "kernels/x86/q6_k_avx2.h"

#define H2OKV_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace h2okv::kernels::avx2 {
namespace {

using detail::q8k_block;

H2OKV_AVX2 inline float half_at(const std::byte* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

// acc + a * b as one fused operation (the float steps of kernels/q8k.h).
H2OKV_AVX2 inline float fma1(float a, float b, float acc) {
    return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(acc)));
}

// 32 int8 as 8 sums of 4 and then 2 sums of 16 (lanes 0..3, 4..7): the block sums of kernels/q8k.h.
H2OKV_AVX2 inline void sums16(__m256i q, int16_t* out) {
    const __m256i quads =
        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
    __m256i h = _mm256_hadd_epi32(quads, quads);  // per 128-bit half: q0+q1, q2+q3, ...
    h = _mm256_hadd_epi32(h, h);
    out[0] = static_cast<int16_t>(_mm256_extract_epi32(h, 0));
    out[1] = static_cast<int16_t>(_mm256_extract_epi32(h, 4));
}

// One 256-element block of activations, as detail::quantize_q8k defines it.
H2OKV_AVX2 void quantize_block(const float* x, q8k_block* o) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax = _mm256_setzero_ps();
    __m256 nan = _mm256_setzero_ps();
    for (int i = 0; i < 256; i += 8) {
        const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i));
        amax = _mm256_max_ps(a, amax);  // a NaN `a` leaves amax unchanged, as the reference's comparison
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float am = _mm_cvtss_f32(m4);
    const float iscale = am > 0.0f ? 127.0f / am : 0.0f;
    const __m256 iv = _mm256_set1_ps(iscale);
    const __m256 lo = _mm256_set1_ps(-127.0f);
    const __m256 hi = _mm256_set1_ps(127.0f);
    for (int i = 0; i < 256; i += 32) {
        __m256i q[4];
        for (int u = 0; u < 4; ++u) {
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * u), iv);
            v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);  // max(NaN, lo) = lo
            q[u] = _mm256_cvtps_epi32(v);                 // round half to even (MXCSR default)
        }
        // packs work per 128-bit half; the permute restores element order.
        const __m256i p16 = _mm256_packs_epi32(q[0], q[1]);
        const __m256i p16b = _mm256_packs_epi32(q[2], q[3]);
        const __m256i p8 = _mm256_packs_epi16(p16, p16b);
        const __m256i ordered = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o->qs + i), ordered);
        sums16(ordered, o->bsum16 + i / 16);
    }
    o->d = _mm256_movemask_ps(nan) != 0 ? std::numeric_limits<float>::quiet_NaN() : am / 127.0f;
    for (int j = 0; j < 16; ++j) o->q6_bias[j] = -32 * o->bsum16[j];
    for (int j = 0; j < 8; ++j) o->bsum32[j] = static_cast<int16_t>(o->bsum16[2 * j] + o->bsum16[2 * j + 1]);
}

// Horizontal sums of two int32 vectors: {sum a, sum b} in lanes 0 and 1.
H2OKV_AVX2 inline __m128i hsum2(__m256i a, __m128i b4) {
    const __m128i a4 = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    const __m128i h = _mm_hadd_epi32(a4, b4);
    return _mm_hadd_epi32(h, h);
}

// A Q4_K block's 8 scales (bytes 0..7) and 8 mins (bytes 8..15).
H2OKV_AVX2 inline __m128i q4_k_scales_mins(const std::byte* block) {
    uint32_t w[4];
    detail::unpack_scale_min_k4(reinterpret_cast<const uint8_t*>(block + detail::q4_k_scales_offset), w);
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
}

// Byte j of v in all 16 int16 lanes.
H2OKV_AVX2 inline __m256i spread_u8(__m128i v, int j) {
    return _mm256_cvtepu8_epi16(_mm_shuffle_epi8(v, _mm_set1_epi8(static_cast<char>(j))));
}

// One output of a Q4_K row. Rows are walked one at a time, front to back: several rows side by side would
// share the activation loads, but defeat the hardware prefetcher (measured: 6 GB/s instead of 24 on Q6_K
// rows streamed from memory).
H2OKV_AVX2 float q4_k_direct(const std::byte* row, const q8k_block* x, int64_t nb) {
    float acc = 0.0f;
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; ++b) {
        const q8k_block& xb = x[b];
        const std::byte* block = row + b * detail::q4_k_bytes;
        const __m128i scm = q4_k_scales_mins(block);
        __m256i iacc = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
            const __m256i xlo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs + 64 * p));
            const __m256i xhi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs + 64 * p + 32));
            const __m256i raw =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + detail::q4_k_qs_offset + 32 * p));
            const __m256i lo = _mm256_and_si256(raw, low4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
            const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, xlo), spread_u8(scm, 2 * p));
            const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xhi), spread_u8(scm, 2 * p + 1));
            iacc = _mm256_add_epi32(iacc, _mm256_add_epi32(plo, phi));
        }
        const __m128i bs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.bsum32));
        const __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(scm, 8));
        const __m128i sums = hsum2(iacc, _mm_madd_epi16(mins, bs));
        acc = fma1(static_cast<float>(_mm_cvtsi128_si32(sums)), half_at(block) * xb.d, acc);
        acc = fma1(static_cast<float>(_mm_extract_epi32(sums, 1)), -(half_at(block + 2) * xb.d), acc);
    }
    return acc;
}

// One output of a Q6_K row.
H2OKV_AVX2 float q6_k_direct(const std::byte* row, const q8k_block* x, int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        const q8k_block& xb = x[b];
        const std::byte* block = row + b * detail::q6_k_bytes;
        const __m128i sc =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + detail::q6_k_scales_offset));
        // The (q - 32) offset of every sub-block: -32 * sum_j sc_j * bsum16_j.
        const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsum16));
        __m256i iacc = _mm256_sub_epi32(
            _mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc), bs), 5));
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
            const __m256i xg = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs + 32 * g));
            // Bytes 0..7 of the shuffle pick scale 2g, bytes 8..15 scale 2g + 1.
            const __m128i pick =
                _mm_setr_epi8(2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g + 1, 2 * g + 1,
                              2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1);
            const __m256i q = x86::q6_k_group_u8(block, g);
            const __m256i sv = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, pick));
            iacc = _mm256_add_epi32(iacc, _mm256_madd_epi16(_mm256_maddubs_epi16(q, xg), sv));
        }
        const __m128i sums = hsum2(iacc, _mm_setzero_si128());
        acc = fma1(static_cast<float>(_mm_cvtsi128_si32(sums)), half_at(block + detail::q6_k_d_offset) * xb.d,
                   acc);
    }
    return acc;
}

}  // namespace

H2OKV_AVX2 void quantize_q8k(const float* x, int64_t cols, q8k_block* out) {
    for (int64_t b = 0; b < cols / detail::q8k_elems; ++b) quantize_block(x + b * detail::q8k_elems, out + b);
}

H2OKV_AVX2 void kquant_direct_rows(const matrix_view& w, const q8k_block* xq, int n_tok, float* y, int64_t r0,
                                   int64_t r1) {
    const int64_t nb = w.cols / detail::q8k_elems;
    const bool q4 = w.type == core::tensor_type::q4_k;
    for (int64_t r = r0; r < r1; ++r) {
        const std::byte* row = w.data + static_cast<size_t>(r) * w.row_bytes;
        for (int t = 0; t < n_tok; ++t)
            y[t * w.rows + r] = q4 ? q4_k_direct(row, xq + t * nb, nb) : q6_k_direct(row, xq + t * nb, nb);
    }
}

}  // namespace h2okv::kernels::avx2

#endif  // H2OKV_KERNELS_X86
