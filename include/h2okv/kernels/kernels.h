// Compute kernels of the forward pass: weight-matrix products for every supported GGUF weight type, RMSNorm,
// RoPE, softmax, SwiGLU, and the attention of one query over a slot-indexed K/V store with the H2O score
// bookkeeping fused into the same pass.
//
// Every kernel has a plain scalar reference (src/kernels/ref/) and, where it pays, SIMD variants
// (src/kernels/x86/) chosen once at run time from the CPU's features; tests check each variant against its
// reference. Kernels are noexcept pointer functions: they trust their callers (shapes and types are
// validated where data enters, e.g. by the model loader through `matmul_supports`) and only debug-assert.
//
//   using namespace h2okv::kernels;
//   matrix_view w{core::tensor_type::f32, info->data, /*rows=*/n_out, /*cols=*/n_in, n_in * sizeof(float)};
//   matmul(w, x, n_tok, y);                          // y: [n_tok][n_out]
//   kv_rows k{core::tensor_type::f16, k_bytes, 2u * head_dim};
//   kv_rows v{core::tensor_type::f16, v_bytes, 2u * head_dim};
//   attend(q, n_q, k, v, head_dim, slots, n, 1.0f / std::sqrt(float(head_dim)), out, w, n, score_row);
//
// Determinism: every output element is computed by one thread with one fixed sequence of operations that
// depends only on the active ISA and the element's own inputs (not on the thread count, the row block, or
// the number of tokens in the call), so results are bit-identical for any OpenMP thread count and any prefill
// chunking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "h2okv/core/tensor_type.h"

namespace h2okv::kernels {

// IEEE binary16 and bfloat16 conversions. Narrowing rounds to nearest, ties to even; overflow gives inf;
// NaN stays NaN (quiet, sign kept, top payload bits kept). Widening is exact.
float fp16_to_fp32(uint16_t h) noexcept;
uint16_t fp32_to_fp16(float f) noexcept;
float bf16_to_fp32(uint16_t h) noexcept;
uint16_t fp32_to_bf16(float f) noexcept;

// A weight matrix as stored in GGUF: `rows` output features, each row `cols` elements (GGUF dims[0] = cols),
// rows contiguous and `row_bytes` apart. Quantised rows are whole blocks in ggml's layouts, so cols must be a
// multiple of the block: Q8_0 (32 elements in 34 bytes: fp16 d, int8 q[32]; value d*q), Q4_0 (32 in 18:
// fp16 d, 16 bytes of nibbles; value d*(q-8)), Q4_K (256 in 144: fp16 d, fp16 dmin, 12 bytes of 6-bit
// sub-block scales and mins, 128 bytes of nibbles; value (d*sc)*q - dmin*m per 32 elements), Q6_K (256 in
// 210: 6-bit q in 128 + 64 bytes, int8 scales[16], fp16 d; value (d*sc)*(q-32) per 16 elements). The exact
// bit layouts are in src/kernels/blocks.h; the reference dequantisers define the values. The view does not
// own `data`.
//
// `layout` says whether the rows are as the file stores them or packed for the products by packed_weights
// (then `data` is the packed bytes, `row_bytes` their share per row, and only matmul reads them).
enum class weight_layout : uint8_t {
    rows,      // rows contiguous, ggml's blocks
    q4_k_x16,  // Q4_K, 16 rows interleaved with their scales unpacked (src/kernels/q4_k_x16.h)
    q8_0_x16,  // Q8_0, 16 rows interleaved, weights as unsigned bytes (src/kernels/q8_0_x16.h)
};

struct matrix_view {
    core::tensor_type type;
    const std::byte* data;
    int64_t rows;
    int64_t cols;
    size_t row_bytes;
    weight_layout layout = weight_layout::rows;
};

// Weight matrices repacked once, at load time, into the layout the products read fastest; the products give
// the same bits as over the plain rows. Today: Q4_K and Q8_0 matrices whose rows are a multiple of 16 (decode
// and small batches then read one interleaved stream: no per-row scale unpacking for Q4_K, one vpdpbusd per
// four weights of 16 rows for Q8_0).
// H2OKV_PACK_WEIGHTS=0 in the environment turns packing off (to compare).
//
//   kernels::packed_weights packed;
//   matrix_view w = packed.pack(plain);   // plain itself when there is nothing to pack
class packed_weights {
public:
    // A view for matmul: `w` itself when its type or shape has no packed layout or packing is off, otherwise
    // a packed copy owned by this object (valid while it lives). `*packed` says which.
    matrix_view pack(const matrix_view& w, bool* packed = nullptr);
    // Bytes of the packed copies.
    int64_t bytes() const noexcept { return bytes_; }

private:
    struct release {
        void operator()(std::byte* p) const noexcept;
    };
    std::vector<std::unique_ptr<std::byte, release>> buffers_;
    int64_t bytes_ = 0;
};

// True for the weight types matmul and dequantize_row handle (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K).
// Loaders check this and refuse other types with a status; the kernels themselves do not check.
bool matmul_supports(core::tensor_type t) noexcept;
// Bytes of one row of `cols` elements of type `t`: a matmul_supports type or Q4_1 (a KV-cache type only); 0
// for other types or when cols is not a whole number of blocks.
size_t row_size(core::tensor_type t, int64_t cols) noexcept;

// y[t*rows + r] = dot(W row r, x[t*cols ...]) for t < n_tok. x: [n_tok][cols] f32; y: [n_tok][rows] f32 (must
// not alias x). Parallel over blocks of rows with OpenMP (serial when called inside a parallel region or for
// small products); bit-identical for any thread count and for any split of the tokens into calls.
// F32, F16, BF16, Q8_0 and Q4_0 weights are dequantised exactly (as dequantize_row) and multiplied with the
// f32 activations in f32: the error bound of an f32 dot product of the decoded weights. Q4_K and Q6_K
// weights (the k-quants) are multiplied as llama.cpp does, with integer dot products against activations
// rounded to 8 bits per block of 256 (scale max|x| / 127, round half to even): the rounding and the exact
// sequence of operations per output are defined in src/kernels/q8k.h, and every ISA gives the same bits.
// Per-token work that a product runs in its own parallel region, so that it costs no region (a fork and join
// of the threads) of its own: `prepare(t0, t1)` makes tokens [t0, t1) of the input ready (a norm, a residual,
// an activation) before any row reads them, `finish(t0, t1)` works on those tokens' outputs once every row is
// done. Each thread takes the share of the tokens it quantises; without a parallel region, one call takes
// them all. A token's arithmetic is the caller's either way, so the split changes no bit. Holds a pointer to
// the callable, which must outlive the product (a lambda passed in the call does).
class token_work {
public:
    token_work() = default;
    template <typename F>
    token_work(const F& f) noexcept  // NOLINT(google-explicit-constructor): passed as a lambda
        : ctx_(&f), fn_([](const void* c, int t0, int t1) { (*static_cast<const F*>(c))(t0, t1); }) {}
    explicit operator bool() const noexcept { return fn_ != nullptr; }
    void operator()(int t0, int t1) const { fn_(ctx_, t0, t1); }

private:
    const void* ctx_ = nullptr;
    void (*fn_)(const void*, int, int) = nullptr;
};

void matmul(const matrix_view& w, const float* x, int n_tok, float* y, token_work prepare = {},
            token_work finish = {}) noexcept;

// matmul for n matrices that share the input x (a layer's q, k and v; gate and up): ys[i] = ws[i] x, all of
// ws[i].cols equal. One parallel region splits the matrices' row blocks, taken one after the other, between
// the threads, and the k-quants quantise x once. The same bits as n matmul calls.
void matmul_shared_input(const matrix_view* ws, float* const* ys, int n, const float* x, int n_tok,
                         token_work prepare = {}, token_work finish = {}) noexcept;

// Converts `n` elements of a row of type `t` (a matmul_supports type or Q4_1) to f32 (n a whole number of
// blocks for quantised types). src: the row's bytes.
void dequantize_row(core::tensor_type t, const std::byte* src, int64_t n, float* dst) noexcept;

// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; x, w, out: [n]; out may alias x. The sum of squares is
// accumulated in double.
void rmsnorm(const float* x, const float* w, int n, float eps, float* out) noexcept;

// Which dimensions RoPE rotates together: `normal` pairs (2i, 2i+1) (llama GGUFs), `neox` pairs
// (i, i + rope_dim/2).
enum class rope_pairing { normal, neox };

// Rotates, in place, the first rope_dim (even, <= head_dim) dims of each of n_heads vectors of head_dim
// floats (x: [n_heads][head_dim]) for position pos: pair i turns by theta_i = pos * freq_base^(-2i/rope_dim).
// Angles and their cosines/sines are computed in double, so large positions keep their precision.
void rope(float* x, int n_heads, int head_dim, int rope_dim, int64_t pos, float freq_base,
          rope_pairing p) noexcept;

// rope() in two steps, for callers that rotate many vectors at one position (every layer's q and k):
// rope_rotation writes cos_sin[2i], cos_sin[2i + 1] = cos(theta_i), sin(theta_i) for i < rope_dim / 2
// (cos_sin: [rope_dim] floats), and rope_apply rotates with them; together they give rope()'s result bit for
// bit.
void rope_rotation(int64_t pos, int rope_dim, float freq_base, float* cos_sin) noexcept;
void rope_apply(float* x, int n_heads, int head_dim, int rope_dim, const float* cos_sin,
                rope_pairing p) noexcept;

// One layer's RoPE as data, computed once when a model loads (h2okv/model/rope.h builds it from the file's
// base, rope_freqs factors and rope.scaling.* keys): pair i of the first rope_dim dims turns by
// pos * inv_freq[i] radians, and the rotated dims are multiplied by `magnitude` (YaRN's attention factor,
// 1 otherwise). Whoever applies RoPE (the forward pass, or a cache that re-rotates keys) hands the same spec
// to rope_rotation and rope_apply.
//
//   rope_spec s = rope_spec::plain(128, 500000.0f, rope_pairing::normal);
//   rope_rotation(s, pos, cs);   rope_apply(q, n_head, head_dim, s.rope_dim, cs, s.pairing);
struct rope_spec {
    int rope_dim = 0;
    rope_pairing pairing = rope_pairing::normal;
    std::vector<double> inv_freq;  // [rope_dim / 2] radians per position
    double magnitude = 1.0;
    // Unscaled RoPE: inv_freq[i] = freq_base^(-2i / rope_dim).
    static rope_spec plain(int rope_dim, float freq_base, rope_pairing p);
};

// cos_sin[2i], cos_sin[2i + 1] = magnitude * cos(theta_i), magnitude * sin(theta_i), theta_i = pos *
// inv_freq[i], in double (cos_sin: [rope_dim] floats). For rope_spec::plain the same bits as the
// rope_rotation above.
void rope_rotation(const rope_spec& s, int64_t pos, float* cos_sin) noexcept;

// In-place softmax of x[0..n): exp(x - max) / sum; the sum is accumulated in double.
void softmax(float* x, int n) noexcept;

// out[i] = silu(gate[i]) * up[i] with silu(g) = g / (1 + exp(-g)); out may alias gate or up.
void swiglu(const float* gate, const float* up, int n, float* out) noexcept;

// A slot-indexed K or V store of one KV head, as attend reads it: row s holds head_dim elements of `type` at
// data + s * row_bytes. Types: f32, f16 (IEEE binary16), q8_0, q4_0 or q4_1 (ggml's blocks of 32, so head_dim
// must be a multiple of 32); the values are those dequantize_row gives. The view does not own `data`.
struct kv_rows {
    core::tensor_type type;
    const std::byte* data;
    size_t row_bytes;
};

// True when attend reads rows of type `t` with this head_dim: f32 and f16 for any head_dim >= 1, q8_0, q4_0
// and q4_1 for multiples of 32.
bool attend_supports(core::tensor_type t, int head_dim) noexcept;

// Attention of the n_q (>= 1) query heads of one GQA group over the same slot-indexed K/V rows (k and v of
// one type); K and V are read once for all the heads.
//   q: [n_q][head_dim]; slots[0..n): the slot indices to attend, in any order;
//   for head i: s_ij = scale * dot(q_i, k[slots[j]]);  w_i = softmax(s_i);
//   out: [n_q][head_dim], out[i] = sum_j w_ij * v[slots[j]].
//   weights: head i's w_i[0..n) at weights + i * weights_stride on return.
//   score_row: null, or a per-slot [n_slots] double row that receives score_row[slots[j]] += (double)w_ij
//   for i = 0 .. n_q-1 in that order (the H2O score bookkeeping fused into the same pass; slots must then be
//   distinct).
// A head's out and weights are the same bits whatever n_q is and whatever the other heads are, so a caller
// may split a group into parts freely. n == 0 gives out = 0.
void attend(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim, const int32_t* slots,
            int n, float scale, float* out, float* weights, size_t weights_stride,
            double* score_row) noexcept;

// Rolling positions (h2okv/kv/kv_cache.h) keep K rows rotated at their admission positions and turn them to
// their places in the cache when they are attended. For each j < n: decodes row slots[j] of k (head_dim
// elements) into dst + slots[j] * head_dim as f32 and, where turns[j] != 0, turns its first rope_dim dims by
// the table t at tables + turns[j] * 2 * rope_dim (h2okv/model/rope.h writes them: rope_turn_table). Each
// dim d of a pair (a, b) (a = 2i, b = 2i + 1 for normal pairing; a = i, b = rope_dim / 2 + i for neox) has
// its pair's cosine at t[d] and its pair's sine at t[rope_dim + d], negated for a:
//   x'[d] = x[d] * t[d] + x[partner] * t[rope_dim + d],  i.e.  x'[a] = x[a] * c - x[b] * s,
//                                                            x'[b] = x[b] * c + x[a] * s
// in float, each product rounded, then the sum: the same bits on every ISA (the layout lets a vector of
// dims take its cosines and sines with two loads, no shuffles).
void turn_rows(const kv_rows& k, int head_dim, const int32_t* slots, const int32_t* turns, int n,
               int rope_dim, rope_pairing p, const float* tables, float* dst) noexcept;

// The turns of attend_turned, read by slot: the key in slot s turned by the table at tables + turns[s] * 2 *
// rope_dim, as turn_rows defines it for that row and turn (the policy's kv_policy::slot_turns table as it
// stands, so no attended-order copy is built per step). The table of turn 0 must be the identity (cos 1,
// sin 0, as rope_turn_table writes it): the vector kernels turn every row by its table, which for turn 0 can
// only change a -0 element to +0. A dot product does not see that: its sum starts at +0 and, rounding to
// nearest, adding a zero of either sign leaves any sum as it is, so scores, weights and outputs are the bits
// of attending turn_rows' rows.
struct key_turns {
    const int32_t* turns;
    const float* tables;
    int rope_dim;
    rope_pairing pairing;
};

// attend over the keys turn_rows would write for slots with turns t.turns[slots[j]], the values as stored,
// without writing them: each key row is decoded and turned in registers as its score is computed. The same
// bits as turn_rows into an f32 buffer, then attend over those rows, for K and V of one type whose rotated
// dims fill the ISA's vectors (rope_dim, and under neox rope_dim / 2, a multiple of 16 for avx512 and 8 for
// avx2); other shapes take the next ISA down, the reference last (its per-element turned keys are the same
// values).
void attend_turned(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim,
                   const int32_t* slots, int n, const key_turns& t, float scale, float* out, float* weights,
                   size_t weights_stride, double* score_row) noexcept;

// Gemma's blocks (src/kernels/gemma.cpp): one scalar implementation each, used by every ISA (they are a
// small part of a step; no SIMD twin to keep in step).
//
// out[i] = gelu(gate[i]) * up[i] with GELU's tanh approximation, gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g +
// 0.044715 g^3))) computed in double; out may alias gate or up.
void gelu_tanh_glu(const float* gate, const float* up, int n, float* out) noexcept;
// x[i] = cap * tanh(x[i] / cap) in place (logit soft-capping), cap > 0, computed in double.
void softcap(float* x, int n, float cap) noexcept;
// attend with soft-capped scores: s_ij = cap * tanh(scale * dot(q_i, k[slots[j]]) / cap), then attend's
// softmax, outputs, weights and score_row, same layout and order; cap > 0. Dots, tanh and sums in double
// (the reference attend's arithmetic); thread-safe like attend.
// With turns, the keys are turned as attend_turned turns them.
void attend_softcap(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim,
                    const int32_t* slots, int n, float scale, float cap, float* out, float* weights,
                    size_t weights_stride, double* score_row, const key_turns* turns = nullptr) noexcept;

// The instruction sets kernels are compiled for. `best_isa()` is the best the CPU supports (avx512 over avx2
// over reference); the kernels start with core::selected_isa() (h2okv/core/cpu_isa.h: the best, or the one
// H2OKV_ISA names; its "scalar" is `reference` here); `set_isa` switches every dispatched kernel (for tests
// and benchmarks comparing variants; a call already running finishes with the variant it started with) and
// returns false, changing nothing, when the CPU (or the OS, for the AVX-512 register state) lacks the ISA or
// this build does not have it. avx512 needs AVX-512 F/BW/DQ/VL; it has its own matmul, dequantize_row and
// attend and shares the avx2 softmax.
enum class isa { reference, avx2, avx512 };
const char* isa_name(isa i) noexcept;  // "reference", "avx2", "avx512"
isa best_isa() noexcept;
isa active_isa() noexcept;
bool set_isa(isa i) noexcept;

}  // namespace h2okv::kernels

namespace h2okv::kernels {

// Converts `n` f32 values to a row of type `t` (any type matmul_supports, or Q4_1; n a whole number of
// blocks), the inverse of dequantize_row up to the type's rounding. dst: row_size(t, n) bytes. Returns false
// for other types or a partial block. Round to nearest with these scales:
//   Q8_0 as ggml: per block of 32, d = max|x| / 127 stored as fp16, q = round(x / d); |error| <= d/2.
//   Q4_0 as ggml: d = -(the signed x of largest magnitude) / 8, q = min(15, floor(x/d + 8.5)); |error| <= d/2
//     except on the side opposite that x, where the clamp at 15 allows up to |d|.
//   Q4_1 as ggml: d = (max x - min x) / 15 and m = min x, q = min(15, floor((x - m)/d + 0.5)); |error| <= d/2
//     plus the fp16 rounding of m and of d (times q <= 15).
//   Q4_K: per 32 elements an offset m_j = max(0, -min x) and step s_j = (max x + m_j) / 15, stored as 6-bit
//     multiples of the block's fp16 dmin and d, rounded up so the grid still covers the sub-block (no
//     clipping); |error| <= (d*sc_j)/2 with the stored values.
//   Q6_K: per 16 elements a step s_j = max|x| / 31, stored as a 7-bit multiple of the block's fp16 d rounded
//     up; q in [-31, 31]; |error| <= (d*sc_j)/2.
// These are simpler than ggml's searched scales (somewhat larger error, same format); llama.cpp reads the
// results like its own.
bool quantize_row(core::tensor_type t, const float* src, int64_t n, std::byte* dst);

}  // namespace h2okv::kernels
