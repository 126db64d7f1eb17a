// The many-token (prefill) k-quant products with quantised activations (kernels/q8k.h), written once over
// an integer vector type: each thread repacks a panel of `lanes` weight rows so that vector lane r holds
// row r, and four consecutive weights of a row share a 32-bit lane; a tile then multiplies the panel with
// a few tokens, broadcasting four activations at a time into a u8 x s8 dot product (vpdpbusd or its AVX2
// emulation). Lanes being rows, every block's integer sums land in the row's own lane and the block's float
// steps run lane-wise: the exact sequence of kernels/q8k.h, so the bits equal the reference and the
// one-token kernels. An ISA's translation unit defines H2OKV_KQ_TARGET and its traits V, includes this
// header and calls matmul_kquant<V>.
//
// V: `ireg`, `freg`, `lanes` (rows per panel), `tokens` (tokens per tile); izero(), iload(p) (lanes int32),
// ibcast(p) (the int32 at p in every lane), iadd, imul (low 32 bits), dot4(acc, u8 weights, s8
// activations) (acc + the sum of each lane's four byte products), madd16(acc, a, b) (acc + each lane's
// two int16 products), to_float, fload, fbcast, fmul, ffma(a, b, c) (a*b + c rounded once), fstore, and
// direct_rows: the few-token kernel (avx2::kquant_direct_rows's contract); and the traits of
// q4_k_x16_tiles.h (packed Q4_K, which takes every product of a packed matrix).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "h2okv/kernels/kernels.h"
#include "kernels/blocks.h"
#include "kernels/half.h"
#include "kernels/q8k.h"
#include "kernels/scratch.h"
#include "kernels/x86/avx2.h"
#include "kernels/x86/q4_k_x16_tiles.h"
#include "kernels/x86/q6_k_avx2.h"

#ifndef H2OKV_KQ_TARGET
#error "define H2OKV_KQ_TARGET before including kernels/x86/kquant_tiles.h"
#endif

namespace h2okv::kernels::x86 {
namespace {

// From this many tokens on, repacking a panel pays for itself (below, the row-walking kernels share one
// decode of a row between up to four tokens: tinyllama Q4_K at 4 sequences 32 -> 49 tokens/s on Sapphire
// Rapids).
constexpr int kq_panel_min_tokens = 8;
// Quantised activations of one token block are kept near this size (L2).
constexpr int64_t kq_token_block_bytes = 384 * 1024;

// Panel layout of one 256-element block of L rows, as 32-bit words [.. ][L]:
//   Q4_K: qs[8 sub-blocks][8 steps][L] (4 weights 0..15 per word), sc[8][L], m[4][L] (int16 pairs m_2p,
//         m_2p+1), d[L], dmin[L] (floats)
//   Q6_K: qs[16 sub-blocks][4 steps][L] (4 weights 0..63 per word), sc[16][L], d[L]
constexpr int64_t q4_k_panel_words = 64 + 8 + 4 + 2;
constexpr int64_t q6_k_panel_words = 64 + 16 + 1;

inline int32_t word_at(const std::byte* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

inline float half_word(const std::byte* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return detail::half_to_float(h);
}

inline int32_t float_word(float f) {
    int32_t v;
    std::memcpy(&v, &f, 4);
    return v;
}

// Row `r` (lane) of a panel block from its Q4_K block.
inline void pack_q4_k_row(const std::byte* block, int r, int64_t L, int32_t* pb) {
    const auto* scales = reinterpret_cast<const uint8_t*>(block + detail::q4_k_scales_offset);
    uint8_t sc[8];
    uint8_t m[8];
    for (int j = 0; j < 8; ++j) detail::scale_min_k4(j, scales, &sc[j], &m[j]);
    const std::byte* qs = block + detail::q4_k_qs_offset;
    for (int p = 0; p < 4; ++p) {
        for (int k = 0; k < 8; ++k) {
            const auto v = static_cast<uint32_t>(word_at(qs + 32 * p + 4 * k));
            pb[((2 * p) * 8 + k) * L + r] = static_cast<int32_t>(v & 0x0F0F0F0Fu);
            pb[((2 * p + 1) * 8 + k) * L + r] = static_cast<int32_t>((v >> 4) & 0x0F0F0F0Fu);
        }
    }
    int32_t* tail = pb + 64 * L;
    for (int j = 0; j < 8; ++j) tail[j * L + r] = sc[j];
    for (int p = 0; p < 4; ++p) tail[(8 + p) * L + r] = m[2 * p] | (m[2 * p + 1] << 16);
    tail[12 * L + r] = float_word(half_word(block));
    tail[13 * L + r] = float_word(half_word(block + 2));
}

// Row `r` (lane) of a panel block from its Q6_K block: each group of 32 elements (sub-blocks 2g, 2g + 1) is
// unpacked to bytes at once (bit layout in blocks.h), then spread as 8 words.
H2OKV_KQ_TARGET inline void pack_q6_k_row(const std::byte* block, int r, int64_t L, int32_t* pb) {
    const auto* scales = reinterpret_cast<const int8_t*>(block + detail::q6_k_scales_offset);
    for (int g = 0; g < 8; ++g) {
        int32_t words[8];
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(words), q6_k_group_u8(block, g));
        for (int i = 0; i < 8; ++i) pb[((2 * g + i / 4) * 4 + i % 4) * L + r] = words[i];
    }
    int32_t* tail = pb + 64 * L;
    for (int j = 0; j < 16; ++j) tail[j * L + r] = scales[j];
    tail[16 * L + r] = float_word(half_word(block + detail::q6_k_d_offset));
}

// The two panel formats for kq_tile: sub-blocks per block, 4-weight steps per sub-block, the panel words
// of one block (scales at word row 64), where a sub-block's integer sum starts, and the block's float steps.
struct q4_k_format {
    static constexpr int subs = 8;
    static constexpr int steps = 8;
    static constexpr int64_t words = q4_k_panel_words;
    template <typename V>
    H2OKV_KQ_TARGET static typename V::ireg start(const detail::q8k_block&, int) {
        return V::izero();
    }
    // facc += I * (d * dx) + M * -(dmin * dx), M = sum_j m_j * bsum32_j (kernels/q8k.h).
    template <typename V, int NT>
    H2OKV_KQ_TARGET static void finish(const int32_t* pb, const detail::q8k_block* const* x, int64_t b,
                                       const typename V::ireg* iacc, typename V::freg* facc) {
        constexpr int64_t L = V::lanes;
        typename V::ireg msum[NT];
#pragma GCC unroll 16
        for (int t = 0; t < NT; ++t) msum[t] = V::izero();
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
            const typename V::ireg m = V::iload(pb + (72 + p) * L);
#pragma GCC unroll 16
            for (int t = 0; t < NT; ++t) msum[t] = V::madd16(msum[t], m, V::ibcast(x[t][b].bsum32 + 2 * p));
        }
        const typename V::freg d = V::fload(pb + 76 * L);
        const typename V::freg dmin = V::fload(pb + 77 * L);
#pragma GCC unroll 16
        for (int t = 0; t < NT; ++t) {
            const float dx = x[t][b].d;
            facc[t] = V::ffma(V::to_float(iacc[t]), V::fmul(d, V::fbcast(dx)), facc[t]);
            facc[t] = V::ffma(V::to_float(msum[t]), V::fmul(dmin, V::fbcast(-dx)), facc[t]);
        }
    }
};

struct q6_k_format {
    static constexpr int subs = 16;
    static constexpr int steps = 4;
    static constexpr int64_t words = q6_k_panel_words;
    // The weights are q in 0..63: each sub-block starts at -32 * its activation sum (the q - 32 offset).
    template <typename V>
    H2OKV_KQ_TARGET static typename V::ireg start(const detail::q8k_block& xb, int s) {
        return V::ibcast(xb.q6_bias + s);
    }
    // facc += I * (d * dx).
    template <typename V, int NT>
    H2OKV_KQ_TARGET static void finish(const int32_t* pb, const detail::q8k_block* const* x, int64_t b,
                                       const typename V::ireg* iacc, typename V::freg* facc) {
        const typename V::freg d = V::fload(pb + 80 * V::lanes);
#pragma GCC unroll 16
        for (int t = 0; t < NT; ++t)
            facc[t] = V::ffma(V::to_float(iacc[t]), V::fmul(d, V::fbcast(x[t][b].d)), facc[t]);
    }
};

// A tile: the L panel rows x NT tokens (x[t]: token t's blocks); y[t * y_stride + lane]. Per block, each
// sub-block's dot products are summed exactly, scaled by the rows' sub-block scales and added up; then the
// format's float steps.
template <typename V, typename F, int NT>
H2OKV_KQ_TARGET void kq_tile(const int32_t* panel, const detail::q8k_block* const* x, int64_t nb, float* y,
                             int64_t y_stride) {
    using ireg = typename V::ireg;
    using freg = typename V::freg;
    constexpr int64_t L = V::lanes;
    constexpr int sub_elems = 4 * F::steps;
    freg facc[NT];
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) facc[t] = V::fzero();
    for (int64_t b = 0; b < nb; ++b) {
        const int32_t* pb = panel + b * F::words * L;
        ireg iacc[NT];
#pragma GCC unroll 16
        for (int t = 0; t < NT; ++t) iacc[t] = V::izero();
        for (int s = 0; s < F::subs; ++s) {
            ireg isum[NT];
#pragma GCC unroll 16
            for (int t = 0; t < NT; ++t) isum[t] = F::template start<V>(x[t][b], s);
#pragma GCC unroll 8
            for (int k = 0; k < F::steps; ++k) {
                const ireg w = V::iload(pb + (s * F::steps + k) * L);
#pragma GCC unroll 16
                for (int t = 0; t < NT; ++t)
                    isum[t] = V::dot4(isum[t], w, V::ibcast(x[t][b].qs + sub_elems * s + 4 * k));
            }
            const ireg sc = V::iload(pb + (64 + s) * L);
#pragma GCC unroll 16
            for (int t = 0; t < NT; ++t) iacc[t] = V::iadd(iacc[t], V::imul(isum[t], sc));
        }
        F::template finish<V, NT>(pb, x, b, iacc, facc);
    }
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) V::fstore(y + t * y_stride, facc[t]);
}

// A tile of nt (1..NT) tokens, chosen at run time.
template <typename V, int NT>
H2OKV_KQ_TARGET void kq_tile_n(bool q4, int nt, const int32_t* panel, const detail::q8k_block* const* x,
                               int64_t nb, float* y, int64_t y_stride) {
    if constexpr (NT > 1) {
        if (nt < NT) {
            kq_tile_n<V, NT - 1>(q4, nt, panel, x, nb, y, y_stride);
            return;
        }
    }
    if (q4) {
        kq_tile<V, q4_k_format, NT>(panel, x, nb, y, y_stride);
    } else {
        kq_tile<V, q6_k_format, NT>(panel, x, nb, y, y_stride);
    }
}

// Rows [r0, r1) of a Q4_K / Q6_K product over quantised activations (kernel_table::kquant_rows).
template <typename V>
H2OKV_KQ_TARGET void kquant_rows(const matrix_view& w, const detail::q8k_block* xq, int n_tok, float* y,
                                 int64_t r0, int64_t r1) {
    if (w.layout == weight_layout::q4_k_x16) {
        q4_k_x16_rows<V>(w, xq, n_tok, y, r0, r1);
        return;
    }
    constexpr int64_t L = V::lanes;
    const int64_t nb = w.cols / detail::q8k_elems;
    const int64_t full_end = r0 + (r1 - r0) / L * L;
    const bool q4 = w.type == core::tensor_type::q4_k;
    const int64_t words = (q4 ? q4_k_panel_words : q6_k_panel_words) * L;
    int32_t* panel = n_tok >= kq_panel_min_tokens && full_end > r0
                         ? detail::thread_scratch<int32_t>(static_cast<size_t>(nb * words))
                         : nullptr;
    if (panel == nullptr) {
        V::direct_rows(w, xq, n_tok, y, r0, r1);
        return;
    }
    const size_t block_bytes = q4 ? detail::q4_k_bytes : detail::q6_k_bytes;
    const int64_t token_bytes = nb * static_cast<int64_t>(sizeof(detail::q8k_block));
    const int block_tokens = static_cast<int>(
        std::max<int64_t>(V::tokens, kq_token_block_bytes / token_bytes / V::tokens * V::tokens));
    for (int t0 = 0; t0 < n_tok; t0 += block_tokens) {
        const int t_end = std::min(n_tok, t0 + block_tokens);
        for (int64_t g = r0; g < full_end; g += L) {
            for (int r = 0; r < L; ++r) {
                const std::byte* row = w.data + static_cast<size_t>(g + r) * w.row_bytes;
                for (int64_t b = 0; b < nb; ++b) {
                    const std::byte* block = row + static_cast<size_t>(b) * block_bytes;
                    if (q4) {
                        pack_q4_k_row(block, r, L, panel + b * words);
                    } else {
                        pack_q6_k_row(block, r, L, panel + b * words);
                    }
                }
            }
            for (int t = t0; t < t_end; t += V::tokens) {
                const int nt = std::min(V::tokens, t_end - t);
                const detail::q8k_block* xt[V::tokens];
                for (int j = 0; j < nt; ++j) xt[j] = xq + (t + j) * nb;
                kq_tile_n<V, V::tokens>(q4, nt, panel, xt, nb, y + static_cast<int64_t>(t) * w.rows + g,
                                        w.rows);
            }
        }
    }
    if (full_end < r1) V::direct_rows(w, xq, n_tok, y, full_end, r1);
}

// Rows [r0, r1) of a Q4_K / Q6_K product (kernels::matmul's contract, the bits of kernels/q8k.h).
template <typename V>
H2OKV_KQ_TARGET void matmul_kquant(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0,
                                   int64_t r1) {
    const detail::q8k_block* xq = detail::quantize_tokens(x, n_tok, w.cols, &avx2::quantize_q8k);
    if (xq == nullptr) {
        detail::matmul_kquant_unbuffered(w, x, n_tok, y, r0, r1);
        return;
    }
    kquant_rows<V>(w, xq, n_tok, y, r0, r1);
}

}  // namespace
}  // namespace h2okv::kernels::x86
