// Activations quantised to 8 bits for the k-quant weight types (Q4_K, Q6_K), as llama.cpp's Q8_K: the
// matrix products of those types multiply integer weights with integer activations and apply the scales
// once per block, which is what makes them fast. This header is the shared definition of that format and of
// the exact arithmetic of one output; ref/kquant.cpp implements it plainly and every SIMD variant must give
// the same bits (the integer sums are exact, and the float steps below are a fixed sequence per output).
//
// Quantisation, per token and per block of 256 elements (cols is a multiple of 256 for these types):
//   amax = max |x_i|;  iscale = 127 / amax (float; 0 when amax is 0);  d = amax / 127 (float)
//   q_i = round-half-even(min(max(x_i * iscale, -127), 127))   (a NaN product gives -127, as maxps does)
//   so x_i ~ d * q_i with |error| <= d / 2.
//
// One output y = dot(W row, x) over the row's blocks b, in order, acc = 0.0f:
//   Q4_K: I = sum_j sc_j * sum_{i in sub-block j} q_i * qx_i      (exact int32)
//         M = sum_j m_j * sum_{i in sub-block j} qx_i             (exact int32)
//         acc = fma(float(I), d_w * d_x, acc);  acc = fma(float(M), -(dmin_w * d_x), acc)
//   Q6_K: I = sum_j sc_j * sum_{i in sub-block j} (q_i - 32) * qx_i   (exact int32, q_i in 0..63)
//         acc = fma(float(I), d_w * d_x, acc)
// (d_w * d_x and dmin_w * d_x are float products; float(I) rounds to nearest.)
#pragma once

#include <cstddef>
#include <cstdint>

#include "h2okv/kernels/kernels.h"

namespace h2okv::kernels::detail {

inline constexpr int64_t q8k_elems = 256;

// One quantised block of 256 activations, with the integer sums the kernels' scale and offset terms need.
struct q8k_block {
    int8_t qs[256];
    float d;
    int16_t bsum16[16];   // sum of qs over each 16 elements (Q6_K sub-blocks)
    int16_t bsum32[8];    // sum of qs over each 32 elements (Q4_K sub-blocks)
    int32_t q6_bias[16];  // -32 * bsum16: the Q6_K offset (q - 32) of each sub-block, ready to broadcast
};

// Quantises one token's `cols` activations (a multiple of 256) into cols / 256 blocks, as defined above.
// Portable scalar code; the SIMD variants give identical blocks (the steps are exact or correctly rounded).
void quantize_q8k(const float* x, int64_t cols, q8k_block* out);
// Fills a block's sums from its qs (the part of quantize_q8k after rounding, shared with SIMD variants).
void q8k_block_sums(q8k_block* b);

// One output of a Q4_K / Q6_K row (cols / 256 blocks) against quantised activations, as defined above,
// continuing the accumulator `acc` (0 for a whole row).
float dot_q4_k_q8k(const std::byte* row, const q8k_block* x, int64_t n_blocks, float acc = 0.0f);
float dot_q6_k_q8k(const std::byte* row, const q8k_block* x, int64_t n_blocks, float acc = 0.0f);

using quantize_q8k_fn = void (*)(const float* x, int64_t cols, q8k_block* out);

// n_tok tokens of `cols` activations quantised with `quantize` into this thread's buffer (reused by later
// calls on the same thread): token t's blocks start at t * cols / 256. Null when the buffer cannot be
// allocated; the caller then uses matmul_kquant_unbuffered.
const q8k_block* quantize_tokens(const float* x, int n_tok, int64_t cols, quantize_q8k_fn quantize);
// Its two steps, for threads that share the quantising: this thread's buffer for n_tok tokens (null when it
// cannot be allocated), then tokens [t0, t1) of x quantised into buf (any thread, disjoint ranges).
q8k_block* q8k_tokens_buffer(int n_tok, int64_t cols);
void quantize_q8k_range(const float* x, int t0, int t1, int64_t cols, quantize_q8k_fn quantize,
                        q8k_block* buf);

// Block b of row r of a k-quant matrix in ggml's plain layout: in place for the plain rows, else unpacked
// into buf (q4_k_bytes). For the reference paths.
const std::byte* plain_block(const matrix_view& w, int64_t r, int64_t b, std::byte* buf);

// Rows [r0, r1) of a Q4_K / Q6_K product quantising one block at a time on the stack: the same bits as the
// buffered kernels, slowly, for when quantize_tokens cannot allocate.
void matmul_kquant_unbuffered(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0,
                              int64_t r1);

}  // namespace h2okv::kernels::detail
