// AVX-512 (F/BW/DQ/VL) + FMA + F16C attention over f32, f16, q8_0, q4_0 and q4_1 K/V rows (kernels::attend's
// contract), attend_avx2.cpp's passes on 16 lanes: up to three query heads of a GQA group at a time share
// each K or V chunk's decoding, and every accumulator belongs to one (head, slot) or one (head, output
// element), so a head's bits do not depend on how many heads share the pass. A quantised block of 32 is read
// as two halves of 16. head_dim not a multiple of 16 goes to the AVX2 kernel (which takes multiples of 8).
#include "kernels/blocks.h"
#include "kernels/dispatch.h"
#include "kernels/x86/avx2.h"
#include "kernels/x86/avx512.h"

#ifdef H2OKV_KERNELS_X86

#include <immintrin.h>

#include <algorithm>
#include <cstring>

// GCC 12's AVX-512 intrinsics pass `_mm512_undefined_*()` as the ignored source of their unmasked forms,
// which -Wuninitialized and -Wmaybe-uninitialized report at every use (as in avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define H2OKV_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))

namespace h2okv::kernels::avx512 {
namespace {

H2OKV_AVX512 inline __m512 half_splat(const std::byte* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _mm512_set1_ps(_cvtsh_ss(h));
}

// Loaders of the 16 elements i .. i+15 (i a multiple of 16) of a K/V row as floats: the values
// dequantize_row gives (the block types' products are exact in float, q4_1's sum rounds once as there).
struct f32_rows {
    H2OKV_AVX512 static __m512 load(const std::byte* row, int i) {
        return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
    }
};

struct f16_rows {
    H2OKV_AVX512 static __m512 load(const std::byte* row, int i) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
    }
};

struct q8_0_rows {
    H2OKV_AVX512 static __m512 load(const std::byte* row, int i) {
        const std::byte* block = row + static_cast<size_t>(i / detail::q8_0_elems) * detail::q8_0_bytes;
        const __m128i q =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2 + i % detail::q8_0_elems));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), half_splat(block));
    }
};

// The 16 nibbles of elements i .. i+15 of a q4_0 or q4_1 block's qs: the low nibbles for the first half of
// the block, the high ones for the second.
H2OKV_AVX512 inline __m512i nibbles(const std::byte* qs, int i) {
    __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    if (i % 32 >= 16) q = _mm_srli_epi16(q, 4);
    return _mm512_cvtepu8_epi32(_mm_and_si128(q, _mm_set1_epi8(0x0F)));
}

struct q4_0_rows {
    // d * (q - 8).
    H2OKV_AVX512 static __m512 load(const std::byte* row, int i) {
        const std::byte* block = row + static_cast<size_t>(i / detail::q4_0_elems) * detail::q4_0_bytes;
        const __m512i q = _mm512_sub_epi32(nibbles(block + 2, i), _mm512_set1_epi32(8));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(q), half_splat(block));
    }
};

struct q4_1_rows {
    // d * q + m, fused: d * q is exact, so the sum rounds once as dequantize_row's addition.
    H2OKV_AVX512 static __m512 load(const std::byte* row, int i) {
        const std::byte* block = row + static_cast<size_t>(i / detail::q4_1_elems) * detail::q4_1_bytes;
        const __m512i q = nibbles(block + detail::q4_1_qs_offset, i);
        return _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), half_splat(block), half_splat(block + 2));
    }
};

// The four sums of a[0..3]'s lanes, each (halves added: lane l + lane l + 8) then the AVX2 kernel's tree.
H2OKV_AVX512 inline __m128 hsum4(const __m512* a) {
    __m256 h[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k)
        h[k] = _mm256_add_ps(_mm512_castps512_ps256(a[k]), _mm512_extractf32x8_ps(a[k], 1));
    const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
    return _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

// w[h][s] = scale * dot(q_h, row s) for the S (4 or 8) rows at slots[0..S) and the NQ heads, one FMA chain
// per (head, slot); a short batch (count < S) repeats its last slot and stores only `count` results.
template <typename Keys, int NQ, int S>
H2OKV_AVX512 void scores(const float* q, const Keys& keys, int hd, const int32_t* slots, int j0, int count,
                         float scale, float* w, size_t w_stride) {
    typename Keys::row_t rows[S];
    for (int s = 0; s < S; ++s) rows[s] = keys.row(slots, j0 + std::min(s, count - 1));
    __m512 acc[NQ][S];
#pragma GCC unroll 8
    for (int h = 0; h < NQ; ++h) {
#pragma GCC unroll 8
        for (int s = 0; s < S; ++s) acc[h][s] = _mm512_setzero_ps();
    }
    for (int i = 0; i < hd; i += 16) {
#pragma GCC unroll 8
        for (int s = 0; s < S; ++s) {
            const __m512 kv = keys.load(rows[s], i);
#pragma GCC unroll 4
            for (int h = 0; h < NQ; ++h)
                acc[h][s] =
                    _mm512_fmadd_ps(_mm512_loadu_ps(q + static_cast<size_t>(h) * hd + i), kv, acc[h][s]);
        }
    }
    const __m128 sv = _mm_set1_ps(scale);
#pragma GCC unroll 4
    for (int h = 0; h < NQ; ++h) {
        float* wh = w + static_cast<size_t>(h) * w_stride;
        if (count == S) {
#pragma GCC unroll 2
            for (int b = 0; b < S; b += 4) _mm_storeu_ps(wh + b, _mm_mul_ps(hsum4(&acc[h][b]), sv));
            continue;
        }
        alignas(16) float r[S];
#pragma GCC unroll 2
        for (int b = 0; b < S; b += 4) _mm_store_ps(r + b, _mm_mul_ps(hsum4(&acc[h][b]), sv));
        std::memcpy(wh, r, sizeof(float) * static_cast<size_t>(count));
    }
}

// Rows this many slots ahead are prefetched, the V rows already during the keys' pass (as
// attend_avx2.cpp).
constexpr int prefetch_ahead = 16;

H2OKV_AVX512 inline void prefetch_row(const kv_rows& r, int32_t slot) {
    const std::byte* p = r.data + static_cast<size_t>(slot) * r.row_bytes;
    for (size_t b = 0; b < r.row_bytes; b += 64) __builtin_prefetch(p + b);
}

// Slots per block of the weighted sum, so a block's V rows stay in L1 across the output's stripes.
constexpr int v_block = 128;

// out[h][c .. c + 16*NC) += sum_{j in [j0, j1)} w[h][j] * v[slots[j]][c ..] for the NQ heads.
template <typename Rows, int NQ, int NC>
H2OKV_AVX512 void stripe(float* out, const float* w, size_t w_stride, const kv_rows& v, int hd,
                         const int32_t* slots, int j0, int j1, int c, int prefetch_end) {
    __m512 acc[NQ][NC];
#pragma GCC unroll 4
    for (int h = 0; h < NQ; ++h) {
#pragma GCC unroll 8
        for (int u = 0; u < NC; ++u)
            acc[h][u] = _mm512_loadu_ps(out + static_cast<size_t>(h) * hd + c + 16 * u);
    }
    for (int j = j0; j < j1; ++j) {
        if (j + prefetch_ahead < prefetch_end) prefetch_row(v, slots[j + prefetch_ahead]);
        const std::byte* row = v.data + static_cast<size_t>(slots[j]) * v.row_bytes;
        __m512 wv[NQ];
#pragma GCC unroll 4
        for (int h = 0; h < NQ; ++h) wv[h] = _mm512_set1_ps(w[static_cast<size_t>(h) * w_stride + j]);
#pragma GCC unroll 8
        for (int u = 0; u < NC; ++u) {
            const __m512 x = Rows::load(row, c + 16 * u);
#pragma GCC unroll 4
            for (int h = 0; h < NQ; ++h) acc[h][u] = _mm512_fmadd_ps(wv[h], x, acc[h][u]);
        }
    }
#pragma GCC unroll 4
    for (int h = 0; h < NQ; ++h) {
#pragma GCC unroll 8
        for (int u = 0; u < NC; ++u)
            _mm512_storeu_ps(out + static_cast<size_t>(h) * hd + c + 16 * u, acc[h][u]);
    }
}

// Stripes of NC chunks; the last stripe of a head_dim that NC*16 does not divide has fewer.
template <typename Rows, int NQ, int NC>
H2OKV_AVX512 void stripe_any(float* out, const float* w, size_t w_stride, const kv_rows& v, int hd,
                             const int32_t* slots, int j0, int j1, int c, int chunks, int prefetch_end) {
    if constexpr (NC == 1) {
        stripe<Rows, NQ, 1>(out, w, w_stride, v, hd, slots, j0, j1, c, prefetch_end);
    } else {
        if (chunks >= NC) {
            stripe<Rows, NQ, NC>(out, w, w_stride, v, hd, slots, j0, j1, c, prefetch_end);
        } else {
            stripe_any<Rows, NQ, NC - 1>(out, w, w_stride, v, hd, slots, j0, j1, c, chunks, prefetch_end);
        }
    }
}

// One pass over the slots for NQ heads: scores, softmax per head, weighted sum. q, out: [NQ][hd].
template <typename Keys, typename VRows, int NQ>
H2OKV_AVX512 void attend_heads(const float* q, const Keys& keys, const kv_rows& v, int hd,
                               const int32_t* slots, int n, float scale, float* out, float* w,
                               size_t w_stride) {
    constexpr int S = NQ == 1 ? 8 : 4;  // (head, slot) chains in flight: 8 or 12
    for (int j = 0; j < n; j += S) {
        for (int p = j + prefetch_ahead; p < std::min(n, j + prefetch_ahead + S); ++p) {
            prefetch_row(keys.k, slots[p]);
            prefetch_row(v, slots[p]);
        }
        scores<Keys, NQ, S>(q, keys, hd, slots, j, std::min(S, n - j), scale, w + j, w_stride);
    }
    for (int h = 0; h < NQ; ++h) avx2::softmax(w + static_cast<size_t>(h) * w_stride, n);
    std::fill(out, out + static_cast<size_t>(NQ) * hd, 0.0f);
    constexpr int NC = NQ == 1 ? 8 : 4;  // output chunks per stripe: 8 or 12 accumulators
    for (int j0 = 0; j0 < n; j0 += v_block) {
        const int j1 = std::min(n, j0 + v_block);
        for (int c = 0; c < hd; c += 16 * NC)
            stripe_any<VRows, NQ, NC>(out, w, w_stride, v, hd, slots, j0, j1, c, (hd - c) / 16,
                                      c == 0 ? n : 0);
    }
}

template <typename Keys, typename VRows>
H2OKV_AVX512 void attend_rows(const float* q, int n_q, const Keys& keys, const kv_rows& v, int hd,
                              const int32_t* slots, int n, float scale, float* out, float* w,
                              size_t w_stride) {
    for (int h = 0; h < n_q; h += 3) {
        const size_t off = static_cast<size_t>(h) * hd;
        float* wh = w + static_cast<size_t>(h) * w_stride;
        switch (std::min(3, n_q - h)) {
            case 1:
                attend_heads<Keys, VRows, 1>(q + off, keys, v, hd, slots, n, scale, out + off, wh, w_stride);
                break;
            case 2:
                attend_heads<Keys, VRows, 2>(q + off, keys, v, hd, slots, n, scale, out + off, wh, w_stride);
                break;
            default:
                attend_heads<Keys, VRows, 3>(q + off, keys, v, hd, slots, n, scale, out + off, wh, w_stride);
                break;
        }
    }
}

// The key rows a call attends, for scores: row(slots, j) is slot j's handle, load(handle, i) the floats of
// its elements i .. i+15.
template <typename Rows>
struct stored_keys {
    kv_rows k;
    using row_t = const std::byte*;
    row_t row(const int32_t* slots, int j) const {
        return k.data + static_cast<size_t>(slots[j]) * k.row_bytes;
    }
    H2OKV_AVX512 __m512 load(row_t r, int i) const { return Rows::load(r, i); }
};

// Keys turned as they are loaded, with turn_rows' operations on 16 lanes (the same floats, every row turned,
// turn 0 by the identity, as avx2's turned_keys); rope_dim (and under neox rope_dim / 2) is a multiple of 16.
template <typename Rows, rope_pairing P>
struct turned_keys {
    kv_rows k;
    key_turns t;
    struct row_t {
        const std::byte* p;
        const float* table;  // turn 0 too: its row is the identity (key_turns)
    };
    row_t row(const int32_t* slots, int j) const {
        return {k.data + static_cast<size_t>(slots[j]) * k.row_bytes,
                t.tables + static_cast<size_t>(t.turns[slots[j]]) * 2 * static_cast<size_t>(t.rope_dim)};
    }
    H2OKV_AVX512 __m512 load(row_t r, int i) const {
        const __m512 x = Rows::load(r.p, i);
        if (i >= t.rope_dim) return x;
        const float* sn = r.table + t.rope_dim;  // as avx2's turned_keys
        __m512 partner;
        if constexpr (P == rope_pairing::normal) {
            partner = _mm512_permute_ps(x, 0xB1);
        } else {
            const int half = t.rope_dim / 2;
            partner = Rows::load(r.p, i < half ? i + half : i - half);
        }
        return _mm512_add_ps(_mm512_mul_ps(x, _mm512_loadu_ps(r.table + i)),
                             _mm512_mul_ps(partner, _mm512_loadu_ps(sn + i)));
    }
};

// f(Rows{}) for the row loader of type t.
template <typename F>
H2OKV_AVX512 void with_rows(core::tensor_type t, F&& f) {
    using tt = core::tensor_type;
    switch (t) {
        case tt::f16: f(f16_rows{}); break;
        case tt::q8_0: f(q8_0_rows{}); break;
        case tt::q4_0: f(q4_0_rows{}); break;
        case tt::q4_1: f(q4_1_rows{}); break;
        default: f(f32_rows{}); break;
    }
}

}  // namespace

H2OKV_AVX512 void attend(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim,
                         const int32_t* slots, int n, float scale, float* out, float* weights,
                         size_t weights_stride, double* score_row) {
    if (head_dim % 16 != 0) {
        avx2::attend(q, n_q, k, v, head_dim, slots, n, scale, out, weights, weights_stride, score_row);
        return;
    }
    if (n <= 0) {
        std::fill(out, out + static_cast<size_t>(n_q) * head_dim, 0.0f);
        return;
    }
    with_rows(k.type, [&](auto rows) {
        using Rows = decltype(rows);
        attend_rows<stored_keys<Rows>, Rows>(q, n_q, stored_keys<Rows>{k}, v, head_dim, slots, n, scale, out,
                                             weights, weights_stride);
    });
    avx2::add_scores(weights, weights_stride, n_q, slots, n, score_row);
}

H2OKV_AVX512 void attend_turned(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim,
                                const int32_t* slots, int n, const key_turns& t, float scale, float* out,
                                float* weights, size_t weights_stride, double* score_row) {
    if (!avx2::turns_fill(head_dim, t, 16)) {
        avx2::attend_turned(q, n_q, k, v, head_dim, slots, n, t, scale, out, weights, weights_stride,
                            score_row);
        return;
    }
    if (n <= 0) {
        std::fill(out, out + static_cast<size_t>(n_q) * head_dim, 0.0f);
        return;
    }
    with_rows(k.type, [&](auto rows) {
        using Rows = decltype(rows);
        if (t.pairing == rope_pairing::normal) {
            using Keys = turned_keys<Rows, rope_pairing::normal>;
            attend_rows<Keys, Rows>(q, n_q, Keys{k, t}, v, head_dim, slots, n, scale, out, weights,
                                    weights_stride);
        } else {
            using Keys = turned_keys<Rows, rope_pairing::neox>;
            attend_rows<Keys, Rows>(q, n_q, Keys{k, t}, v, head_dim, slots, n, scale, out, weights,
                                    weights_stride);
        }
    });
    avx2::add_scores(weights, weights_stride, n_q, slots, n, score_row);
}

}  // namespace h2okv::kernels::avx512

#endif  // H2OKV_KERNELS_X86
