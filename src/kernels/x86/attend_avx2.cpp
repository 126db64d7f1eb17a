// AVX2 + FMA + F16C attention over f32, f16, q8_0, q4_0 and q4_1 K/V rows (kernels::attend's contract), and
// over keys turned as they are loaded (kernels::attend_turned). The query heads of a GQA group are taken up
// to three at a time: each K or V chunk is loaded and converted once and feeds every head's accumulators.
// Every accumulator belongs to one (head, slot) or one (head, output element), so a head's bits do not depend
// on how many heads share the pass. head_dim not a multiple of 8 goes to the reference kernel (no model in
// use has one).
#include "kernels/blocks.h"
#include "kernels/dispatch.h"
#include "kernels/ref/ref.h"
#include "kernels/x86/avx2.h"

#ifdef H2OKV_KERNELS_X86

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#define H2OKV_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace h2okv::kernels::avx2 {
namespace {

// Loaders of the 8 elements i .. i+7 (i a multiple of 8) of a K/V row as floats.
struct f32_rows {
    H2OKV_AVX2 static __m256 load(const std::byte* row, int i) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
    }
};

struct f16_rows {
    H2OKV_AVX2 static __m256 load(const std::byte* row, int i) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    }
};

struct q8_0_rows {
    // d * q, exact in float: the values dequantize_row gives.
    H2OKV_AVX2 static __m256 load(const std::byte* row, int i) {
        const std::byte* block = row + static_cast<size_t>(i / detail::q8_0_elems) * detail::q8_0_bytes;
        uint16_t h;
        std::memcpy(&h, block, 2);
        const __m256 d = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(h)));
        const __m128i q =
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + i % detail::q8_0_elems));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
    }
};

struct q4_0_rows {
    // d * (q - 8), exact in float: the values dequantize_row gives. Elements 0..15 of a block are the low
    // nibbles of its 16 bytes, 16..31 the high ones; i is a multiple of 8.
    H2OKV_AVX2 static __m256 load(const std::byte* row, int i) {
        const std::byte* block = row + static_cast<size_t>(i / detail::q4_0_elems) * detail::q4_0_bytes;
        uint16_t h;
        std::memcpy(&h, block, 2);
        const __m256 d = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(h)));
        const int off = i % detail::q4_0_elems;
        __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + (off & 15)));
        if (off >= 16) q = _mm_srli_epi16(q, 4);
        q = _mm_and_si128(q, _mm_set1_epi8(0x0F));
        const __m256i qi = _mm256_sub_epi32(_mm256_cvtepu8_epi32(q), _mm256_set1_epi32(8));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(qi), d);
    }
};

struct q4_1_rows {
    // d * q + m, the values dequantize_row gives (d * q is exact, so the fused add rounds as its addition).
    H2OKV_AVX2 static __m256 load(const std::byte* row, int i) {
        const std::byte* block = row + static_cast<size_t>(i / detail::q4_1_elems) * detail::q4_1_bytes;
        uint16_t dm[2];
        std::memcpy(dm, block, 4);
        const __m256 d = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(dm[0])));
        const __m256 m = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(dm[1])));
        const int off = i % detail::q4_1_elems;
        __m128i q =
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + detail::q4_1_qs_offset + (off & 15)));
        if (off >= 16) q = _mm_srli_epi16(q, 4);
        q = _mm_and_si128(q, _mm_set1_epi8(0x0F));
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q)), d, m);
    }
};

// The four sums of a[0..3]'s lanes: ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)) each.
H2OKV_AVX2 inline __m128 hsum4(const __m256* a) {
    const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    return _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

// w[h][j0 + s] = scale * dot(q_h, row s) for the S (4 or 8) rows at slots[0..S) and the NQ heads. Each
// (head, slot) has its own FMA chain over the row in order and the hsum4 tree; a short batch (count < S) is
// padded by repeating its last slot and only `count` results are stored.
template <typename Keys, int NQ, int S>
H2OKV_AVX2 void scores(const float* q, const Keys& keys, int hd, const int32_t* slots, int j0, int count,
                       float scale, float* w, size_t w_stride) {
    typename Keys::row_t rows[S];
    for (int s = 0; s < S; ++s) rows[s] = keys.row(slots, j0 + std::min(s, count - 1));
    __m256 acc[NQ][S];
#pragma GCC unroll 8
    for (int h = 0; h < NQ; ++h) {
#pragma GCC unroll 8
        for (int s = 0; s < S; ++s) acc[h][s] = _mm256_setzero_ps();
    }
    for (int i = 0; i < hd; i += 8) {
#pragma GCC unroll 8
        for (int s = 0; s < S; ++s) {
            const __m256 kv = keys.load(rows[s], i);
#pragma GCC unroll 4
            for (int h = 0; h < NQ; ++h)
                acc[h][s] =
                    _mm256_fmadd_ps(_mm256_loadu_ps(q + static_cast<size_t>(h) * hd + i), kv, acc[h][s]);
        }
    }
    const __m128 sv = _mm_set1_ps(scale);
#pragma GCC unroll 4
    for (int h = 0; h < NQ; ++h) {
        float* wh = w + static_cast<size_t>(h) * w_stride;
        if (count == S) {  // the usual full batch: stored in place (a memcpy of a run-time size is a call)
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

// The kernels prefetch the rows this many slots ahead (it changes no result), the V rows already during the
// keys' pass, so that the weighted sum after the softmax finds them in cache. The engine hands the slots in
// ascending order (kv_policy keeps them so), but a caller may pass any order: with the rows shuffled over
// 64 MiB of caches (`bench_kernels_bench --benchmark_filter=attend_memory`, AVX-512 build) the V prefetch
// made attention 25 % faster at one thread and 13 % at two (docs/PERFORMANCE.md).
constexpr int prefetch_ahead = 16;

H2OKV_AVX2 inline void prefetch_row(const kv_rows& r, int32_t slot) {
    const std::byte* p = r.data + static_cast<size_t>(slot) * r.row_bytes;
    for (size_t b = 0; b < r.row_bytes; b += 64) __builtin_prefetch(p + b);
}

// Slots per block of the weighted sum: a block's V rows (16 KiB of f16 at head_dim 64) stay in L1 while
// every stripe of the output passes over them.
constexpr int v_block = 128;

// out[h][c .. c + 8*NC) += sum_{j in [j0, j1)} w[h][j] * v[slots[j]][c ..] for the NQ heads, the stripe's
// accumulators held in registers across the block (loaded from and stored back to out, which is exact).
template <typename Rows, int NQ, int NC>
H2OKV_AVX2 void stripe(float* out, const float* w, size_t w_stride, const kv_rows& v, int hd,
                       const int32_t* slots, int j0, int j1, int c, int prefetch_end) {
    __m256 acc[NQ][NC];
#pragma GCC unroll 4
    for (int h = 0; h < NQ; ++h) {
#pragma GCC unroll 8
        for (int u = 0; u < NC; ++u)
            acc[h][u] = _mm256_loadu_ps(out + static_cast<size_t>(h) * hd + c + 8 * u);
    }
    for (int j = j0; j < j1; ++j) {
        if (j + prefetch_ahead < prefetch_end) prefetch_row(v, slots[j + prefetch_ahead]);
        const std::byte* row = v.data + static_cast<size_t>(slots[j]) * v.row_bytes;
        __m256 wv[NQ];
#pragma GCC unroll 4
        for (int h = 0; h < NQ; ++h) wv[h] = _mm256_set1_ps(w[static_cast<size_t>(h) * w_stride + j]);
#pragma GCC unroll 8
        for (int u = 0; u < NC; ++u) {
            const __m256 x = Rows::load(row, c + 8 * u);
#pragma GCC unroll 4
            for (int h = 0; h < NQ; ++h) acc[h][u] = _mm256_fmadd_ps(wv[h], x, acc[h][u]);
        }
    }
#pragma GCC unroll 4
    for (int h = 0; h < NQ; ++h) {
#pragma GCC unroll 8
        for (int u = 0; u < NC; ++u)
            _mm256_storeu_ps(out + static_cast<size_t>(h) * hd + c + 8 * u, acc[h][u]);
    }
}

// Stripes of NC chunks; the last stripe of a head_dim that NC*8 does not divide has fewer.
template <typename Rows, int NQ, int NC>
H2OKV_AVX2 void stripe_any(float* out, const float* w, size_t w_stride, const kv_rows& v, int hd,
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
H2OKV_AVX2 void attend_heads(const float* q, const Keys& keys, const kv_rows& v, int hd, const int32_t* slots,
                             int n, float scale, float* out, float* w, size_t w_stride) {
    constexpr int S = NQ == 1 ? 8 : 4;  // (head, slot) chains in flight: 8 or 12
    for (int j = 0; j < n; j += S) {
        for (int p = j + prefetch_ahead; p < std::min(n, j + prefetch_ahead + S); ++p) {
            prefetch_row(keys.k, slots[p]);
            prefetch_row(v, slots[p]);
        }
        scores<Keys, NQ, S>(q, keys, hd, slots, j, std::min(S, n - j), scale, w + j, w_stride);
    }
    for (int h = 0; h < NQ; ++h) softmax(w + static_cast<size_t>(h) * w_stride, n);
    std::fill(out, out + static_cast<size_t>(NQ) * hd, 0.0f);
    constexpr int NC = NQ == 1 ? 8 : 4;  // output chunks per stripe: 8 or 12 accumulators
    for (int j0 = 0; j0 < n; j0 += v_block) {
        const int j1 = std::min(n, j0 + v_block);
        // The first stripe of a block prefetches ahead, across blocks too; the others find the rows cached.
        for (int c = 0; c < hd; c += 8 * NC)
            stripe_any<VRows, NQ, NC>(out, w, w_stride, v, hd, slots, j0, j1, c, (hd - c) / 8,
                                      c == 0 ? n : 0);
    }
}

template <typename Keys, typename VRows>
H2OKV_AVX2 void attend_rows(const float* q, int n_q, const Keys& keys, const kv_rows& v, int hd,
                            const int32_t* slots, int n, float scale, float* out, float* w, size_t w_stride) {
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
// its elements i .. i+7.
template <typename Rows>
struct stored_keys {
    kv_rows k;
    using row_t = const std::byte*;
    row_t row(const int32_t* slots, int j) const {
        return k.data + static_cast<size_t>(slots[j]) * k.row_bytes;
    }
    H2OKV_AVX2 __m256 load(row_t r, int i) const { return Rows::load(r, i); }
};

// Keys turned as they are loaded (kernels::attend_turned), with turn_rows' operations: the same floats as
// turn_rows writes, but that every row is turned, turn 0 by the identity (no test and branch per row), which
// can only make a -0 element +0: no score sees the difference (key_turns). rope_dim (and under neox
// rope_dim / 2) is a multiple of 8.
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
    H2OKV_AVX2 __m256 load(row_t r, int i) const {
        const __m256 x = Rows::load(r.p, i);
        if (i >= t.rope_dim) return x;
        // x * cosines + partner * signed sines (key_turns' table layout: no shuffle of the table).
        const float* sn = r.table + t.rope_dim;
        __m256 partner;
        if constexpr (P == rope_pairing::normal) {
            partner = _mm256_permute_ps(x, 0xB1);  // pairs side by side: swap neighbours
        } else {
            const int half = t.rope_dim / 2;
            partner = Rows::load(r.p, i < half ? i + half : i - half);
        }
        return _mm256_add_ps(_mm256_mul_ps(x, _mm256_loadu_ps(r.table + i)),
                             _mm256_mul_ps(partner, _mm256_loadu_ps(sn + i)));
    }
};

// f(Rows{}) for the row loader of type t.
template <typename F>
H2OKV_AVX2 void with_rows(core::tensor_type t, F&& f) {
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

namespace {

// score_row[slots[j]] += weights[0][j], then weights[1][j], ... for NQ heads: one load and one store of the
// row per slot, the sum in a register between them (the same additions in the same order as head by head).
template <int NQ>
void add_heads_scores(const float* weights, size_t weights_stride, const int32_t* slots, int n,
                      double* score_row) {
    for (int j = 0; j < n; ++j) {
        double s = score_row[slots[j]];
#pragma GCC unroll 4
        for (int h = 0; h < NQ; ++h)
            s += static_cast<double>(weights[static_cast<size_t>(h) * weights_stride + j]);
        score_row[slots[j]] = s;
    }
}

}  // namespace

void add_scores(const float* weights, size_t weights_stride, int n_q, const int32_t* slots, int n,
                double* score_row) {
    if (score_row == nullptr) return;
    // Heads in runs of up to four: each slot still takes its heads in order.
    for (int h = 0; h < n_q; h += 4) {
        const float* w = weights + static_cast<size_t>(h) * weights_stride;
        switch (std::min(4, n_q - h)) {
            case 1: add_heads_scores<1>(w, weights_stride, slots, n, score_row); break;
            case 2: add_heads_scores<2>(w, weights_stride, slots, n, score_row); break;
            case 3: add_heads_scores<3>(w, weights_stride, slots, n, score_row); break;
            default: add_heads_scores<4>(w, weights_stride, slots, n, score_row); break;
        }
    }
}

H2OKV_AVX2 void attend(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim,
                       const int32_t* slots, int n, float scale, float* out, float* weights,
                       size_t weights_stride, double* score_row) {
    if (head_dim % 8 != 0) {
        ref::attend(q, n_q, k, v, head_dim, slots, n, scale, out, weights, weights_stride, score_row);
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
    add_scores(weights, weights_stride, n_q, slots, n, score_row);
}

bool turns_fill(int head_dim, const key_turns& t, int lanes) {
    return head_dim % lanes == 0 && t.rope_dim % lanes == 0 &&
           (t.pairing == rope_pairing::normal || (t.rope_dim / 2) % lanes == 0);
}

H2OKV_AVX2 void attend_turned(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim,
                              const int32_t* slots, int n, const key_turns& t, float scale, float* out,
                              float* weights, size_t weights_stride, double* score_row) {
    if (!turns_fill(head_dim, t, 8)) {
        ref::attend_turned(q, n_q, k, v, head_dim, slots, n, t, scale, out, weights, weights_stride,
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
    add_scores(weights, weights_stride, n_q, slots, n, score_row);
}

}  // namespace h2okv::kernels::avx2

#endif  // H2OKV_KERNELS_X86
