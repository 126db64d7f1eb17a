// AVX2 + F16C kernels::turn_rows: f32 and f16 rows decoded and turned in registers, 8 dims at a time (other
// types decoded by dequantize_row, then turned in place), with the reference's products and sums (no FMA:
// -ffp-contract=off keeps mul, mul, add), so every row is the reference's bits.
#include "kernels/dispatch.h"
#include "kernels/half.h"
#include "kernels/x86/avx2.h"

#ifdef H2OKV_KERNELS_X86

#include <immintrin.h>

#include <cassert>

#define H2OKV_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace h2okv::kernels::avx2 {
namespace {

// A K row's elements as floats: 8 at e .. e+7, or one.
struct f32_row {
    const float* p;
    H2OKV_AVX2 __m256 operator()(int e) const { return _mm256_loadu_ps(p + e); }
    float at(int e) const { return p[e]; }
};
struct f16_row {
    const uint16_t* p;
    H2OKV_AVX2 __m256 operator()(int e) const {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + e)));
    }
    float at(int e) const { return detail::half_to_float(p[e]); }
};

// Writes the row's dims [e, head_dim) to x unchanged.
template <typename Row>
H2OKV_AVX2 void copy_rest(Row row, int e, int head_dim, float* x) {
    for (; e + 8 <= head_dim; e += 8) _mm256_storeu_ps(x + e, row(e));
    for (; e < head_dim; ++e) x[e] = row.at(e);
}

// x = the row turned by table t (kernels::turn_rows: cosines at t, signed sines at s = t + rope_dim); x may
// be the row itself.
template <typename Row>
H2OKV_AVX2 void turn_row(Row row, int head_dim, int rope_dim, rope_pairing p, const float* t, float* x) {
    const float* s = t + rope_dim;
    if (p == rope_pairing::normal) {
        int e = 0;
        for (; e + 8 <= rope_dim; e += 8) {
            // Pairs (2i, 2i + 1) sit side by side: swapping neighbours lines every dim up with its partner.
            const __m256 v = row(e);
            _mm256_storeu_ps(
                x + e, _mm256_add_ps(_mm256_mul_ps(v, _mm256_loadu_ps(t + e)),
                                     _mm256_mul_ps(_mm256_permute_ps(v, 0xB1), _mm256_loadu_ps(s + e))));
        }
        for (; e < rope_dim; e += 2) {
            const float xa = row.at(e);
            const float xb = row.at(e + 1);
            x[e] = xa * t[e] + xb * s[e];
            x[e + 1] = xb * t[e + 1] + xa * s[e + 1];
        }
    } else {
        const int half = rope_dim / 2;
        int i = 0;
        for (; i + 8 <= half; i += 8) {
            const __m256 lo = row(i);
            const __m256 hi = row(half + i);
            _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_mul_ps(lo, _mm256_loadu_ps(t + i)),
                                                  _mm256_mul_ps(hi, _mm256_loadu_ps(s + i))));
            _mm256_storeu_ps(x + half + i, _mm256_add_ps(_mm256_mul_ps(hi, _mm256_loadu_ps(t + half + i)),
                                                         _mm256_mul_ps(lo, _mm256_loadu_ps(s + half + i))));
        }
        for (; i < half; ++i) {
            const float xa = row.at(i);
            const float xb = row.at(half + i);
            x[i] = xa * t[i] + xb * s[i];
            x[half + i] = xb * t[half + i] + xa * s[half + i];
        }
    }
    copy_rest(row, rope_dim, head_dim, x);
}

}  // namespace

H2OKV_AVX2 void turn_rows(const kv_rows& k, int head_dim, const int32_t* slots, const int32_t* turns, int n,
                          int rope_dim, rope_pairing p, const float* tables, float* dst) {
    assert(rope_dim % 2 == 0 && rope_dim <= head_dim);
    const auto hd = static_cast<size_t>(head_dim);
    for (int j = 0; j < n; ++j) {
        const auto slot = static_cast<size_t>(slots[j]);
        float* x = dst + slot * hd;
        const std::byte* src = k.data + slot * k.row_bytes;
        const float* t = tables + static_cast<size_t>(turns[j]) * 2 * static_cast<size_t>(rope_dim);
        switch (k.type) {
            case core::tensor_type::f32: {
                const f32_row row{reinterpret_cast<const float*>(src)};
                if (turns[j] == 0) {
                    copy_rest(row, 0, head_dim, x);
                } else {
                    turn_row(row, head_dim, rope_dim, p, t, x);
                }
                break;
            }
            case core::tensor_type::f16: {
                const f16_row row{reinterpret_cast<const uint16_t*>(src)};
                if (turns[j] == 0) {
                    copy_rest(row, 0, head_dim, x);
                } else {
                    turn_row(row, head_dim, rope_dim, p, t, x);
                }
                break;
            }
            default:
                dequantize_row(k.type, src, head_dim, x);
                if (turns[j] != 0) turn_row(f32_row{x}, head_dim, rope_dim, p, t, x);
                break;
        }
    }
}

}  // namespace h2okv::kernels::avx2

#endif  // H2OKV_KERNELS_X86
