// AVX2 + FMA + F16C variants of the dispatched kernels (same contracts as h2okv/kernels/kernels.h). Call them
// only when core::cpu_supports(core::cpu_isa::avx2) is true; kernels.cpp does the dispatch, tests call them
// directly to compare with ref/.
//
//   using namespace h2okv;
//   if (core::cpu_supports(core::cpu_isa::avx2)) kernels::avx2::matmul_rows(w, x, n_tok, y, 0, w.rows);
#pragma once

#include <cstddef>
#include <cstdint>

#include "h2okv/kernels/kernels.h"
#include "kernels/q8_0_act.h"
#include "kernels/q8k.h"

namespace h2okv::kernels::avx2 {

void matmul_rows(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0, int64_t r1);
void dequantize_row(core::tensor_type t, const std::byte* src, int64_t n, float* dst);
// out[i] = exp(x[i]) for x[i] <= 0 with the 8-lane polynomial exp that softmax and attend use (exposed so
// tests can bound its error directly); arguments below -87 give 0.
void exp_nonpositive(const float* x, int n, float* out);
// exp(x - max) with an 8-lane polynomial exp, lane sums in float, then normalised.
void softmax(float* x, int n);
// The sum of squares in double (4-lane partial sums), then the reference's float products.
void rmsnorm(const float* x, const float* w, int n, float eps, float* out);
// silu(g) * up with the polynomial exp (sigmoid from exp(-|g|)); gates below -87 give 0 (|silu(g) * up|
// < |g * up| * exp(-87) there).
void swiglu(const float* gate, const float* up, int n, float* out);
// kernels::rope_apply, 8 lanes at a time: the reference's products and sums, so the same bits.
void rope_apply(float* x, int n_heads, int head_dim, int rope_dim, const float* cos_sin, rope_pairing p);
// kernels::fp32_to_fp16 of n values (F16C's vcvtps2ph, rounding to nearest even: the scalar conversion's
// bits, NaNs quietened with their payload's top bits as it does).
void to_f16(const float* src, int64_t n, std::byte* dst);
// kernels::attend (src/kernels/x86/attend_avx2.cpp): F16C conversion of f16 rows, q8_0, q4_0 and q4_1 decoded
// as dequantize_row (d * q, d * (q - 8), d * q + m in f32), each head's dot products and weighted sums as
// float FMA chains.
void attend(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim, const int32_t* slots,
            int n, float scale, float* out, float* weights, size_t weights_stride, double* score_row);
// kernels::attend_turned (the same file): attend's passes over keys turned in registers as they are loaded;
// the reference where the rotated dims do not fill 8-lane vectors (turns_fill).
void attend_turned(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim,
                   const int32_t* slots, int n, const key_turns& t, float scale, float* out, float* weights,
                   size_t weights_stride, double* score_row);
// True when head_dim, rope_dim and (neox) rope_dim / 2 are multiples of `lanes`.
bool turns_fill(int head_dim, const key_turns& t, int lanes);
// score_row[slots[j]] += weights[h][j] for j < n, h < n_q in that order (attend's score bookkeeping).
void add_scores(const float* weights, size_t weights_stride, int n_q, const int32_t* slots, int n,
                double* score_row);

// kernels::turn_rows (src/kernels/x86/turn_avx2.cpp): f32 and f16 rows decoded and turned 8 dims at a time
// (q8_0 rows decoded by dequantize_row first); the reference's products and sums, so the same bits.
void turn_rows(const kv_rows& k, int head_dim, const int32_t* slots, const int32_t* turns, int n,
               int rope_dim, rope_pairing p, const float* tables, float* dst);

// The k-quant pieces (src/kernels/x86/kquant_avx2.cpp), also used by the avx512 table:
// detail::quantize_q8k, bit for bit;
void quantize_q8k(const float* x, int64_t cols, detail::q8k_block* out);
// rows [r0, r1) of a Q4_K or Q6_K product for n_tok tokens already quantised (token t's blocks at
// xq + t * w.cols / 256), reading each row in its GGUF layout; the bits of kernels/q8k.h.
void kquant_direct_rows(const matrix_view& w, const detail::q8k_block* xq, int n_tok, float* y, int64_t r0,
                        int64_t r1);
// kernel_table::kquant_rows: the one-token kernels for up to 3 tokens, else 8-row panels (kquant_tiles.h).
void kquant_rows(const matrix_view& w, const detail::q8k_block* xq, int n_tok, float* y, int64_t r0,
                 int64_t r1);

// The Q8_0 pieces (src/kernels/x86/q8_0_avx2.cpp), the quantiser also used by the avx512 table:
// detail::quantize_q8_0_act, bit for bit;
void quantize_q8_0_act(const float* x, int64_t cols, detail::q8_0_act* out);
// kernel_table::q8_0_rows: q8_0_dot_rows_avx_vnni where the CPU has AVX-VNNI, else q8_0_dot_rows_no_vnni;
void q8_0_dot_rows(const matrix_view& w, const detail::q8_0_act* xq, int n_tok, float* y, int64_t r0,
                   int64_t r1);
// without VNNI: 8 rows x 4 tokens of a q8_0_x16 group per tile (vpmaddubsw), or the plain rows' kernel;
void q8_0_dot_rows_no_vnni(const matrix_view& w, const detail::q8_0_act* xq, int n_tok, float* y, int64_t r0,
                           int64_t r1);
// with AVX-VNNI (vpdpbusd on ymm; src/kernels/x86/q8_0_avxvnni.cpp): 8 rows x 6 tokens per tile, only where
// cpu_has_avx_vnni();
void q8_0_dot_rows_avx_vnni(const matrix_view& w, const detail::q8_0_act* xq, int n_tok, float* y, int64_t r0,
                            int64_t r1);
bool cpu_has_avx_vnni();
// rows [r0, r1) of a Q8_0 product from f32 activations (quantised here): what matmul_rows does for Q8_0;
void matmul_q8_0_rows(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0, int64_t r1);
// the f32-activation product Q8_0 had before (weights decoded to f32, matmul_tiles.h panels), plain rows
// only: kept to measure the integer products against (bench/q8_0_bench.cpp).
void matmul_q8_0_f32_rows(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0, int64_t r1);

}  // namespace h2okv::kernels::avx2
