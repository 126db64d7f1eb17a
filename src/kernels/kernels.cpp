#include "h2okv/kernels/kernels.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <vector>

#include "h2okv/core/cpu_isa.h"
#include "h2okv/core/parallel.h"
#include "kernels/blocks.h"
#include "kernels/dispatch.h"
#include "kernels/half.h"
#include "kernels/ref/ref.h"

namespace h2okv::kernels {
namespace {

using core::tensor_type;

// Threads take contiguous runs of whole blocks of this many rows (the kernels' panel height), so each
// thread streams its own part of the matrix once per token block. (Handing out small runs dynamically
// instead, to absorb a thread slowed by other work, made 2-thread Q4_K decode 10-30 % slower: the two
// threads' reads then interleave.) Each thread's part is a stealing range: it takes its own runs in order and
// then the tail of a slower thread's part.
constexpr int64_t row_block = 16;
// Runs per thread's part: the granularity at which a thread that finished early takes over the tail of
// another.
constexpr int64_t k_runs_per_thread = 8;
// Below this many multiply-adds (about 10 us of one core) a parallel region's fork and join, several
// microseconds on a busy machine, cost more than the split saves.
constexpr int64_t min_parallel_work = int64_t{1} << 18;

const detail::kernel_table& table_of(core::cpu_isa i) {
#ifdef H2OKV_KERNELS_X86
    if (i == core::cpu_isa::avx512) return detail::avx512_table();
    if (i == core::cpu_isa::avx2) return detail::avx2_table();
#endif
    (void)i;
    return detail::reference_table();
}

const detail::kernel_table& best_table() {
    return table_of(core::detected_isa());
}

std::atomic<const detail::kernel_table*>& active_table() {
    static std::atomic<const detail::kernel_table*> table{&table_of(core::selected_isa())};
    return table;
}

const detail::kernel_table& table() {
    return *active_table().load(std::memory_order_acquire);
}

}  // namespace

namespace detail {

const kernel_table& current_table() {
    return table();
}

const kernel_table& reference_table() {
    static const kernel_table t{isa::reference,
                                &ref::matmul_rows,
                                &ref::dequantize_row,
                                &ref::softmax,
                                &ref::attend,
                                &ref::rmsnorm,
                                &ref::swiglu,
                                &detail::quantize_q8k,
                                &ref::kquant_rows,
                                &ref::turn_rows,
                                &detail::quantize_q8_0_act,
                                &ref::q8_0_rows,
                                &ref::to_f16,
                                &ref::attend_turned,
                                &ref::rope_apply};
    return t;
}

}  // namespace detail

float fp16_to_fp32(uint16_t h) noexcept {
    return detail::half_to_float(h);
}
uint16_t fp32_to_fp16(float f) noexcept {
    return detail::float_to_half(f);
}
float bf16_to_fp32(uint16_t h) noexcept {
    return detail::bfloat_to_float(h);
}
uint16_t fp32_to_bf16(float f) noexcept {
    return detail::float_to_bfloat(f);
}

bool matmul_supports(tensor_type t) noexcept {
    switch (t) {
        case tensor_type::f32:
        case tensor_type::f16:
        case tensor_type::bf16:
        case tensor_type::q8_0:
        case tensor_type::q4_0:
        case tensor_type::q4_k:
        case tensor_type::q6_k: return true;
        default: return false;
    }
}

size_t row_size(tensor_type t, int64_t cols) noexcept {
    if (cols < 0 || (!matmul_supports(t) && t != tensor_type::q4_1)) return 0;
    const auto n = static_cast<size_t>(cols);
    const auto elems = static_cast<size_t>(core::block_elements(t));
    return n % elems == 0 ? n / elems * static_cast<size_t>(core::block_bytes(t)) : 0;
}

void matmul_shared_input(const matrix_view* ws, float* const* ys, int n, const float* x, int n_tok,
                         token_work prepare, token_work finish) noexcept {
    const detail::kernel_table& tb = table();
    int64_t work = 0;
    int64_t n_blocks = 0;
    bool k_quant = false;
    bool q8_0 = false;
    for (int i = 0; i < n; ++i) {
        assert(ws[i].cols == ws[0].cols);
        work += ws[i].rows * ws[i].cols * n_tok;
        n_blocks += (ws[i].rows + row_block - 1) / row_block;
        k_quant = k_quant || ws[i].type == tensor_type::q4_k || ws[i].type == tensor_type::q6_k;
        q8_0 = q8_0 || ws[i].type == tensor_type::q8_0;
    }
    // The k-quants and Q8_0 quantise the activations once, for every matrix and thread (a failed allocation
    // takes matmul_rows, which falls back to quantising block by block); the threads of a parallel call
    // quantise a share of the tokens each, into the calling thread's buffers.
    const int64_t cols = ws[0].cols;
    detail::q8k_block* xq = k_quant ? detail::q8k_tokens_buffer(n_tok, cols) : nullptr;
    detail::q8_0_act* xq8 = q8_0 ? detail::q8_0_tokens_buffer(n_tok, cols) : nullptr;
    auto quantize = [&](int t0, int t1) {
        if (xq != nullptr) detail::quantize_q8k_range(x, t0, t1, cols, tb.quantize_q8k, xq);
        if (xq8 != nullptr) detail::quantize_q8_0_range(x, t0, t1, cols, tb.quantize_q8_0, xq8);
    };
    // Row blocks [b0, b1) of the matrices taken one after the other.
    auto blocks = [&](int64_t b0, int64_t b1) {
        int64_t first = 0;
        for (int i = 0; i < n && first < b1; ++i) {
            const matrix_view& w = ws[i];
            const int64_t count = (w.rows + row_block - 1) / row_block;
            const int64_t lo = std::max(b0, first) - first;
            const int64_t hi = std::min(b1, first + count) - first;
            first += count;
            if (lo >= hi) continue;
            const int64_t r0 = lo * row_block;
            const int64_t r1 = std::min(w.rows, hi * row_block);
            if (xq != nullptr && (w.type == tensor_type::q4_k || w.type == tensor_type::q6_k)) {
                tb.kquant_rows(w, xq, n_tok, ys[i], r0, r1);
            } else if (xq8 != nullptr && w.type == tensor_type::q8_0) {
                tb.q8_0_rows(w, xq8, n_tok, ys[i], r0, r1);
            } else {
                tb.matmul_rows(w, x, n_tok, ys[i], r0, r1);
            }
        }
    };
    if (!core::should_fork(core::parallel_site::matmul, work, min_parallel_work)) {
        if (prepare) prepare(0, n_tok);
        quantize(0, n_tok);
        blocks(0, n_blocks);
        if (finish) finish(0, n_tok);
        return;
    }
    core::stealing_ranges ranges(n_blocks, omp_get_max_threads());
#pragma omp parallel
    {
        const int64_t n_threads = omp_get_num_threads();
        const int64_t id = omp_get_thread_num();
        const auto t0 = static_cast<int>(n_tok * id / n_threads);
        const auto t1 = static_cast<int>(n_tok * (id + 1) / n_threads);
        if (prepare && t0 < t1) prepare(t0, t1);
        quantize(t0, t1);
#pragma omp barrier
        ranges.run(static_cast<int>(id), std::max<int64_t>(1, n_blocks / (n_threads * k_runs_per_thread)),
                   blocks);
        if (finish) {  // the same for every thread of the team, so all of them meet the barrier
#pragma omp barrier
            if (t0 < t1) finish(t0, t1);
        }
    }
}

void matmul(const matrix_view& w, const float* x, int n_tok, float* y, token_work prepare,
            token_work finish) noexcept {
    matmul_shared_input(&w, &y, 1, x, n_tok, prepare, finish);
}

void dequantize_row(tensor_type t, const std::byte* src, int64_t n, float* dst) noexcept {
    table().dequantize_row(t, src, n, dst);
}

void turn_rows(const kv_rows& k, int head_dim, const int32_t* slots, const int32_t* turns, int n,
               int rope_dim, rope_pairing p, const float* tables, float* dst) noexcept {
    table().turn_rows(k, head_dim, slots, turns, n, rope_dim, p, tables, dst);
}

void rmsnorm(const float* x, const float* w, int n, float eps, float* out) noexcept {
    table().rmsnorm(x, w, n, eps, out);
}

void rope(float* x, int n_heads, int head_dim, int rope_dim, int64_t pos, float freq_base,
          rope_pairing p) noexcept {
    ref::rope(x, n_heads, head_dim, rope_dim, pos, freq_base, p);
}

void rope_rotation(int64_t pos, int rope_dim, float freq_base, float* cos_sin) noexcept {
    ref::rope_rotation(pos, rope_dim, freq_base, cos_sin);
}

rope_spec rope_spec::plain(int rope_dim, float freq_base, rope_pairing p) {
    rope_spec s{rope_dim, p, std::vector<double>(static_cast<size_t>(rope_dim / 2)), 1.0};
    for (int i = 0; i < rope_dim / 2; ++i)
        s.inv_freq[static_cast<size_t>(i)] = std::pow(static_cast<double>(freq_base), -2.0 * i / rope_dim);
    return s;
}

void rope_rotation(const rope_spec& s, int64_t pos, float* cos_sin) noexcept {
    ref::rope_rotation(s, pos, cos_sin);
}

void rope_apply(float* x, int n_heads, int head_dim, int rope_dim, const float* cos_sin,
                rope_pairing p) noexcept {
    table().rope_apply(x, n_heads, head_dim, rope_dim, cos_sin, p);
}

void softmax(float* x, int n) noexcept {
    table().softmax(x, n);
}

void swiglu(const float* gate, const float* up, int n, float* out) noexcept {
    table().swiglu(gate, up, n, out);
}

bool attend_supports(tensor_type t, int head_dim) noexcept {
    if (head_dim < 1) return false;
    switch (t) {
        case tensor_type::f32:
        case tensor_type::f16: return true;
        case tensor_type::q8_0: return head_dim % detail::q8_0_elems == 0;
        case tensor_type::q4_0: return head_dim % detail::q4_0_elems == 0;
        case tensor_type::q4_1: return head_dim % detail::q4_1_elems == 0;
        default: return false;
    }
}

void attend(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim, const int32_t* slots,
            int n, float scale, float* out, float* weights, size_t weights_stride,
            double* score_row) noexcept {
    table().attend(q, n_q, k, v, head_dim, slots, n, scale, out, weights, weights_stride, score_row);
}

void attend_turned(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim,
                   const int32_t* slots, int n, const key_turns& t, float scale, float* out, float* weights,
                   size_t weights_stride, double* score_row) noexcept {
    table().attend_turned(q, n_q, k, v, head_dim, slots, n, t, scale, out, weights, weights_stride,
                          score_row);
}

const char* isa_name(isa i) noexcept {
    switch (i) {
        case isa::reference: return "reference";
        case isa::avx2: return "avx2";
        case isa::avx512: return "avx512";
    }
    return "unknown";
}

isa best_isa() noexcept {
    return best_table().id;
}

isa active_isa() noexcept {
    return table().id;
}

bool set_isa(isa i) noexcept {
    const core::cpu_isa c = i == isa::avx512 ? core::cpu_isa::avx512
                            : i == isa::avx2 ? core::cpu_isa::avx2
                                             : core::cpu_isa::scalar;
    if (!core::cpu_supports(c)) return false;
    active_table().store(&table_of(c), std::memory_order_release);
    return true;
}

}  // namespace h2okv::kernels
