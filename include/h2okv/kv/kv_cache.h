// The slot-based KV cache: preallocated K and V of `capacity` slots per (layer, KV head), bound to an
// eviction policy that decides which slot each token occupies. Keys are stored after RoPE at their original
// positions; an evicted token's slot is overwritten by a newcomer (no compaction, no memmove). Each KV head
// attends over its own unit's slots, so per-head kept sets differ.
//
// It is the model's attention_backend: per layer it stores the chunk's K/V, runs attention row by row (kept
// slots + the chunk prefix, never an n x n matrix), and, when the policy reads attention, sums each query's
// softmax weights over the unit's query heads (in double, layer-major head order) and hands the row to the
// policy.
//
//   H2OKV_ASSIGN_OR_RETURN(auto cache, kv::kv_cache::create(model.params(), policy_params, chunk, n_ctx, n));
//   cache->begin_chunk(first, n);
//   model.forward(tokens, n, first, *cache, logits, mode);   // once, or token by token (token_by_token())
//   cache->end_chunk();
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "h2okv/core/status.h"
#include "h2okv/model/model.h"
#include "h2okv/policy/policy.h"

namespace h2okv::kv {

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
    // run_length resolves fractional budgets (SPEC.md). n_ctx bounds positions under `full`.
    static result<std::unique_ptr<kv_cache>> create(const model::hparams& hp, const policy::params& pp,
                                                    int max_chunk, int64_t n_ctx, int64_t run_length);
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
    int64_t bytes() const;  // K and V storage allocated
    // Positions held, summed over units.
    int64_t kept_total() const;
    // The kept positions of every (layer, KV head), layer-major: n_layer * n_kv_head sorted lists.
    std::vector<std::vector<int64_t>> kept_per_head() const;

private:
    kv_cache(const model::hparams& hp, std::unique_ptr<policy::kv_policy> pol);
    float* k_at(int layer, int kv_head, int32_t slot);
    float* v_at(int layer, int kv_head, int32_t slot);
    void commit_rows(int layer, int chunk_index);
    void emit_weights(int layer, int chunk_index);

    model::hparams hp_;
    std::unique_ptr<policy::kv_policy> policy_;
    int64_t capacity_ = 0;
    std::vector<float> k_, v_;  // [n_layer][n_kv_head][capacity][head_dim]

    // Per-chunk state.
    int64_t chunk_first_ = 0;
    int chunk_n_ = 0;
    std::vector<std::vector<int32_t>> attended_;  // per unit: kept slots, then the chunk's slots
    std::vector<int> n_kept_;                     // per unit: how many of attended_ are kept slots
    std::vector<std::vector<double>> rows_;       // per unit: the row being summed, indexed by slot
    std::vector<float> weights_;                  // [n_head][capacity]: the last softmax weights per head
    row_observer observer_;
    weights_observer weights_observer_;
    std::vector<int64_t> obs_positions_;
    std::vector<double> obs_increments_;
};

}  // namespace h2okv::kv
