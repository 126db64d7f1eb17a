// AVX-512 (F/BW/DQ/VL) + FMA + F16C variants of the dispatched kernels (same contracts as
// h2okv/kernels/kernels.h). Call them only when core::cpu_supports(core::cpu_isa::avx512) is true;
// kernels.cpp does the dispatch, tests call them directly to compare with ref/. Softmax, rmsnorm and swiglu
// have no AVX-512 variant: the avx512 table uses the AVX2 ones.
//
//   using namespace h2okv;
//   if (core::cpu_supports(core::cpu_isa::avx512)) kernels::avx512::matmul_rows(w, x, n_tok, y, 0, w.rows);
#pragma once

#include <cstddef>
#include <cstdint>

#include "h2okv/kernels/kernels.h"
#include "kernels/q8_0_act.h"
#include "kernels/q8k.h"

namespace h2okv::kernels::avx512 {

void matmul_rows(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0, int64_t r1);
void dequantize_row(core::tensor_type t, const std::byte* src, int64_t n, float* dst);
// kernels::attend (src/kernels/x86/attend_avx512.cpp): the AVX2 kernel's passes on 16 lanes for head_dim a
// multiple of 16 (the AVX2 kernel otherwise), every KV type decoded as dequantize_row.
void attend(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim, const int32_t* slots,
            int n, float scale, float* out, float* weights, size_t weights_stride, double* score_row);
// kernels::attend_turned (the same file): the AVX2 kernel's turned keys on 16 lanes where the rotated dims
// fill them, the AVX2 kernel otherwise.
void attend_turned(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim,
                   const int32_t* slots, int n, const key_turns& t, float scale, float* out, float* weights,
                   size_t weights_stride, double* score_row);
// kernel_table::kquant_rows: with AVX512-VNNI 16-row panels and a 512-bit Q4_K decode kernel, else AVX2's.
void kquant_rows(const matrix_view& w, const detail::q8k_block* xq, int n_tok, float* y, int64_t r0,
                 int64_t r1);

// kernel_table::q8_0_rows: with AVX512-VNNI q8_0_x16 tiles of two 16-row groups x 6 tokens from 8 tokens on,
// one group x 8 tokens below (vpdpbusd), and the plain rows' kernel with 256-bit vpdpbusd
// (src/kernels/x86/q8_0_avx512.cpp), else AVX2's.
void q8_0_dot_rows(const matrix_view& w, const detail::q8_0_act* xq, int n_tok, float* y, int64_t r0,
                   int64_t r1);
void q8_0_dot_rows_vnni(const matrix_view& w, const detail::q8_0_act* xq, int n_tok, float* y, int64_t r0,
                        int64_t r1);
// The tiles of before: one group x 8 tokens at every token count (bench_q8_0_bench compares).
void q8_0_dot_rows_vnni_one_group(const matrix_view& w, const detail::q8_0_act* xq, int n_tok, float* y,
                                  int64_t r0, int64_t r1);
// The f32-activation Q8_0 product of before (plain rows; see avx2::matmul_q8_0_f32_rows).
void matmul_q8_0_f32_rows(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0, int64_t r1);

}  // namespace h2okv::kernels::avx512
