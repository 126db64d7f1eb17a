// The register-tiled matrix products behind the AVX2 and AVX-512 matmul kernels, written once over a vector
// type. An ISA's translation unit defines H2OKV_TILE_TARGET (its target attribute), its vector traits `V` and
// one codec per weight type, includes this header, and calls matmul_tiled<V, C>. Everything here has
// internal linkage, so each ISA gets its own copy compiled for its own target.
//
//   #define H2OKV_TILE_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")))
//   #include "kernels/x86/matmul_tiles.h"
//   matmul_tiled<v512, q8_0_codec>(w, x, n_tok, y, r0, r1);
//
// V (vector traits): `reg`, `lanes`, zero(), load(p), load_tail(p, n) (lanes >= n zeroed, nothing read
// there), store(p, v), store_tail(p, n, v), fma(a, b, c) = a*b + c rounded once, hsum(v) (one fixed
// tree), and the tile shapes: panel_rows x panel_tokens accumulators for prefill, direct_rows for the
// matrix-vector product.
// C (codec of a weight type): `step` (elements one decode yields, a multiple of lanes; 32 for the block
// types), `dense` (true for F32/F16/BF16: rows may end in a partial vector, decoded by decode_tail),
// decode(row, i, w) (elements [i, i + step) of the row as step / lanes registers) and, for dense codecs,
// decode_tail(row, i, n, w) (n < lanes elements into one register, zeros after). Decoding reproduces
// ref::dequantize_row bit for bit.
//
// Determinism: output (r, t) is ONE accumulator chain. For each lanes-wide slice of the row, in order of k,
// acc = fma(w slice, x slice, acc); a row's partial last slice (dense types) goes through the same fma
// with both sides zero-padded; then hsum. The weights are the exact decoded values whether they come from
// registers (direct path) or from the f32 panel (prefill path), so the tile an element lands in, the number
// of tokens in the call and the row range do not change a single rounding.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "h2okv/kernels/kernels.h"
#include "kernels/scratch.h"

#ifndef H2OKV_TILE_TARGET
#error "define H2OKV_TILE_TARGET before including kernels/x86/matmul_tiles.h"
#endif

namespace h2okv::kernels::x86 {
namespace {

// Below this many tokens each weight row is decoded in registers for every token (matrix-vector style);
// from it on, a panel of rows is decoded once to f32 and reused by every token tile.
constexpr int panel_min_tokens = 4;
// Rows decoded into one panel: 16 rows of up to a few thousand columns stay in L2 while the token tiles
// of a token block sweep over them.
constexpr int64_t panel_rows = 16;
// Activations of one token block (tokens x cols floats) are kept near this size, so they stay in L2 while
// the panels of the caller's rows pass.
constexpr int64_t token_block_bytes = 256 * 1024;

// Dense f32 rows (the F32 weights themselves, or a decoded panel).
template <typename V>
struct f32_rows {
    using reg = typename V::reg;
    static constexpr int64_t step = V::lanes;
    static constexpr bool dense = true;
    static constexpr bool tile_in_place = true;
    H2OKV_TILE_TARGET static void decode(const std::byte* row, int64_t i, reg* w) {
        w[0] = V::load(reinterpret_cast<const float*>(row) + i);
    }
    H2OKV_TILE_TARGET static void decode_tail(const std::byte* row, int64_t i, int64_t n, reg* w) {
        w[0] = V::load_tail(reinterpret_cast<const float*>(row) + i, n);
    }
};

// Whether the panel tiles read a codec's rows in place instead of a decoded f32 panel: codecs that say so
// (F32, and one conversion per register: F16 and BF16), which needs no panel and streams only the rows'
// bytes.
template <typename C>
constexpr bool tile_in_place = requires {
    requires C::tile_in_place;
};

// Direct path: RM rows x 1 token. x: the token's cols floats; y[r * y_stride]: row r's result. Streaming RM
// rows side by side defeats the hardware prefetchers, so each step prefetches the same position in the
// rows `next` bytes further on (the next row group; 0: none), which keeps one group of reads in flight.
// step_bytes: about the bytes of a row one decode step consumes.
template <typename V, typename C, int RM>
H2OKV_TILE_TARGET void direct_tile(const std::byte* const* rows, const float* x, int64_t cols, float* y,
                                   int64_t y_stride, size_t next, size_t step_bytes) {
    using reg = typename V::reg;
    constexpr int S = static_cast<int>(C::step / V::lanes);
    reg acc[RM];
#pragma GCC unroll 16
    for (int r = 0; r < RM; ++r) acc[r] = V::zero();
    int64_t i = 0;
    for (size_t at = next; i + C::step <= cols; i += C::step, at += step_bytes) {
        if (next != 0) {
#pragma GCC unroll 16
            for (int r = 0; r < RM; ++r) __builtin_prefetch(rows[r] + at);
        }
        reg xv[S];
#pragma GCC unroll 8
        for (int u = 0; u < S; ++u) xv[u] = V::load(x + i + u * V::lanes);
#pragma GCC unroll 16
        for (int r = 0; r < RM; ++r) {
            reg w[S];
            C::decode(rows[r], i, w);
#pragma GCC unroll 8
            for (int u = 0; u < S; ++u) acc[r] = V::fma(w[u], xv[u], acc[r]);
        }
    }
    if constexpr (C::dense) {
        if (i < cols) {
            const reg xv = V::load_tail(x + i, cols - i);
#pragma GCC unroll 16
            for (int r = 0; r < RM; ++r) {
                reg w[1];
                C::decode_tail(rows[r], i, cols - i, w);
                acc[r] = V::fma(w[0], xv, acc[r]);
            }
        }
    }
    float sums[RM];
#pragma GCC unroll 4
    for (int o = 0; o < RM; o += 16) V::hsum_many(acc + o, std::min(16, RM - o), sums + o);
#pragma GCC unroll 16
    for (int r = 0; r < RM; ++r) y[r * y_stride] = sums[r];
}

// Panel path: RM rows x RN tokens, RM * RN accumulators; every step loads RN activation vectors and decodes
// RM weight vectors (codec C, one register per step: f32 rows of a decoded panel, or F16/BF16 rows read in
// place) for RM * RN fmas. x: token t at x + t * cols; y[t * y_stride + r].
template <typename V, typename C, int RM, int RN>
H2OKV_TILE_TARGET void panel_tile(const std::byte* const* rows, const float* x, int64_t cols, float* y,
                                  int64_t y_stride) {
    static_assert(C::step == V::lanes && C::dense, "a panel tile decodes one register per step");
    using reg = typename V::reg;
    reg acc[RM][RN];
#pragma GCC unroll 8
    for (int r = 0; r < RM; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < RN; ++t) acc[r][t] = V::zero();
    }
    int64_t i = 0;
    for (; i + V::lanes <= cols; i += V::lanes) {
        reg xv[RN];
#pragma GCC unroll 8
        for (int t = 0; t < RN; ++t) xv[t] = V::load(x + t * cols + i);
#pragma GCC unroll 8
        for (int r = 0; r < RM; ++r) {
            reg w;
            C::decode(rows[r], i, &w);
#pragma GCC unroll 8
            for (int t = 0; t < RN; ++t) acc[r][t] = V::fma(w, xv[t], acc[r][t]);
        }
    }
    if (i < cols) {
        const int64_t n = cols - i;
        reg xv[RN];
#pragma GCC unroll 8
        for (int t = 0; t < RN; ++t) xv[t] = V::load_tail(x + t * cols + i, n);
#pragma GCC unroll 8
        for (int r = 0; r < RM; ++r) {
            reg w;
            C::decode_tail(rows[r], i, n, &w);
#pragma GCC unroll 8
            for (int t = 0; t < RN; ++t) acc[r][t] = V::fma(w, xv[t], acc[r][t]);
        }
    }
    float sums[RM * RN];
#pragma GCC unroll 4
    for (int o = 0; o < RM * RN; o += 16) V::hsum_many(&acc[0][0] + o, std::min(16, RM * RN - o), sums + o);
#pragma GCC unroll 8
    for (int r = 0; r < RM; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < RN; ++t) y[t * y_stride + r] = sums[r * RN + t];
    }
}

// panel_tile with the token count nt (1..RN) chosen at run time.
template <typename V, typename C, int RM, int RN>
H2OKV_TILE_TARGET void panel_tile_n(int nt, const std::byte* const* rows, const float* x, int64_t cols,
                                    float* y, int64_t y_stride) {
    if constexpr (RN > 1) {
        if (nt < RN) {
            panel_tile_n<V, C, RM, RN - 1>(nt, rows, x, cols, y, y_stride);
            return;
        }
    }
    panel_tile<V, C, RM, RN>(rows, x, cols, y, y_stride);
}

// Rows [r0, r1) of the product for every token, decoding each row per token (few tokens).
template <typename V, typename C>
H2OKV_TILE_TARGET void matmul_direct(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0,
                                     int64_t r1) {
    constexpr int RM = V::direct_rows;
    const size_t step_bytes = w.row_bytes * static_cast<size_t>(C::step) / static_cast<size_t>(w.cols);
    const size_t group_bytes = RM * w.row_bytes;
    const std::byte* rows[RM];
    int64_t r = r0;
    for (; r + RM <= r1; r += RM) {
        for (int j = 0; j < RM; ++j) rows[j] = w.data + static_cast<size_t>(r + j) * w.row_bytes;
        const size_t next = r + 2 * RM <= r1 ? group_bytes : 0;
        for (int t = 0; t < n_tok; ++t) {
            direct_tile<V, C, RM>(rows, x + t * w.cols, w.cols, y + t * w.rows + r, 1, next, step_bytes);
        }
    }
    for (; r < r1; ++r) {
        rows[0] = w.data + static_cast<size_t>(r) * w.row_bytes;
        for (int t = 0; t < n_tok; ++t)
            direct_tile<V, C, 1>(rows, x + t * w.cols, w.cols, y + t * w.rows + r, 1, 0, 0);
    }
}

// Decodes `n` elements of a row into dst (exactly dequantize_row's values). With `next` != 0 each step also
// prefetches the bytes `next` further on (the same part of the next panel's row), step_bytes apart.
template <typename V, typename C>
H2OKV_TILE_TARGET void decode_row(const std::byte* row, int64_t n, float* dst, size_t next = 0,
                                  size_t step_bytes = 0) {
    using reg = typename V::reg;
    constexpr int S = static_cast<int>(C::step / V::lanes);
    int64_t i = 0;
    for (size_t at = next; i + C::step <= n; i += C::step, at += step_bytes) {
        if (next != 0) __builtin_prefetch(row + at);
        reg w[S];
        C::decode(row, i, w);
#pragma GCC unroll 8
        for (int u = 0; u < S; ++u) V::store(dst + i + u * V::lanes, w[u]);
    }
    if constexpr (C::dense) {
        if (i < n) {
            reg w[1];
            C::decode_tail(row, i, n - i, w);
            V::store_tail(dst + i, n - i, w[0]);
        }
    }
}

// Rows [r0, r1) for many tokens: per token block, per panel of up to panel_rows rows (decoded to f32 once,
// or read in place by the tiles: F32, and F16/BF16 whose codec decodes a register straight from the row),
// per tile of panel_tokens tokens, per panel_rows-row group.
template <typename V, typename C>
H2OKV_TILE_TARGET void matmul_panels(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0,
                                     int64_t r1) {
    constexpr int RM = V::panel_rows;
    constexpr int RN = V::panel_tokens;
    constexpr bool InPlace = tile_in_place<C>;
    using T = std::conditional_t<InPlace, C, f32_rows<V>>;  // what the tiles decode
    const int64_t cols = w.cols;
    float* panel = nullptr;
    if constexpr (!InPlace) {
        panel = detail::thread_scratch<float>(static_cast<size_t>(panel_rows * cols));
        if (panel == nullptr) {
            matmul_direct<V, C>(w, x, n_tok, y, r0, r1);
            return;
        }
    }
    const size_t step_bytes = w.row_bytes * static_cast<size_t>(C::step) / static_cast<size_t>(cols);
    const size_t panel_bytes = static_cast<size_t>(panel_rows) * w.row_bytes;
    const int64_t fit = token_block_bytes / (cols * static_cast<int64_t>(sizeof(float)));
    const int block_tokens = static_cast<int>(std::max<int64_t>(RN, fit / RN * RN));
    for (int t0 = 0; t0 < n_tok; t0 += block_tokens) {
        const int t_end = std::min(n_tok, t0 + block_tokens);
        for (int64_t p0 = r0; p0 < r1; p0 += panel_rows) {
            const int64_t np = std::min(panel_rows, r1 - p0);
            const std::byte* prow[panel_rows];
            for (int64_t j = 0; j < np; ++j) {
                const std::byte* src = w.data + static_cast<size_t>(p0 + j) * w.row_bytes;
                if constexpr (InPlace) {
                    prow[j] = src;
                } else {
                    // The weights stream from memory once per token block: ask for the next panel's rows
                    // while this one is decoded (16 sequences' decode on Sapphire Rapids: half the decode's
                    // time was waiting for them).
                    const size_t next = p0 + panel_rows + j < r1 ? panel_bytes : 0;
                    decode_row<V, C>(src, cols, panel + j * cols, next, step_bytes);
                    prow[j] = reinterpret_cast<const std::byte*>(panel + j * cols);
                }
            }
            for (int t = t0; t < t_end; t += RN) {
                const int nt = std::min(RN, t_end - t);
                const float* xt = x + static_cast<int64_t>(t) * cols;
                float* yt = y + static_cast<int64_t>(t) * w.rows + p0;
                int64_t j = 0;
                for (; j + RM <= np; j += RM)
                    panel_tile_n<V, T, RM, RN>(nt, prow + j, xt, cols, yt + j, w.rows);
                for (; j < np; ++j) panel_tile_n<V, T, 1, RN>(nt, prow + j, xt, cols, yt + j, w.rows);
            }
        }
    }
}

// Rows [r0, r1) of y = W x for n_tok tokens (kernels::matmul's contract).
template <typename V, typename C>
H2OKV_TILE_TARGET void matmul_tiled(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0,
                                    int64_t r1) {
    if (n_tok < panel_min_tokens) {
        matmul_direct<V, C>(w, x, n_tok, y, r0, r1);
    } else {
        matmul_panels<V, C>(w, x, n_tok, y, r0, r1);
    }
}

}  // namespace
}  // namespace h2okv::kernels::x86
