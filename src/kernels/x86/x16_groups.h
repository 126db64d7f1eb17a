// The walk over a matrix packed 16 rows to a group (kernels/q8_0_x16.h, kernels/q4_k_x16.h) that the packed
// Q8_0 and Q4_K products share: a tile multiplies RV row vectors (`lanes` rows each: part of one group, or
// several whole groups) with up to NT tokens; the groups of a step are read from memory once and stay in
// cache while the token tiles pass over them, and the tiles fetch the next step's groups as they compute.
//
// A product's tiles are a class Tiles with `lanes` (rows per row vector), `row_vectors` (RV) and
//   template <int NT> static void tile(const x16_row_vector* rv, const Act* const* x, int64_t nb, float* y,
//                                      int64_t y_stride, uintptr_t pf, size_t pf_step);
// NT tokens of the row vectors rv[0..RV) against x[t] (token t's nb blocks), output r * lanes + lane of token
// t at y[t * y_stride + r * lanes + lane]; while it computes it asks memory for `pf_step` bytes from `pf` per
// block (pf 0: nothing to fetch).
#pragma once

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>

#include "h2okv/kernels/kernels.h"

namespace h2okv::kernels::x86 {
namespace {

inline constexpr int64_t x16_group_rows = 16;

// Row vector r of a tile: the `lanes` rows of the group at `group` that start at lane `lane0`.
struct x16_row_vector {
    const std::byte* group;
    int64_t lane0;
};

// A tile of nt (1..NT) tokens, chosen at run time.
template <typename Tiles, int NT, typename Act>
void x16_tile_n(int nt, const x16_row_vector* rv, const Act* const* x, int64_t nb, float* y, int64_t y_stride,
                uintptr_t pf, size_t pf_step) {
    if constexpr (NT > 1) {
        if (nt < NT) {
            x16_tile_n<Tiles, NT - 1>(nt, rv, x, nb, y, y_stride, pf, pf_step);
            return;
        }
    }
    Tiles::template tile<NT>(rv, x, nb, y, y_stride, pf, pf_step);
}

// Groups [g0, g1) of a packed matrix of nb blocks per row (`block_bytes` per group and block), GT groups at a
// time (the rows of a tile: GT groups of RV row vectors, GT * 16 == RV * lanes), token tiles of at most NT.
template <typename Tiles, int NT, typename Act>
void x16_groups(const matrix_view& w, int64_t nb, size_t block_bytes, const Act* xq, int n_tok, float* y,
                int64_t g0, int64_t g1) {
    constexpr int64_t Lanes = Tiles::lanes;
    constexpr int RV = Tiles::row_vectors;
    constexpr int64_t G = x16_group_rows;
    constexpr int64_t tile_rows = RV * Lanes;
    constexpr int64_t GT = tile_rows >= G ? tile_rows / G : 1;          // groups per tile
    constexpr int64_t lane_tiles = tile_rows >= G ? 1 : G / tile_rows;  // tiles across a group's lanes
    static_assert(tile_rows % G == 0 || G % tile_rows == 0);
    assert((g1 - g0) % GT == 0);
    const size_t group_bytes = static_cast<size_t>(nb) * block_bytes;
    const size_t step_bytes = static_cast<size_t>(GT) * group_bytes;
    // The fewest token tiles of at most NT tokens, their sizes differing by one at most (8 tokens in tiles of
    // 6: 4 + 4, not 6 + 2).
    const int token_tiles = (n_tok + NT - 1) / NT;
    // The tiles of a step share the prefetch of the next step's groups evenly, block by block.
    const int64_t tiles = token_tiles * lane_tiles;
    const size_t pf_step =
        (step_bytes + static_cast<size_t>(tiles * nb) - 1) / static_cast<size_t>(tiles * nb);
    for (int64_t g = g0; g < g1; g += GT) {
        const std::byte* group = w.data + static_cast<size_t>(g) * group_bytes;
        // The next groups of the matrix, past the end of this run too (a thread takes its runs in order).
        // An address, not a pointer: the last tile's share may reach a little past the matrix.
        uintptr_t pf = g + GT < w.rows / G ? reinterpret_cast<uintptr_t>(group + step_bytes) : 0;
        for (int tt = 0; tt < token_tiles; ++tt) {
            const int t = tt * n_tok / token_tiles;
            const int nt = (tt + 1) * n_tok / token_tiles - t;
            const Act* xt[NT];
            for (int j = 0; j < nt; ++j) xt[j] = xq + (t + j) * nb;
            for (int64_t lt = 0; lt < lane_tiles; ++lt) {
                x16_row_vector rv[RV];
                for (int r = 0; r < RV; ++r) {
                    const int64_t row = lt * tile_rows + r * Lanes;  // within the tile's first group
                    rv[r] = {group + static_cast<size_t>(row / G) * group_bytes, row % G};
                }
                x16_tile_n<Tiles, NT>(nt, rv, xt, nb,
                                      y + static_cast<int64_t>(t) * w.rows + g * G + lt * tile_rows, w.rows,
                                      pf, pf_step);
                if (pf != 0) pf += pf_step * static_cast<size_t>(nb);
            }
        }
    }
}

// Rows [r0, r1) (whole groups) of a packed product. When `wide`, the groups that make whole steps of Wide
// take its tiles (NTW tokens each); the groups left over, and every group when not `wide`, take One's (NT1
// tokens each).
template <typename Wide, int NTW, typename One, int NT1, typename Act>
void x16_rows(const matrix_view& w, int64_t nb, size_t block_bytes, const Act* xq, int n_tok, float* y,
              int64_t r0, int64_t r1, bool wide) {
    constexpr int64_t G = x16_group_rows;
    assert(r0 % G == 0 && r1 % G == 0);
    const int64_t g0 = r0 / G, g1 = r1 / G;
    int64_t g_mid = g0;
    if (wide) {
        constexpr int64_t GT = std::max<int64_t>(1, Wide::row_vectors * Wide::lanes / G);
        g_mid = g0 + (g1 - g0) / GT * GT;
        if (g_mid > g0) x16_groups<Wide, NTW>(w, nb, block_bytes, xq, n_tok, y, g0, g_mid);
    }
    if (g1 > g_mid) x16_groups<One, NT1>(w, nb, block_bytes, xq, n_tok, y, g_mid, g1);
}

}  // namespace
}  // namespace h2okv::kernels::x86
