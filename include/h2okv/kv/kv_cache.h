// The slot-based KV cache: preallocated K and V of `capacity` slots per (layer, KV head), bound to an
// eviction policy that decides which slot each token occupies. Keys are stored after RoPE at their original
// positions; an evicted token's slot is overwritten by a newcomer (no compaction, no memmove). Each KV head
// attends over its own unit's slots, so per-head kept sets differ.
//
// K and V are stored as f32, f16 (the default, as llama.cpp) or q8_0 (ggml's blocks of 32 with an fp16 scale;
// head_dim must be a multiple of 32): the stored value is the rounding of the f32 row, and attention reads
// the stored values. Scores and the policy are the same for every type.
//
// It is the model's attention_backend: per layer it stores the chunk's K/V, runs attention row by row (kept
// slots + the chunk prefix, never an n x n matrix; one parallel region per layer over (token, KV head) items,
// each item reading its K/V rows once for the group's query heads), and, when the policy reads attention,
// sums each query's softmax weights over the unit's query heads (in double, layer-major head order) and hands
// the row to the policy, query by query in order, so the rows are the same for any thread count.
//
//   H2OKV_ASSIGN_OR_RETURN(auto cache, kv::kv_cache::create(model.params(), policy_params, chunk, n_ctx, n,
//                                                           kv::kv_type::f16));
//   cache->begin_chunk(first, n);
//   model.forward(tokens, n, first, *cache, logits, mode);   // once, or token by token (token_by_token())
//   cache->end_chunk();
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "h2okv/core/status.h"
#include "h2okv/model/model.h"
#include "h2okv/policy/policy.h"

namespace h2okv::kv {

// The element type of stored K and V.
enum class kv_type { f32, f16, q8_0 };
const char* kv_type_name(kv_type t) noexcept;  // "f32", "f16", "q8_0"
std::string kv_type_names();                   // "f32, f16, q8_0"
// Parses a name of kv_type_name; the error lists the valid names.
result<kv_type> parse_kv_type(std::string_view name);
// Bytes of one stored row of head_dim elements: 4 or 2 per element, or 34 per 32 for q8_0; 0 when q8_0 does
// not divide head_dim.
size_t kv_row_bytes(kv_type t, int head_dim) noexcept;

// Called with every attention row handed to the policy: the unit, the query position, and the attended
// positions with their row increments (same order). For tests and traces; costs nothing when unset.
using row_observer = std::function<void(int unit, int64_t query_pos, std::span<const int64_t> positions,
                                        std::span<const double> increments)>;

// Called, when set, with every query row of every (layer, query head) under any policy, `full` included:
// the attended positions (kept positions, then the chunk prefix) and that head's softmax weights, in the same
// order. For measurements such as retained attention mass; costs nothing when unset.
using weights_observer =
    std::function<void(int layer, int head, int64_t query_pos, std::span<const int64_t> positions,
                       std::span<const float> weights)>;

class kv_cache final : public model::attention_backend {
public:
    // run_length resolves fractional budgets (SPEC.md). n_ctx bounds positions under `full`. q8_0 needs a
    // head_dim that is a multiple of 32 (refused otherwise).
    static result<std::unique_ptr<kv_cache>> create(const model::hparams& hp, const policy::params& pp,
                                                    int max_chunk, int64_t n_ctx, int64_t run_length,
                                                    kv_type type);
    ~kv_cache() override;

    const policy::kv_policy& policy() const { return *policy_; }
    // True when a chunk must be forwarded one token at a time: a `model`-granularity policy that reads
    // attention needs the rows of every layer for a query before the next query's row.
    bool token_by_token() const;

    status begin_chunk(int64_t first, int n);
    status attend(int layer, int64_t first_pos, int n_tok, const float* q, const float* k, const float* v,
                  float* out) override;
    status end_chunk();

    void set_row_observer(row_observer obs) { observer_ = std::move(obs); }
    void set_weights_observer(weights_observer obs) { weights_observer_ = std::move(obs); }

    int64_t capacity() const { return capacity_; }
    kv_type type() const { return type_; }
    int64_t bytes() const;  // K and V storage allocated, at the type's real size
    // Positions held, summed over units.
    int64_t kept_total() const;
    // The kept positions of every (layer, KV head), layer-major: n_layer * n_kv_head sorted lists.
    std::vector<std::vector<int64_t>> kept_per_head() const;

private:
    kv_cache(const model::hparams& hp, std::unique_ptr<policy::kv_policy> pol, kv_type type);
    // The K or V rows of (layer, KV head): slot s at data + s * row_bytes.
    kernels::kv_rows rows(const std::vector<std::byte>& store, int layer, int kv_head) const;
    void store_row(std::vector<std::byte>& store, int layer, int kv_head, int32_t slot, const float* x);
    // w: [n_head][capacity], query `chunk_index`'s weights; `fused`: the kernel already summed head-unit
    // rows.
    void commit_rows(int layer, int chunk_index, const float* w, bool fused);
    void emit_weights(int layer, int chunk_index, const float* w);

    model::hparams hp_;
    std::unique_ptr<policy::kv_policy> policy_;
    int64_t capacity_ = 0;
    kv_type type_;
    size_t row_bytes_ = 0;
    std::vector<std::byte> k_, v_;  // [n_layer][n_kv_head][capacity] rows of row_bytes_
    int block_tokens_ = 1;          // queries whose weights weights_ holds at once

    // Per-chunk state.
    int64_t chunk_first_ = 0;
    int chunk_n_ = 0;
    std::vector<std::vector<int32_t>> attended_;  // per unit: kept slots, then the chunk's slots
    std::vector<int> n_kept_;                     // per unit: how many of attended_ are kept slots
    std::vector<std::vector<double>> rows_;       // per unit: the row being summed, indexed by slot
    std::vector<float> weights_;  // [block_tokens_][n_head][capacity]: softmax weights of a block of queries
    row_observer observer_;
    weights_observer weights_observer_;
    std::vector<int64_t> obs_positions_;
    std::vector<double> obs_increments_;
};

}  // namespace h2okv::kv
