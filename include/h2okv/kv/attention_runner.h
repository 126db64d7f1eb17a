// The attention runner: the model's attention backend for one forward pass over the tokens of one or many
// sequences, each with its own kv_cache (slot store + policy). Per layer it stores every token's K/V in the
// slot its sequence's policy gave it, runs each query over its own sequence's kept slots plus the chunk
// prefix (never an n x n matrix), and commits the softmax weights to each sequence's policy as score rows.
//
// Two paths give the same bits:
//   - `reference`: one thread, a textbook loop — per sequence, token, KV head and query head one attention
//     call, its weights added into the unit's row in head order, the row handed to the policy per query;
//   - `parallel` (the default): per layer, one OpenMP region over (query, KV head) items of all sequences
//     (each item reads its K/V rows once for the group's query heads; a decode step with fewer KV heads
//     than twice the threads splits groups into single heads), then one region over (sequence, unit) that
//     sums and commits the rows, each unit's queries in order.
// A head's output and weights do not depend on how heads are grouped (kernels::attend), and every row sums
// its heads in the contract's order (layer-major, ascending head), so a sequence's results are the same
// whatever the thread count, the path, and the other sequences of the pass.
//
//   kv::attention_runner runner;
//   H2OKV_RETURN_IF_ERROR(runner.begin_step(caches, n_tokens));   // caches[i] takes the next n_tokens[i]
//   H2OKV_RETURN_IF_ERROR(model.forward(batch, runner, logits));   // batch: those tokens, in that order
//   runner.end_step();
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "h2okv/core/status.h"
#include "h2okv/kv/kv_cache.h"
#include "h2okv/model/model.h"

namespace h2okv::kv {

class attention_runner final : public model::attention_backend {
public:
    enum class path { parallel, reference };
    explicit attention_runner(path p = path::parallel) : path_(p) {}

    // The step's sequences in batch order: caches[i] takes the batch's next n_tok[i] (>= 1) tokens, which
    // are the next tokens of its open chunk (from chunk_done() on). A cache that forwards token by token
    // takes one. All caches belong to models of the same shape; a cache appears once.
    status begin_step(std::span<kv_cache* const> caches, std::span<const int> n_tok);
    // q: [n_tok][n_head * head_dim], k, v: [n_tok][n_kv_head * head_dim], after RoPE at each cache's
    // kv_cache::position_of; n_tok: the step's tokens. out: [n_tok][n_head * head_dim].
    status attend(int layer, int n_tok, const float* q, const float* k, const float* v, float* out) override;
    // Counts the step's tokens as forwarded by their caches.
    void end_step();

    // Bytes of the softmax-weights buffer: at most 16 MiB, or one query's weights when they are more.
    size_t work_bytes() const { return weights_.capacity() * sizeof(float); }

private:
    struct segment {
        kv_cache* cache;
        int first;  // the segment's first token in the batch
        int n;
        bool scores;    // the policy reads attention
        bool per_head;  // head-granularity units
    };
    // One query of the step: its segment, batch token and index in its sequence's chunk.
    struct query {
        int seg;
        int token;
        int ci;
    };

    status attend_parallel(int layer, const float* q, float* out);
    status attend_reference(int layer, const float* q, float* out);
    void store_kv(int layer, const float* k, const float* v);
    // Sums and commits the rows of the block's queries of segment `s`, unit `u` of `layer`.
    void commit_unit(int layer, int s, int u, int q0, int q1);
    void emit_weights(int layer, int q0, int q1);
    // Attended slots of query `qu` in the unit of (layer, KV head g): kept slots + chunk prefix.
    int n_att(int layer, const query& qu, int g) const;
    // Completes a unit's row for one query: observer, policy, row cleared.
    void hand_over(const segment& sg, int u, int ci);

    path path_;
    std::vector<segment> segs_;
    int n_tok_ = 0;
    model::hparams hp_;
    std::vector<query> queries_;  // every query of the step, in batch order
    // The current block of queries [block_q0_, ...):
    int block_q0_ = 0;
    std::vector<size_t> w_off_;  // [query - q0][KV head]: offset of the group's weights in weights_
    // [query - q0]: whether the kernel sums the row itself (the only query of a head-granularity unit in
    // the block, its whole group in one item), and whether the item then also hands the row to the policy
    // (no row observer), so the unit has no commit task (k_row_* in attention_runner.cpp).
    std::vector<uint8_t> fused_;
    std::vector<float> weights_;  // softmax weights of the block, [query][KV head][group head][attended]
    std::vector<std::pair<int, int>> tasks_;  // (segment, unit) commits of a block
};

}  // namespace h2okv::kv
