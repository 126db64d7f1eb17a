// The products of Q4_K weights packed 16 rows to a group (kernels/q4_k_x16.h) with quantised activations,
// for any number of tokens: vector lane r is row r, so one load of a packed word gives every row of the
// tile four weights of two sub-blocks (its low and high nibbles), each multiplied with four broadcast
// activations (dot4); no scale is unpacked and nothing is repacked at product time. The integer sums are
// exact and the float steps are kernels/q8k.h's per block, so the bits equal the reference's. Included by
// kernels/x86/kquant_tiles.h, with the same traits V plus: iand, isrl4 (each 16 bits >> 4), u8_to_i32(p)
// (`lanes` bytes zero-extended), u8_to_i16(p) (2 * `lanes` bytes zero-extended to 16 bits), f16_load(p)
// (`lanes` halves), x16_tokens (tokens per tile of one row vector) and x16_row_vectors; where that is above 1
// also x16_wide_tokens (tokens per tile of x16_row_vectors row vectors) and x16_wide_from (the fewest tokens
// that take those tiles). The walk over the groups is kernels/x86/x16_groups.h's.
#pragma once

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>

#include "kernels/q4_k_x16.h"
#include "kernels/q8k.h"
#include "kernels/x86/x16_groups.h"

#ifndef H2OKV_KQ_TARGET
#error "define H2OKV_KQ_TARGET before including kernels/x86/q4_k_x16_tiles.h"
#endif

namespace h2okv::kernels::x86 {
namespace {

// The tiles of RV row vectors, NT tokens per call (kernels/x86/x16_groups.h; x[t]: token t's blocks); y[t *
// y_stride + r * V::lanes + lane]. Each token's activations are broadcast once per step and feed all RV row
// vectors, so a tile of more rows issues fewer loads per product. While it computes, the tile asks memory for
// `pf_step` bytes from `pf` per block (its share of the next groups), so that the weights stream while the
// groups in cache are computed with.
template <typename V, int RV>
struct q4_k_x16_tiles {
    static constexpr int64_t lanes = V::lanes;
    static constexpr int row_vectors = RV;

    template <int NT>
    H2OKV_KQ_TARGET static void tile(const x16_row_vector* rv, const detail::q8k_block* const* x, int64_t nb,
                                     float* y, int64_t y_stride, uintptr_t pf, size_t pf_step) {
        using ireg = typename V::ireg;
        using freg = typename V::freg;
        constexpr int64_t G = detail::q4_k_x16_rows;
        const ireg low4 = V::ibcast_value(0x0F0F0F0F);
        freg facc[RV][NT];
#pragma GCC unroll 4
        for (int r = 0; r < RV; ++r) {
#pragma GCC unroll 8
            for (int t = 0; t < NT; ++t) facc[r][t] = V::fzero();
        }
        for (int64_t b = 0; b < nb; ++b) {
            const std::byte* gb[RV];
#pragma GCC unroll 4
            for (int r = 0; r < RV; ++r)
                gb[r] = rv[r].group + static_cast<size_t>(b) * detail::q4_k_x16_block_bytes;
            if (pf != 0) {
                for (size_t o = 0; o < pf_step; o += 64)
                    __builtin_prefetch(reinterpret_cast<const void*>(pf + o));
                pf += pf_step;
            }
            ireg iacc[RV][NT];
#pragma GCC unroll 4
            for (int r = 0; r < RV; ++r) {
#pragma GCC unroll 8
                for (int t = 0; t < NT; ++t) iacc[r][t] = V::izero();
            }
            for (int p = 0; p < 4; ++p) {
                ireg lo_sum[RV][NT];
                ireg hi_sum[RV][NT];
#pragma GCC unroll 4
                for (int r = 0; r < RV; ++r) {
#pragma GCC unroll 8
                    for (int t = 0; t < NT; ++t) lo_sum[r][t] = hi_sum[r][t] = V::izero();
                }
#pragma GCC unroll 8
                for (int k = 0; k < 8; ++k) {
                    ireg lo[RV];
                    ireg hi[RV];
#pragma GCC unroll 4
                    for (int r = 0; r < RV; ++r) {
                        const ireg raw =
                            V::iload(reinterpret_cast<const int32_t*>(gb[r] + detail::q4_k_x16_qs_offset) +
                                     rv[r].lane0 + (8 * p + k) * G);
                        lo[r] = V::iand(raw, low4);
                        hi[r] = V::iand(V::isrl4(raw), low4);
                    }
#pragma GCC unroll 8
                    for (int t = 0; t < NT; ++t) {
                        const int8_t* xq = x[t][b].qs + 64 * p + 4 * k;
                        const ireg xl = V::ibcast(xq);
                        const ireg xh = V::ibcast(xq + 32);
#pragma GCC unroll 4
                        for (int r = 0; r < RV; ++r) {
                            lo_sum[r][t] = V::dot4(lo_sum[r][t], lo[r], xl);
                            hi_sum[r][t] = V::dot4(hi_sum[r][t], hi[r], xh);
                        }
                    }
                }
#pragma GCC unroll 4
                for (int r = 0; r < RV; ++r) {
                    const auto* sc =
                        reinterpret_cast<const uint8_t*>(gb[r] + detail::q4_k_x16_sc_offset) + rv[r].lane0;
                    const ireg sc_lo = V::u8_to_i32(sc + 2 * p * G);
                    const ireg sc_hi = V::u8_to_i32(sc + (2 * p + 1) * G);
#pragma GCC unroll 8
                    for (int t = 0; t < NT; ++t)
                        iacc[r][t] = V::iadd(
                            iacc[r][t], V::iadd(V::imul(lo_sum[r][t], sc_lo), V::imul(hi_sum[r][t], sc_hi)));
                }
            }
            // M = sum_j m_j * bsum32_j, two sub-blocks per 16-bit pair; then acc = fma(float(I), d * dx, acc)
            // and acc = fma(float(M), -(dmin * dx), acc).
#pragma GCC unroll 4
            for (int r = 0; r < RV; ++r) {
                const auto* m =
                    reinterpret_cast<const uint8_t*>(gb[r] + detail::q4_k_x16_m_offset) + 2 * rv[r].lane0;
                ireg mp[4];
#pragma GCC unroll 4
                for (int p = 0; p < 4; ++p) mp[p] = V::u8_to_i16(m + p * 2 * G);
                const freg d = V::f16_load(gb[r] + detail::q4_k_x16_d_offset + 2 * rv[r].lane0);
                const freg dmin = V::f16_load(gb[r] + detail::q4_k_x16_dmin_offset + 2 * rv[r].lane0);
#pragma GCC unroll 8
                for (int t = 0; t < NT; ++t) {
                    ireg msum = V::izero();
#pragma GCC unroll 4
                    for (int p = 0; p < 4; ++p)
                        msum = V::madd16(msum, mp[p], V::ibcast(x[t][b].bsum32 + 2 * p));
                    const float dx = x[t][b].d;
                    facc[r][t] = V::ffma(V::to_float(iacc[r][t]), V::fmul(d, V::fbcast(dx)), facc[r][t]);
                    facc[r][t] = V::ffma(V::to_float(msum), V::fmul(dmin, V::fbcast(-dx)), facc[r][t]);
                }
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
#pragma GCC unroll 4
            for (int r = 0; r < RV; ++r) V::fstore(y + t * y_stride + r * V::lanes, facc[r][t]);
        }
    }
};

// Rows [r0, r1) (whole groups) of a packed Q4_K product over quantised activations. From V::x16_wide_from
// tokens on, tiles of V::x16_row_vectors row vectors (their groups a run of whole tiles), the groups left
// over one row vector at a time; fewer tokens stay on one row vector.
template <typename V>
H2OKV_KQ_TARGET void q4_k_x16_rows(const matrix_view& w, const detail::q8k_block* xq, int n_tok, float* y,
                                   int64_t r0, int64_t r1) {
    static_assert(detail::q4_k_x16_rows == x16_group_rows);
    constexpr int RV = V::x16_row_vectors;
    const int64_t nb = w.cols / detail::q8k_elems;
    constexpr size_t bb = detail::q4_k_x16_block_bytes;
    using one = q4_k_x16_tiles<V, 1>;
    if constexpr (RV == 1) {
        x16_rows<one, V::x16_tokens, one, V::x16_tokens>(w, nb, bb, xq, n_tok, y, r0, r1, false);
    } else {
        x16_rows<q4_k_x16_tiles<V, RV>, V::x16_wide_tokens, one, V::x16_tokens>(
            w, nb, bb, xq, n_tok, y, r0, r1, n_tok >= V::x16_wide_from);
    }
}

}  // namespace
}  // namespace h2okv::kernels::x86
