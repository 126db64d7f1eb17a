// AVX-512 (F/BW/DQ/VL) + FMA + F16C variants of the dispatched kernels (same contracts as
// h2okv/kernels/kernels.h). Call them only when core::cpu_supports(core::cpu_isa::avx512) is true;
// kernels.cpp does the dispatch, tests call them directly to compare with ref/. Softmax, attend, rmsnorm and
// swiglu have no AVX-512 variant: the avx512 table uses the AVX2 ones.
//
//   using namespace h2okv;
//   if (core::cpu_supports(core::cpu_isa::avx512)) kernels::avx512::matmul_rows(w, x, n_tok, y, 0, w.rows);
#pragma once

#include <cstddef>
#include <cstdint>

#include "h2okv/kernels/kernels.h"
#include "kernels/q8k.h"

namespace h2okv::kernels::avx512 {

void matmul_rows(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0, int64_t r1);
void dequantize_row(core::tensor_type t, const std::byte* src, int64_t n, float* dst);
// kernel_table::kquant_rows: with AVX512-VNNI 16-row panels and a 512-bit Q4_K decode kernel, else AVX2's.
void kquant_rows(const matrix_view& w, const detail::q8k_block* xq, int n_tok, float* y, int64_t r0,
                 int64_t r1);

}  // namespace h2okv::kernels::avx512
