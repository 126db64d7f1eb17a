// The run-time dispatch table: one entry per kernel that has SIMD variants. kernels.cpp starts with the table
// of core::selected_isa(); each ISA folder provides its table.
#pragma once

#include <cstdint>

#include "h2okv/kernels/kernels.h"
#include "kernels/q8_0_act.h"
#include "kernels/q8k.h"

namespace h2okv::kernels::detail {

struct kernel_table {
    isa id;
    // Rows [r0, r1) of matmul (the caller splits rows across threads).
    void (*matmul_rows)(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0, int64_t r1);
    void (*dequantize_row)(core::tensor_type t, const std::byte* src, int64_t n, float* dst);
    void (*softmax)(float* x, int n);
    void (*attend)(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim,
                   const int32_t* slots, int n, float scale, float* out, float* weights,
                   size_t weights_stride, double* score_row);
    void (*rmsnorm)(const float* x, const float* w, int n, float eps, float* out);
    void (*swiglu)(const float* gate, const float* up, int n, float* out);
    // The k-quant products (kernels/q8k.h), in two steps so a call quantises its activations once for all
    // threads: quantize_q8k(x, cols, out) as detail::quantize_q8k, then kquant_rows: rows [r0, r1) for
    // n_tok tokens already quantised (token t's blocks at xq + t * w.cols / 256). Same bits on every ISA.
    quantize_q8k_fn quantize_q8k;
    void (*kquant_rows)(const matrix_view& w, const q8k_block* xq, int n_tok, float* y, int64_t r0,
                        int64_t r1);
    void (*turn_rows)(const kv_rows& k, int head_dim, const int32_t* slots, const int32_t* turns, int n,
                      int rope_dim, rope_pairing p, const float* tables, float* dst);
    // The Q8_0 products (kernels/q8_0_act.h), in the same two steps as the k-quants: quantize_q8_0 as
    // detail::quantize_q8_0_act, then q8_0_rows over token t's blocks at xq + t * w.cols / 32, plain or
    // q8_0_x16 rows. Same bits on every ISA.
    quantize_q8_0_fn quantize_q8_0;
    void (*q8_0_rows)(const matrix_view& w, const q8_0_act* xq, int n_tok, float* y, int64_t r0, int64_t r1);
    // The 2 bytes at dst + 2i = fp32_to_fp16(src[i]) for i < n (the KV cache's f16 rows): the same bits on
    // every ISA.
    void (*to_f16)(const float* src, int64_t n, std::byte* dst);
    void (*attend_turned)(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim,
                          const int32_t* slots, int n, const key_turns& t, float scale, float* out,
                          float* weights, size_t weights_stride, double* score_row);
    // kernels::rope_apply: the same bits on every ISA.
    void (*rope_apply)(float* x, int n_heads, int head_dim, int rope_dim, const float* cos_sin,
                       rope_pairing p);
};

// The table the public kernels dispatch to (core::selected_isa()'s, or set_isa's).
const kernel_table& current_table();

const kernel_table& reference_table();
// H2OKV_KERNELS_NO_SIMD builds the reference kernels only (what non-x86 targets get), to test that path.
#if (defined(__x86_64__) || defined(__i386__)) && !defined(H2OKV_KERNELS_NO_SIMD)
#define H2OKV_KERNELS_X86 1
// Used only where core::cpu_supports(core::cpu_isa::avx2 / avx512) (h2okv/core/cpu_isa.h).
const kernel_table& avx2_table();
const kernel_table& avx512_table();
#endif

}  // namespace h2okv::kernels::detail
