// The Q8_0 products with quantised activations (kernels/q8_0_act.h, kernels/x86/q8_0_tiles.h) for the avx2
// table on CPUs with AVX-VNNI (vpdpbusd on ymm without AVX-512: Alder Lake and later, Sapphire Rapids): the
// packed unsigned weights (q + 128) times the signed activations, four at a time in each of 8 rows, the
// block's sum starting from the activations' bias, as the AVX-512 kernel. The same bits as every variant.
#include "kernels/dispatch.h"
#include "kernels/x86/avx2.h"

#ifdef H2OKV_KERNELS_X86

#include <immintrin.h>

#include <cstring>

#include "kernels/q8_0_act.h"

#define H2OKV_AVX_VNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define H2OKV_Q8_TARGET H2OKV_AVX_VNNI
#define H2OKV_Q8_VNNI _mm256_dpbusd_avx_epi32
#include "kernels/x86/q8_0_tiles.h"

namespace h2okv::kernels::avx2 {
namespace {

// 8 lanes, 8 rows x 6 tokens per tile (6 integer and 6 float accumulators, the weights and the scales, of
// the 16 ymm registers).
struct q8v256_vnni {
    using ireg = __m256i;
    using freg = __m256;
    static constexpr int64_t lanes = 8;
    static constexpr int q8_tokens = 6;
    static constexpr int q8_row_vectors = 1;
    H2OKV_AVX_VNNI static ireg iload(const int32_t* p) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    }
    H2OKV_AVX_VNNI static ireg ibcast(const void* p) {
        int32_t v;
        std::memcpy(&v, p, 4);
        return _mm256_set1_epi32(v);
    }
    H2OKV_AVX_VNNI static freg to_float(ireg v) { return _mm256_cvtepi32_ps(v); }
    H2OKV_AVX_VNNI static freg fzero() { return _mm256_setzero_ps(); }
    H2OKV_AVX_VNNI static freg fbcast(float f) { return _mm256_set1_ps(f); }
    H2OKV_AVX_VNNI static freg fmul(freg a, freg b) { return _mm256_mul_ps(a, b); }
    H2OKV_AVX_VNNI static freg ffma(freg a, freg b, freg c) { return _mm256_fmadd_ps(a, b, c); }
    H2OKV_AVX_VNNI static void fstore(float* p, freg v) { _mm256_storeu_ps(p, v); }
    H2OKV_AVX_VNNI static freg f16_load(const std::byte* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    H2OKV_AVX_VNNI static ireg q8_weights(ireg raw) { return raw; }
    H2OKV_AVX_VNNI static ireg q8_dot(ireg acc, ireg w, ireg x) { return _mm256_dpbusd_avx_epi32(acc, w, x); }
    H2OKV_AVX_VNNI static ireg q8_init(int32_t bias) { return _mm256_set1_epi32(bias); }
};

}  // namespace

H2OKV_AVX_VNNI void q8_0_dot_rows_avx_vnni(const matrix_view& w, const detail::q8_0_act* xq, int n_tok,
                                           float* y, int64_t r0, int64_t r1) {
    x86::q8_0_rows<q8v256_vnni>(w, xq, n_tok, y, r0, r1);
}

}  // namespace h2okv::kernels::avx2

#endif  // H2OKV_KERNELS_X86
