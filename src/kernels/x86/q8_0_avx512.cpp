// The AVX-512 VNNI Q8_0 products with quantised activations (kernels/q8_0_act.h, kernels/x86/q8_0_tiles.h):
// vpdpbusd multiplies the packed unsigned weights (q + 128) with the signed activations, four at a time in
// each of 16 rows, and a block's sum starts from the activations' bias (-128 * their sum), so it comes out
// exact. Used by the avx512 table only where the CPU has AVX512-VNNI; the same bits as the AVX2 kernels.
#include "kernels/dispatch.h"
#include "kernels/x86/avx512.h"

#ifdef H2OKV_KERNELS_X86

#include <immintrin.h>

#include <cstring>

#include "kernels/q8_0_act.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define H2OKV_AVX512_VNNI \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c")))
#define H2OKV_Q8_TARGET H2OKV_AVX512_VNNI
#define H2OKV_Q8_VNNI _mm256_dpbusd_epi32
#include "kernels/x86/q8_0_tiles.h"

namespace h2okv::kernels::avx512 {
namespace {

// From 8 tokens on, two 16-row groups x 6 tokens per tile (12 integer and 12 float accumulators of the 32 zmm
// registers), so that each broadcast activation word feeds two vpdpbusd; fewer tokens, and groups left over,
// one group x 8 tokens (`bench_q8_0_bench` times both).
struct q8v512 {
    using ireg = __m512i;
    using freg = __m512;
    static constexpr int64_t lanes = 16;
    static constexpr int q8_row_vectors = 2;
    static constexpr int q8_tokens = 6;
    static constexpr int q8_wide_from = 8;
    static constexpr int q8_tokens_one_vector = 8;
    H2OKV_AVX512_VNNI static ireg iload(const int32_t* p) { return _mm512_loadu_si512(p); }
    H2OKV_AVX512_VNNI static ireg ibcast(const void* p) {
        int32_t v;
        std::memcpy(&v, p, 4);
        return _mm512_set1_epi32(v);
    }
    H2OKV_AVX512_VNNI static freg to_float(ireg v) { return _mm512_cvtepi32_ps(v); }
    H2OKV_AVX512_VNNI static freg fzero() { return _mm512_setzero_ps(); }
    H2OKV_AVX512_VNNI static freg fbcast(float f) { return _mm512_set1_ps(f); }
    H2OKV_AVX512_VNNI static freg fmul(freg a, freg b) { return _mm512_mul_ps(a, b); }
    H2OKV_AVX512_VNNI static freg ffma(freg a, freg b, freg c) { return _mm512_fmadd_ps(a, b, c); }
    H2OKV_AVX512_VNNI static void fstore(float* p, freg v) { _mm512_storeu_ps(p, v); }
    H2OKV_AVX512_VNNI static freg f16_load(const std::byte* p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    H2OKV_AVX512_VNNI static ireg q8_weights(ireg raw) { return raw; }
    H2OKV_AVX512_VNNI static ireg q8_dot(ireg acc, ireg w, ireg x) { return _mm512_dpbusd_epi32(acc, w, x); }
    H2OKV_AVX512_VNNI static ireg q8_init(int32_t bias) { return _mm512_set1_epi32(bias); }
};

// One group x 8 tokens at every token count.
struct q8v512_one_group : q8v512 {
    static constexpr int q8_row_vectors = 1;
    static constexpr int q8_tokens = 8;
};

}  // namespace

H2OKV_AVX512_VNNI void q8_0_dot_rows_vnni(const matrix_view& w, const detail::q8_0_act* xq, int n_tok,
                                          float* y, int64_t r0, int64_t r1) {
    x86::q8_0_rows<q8v512>(w, xq, n_tok, y, r0, r1);
}

H2OKV_AVX512_VNNI void q8_0_dot_rows_vnni_one_group(const matrix_view& w, const detail::q8_0_act* xq,
                                                    int n_tok, float* y, int64_t r0, int64_t r1) {
    x86::q8_0_rows<q8v512_one_group>(w, xq, n_tok, y, r0, r1);
}

}  // namespace h2okv::kernels::avx512

#endif  // H2OKV_KERNELS_X86
