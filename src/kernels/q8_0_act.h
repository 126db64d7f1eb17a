// Activations quantised to 8 bits for Q8_0 weights, as llama.cpp's q8_0 activation blocks: the Q8_0 matrix
// products multiply the int8 weights with int8 activations per block of 32 and apply the two scales once per
// block. This header is the shared definition of that format and of the exact arithmetic of one output;
// ref/q8_0.cpp implements it plainly and every SIMD variant must give the same bits (the integer sums are
// exact, and the float step below is one fma per block, in block order).
//
// Quantisation, per token and per block of 32 elements (llama.cpp's x86 quantize_row_q8_0):
//   amax = max |x_i|;  iscale = 127 / amax (float; 0 when amax is 0);  d = fp16(amax / 127)
//   q_i = round-half-even(min(max(x_i * iscale, -127), 127))   (a NaN product gives -127, as maxps does)
// The scale is rounded to fp16 as llama.cpp stores it (q is computed with the unrounded iscale, as there), so
// x_i ~ d * q_i to about d / 2 + |x_i| * 2^-11.
//
// One output y = dot(W row, x) over the row's blocks b, in order, acc = 0.0f:
//   I = sum_i qw_i * qx_i   (exact int32: |I| <= 32 * 128 * 127)
//   acc = fma(float(I), d_w * d_x, acc)   (d_w * d_x: two fp16 values, so the float product is exact)
//
//   const detail::q8_0_act* xq = detail::quantize_q8_0_tokens(x, n_tok, cols, tb.quantize_q8_0);
#pragma once

#include <cstddef>
#include <cstdint>

#include "h2okv/kernels/kernels.h"

namespace h2okv::kernels::detail {

inline constexpr int64_t q8_0_act_elems = 32;

// One quantised block of 32 activations.
struct q8_0_act {
    int8_t qs[32];
    float d;       // the fp16 scale, as a float
    int32_t bias;  // -128 * sum(qs): for kernels that multiply unsigned bytes (q + 128) with qs
};

// Quantises one token's `cols` activations (a multiple of 32) into cols / 32 blocks, as defined above.
// Portable scalar code; the SIMD variants give identical blocks.
void quantize_q8_0_act(const float* x, int64_t cols, q8_0_act* out);

// One output of a plain Q8_0 row (n_blocks blocks of 34 bytes) against quantised activations, as defined
// above, continuing the accumulator `acc` (0 for a whole row).
float dot_q8_0_q8_0(const std::byte* row, const q8_0_act* x, int64_t n_blocks, float acc = 0.0f);

using quantize_q8_0_fn = void (*)(const float* x, int64_t cols, q8_0_act* out);

// n_tok tokens of `cols` activations quantised with `quantize` into this thread's buffer (reused by later
// calls on the same thread): token t's blocks start at t * cols / 32. Null when the buffer cannot be
// allocated; the caller then uses matmul_q8_0_unbuffered.
const q8_0_act* quantize_q8_0_tokens(const float* x, int n_tok, int64_t cols, quantize_q8_0_fn quantize);
// Its two steps, for threads that share the quantising: this thread's buffer for n_tok tokens (null when it
// cannot be allocated), then tokens [t0, t1) of x quantised into buf (any thread, disjoint ranges).
q8_0_act* q8_0_tokens_buffer(int n_tok, int64_t cols);
void quantize_q8_0_range(const float* x, int t0, int t1, int64_t cols, quantize_q8_0_fn quantize,
                         q8_0_act* buf);

// Block b of row r of a Q8_0 matrix in ggml's plain layout (34 bytes): in place for plain rows, else
// unpacked from the q8_0_x16 layout into buf. For the reference paths.
const std::byte* plain_q8_0_block(const matrix_view& w, int64_t r, int64_t b, std::byte* buf);

// Rows [r0, r1) of a Q8_0 product quantising one block at a time on the stack: the bits of the buffered
// kernels, slowly, for when quantize_q8_0_tokens cannot allocate.
void matmul_q8_0_unbuffered(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0,
                            int64_t r1);

}  // namespace h2okv::kernels::detail
