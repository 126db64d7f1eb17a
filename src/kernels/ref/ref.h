// Scalar reference kernels: the readable definition of every kernel in h2okv/kernels/kernels.h, and the
// oracle the SIMD variants are tested against. Dot products and sums accumulate in double, so the reference
// is at least as accurate as any variant. Portable C++ only: this is also what non-x86 builds run.
//
//   h2okv::kernels::ref::matmul(w, x, n_tok, y);   // same contract as kernels::matmul, single-threaded
#pragma once

#include <cstddef>
#include <cstdint>

#include "h2okv/kernels/kernels.h"
#include "kernels/q8_0_act.h"
#include "kernels/q8k.h"

namespace h2okv::kernels::ref {

// Rows [r0, r1) of kernels::matmul: y[t*w.rows + r] for t < n_tok, r0 <= r < r1.
void matmul_rows(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0, int64_t r1);
void matmul(const matrix_view& w, const float* x, int n_tok, float* y);
// Rows [r0, r1) of a Q4_K / Q6_K product over activations already quantised (kernel_table::kquant_rows).
void kquant_rows(const matrix_view& w, const detail::q8k_block* xq, int n_tok, float* y, int64_t r0,
                 int64_t r1);
// Rows [r0, r1) of a Q8_0 product over activations already quantised (kernel_table::q8_0_rows), either
// layout (src/kernels/ref/q8_0.cpp).
void q8_0_rows(const matrix_view& w, const detail::q8_0_act* xq, int n_tok, float* y, int64_t r0, int64_t r1);
void dequantize_row(core::tensor_type t, const std::byte* src, int64_t n, float* dst);
void rmsnorm(const float* x, const float* w, int n, float eps, float* out);
void rope(float* x, int n_heads, int head_dim, int rope_dim, int64_t pos, float freq_base, rope_pairing p);
void rope_rotation(int64_t pos, int rope_dim, float freq_base, float* cos_sin);
void rope_rotation(const rope_spec& spec, int64_t pos, float* cos_sin);
void rope_apply(float* x, int n_heads, int head_dim, int rope_dim, const float* cos_sin, rope_pairing p);
// kernels::turn_rows: each row decoded by dequantize_row, then turned pair by pair.
void turn_rows(const kv_rows& k, int head_dim, const int32_t* slots, const int32_t* turns, int n,
               int rope_dim, rope_pairing p, const float* tables, float* dst);
void softmax(float* x, int n);
void swiglu(const float* gate, const float* up, int n, float* out);
// dst[i] = fp32_to_fp16(src[i]).
void to_f16(const float* src, int64_t n, std::byte* dst);
// kernels::attend (src/kernels/ref/attend_kv.cpp): K/V decoded element by element, dot products and sums in
// double.
void attend(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim, const int32_t* slots,
            int n, float scale, float* out, float* weights, size_t weights_stride, double* score_row);
// kernels::attend_turned: attend's arithmetic over the keys turned element by element (turn_rows' values).
void attend_turned(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim,
                   const int32_t* slots, int n, const key_turns& t, float scale, float* out, float* weights,
                   size_t weights_stride, double* score_row);

}  // namespace h2okv::kernels::ref
