// The products of Q4_K weights packed 16 rows to a group (kernels/q4_k_x16.h) with quantised activations,
// for any number of tokens: vector lane r is row r, so one load of a packed word gives every row of the
// tile four weights of two sub-blocks (its low and high nibbles), each multiplied with four broadcast
// activations (dot4); no scale is unpacked and nothing is repacked at product time. The integer sums are
// exact and the float steps are kernels/q8k.h's per block, so the bits equal the reference's. Included by
// kernels/x86/kquant_tiles.h, with the same traits V plus: iand, isrl4 (each 16 bits >> 4), u8_to_i32(p)
// (`lanes` bytes zero-extended), u8_to_i16(p) (2 * `lanes` bytes zero-extended to 16 bits), f16_load(p)
// (`lanes` halves), and x16_tokens (tokens per tile).
#pragma once

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>

#include "kernels/q4_k_x16.h"
#include "kernels/q8k.h"

#ifndef H2OKV_KQ_TARGET
#error "define H2OKV_KQ_TARGET before including kernels/x86/q4_k_x16_tiles.h"
#endif

namespace h2okv::kernels::x86 {
namespace {

// NT tokens of the `lanes` rows of a group that start at lane `lane0` (x[t]: token t's blocks); y[t *
// y_stride + lane].
// While it computes, the tile asks memory for `pf_step` bytes from `pf` per block (its share of the next
// group), so that the weights stream while the group in cache is computed with.
template <typename V, int NT>
H2OKV_KQ_TARGET void q4_k_x16_tile(const std::byte* group, int64_t lane0, const detail::q8k_block* const* x,
                                   int64_t nb, float* y, int64_t y_stride, uintptr_t pf, size_t pf_step) {
    using ireg = typename V::ireg;
    using freg = typename V::freg;
    constexpr int64_t G = detail::q4_k_x16_rows;
    const ireg low4 = V::ibcast_value(0x0F0F0F0F);
    freg facc[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) facc[t] = V::fzero();
    for (int64_t b = 0; b < nb; ++b) {
        const std::byte* gb = group + static_cast<size_t>(b) * detail::q4_k_x16_block_bytes;
        const auto* qs = reinterpret_cast<const int32_t*>(gb + detail::q4_k_x16_qs_offset) + lane0;
        const auto* sc = reinterpret_cast<const uint8_t*>(gb + detail::q4_k_x16_sc_offset) + lane0;
        const auto* m = reinterpret_cast<const uint8_t*>(gb + detail::q4_k_x16_m_offset) + 2 * lane0;
        if (pf != 0) {
            for (size_t o = 0; o < pf_step; o += 64)
                __builtin_prefetch(reinterpret_cast<const void*>(pf + o));
            pf += pf_step;
        }
        ireg iacc[NT];
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) iacc[t] = V::izero();
        for (int p = 0; p < 4; ++p) {
            ireg lo_sum[NT];
            ireg hi_sum[NT];
#pragma GCC unroll 8
            for (int t = 0; t < NT; ++t) lo_sum[t] = hi_sum[t] = V::izero();
#pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) {
                const ireg raw = V::iload(qs + (8 * p + k) * G);
                const ireg lo = V::iand(raw, low4);
                const ireg hi = V::iand(V::isrl4(raw), low4);
#pragma GCC unroll 8
                for (int t = 0; t < NT; ++t) {
                    const int8_t* xq = x[t][b].qs + 64 * p + 4 * k;
                    lo_sum[t] = V::dot4(lo_sum[t], lo, V::ibcast(xq));
                    hi_sum[t] = V::dot4(hi_sum[t], hi, V::ibcast(xq + 32));
                }
            }
            const ireg sc_lo = V::u8_to_i32(sc + 2 * p * G);
            const ireg sc_hi = V::u8_to_i32(sc + (2 * p + 1) * G);
#pragma GCC unroll 8
            for (int t = 0; t < NT; ++t)
                iacc[t] = V::iadd(iacc[t], V::iadd(V::imul(lo_sum[t], sc_lo), V::imul(hi_sum[t], sc_hi)));
        }
        // M = sum_j m_j * bsum32_j, two sub-blocks per 16-bit pair; then acc = fma(float(I), d * dx, acc)
        // and acc = fma(float(M), -(dmin * dx), acc).
        ireg mp[4];
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) mp[p] = V::u8_to_i16(m + p * 2 * G);
        ireg msum[NT];
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
            msum[t] = V::izero();
#pragma GCC unroll 4
            for (int p = 0; p < 4; ++p)
                msum[t] = V::madd16(msum[t], mp[p], V::ibcast(x[t][b].bsum32 + 2 * p));
        }
        const freg d = V::f16_load(gb + detail::q4_k_x16_d_offset + 2 * lane0);
        const freg dmin = V::f16_load(gb + detail::q4_k_x16_dmin_offset + 2 * lane0);
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
            const float dx = x[t][b].d;
            facc[t] = V::ffma(V::to_float(iacc[t]), V::fmul(d, V::fbcast(dx)), facc[t]);
            facc[t] = V::ffma(V::to_float(msum[t]), V::fmul(dmin, V::fbcast(-dx)), facc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) V::fstore(y + t * y_stride, facc[t]);
}

// A tile of nt (1..NT) tokens, chosen at run time.
template <typename V, int NT>
H2OKV_KQ_TARGET void q4_k_x16_tile_n(int nt, const std::byte* group, int64_t lane0,
                                     const detail::q8k_block* const* x, int64_t nb, float* y,
                                     int64_t y_stride, uintptr_t pf, size_t pf_step) {
    if constexpr (NT > 1) {
        if (nt < NT) {
            q4_k_x16_tile_n<V, NT - 1>(nt, group, lane0, x, nb, y, y_stride, pf, pf_step);
            return;
        }
    }
    q4_k_x16_tile<V, NT>(group, lane0, x, nb, y, y_stride, pf, pf_step);
}

// Rows [r0, r1) (whole groups) of a packed Q4_K product over quantised activations: per group, its bytes are
// read from memory once and stay in cache while the token tiles pass over them.
template <typename V>
H2OKV_KQ_TARGET void q4_k_x16_rows(const matrix_view& w, const detail::q8k_block* xq, int n_tok, float* y,
                                   int64_t r0, int64_t r1) {
    constexpr int64_t G = detail::q4_k_x16_rows;
    constexpr int NT = V::x16_tokens;
    assert(r0 % G == 0 && r1 % G == 0);
    const int64_t nb = w.cols / detail::q8k_elems;
    const size_t group_bytes = static_cast<size_t>(nb) * detail::q4_k_x16_block_bytes;
    // The tiles of a group share the prefetch of the next group evenly, block by block.
    const int64_t tiles = (n_tok + NT - 1) / NT * (G / V::lanes);
    const size_t pf_step =
        (group_bytes + static_cast<size_t>(tiles * nb) - 1) / static_cast<size_t>(tiles * nb);
    for (int64_t g = r0 / G; g < r1 / G; ++g) {
        const std::byte* group = w.data + static_cast<size_t>(g) * group_bytes;
        // The next group of the matrix, past the end of this run too (a thread takes its runs in order).
        // An address, not a pointer: the last tile's share may reach a little past the matrix.
        uintptr_t pf = g + 1 < w.rows / G ? reinterpret_cast<uintptr_t>(group + group_bytes) : 0;
        for (int t = 0; t < n_tok; t += NT) {
            const int nt = std::min(NT, n_tok - t);
            const detail::q8k_block* xt[NT];
            for (int j = 0; j < nt; ++j) xt[j] = xq + (t + j) * nb;
            for (int64_t lane0 = 0; lane0 < G; lane0 += V::lanes) {
                q4_k_x16_tile_n<V, NT>(nt, group, lane0, xt, nb,
                                       y + static_cast<int64_t>(t) * w.rows + g * G + lane0, w.rows, pf,
                                       pf_step);
                if (pf != 0) pf += pf_step * static_cast<size_t>(nb);
            }
        }
    }
}

}  // namespace
}  // namespace h2okv::kernels::x86
