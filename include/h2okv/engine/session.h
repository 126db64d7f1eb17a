// A session runs one sequence through a model with a policy-managed KV cache: prompts are processed in chunks
// of `prefill_chunk` tokens (eviction after each chunk), generated tokens one at a time (eviction after
// each). `process` runs the session alone; in a batch (engine::scheduler, engine::forward_pass) the
// session opens its chunks and a shared forward pass forwards its tokens beside other sessions', with the
// same results.
//
//   engine::session_params sp;
//   sp.kv = *policy::params::parse("h2o:budget=64");
//   H2OKV_ASSIGN_OR_RETURN(auto s, engine::session::create(*model, sp, /*run_length=*/prompt.size() + 200));
//   H2OKV_RETURN_IF_ERROR(s->process(prompt_ids, model::logits_mode::last, &logits));
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "h2okv/core/status.h"
#include "h2okv/engine/forward_pass.h"
#include "h2okv/kv/kv_cache.h"
#include "h2okv/model/model.h"
#include "h2okv/policy/policy.h"

namespace h2okv::engine {

struct session_params {
    // The eviction policy and its parameters.
    policy::params kv;
    // The element type K and V are stored in (f16 by default, as llama.cpp).
    kv::kv_type kv_type = kv::kv_type::f16;
    // A budget in bytes of K/V per sequence instead of kv.budget (0: none; an evicting policy only): the
    // session takes the largest token budget whose K/V rows fit it at kv_type's row size
    // (kv::kv_cache::budget_for_bytes); its params() then hold that count as kv.budget (and 0 here).
    int64_t kv_budget_bytes = 0;
    // Tokens per prefill chunk (>= 1).
    int prefill_chunk = 512;
    // Context length; 0 takes the model's; bounds the run under `full`.
    int64_t n_ctx = 0;
    status validate() const;
};

struct session_stats {
    int64_t prefill_tokens = 0, decode_tokens = 0;
    double prefill_seconds = 0.0, decode_seconds = 0.0;
};

class session {
public:
    // run_length: the number of tokens this session will process (BOS + prompt + generated); it resolves
    // fractional budgets, and under `full` it must fit the context.
    static result<std::unique_ptr<session>> create(model::model& m, const session_params& p,
                                                   int64_t run_length);
    // The memory create() would take for its cache, with the same validation, allocating nothing.
    static result<kv::cache_footprint> plan(const model::model& m, const session_params& p,
                                            int64_t run_length);

    // What happens to RoPE positions in this run, when they pass the model's trained context
    // (hparams::n_ctx_train, as the file states it): a sentence saying so and what to do about it, for the
    // caller to show; empty when they stay within it. The same validation as plan().
    static result<std::string> position_warning(const model::model& m, const session_params& p,
                                                int64_t run_length);

    // Processes `tokens` at positions n_past().. in chunks of prefill_chunk (a single token is a decode
    // step). logits: resized to n_vocab (`last`) or tokens.size() * n_vocab (`all`).
    status process(std::span<const int32_t> tokens, model::logits_mode mode, std::vector<float>* logits);

    // Called after each chunk's evictions with the chunk's last position.
    void set_chunk_observer(std::function<void(int64_t last_pos)> obs) { chunk_observer_ = std::move(obs); }

    // Batched use: opens the chunk of the next n tokens at n_past() (1 <= n <= prefill_chunk, within the run
    // length); forward_pass parts then forward them, and the part that completes the chunk closes it
    // (evictions, then the chunk observer).
    status open_chunk(int n);
    // Tokens of the open chunk not yet forwarded (0 when none is open).
    int chunk_left() const;
    // How many tokens the next part of a run may take in a pass with `budget` free tokens, `remaining` being
    // the run's tokens not yet forwarded: opens the run's next chunk when none is open (min(prefill_chunk,
    // remaining) tokens, the chunks process() makes), then at most what is left of it (one token per pass
    // when the session forwards token by token). 0 when budget or remaining is 0.
    result<int> next_part(size_t remaining, int budget);
    // Whether this session's chunks must be forwarded one token per pass (kv_cache::token_by_token).
    bool token_by_token() const { return cache_->token_by_token(); }

    int64_t n_past() const { return n_past_; }
    int64_t n_ctx() const { return n_ctx_; }
    int64_t run_length() const { return run_length_; }
    const model::model& model() const { return *model_; }
    kv::kv_cache& cache() { return *cache_; }
    const kv::kv_cache& cache() const { return *cache_; }
    const session_stats& stats() const { return stats_; }
    const session_params& params() const { return params_; }

private:
    friend class forward_pass;
    session(model::model& m, session_params p, int64_t n_ctx, int64_t run_length,
            std::unique_ptr<kv::kv_cache> c);
    // forward_pass's steps after a pass: counts n tokens of the open chunk as forwarded (true when they
    // complete it); closes the complete chunk (its evictions: one session's own cache, so different sessions
    // close theirs at once); then calls the chunk observer.
    bool count_forwarded(int n);
    status close_chunk();
    void notify_chunk_closed();

    model::model* model_;
    session_params params_;
    int64_t n_ctx_;
    int64_t run_length_;
    std::unique_ptr<kv::kv_cache> cache_;
    std::unique_ptr<forward_pass> pass_;  // process()'s, created on first use
    int64_t n_past_ = 0;
    session_stats stats_;
    std::function<void(int64_t)> chunk_observer_;
};

}  // namespace h2okv::engine
