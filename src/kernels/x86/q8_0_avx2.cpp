// The AVX2 Q8_0 products with quantised activations (kernels/q8_0_act.h, kernels/x86/q8_0_tiles.h) and the
// activation quantiser the avx512 table shares. Without VNNI a 4-byte dot product is vpsignb, vpmaddubsw and
// vpmaddwd on |w| and x with w's sign (pairs up to 2 * 128 * 127, inside int16).
#include "kernels/dispatch.h"
#include "kernels/x86/avx2.h"

#ifdef H2OKV_KERNELS_X86

#include <cpuid.h>
#include <immintrin.h>

#include <cstring>
#include <limits>

#include "kernels/half.h"
#include "kernels/q8_0_act.h"

#define H2OKV_AVX2 __attribute__((target("avx2,fma,f16c")))
#define H2OKV_Q8_TARGET H2OKV_AVX2
#include "kernels/x86/q8_0_tiles.h"

namespace h2okv::kernels::avx2 {
namespace {

// 8 lanes: a 16-row group is two tiles of 8 rows x 4 tokens (4 integer and 4 float accumulators, the
// weights and their absolute values, of the 16 ymm registers).
struct q8v256 {
    using ireg = __m256i;
    using freg = __m256;
    static constexpr int64_t lanes = 8;
    static constexpr int q8_tokens = 4;
    static constexpr int q8_row_vectors = 1;
    struct weights {
        __m256i w;
        __m256i abs_w;
    };
    H2OKV_AVX2 static ireg iload(const int32_t* p) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    }
    H2OKV_AVX2 static ireg ibcast(const void* p) {
        int32_t v;
        std::memcpy(&v, p, 4);
        return _mm256_set1_epi32(v);
    }
    H2OKV_AVX2 static freg to_float(ireg v) { return _mm256_cvtepi32_ps(v); }
    H2OKV_AVX2 static freg fzero() { return _mm256_setzero_ps(); }
    H2OKV_AVX2 static freg fbcast(float f) { return _mm256_set1_ps(f); }
    H2OKV_AVX2 static freg fmul(freg a, freg b) { return _mm256_mul_ps(a, b); }
    H2OKV_AVX2 static freg ffma(freg a, freg b, freg c) { return _mm256_fmadd_ps(a, b, c); }
    H2OKV_AVX2 static void fstore(float* p, freg v) { _mm256_storeu_ps(p, v); }
    H2OKV_AVX2 static freg f16_load(const std::byte* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    // The packed bytes are q + 128: XOR 0x80 gives the signed weights back.
    H2OKV_AVX2 static weights q8_weights(ireg raw) {
        const __m256i w = _mm256_xor_si256(raw, _mm256_set1_epi8(-128));
        return {w, _mm256_abs_epi8(w)};
    }
    H2OKV_AVX2 static ireg q8_dot(ireg acc, const weights& w, ireg x) {
        const __m256i p = _mm256_maddubs_epi16(w.abs_w, _mm256_sign_epi8(x, w.w));
        return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
    }
    H2OKV_AVX2 static ireg q8_init(int32_t) { return _mm256_setzero_si256(); }
};

}  // namespace

H2OKV_AVX2 void quantize_q8_0_act(const float* x, int64_t cols, detail::q8_0_act* out) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < cols / detail::q8_0_act_elems; ++b) {
        const float* xb = x + b * detail::q8_0_act_elems;
        __m256 v[4];
        __m256 amax = _mm256_setzero_ps();
        __m256 nan = _mm256_setzero_ps();
        for (int k = 0; k < 4; ++k) {
            v[k] = _mm256_loadu_ps(xb + 8 * k);
            const __m256 a = _mm256_andnot_ps(sign, v[k]);
            amax = _mm256_max_ps(a, amax);  // a NaN `a` leaves amax unchanged, as the reference's comparison
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float am = _mm_cvtss_f32(m4);
        const __m256 iscale = _mm256_set1_ps(am > 0.0f ? 127.0f / am : 0.0f);
        __m256i q[4];
        for (int k = 0; k < 4; ++k) {
            // max(v, -127) takes -127 for a NaN v (the second operand), as the reference's comparison.
            __m256 s = _mm256_max_ps(_mm256_mul_ps(v[k], iscale), _mm256_set1_ps(-127.0f));
            s = _mm256_min_ps(s, _mm256_set1_ps(127.0f));
            q[k] = _mm256_cvtps_epi32(_mm256_round_ps(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
        // packs interleave the 128-bit halves: 0-3 of q0..q3, then 4-7 of each; the permutation restores
        // order.
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        const __m256i qs = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        detail::q8_0_act& o = out[b];
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.qs), qs);
        const __m256i quads =
            _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), qs), _mm256_set1_epi16(1));
        o.bias = -128 * x86::q8_hsum(quads);
        o.d = _mm256_movemask_ps(nan) != 0 ? std::numeric_limits<float>::quiet_NaN()
                                           : detail::half_to_float(detail::float_to_half(am / 127.0f));
    }
}

H2OKV_AVX2 void q8_0_dot_rows_no_vnni(const matrix_view& w, const detail::q8_0_act* xq, int n_tok, float* y,
                                      int64_t r0, int64_t r1) {
    x86::q8_0_rows<q8v256>(w, xq, n_tok, y, r0, r1);
}

bool cpu_has_avx_vnni() {
    static const bool has = [] {
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) == 0) return false;
        return (eax & (1u << 4)) != 0;  // CPUID.(EAX=7,ECX=1):EAX[4], AVX-VNNI
    }();
    return has;
}

void q8_0_dot_rows(const matrix_view& w, const detail::q8_0_act* xq, int n_tok, float* y, int64_t r0,
                   int64_t r1) {
    if (cpu_has_avx_vnni()) {
        q8_0_dot_rows_avx_vnni(w, xq, n_tok, y, r0, r1);
    } else {
        q8_0_dot_rows_no_vnni(w, xq, n_tok, y, r0, r1);
    }
}

H2OKV_AVX2 void matmul_q8_0_rows(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0,
                                 int64_t r1) {
    const detail::q8_0_act* xq = detail::quantize_q8_0_tokens(x, n_tok, w.cols, &quantize_q8_0_act);
    if (xq == nullptr) {
        detail::matmul_q8_0_unbuffered(w, x, n_tok, y, r0, r1);
        return;
    }
    q8_0_dot_rows(w, xq, n_tok, y, r0, r1);
}

}  // namespace h2okv::kernels::avx2

#endif  // H2OKV_KERNELS_X86
