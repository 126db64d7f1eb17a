// One sequence's KV cache: a slot store of K/V rows (h2okv/kv/slot_store.h) bound to the eviction policy
// that decides which slot each token occupies, plus the bookkeeping of the chunk being processed (each
// unit's attended slots, its score row). An evicted token's slot is overwritten by a newcomer (no
// compaction, no memmove). Each KV head attends over its own unit's slots, so per-head kept sets differ.
//
// Positions (policy::position_mode, docs/EVICTION_CONTRACT.md): in `original` mode a token is rotated at its
// place in the text and its key is stored so. In `rolling` mode the chunk's tokens are rotated at n_kept + i
// (position_of), and a key is stored as rotated at that admission position; when a query attends, each kept
// key whose rolling position has dropped since (older tokens were evicted) is turned back by the difference
// as attention loads it (turns(): the policy's drop per slot, kernels::attend_turned), so the stored rows are
// never rewritten and never accumulate rounding.
//
// Sliding-window layers (model::hparams::sliding, Gemma's local layers) are not governed by the policy: they
// get their own store and a `window` slot table (kv_policy of the `window` policy over those layers, one
// unit, budget W - 1 for a window of W), so each holds only the last W - 1 positions between chunks and W -
// 1 + chunk while one is open; a query at t attends the positions in (t - W, t]. The configured policy
// (policy()) governs the global layers only: its units, layers and budgets count global layers alone.
// Rolling positions are refused for models with sliding-window layers.
//
// The cache does not run attention itself: an attention_runner (h2okv/kv/attention_runner.h) does, for the
// tokens of one or many caches in one forward pass. A chunk may be forwarded in several passes (token by
// token when the policy needs it, or a few tokens per pass when a batch is full); the cache counts how many
// of the chunk's tokens have been forwarded.
//
//   H2OKV_ASSIGN_OR_RETURN(auto cache, kv::kv_cache::create(model.params(), policy_params, chunk, n_ctx, n,
//                                                           kv::kv_type::f16));
//   cache->begin_chunk(first, n);
//   runner.begin_step({cache.get()}, {n}); model.forward(batch, runner, logits); runner.end_step();
//   cache->end_chunk();
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "h2okv/core/status.h"
#include "h2okv/kv/slot_store.h"
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

// The memory of one sequence's cache, known before it is allocated (kv_cache::plan).
struct cache_footprint {
    int64_t capacity = 0;  // slots of the largest unit of the global layers (the policy's)
    // Slots per (global layer, KV head), layer-major: each head's own unit's (clause 11).
    std::vector<int64_t> head_capacity;
    int64_t window_capacity = 0;  // slots per KV head of a sliding-window layer (0: none)
    int64_t kv_bytes = 0;         // K and V rows at the type's real size, both kinds of layer
    int64_t table_bytes = 0;  // the policy's slot tables and the cache's per-unit slot lists and score rows
    bool rolling = false;     // rolling positions (policy::position_mode::rolling; never under `full`)
    int64_t total() const { return kv_bytes + table_bytes; }
};

class kv_cache {
public:
    // What create() with the same arguments allocates, without allocating (the same validation).
    static result<cache_footprint> plan(const model::hparams& hp, const policy::params& pp, int max_chunk,
                                        int64_t n_ctx, int64_t run_length, kv_type type);
    // The largest budget (tokens per unit, for pp's policy with its own budget ignored) whose cache's K/V
    // rows (plan's kv_bytes at the type's exact row size: budget + chunk slots per unit of the global layers,
    // and the sliding-window layers' fixed slots) take at most `bytes`. Refused, saying what one token costs,
    // when no budget fits, and with plan's reason when the largest that fits is invalid for the policy (too
    // small for its recent window and sinks).
    static result<int64_t> budget_for_bytes(const model::hparams& hp, const policy::params& pp, int max_chunk,
                                            int64_t n_ctx, int64_t run_length, kv_type type, int64_t bytes);
    // run_length resolves fractional budgets (SPEC.md). n_ctx bounds positions under `full`. The block KV
    // types need a head_dim that is a multiple of 32 (refused otherwise). A cache larger than the machine can
    // hold is refused before anything is allocated.
    static result<std::unique_ptr<kv_cache>> create(const model::hparams& hp, const policy::params& pp,
                                                    int max_chunk, int64_t n_ctx, int64_t run_length,
                                                    kv_type type);
    ~kv_cache();

    const model::hparams& hparams() const { return hp_; }
    const policy::kv_policy& policy() const { return *policy_; }
    // True when a chunk must be forwarded one token at a time (kv_policy::token_by_token).
    bool token_by_token() const { return policy_->token_by_token(); }

    // Opens the chunk [first, first + n) (the policy assigns its slots); its tokens are then forwarded, in
    // order, by one or more runner steps; end_chunk evicts once all n have been.
    status begin_chunk(int64_t first, int n);
    status end_chunk();
    bool in_chunk() const { return chunk_n_ > 0; }
    int64_t chunk_first() const { return chunk_first_; }
    int chunk_size() const { return chunk_n_; }
    int chunk_done() const { return chunk_done_; }  // tokens of the chunk already forwarded
    // The RoPE position of the open chunk's token i, what the model rotates its q and k at: chunk_first() + i
    // in original mode, n_kept + i in rolling mode.
    int64_t position_of(int i) const { return chunk_base_ + i; }

    void set_row_observer(row_observer obs) { observer_ = std::move(obs); }
    void set_weights_observer(weights_observer obs) { weights_observer_ = std::move(obs); }

    // Slots of the largest unit of the global layers (every unit's, unless the allocation gives units
    // budgets of their own).
    int64_t capacity() const { return store_.capacity(); }
    kv_type type() const { return store_.type(); }
    // K and V storage allocated, at the type's real size, both kinds of layer.
    int64_t bytes() const { return store_.bytes() + window_store_.bytes(); }
    // Sliding-window layers: their slot table (null when the model has none) and slots per KV head.
    const policy::kv_policy* window_policy() const { return window_.get(); }
    int64_t window_capacity() const { return window_ ? window_store_.capacity() : 0; }
    const cache_footprint& footprint() const { return footprint_; }
    // Positions held, summed over the policy's units (the global layers).
    int64_t kept_total() const;
    // The kept positions of every (layer, KV head), layer-major: n_layer * n_kv_head sorted lists (a
    // sliding-window layer's are its window's).
    std::vector<std::vector<int64_t>> kept_per_head() const;

private:
    friend class attention_runner;
    kv_cache(const model::hparams& hp, std::unique_ptr<policy::kv_policy> pol, slot_store store,
             cache_footprint fp);

    // What the runner sees of a layer, whichever its kind.
    bool sliding(int layer) const { return hp_.sliding(layer); }
    // The policy's unit of (layer, KV head g) of a global layer.
    int unit_of(int layer, int g) const { return policy_->unit_of(index_[static_cast<size_t>(layer)], g); }
    // The slot of chunk token ci in (layer, g): the policy's chunk slot, or the window's on a sliding layer.
    int32_t chunk_slot(int layer, int g, int ci) const;
    // Stores chunk token ci's K and V rows of (layer, g) in its slot (and hands the key to a key-scored
    // policy).
    void write(int layer, int g, int ci, const float* k, const float* v);
    // The rows write(layer, g, ci, ...) will store, asked of memory ahead (slot_store::prefetch_for_write).
    void prefetch_for_write(int layer, int g, int ci) const;
    // The slots chunk query ci attends in (layer, g): a global layer's kept slots and the chunk prefix; a
    // sliding layer's window of it.
    std::span<const int32_t> attended(int layer, int g, int ci) const;
    // Their positions, in the same order.
    void attended_positions(int layer, int g, int ci, std::vector<int64_t>* out) const;
    // Whether a global layer's rows are handed to the policy after it (not before the last global layer
    // under `model` granularity).
    bool hands_rows(int layer) const;
    kernels::kv_rows values(int layer, int g) const;
    kernels::kv_rows keys(int layer, int g) const;
    // Rolling mode: by how much each slot's key in the unit of (layer, g) turns, from its admission position
    // to its rolling position (0 for the chunk's own; kv_policy::slot_turns, read by slot), with the layer's
    // turn tables.
    kernels::key_turns turns(int layer, int g) const;
    // Whether attention turns the layer's keys (rolling mode, a global layer).
    bool turned(int layer) const { return rolling_ && !sliding(layer); }

    model::hparams hp_;
    std::unique_ptr<policy::kv_policy> policy_;
    slot_store store_;  // the global layers'
    cache_footprint footprint_;
    // Per model layer: its index among the layers of its kind (the policy's layer, or the window store's).
    std::vector<int> index_;
    int last_global_ = 0;
    // Sliding-window layers: their slot table (one unit for all of them: the window is the same for each),
    // their store, and the open chunk's attended slots with their positions, kept ones in position order.
    std::unique_ptr<policy::kv_policy> window_;
    slot_store window_store_;
    std::vector<int32_t> window_attended_;
    std::vector<int64_t> window_positions_;
    int window_n_kept_ = 0;

    // Rolling positions: per distinct rope of the layers (hparams::rope_specs), the turns by -d for d in
    // [0, capacity) ([spec][capacity][2 * rope_dim], model::rope_turn_table). The policy keeps each key's
    // turn.
    bool rolling_ = false;
    std::vector<float> turns_;

    // The open chunk.
    int64_t chunk_first_ = 0;
    int64_t chunk_base_ = 0;  // position_of(0)
    int chunk_n_ = 0;
    int chunk_done_ = 0;
    // Slots held by unit u before the open chunk: the first entries of its attended list.
    int n_kept(int unit) const { return static_cast<int>(policy_->kept_slots(unit).size()); }
    // The rows being summed, indexed by slot: only one layer's units are in flight at a time, so one row per
    // KV head for head-granularity units, one for layer or model units (row(u)).
    std::vector<std::vector<double>> rows_;
    double* row(int unit) {
        return rows_[rows_.size() == 1 ? 0 : static_cast<size_t>(unit) % rows_.size()].data();
    }
    row_observer observer_;
    weights_observer weights_observer_;
};

}  // namespace h2okv::kv
