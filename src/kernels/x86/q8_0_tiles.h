// The Q8_0 products with quantised activations (kernels/q8_0_act.h) for any number of tokens, on the two
// weight layouts:
//   - q8_0_x16 (kernels/q8_0_x16.h): vector lane r is row r of a 16-row group, so one load of a packed word
//     gives every row of the tile four weights, each multiplied with four broadcast activations (q8_dot); a
//     tile is V::q8_row_vectors row vectors (one group's lanes, or several groups) x up to V::q8_tokens
//     tokens, the groups staying in cache while the token tiles pass over them.
//   - plain rows (the tied output matrix, packing off, row counts that are not whole groups): each row's
//     block is one 256-bit vector; a tile multiplies R rows with T tokens (R * T = 8) and reduces the eight
//     sums together, so the float step runs with the eight outputs in the lanes.
// Either way the integer sums are exact and each output's float steps are kernels/q8_0_act.h's, one fma per
// block in block order, so the bits equal the reference's. Included by q8_0_avx2.cpp and q8_0_avx512.cpp
// (and q8_0_avxvnni.cpp) with H2OKV_Q8_TARGET (the target attribute) and, where vpdpbusd exists,
// H2OKV_Q8_VNNI defined as its 256-bit intrinsic (_mm256_dpbusd_epi32 with AVX512-VL, _mm256_dpbusd_avx_epi32
// with AVX-VNNI), and traits V: ireg/freg, lanes, q8_row_vectors, q8_tokens (where q8_row_vectors > 1 also
// q8_wide_from, the fewest tokens that take those tiles, and q8_tokens_one_vector, the tokens per tile of one
// row vector for fewer tokens and for the groups left over), iload(const int32_t*), ibcast(const void*) (4
// bytes to every lane), to_float, fzero, fbcast, fmul, ffma, fstore, f16_load(p) (`lanes` halves),
// q8_weights(raw packed word vector) -> the operand q8_dot takes, q8_dot(acc, weights, x): acc + the 4-byte
// dot products of the rows' weights with x (the unsigned bytes q + 128 for vpdpbusd, q itself otherwise),
// q8_init(bias): the accumulator a block starts from (the activations' `bias`, -128 * sum(x), where q8_dot
// multiplies q + 128, else 0), so that the block's sum is exactly sum q * x.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/blocks.h"
#include "kernels/q8_0_act.h"
#include "kernels/q8_0_x16.h"
#include "kernels/ref/ref.h"
#include "kernels/scratch.h"
#include "kernels/x86/x16_groups.h"

#ifndef H2OKV_Q8_TARGET
#error "define H2OKV_Q8_TARGET before including kernels/x86/q8_0_tiles.h"
#endif

namespace h2okv::kernels::x86 {
namespace {

// The tiles of RV row vectors (V::lanes rows each), NT tokens per call (kernels/x86/x16_groups.h): row vector
// r is the lanes of the group at rv[r].group that start at lane rv[r].lane0 (x[t]: token t's blocks); y[t *
// y_stride + r * V::lanes + lane]. Each token's activations are broadcast once per step and feed all RV row
// vectors, so a tile of more rows issues fewer loads per product. While it computes, the tile asks memory for
// `pf_step` bytes from `pf` per block (the next groups' share that this tile fetches), so that the weights
// stream while the tiles of groups that sit in cache compute.
template <typename V, int RV>
struct q8_0_x16_tiles {
    static constexpr int64_t lanes = V::lanes;
    static constexpr int row_vectors = RV;

    template <int NT>
    H2OKV_Q8_TARGET static void tile(const x16_row_vector* rv, const detail::q8_0_act* const* x, int64_t nb,
                                     float* y, int64_t y_stride, uintptr_t pf, size_t pf_step) {
        using ireg = typename V::ireg;
        using freg = typename V::freg;
        constexpr int64_t G = detail::q8_0_x16_rows;
        freg facc[RV][NT];
#pragma GCC unroll 4
        for (int r = 0; r < RV; ++r) {
#pragma GCC unroll 16
            for (int t = 0; t < NT; ++t) facc[r][t] = V::fzero();
        }
        for (int64_t b = 0; b < nb; ++b) {
            const int32_t* qs[RV];
#pragma GCC unroll 4
            for (int r = 0; r < RV; ++r)
                qs[r] = reinterpret_cast<const int32_t*>(
                            rv[r].group + static_cast<size_t>(b) * detail::q8_0_x16_block_bytes +
                            detail::q8_0_x16_qs_offset) +
                        rv[r].lane0;
            if (pf != 0) {
                for (size_t o = 0; o < pf_step; o += 64)
                    __builtin_prefetch(reinterpret_cast<const void*>(pf + o));
                pf += pf_step;
            }
            ireg iacc[RV][NT];
#pragma GCC unroll 16
            for (int t = 0; t < NT; ++t) {
                const ireg init = V::q8_init(x[t][b].bias);
#pragma GCC unroll 4
                for (int r = 0; r < RV; ++r) iacc[r][t] = init;
            }
#pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) {
                decltype(V::q8_weights(V::iload(qs[0]))) w[RV];
#pragma GCC unroll 4
                for (int r = 0; r < RV; ++r) w[r] = V::q8_weights(V::iload(qs[r] + k * G));
#pragma GCC unroll 16
                for (int t = 0; t < NT; ++t) {
                    const auto xb = V::ibcast(x[t][b].qs + 4 * k);
#pragma GCC unroll 4
                    for (int r = 0; r < RV; ++r) iacc[r][t] = V::q8_dot(iacc[r][t], w[r], xb);
                }
            }
            freg d[RV];
#pragma GCC unroll 4
            for (int r = 0; r < RV; ++r)
                d[r] = V::f16_load(rv[r].group + static_cast<size_t>(b) * detail::q8_0_x16_block_bytes +
                                   detail::q8_0_x16_d_offset + 2 * rv[r].lane0);
#pragma GCC unroll 16
            for (int t = 0; t < NT; ++t) {
                const freg xd = V::fbcast(x[t][b].d);
#pragma GCC unroll 4
                for (int r = 0; r < RV; ++r)
                    facc[r][t] = V::ffma(V::to_float(iacc[r][t]), V::fmul(d[r], xd), facc[r][t]);
            }
        }
#pragma GCC unroll 16
        for (int t = 0; t < NT; ++t) {
#pragma GCC unroll 4
            for (int r = 0; r < RV; ++r) V::fstore(y + t * y_stride + r * V::lanes, facc[r][t]);
        }
    }
};

// Rows [r0, r1) of a packed product. From V::q8_wide_from tokens on, tiles of V::q8_row_vectors row vectors
// (their groups a run of whole tiles) and V::q8_tokens tokens, the groups left over one row vector at a time;
// fewer tokens (a decode step of a few sequences, whose products wait on memory: the wider tile gained
// nothing there) stay on one row vector.
template <typename V>
H2OKV_Q8_TARGET void q8_0_x16_rows(const matrix_view& w, const detail::q8_0_act* xq, int n_tok, float* y,
                                   int64_t r0, int64_t r1) {
    static_assert(detail::q8_0_x16_rows == x16_group_rows);
    constexpr int RV = V::q8_row_vectors;
    const int64_t nb = w.cols / detail::q8_0_elems;
    constexpr size_t bb = detail::q8_0_x16_block_bytes;
    using one = q8_0_x16_tiles<V, 1>;
    if constexpr (RV == 1) {
        x16_rows<one, V::q8_tokens, one, V::q8_tokens>(w, nb, bb, xq, n_tok, y, r0, r1, false);
    } else {
        x16_rows<q8_0_x16_tiles<V, RV>, V::q8_tokens, one, V::q8_tokens_one_vector>(
            w, nb, bb, xq, n_tok, y, r0, r1, n_tok >= V::q8_wide_from);
    }
}

// The 32 weights of a plain block against one token's block: eight int32 lanes whose sum is the block's I.
struct q8_row_block {
    __m256i w;  // the signed weights
#ifdef H2OKV_Q8_VNNI
    __m256i bias;  // -128 * the sum of each lane's four weights (the activations enter as q + 128)
#else
    __m256i abs_w;  // |w| (vpmaddubsw multiplies unsigned with signed bytes)
#endif
};

H2OKV_Q8_TARGET inline q8_row_block q8_row_weights(const std::byte* qs) {
    q8_row_block r;
    r.w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
#ifdef H2OKV_Q8_VNNI
    r.bias = _mm256_sub_epi32(_mm256_setzero_si256(),
                              H2OKV_Q8_VNNI(_mm256_setzero_si256(), _mm256_set1_epi8(-128), r.w));
#else
    r.abs_w = _mm256_abs_epi8(r.w);
#endif
    return r;
}

// A token's block as q8_row_dot takes it: for vpdpbusd the unsigned bytes q + 128.
H2OKV_Q8_TARGET inline __m256i q8_row_activations(const int8_t* x) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
#ifdef H2OKV_Q8_VNNI
    return _mm256_xor_si256(xv, _mm256_set1_epi8(-128));
#else
    return xv;
#endif
}

H2OKV_Q8_TARGET inline __m256i q8_row_dot(const q8_row_block& r, __m256i x) {
#ifdef H2OKV_Q8_VNNI
    return H2OKV_Q8_VNNI(r.bias, x, r.w);
#else
    // |w| * (x with w's sign): pairs up to 2 * 128 * 127, inside vpmaddubsw's int16.
    return _mm256_madd_epi16(_mm256_maddubs_epi16(r.abs_w, _mm256_sign_epi8(x, r.w)), _mm256_set1_epi16(1));
#endif
}

// Lane t of the result: the sum of the eight lanes of p[t].
H2OKV_Q8_TARGET inline __m256i q8_reduce8(const __m256i* p) {
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

H2OKV_Q8_TARGET inline int32_t q8_hsum(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

// The activation scales of a tile's lanes, per block: d[j] for lane j's token.
struct q8_tile_scales {
    float d[8];
};

// One tile of the plain rows: R rows x T tokens (R * T = 8), lane j = row j / T, token j % T. Each row's
// block is loaded once for its T tokens, the eight dot products are reduced together and the float step runs
// on the eight outputs at once, each lane's fma chain in block order.
template <int R, int T>
H2OKV_Q8_TARGET void q8_0_plain_tile(const std::byte* const* rows, const detail::q8_0_act* const* x,
                                     const q8_tile_scales* dx, int64_t nb, float* out) {
    static_assert(R * T == 8);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        __m256i xv[T];
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) xv[t] = q8_row_activations(x[t][b].qs);
        __m256i p[8];
        uint16_t h[R];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const std::byte* block = rows[r] + b * detail::q8_0_bytes;
            const q8_row_block wb = q8_row_weights(block + 2);
            std::memcpy(&h[r], block, 2);
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) p[r * T + t] = q8_row_dot(wb, xv[t]);
        }
        // Lane j's weight scale (row j / T), inserted from registers: eight 2-byte stores and a vector load
        // would stall on store forwarding.
        const __m256 dw = _mm256_cvtph_ps(_mm_setr_epi16(
            static_cast<int16_t>(h[0 / T]), static_cast<int16_t>(h[1 / T]), static_cast<int16_t>(h[2 / T]),
            static_cast<int16_t>(h[3 / T]), static_cast<int16_t>(h[4 / T]), static_cast<int16_t>(h[5 / T]),
            static_cast<int16_t>(h[6 / T]), static_cast<int16_t>(h[7 / T])));
        const __m256 dd = _mm256_mul_ps(dw, _mm256_loadu_ps(dx[b].d));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q8_reduce8(p)), dd, acc);
    }
    _mm256_storeu_ps(out, acc);
}

// Tokens [t0, t1) of rows [r0, r1) in R x T tiles: rows outer (each group's rows read from memory once),
// token tiles inner; a partial last group or tile repeats its last row or token and drops those lanes.
template <int R, int T>
H2OKV_Q8_TARGET void q8_0_plain_pass(const matrix_view& w, const detail::q8_0_act* xq, int t0, int t1,
                                     float* y, int64_t r0, int64_t r1) {
    const int64_t nb = w.cols / detail::q8_0_elems;
    const int tiles = (t1 - t0 + T - 1) / T;
    q8_tile_scales* dx = detail::thread_scratch<q8_tile_scales>(static_cast<size_t>(tiles * nb));
    if (dx == nullptr) {
        ref::q8_0_rows(w, xq + t0 * nb, t1 - t0, y + static_cast<int64_t>(t0) * w.rows, r0, r1);
        return;
    }
    for (int tile = 0; tile < tiles; ++tile)
        for (int64_t b = 0; b < nb; ++b)
            for (int j = 0; j < 8; ++j) {
                const int t = std::min(t0 + tile * T + j % T, t1 - 1);
                dx[tile * nb + b].d[j] = xq[t * nb + b].d;
            }
    const size_t group_bytes = static_cast<size_t>(R) * w.row_bytes;
    for (int64_t g = r0; g < r1; g += R) {
        const std::byte* rows[R];
        for (int r = 0; r < R; ++r)
            rows[r] = w.data + static_cast<size_t>(std::min<int64_t>(g + r, r1 - 1)) * w.row_bytes;
        // The next group's rows, so that memory streams them while this group computes (R rows side by side
        // are more streams than the hardware prefetcher follows).
        if (g + 2 * R <= r1) {
            for (size_t off = 0; off < group_bytes; off += 64)
                __builtin_prefetch(rows[0] + group_bytes + off);
        }
        for (int tile = 0; tile < tiles; ++tile) {
            const detail::q8_0_act* xt[T];
            for (int t = 0; t < T; ++t) xt[t] = xq + std::min(t0 + tile * T + t, t1 - 1) * nb;
            alignas(32) float out[8];
            q8_0_plain_tile<R, T>(rows, xt, dx + tile * nb, nb, out);
            for (int j = 0; j < 8; ++j) {
                const int64_t r = g + j / T;
                const int t = t0 + tile * T + j % T;
                if (r < r1 && t < t1) y[static_cast<int64_t>(t) * w.rows + r] = out[j];
            }
        }
    }
}

// Rows [r0, r1) of a plain-rows Q8_0 product: eight-token tiles, and the tokens left over (or a decode step's
// one to four) with two to eight rows side by side, so that a tile always has eight independent outputs.
H2OKV_Q8_TARGET void q8_0_plain_rows(const matrix_view& w, const detail::q8_0_act* xq, int n_tok, float* y,
                                     int64_t r0, int64_t r1) {
    const int rest = n_tok % 8;
    if (rest >= 5) {
        q8_0_plain_pass<1, 8>(w, xq, 0, n_tok, y, r0, r1);
        return;
    }
    const int main_tokens = n_tok - rest;
    if (main_tokens > 0) q8_0_plain_pass<1, 8>(w, xq, 0, main_tokens, y, r0, r1);
    switch (rest) {
        case 1: q8_0_plain_pass<8, 1>(w, xq, main_tokens, n_tok, y, r0, r1); break;
        case 2: q8_0_plain_pass<4, 2>(w, xq, main_tokens, n_tok, y, r0, r1); break;
        case 3:
        case 4: q8_0_plain_pass<2, 4>(w, xq, main_tokens, n_tok, y, r0, r1); break;
        default: break;
    }
}

// kernel_table::q8_0_rows for this ISA.
template <typename V>
H2OKV_Q8_TARGET void q8_0_rows(const matrix_view& w, const detail::q8_0_act* xq, int n_tok, float* y,
                               int64_t r0, int64_t r1) {
    if (w.layout == weight_layout::q8_0_x16) {
        q8_0_x16_rows<V>(w, xq, n_tok, y, r0, r1);
    } else {
        q8_0_plain_rows(w, xq, n_tok, y, r0, r1);
    }
}

}  // namespace
}  // namespace h2okv::kernels::x86
