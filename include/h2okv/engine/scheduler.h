// Continuous batching: many generation requests advanced together, one forward pass per step. Each step
// every decoding sequence contributes its next token, then prompts contribute chunks of their tokens up to
// the step's token budget (a prompt's chunks are the ones a lone session makes; a chunk may be spread over
// several steps), and one engine::forward_pass runs them all. Each sequence has its own policy, budget,
// granularity, KV type, sampler and length, and gets the same tokens as `generate` gives it alone.
//
// Admission: a request waits (first in, first out) until fewer than `parallel` sequences are active and its
// cache's footprint (session::plan: K/V + slot tables) fits the KV memory pool; its bytes return to the pool
// when it finishes. A request whose cache could never fit the pool is refused at submit.
//
//   H2OKV_ASSIGN_OR_RETURN(auto sch, engine::scheduler::create(model, {.parallel = 16, .kv_memory = 512 <<
//   20})); H2OKV_ASSIGN_OR_RETURN(uint64_t id, sch->submit(std::move(request))); while (!sch->idle()) {
//   H2OKV_ASSIGN_OR_RETURN(auto done, sch->step()); for (auto& r : done) ...; }
//
// Not thread-safe: one thread submits, cancels and steps (the server marshals its connections' calls).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "h2okv/core/status.h"
#include "h2okv/engine/forward_pass.h"
#include "h2okv/engine/generate.h"
#include "h2okv/engine/sampler.h"
#include "h2okv/engine/session.h"
#include "h2okv/kv/memory_pool.h"
#include "h2okv/model/model.h"

namespace h2okv::engine {

struct scheduler_params {
    int parallel = 8;       // the most sequences active at once (>= 1)
    int64_t kv_memory = 0;  // bytes of the KV memory pool; 0: no limit but `parallel`
    int step_tokens = 512;  // tokens per forward pass (>= parallel: every decoding sequence fits a step)
    status validate() const;
};

struct request {
    std::vector<int32_t> prompt;  // BOS + the prompt's ids (at least one token)
    session_params session;       // policy, KV type, prefill chunk (taken at most the prompt's length)
    generation_params generation;
    // End-of-generation tokens (null: none).
    std::function<bool(int32_t)> is_end;
    // Sees every generated token as soon as it is sampled; returning false stops the sequence after it
    // (finish_reason::stop; e.g. a stop string). Null: never stops.
    std::function<bool(int32_t)> on_token;
};

enum class finish_reason { length, end_of_generation, stop, cancelled, error };
const char* finish_reason_name(finish_reason r);  // "length", "end_of_generation", "stop", ...

struct sequence_result {
    uint64_t id = 0;
    finish_reason reason = finish_reason::length;
    status error;                 // why, when reason is `error`
    std::vector<int32_t> tokens;  // generated (a stopping end-of-generation token included)
    int64_t prompt_tokens = 0;
    double queued_seconds = 0.0;   // submit -> admission
    double prefill_seconds = 0.0;  // admission -> the first token sampled (the prompt's processing)
    double decode_seconds = 0.0;   // first token -> the last
    std::string policy;            // the resolved configuration (kv_policy config().to_string())
    kv::kv_type kv_type = kv::kv_type::f16;
    int64_t kv_capacity = 0;   // slots per unit
    int64_t kv_bytes = 0;      // K and V allocated
    int64_t kv_footprint = 0;  // what the pool charged: K/V + slot tables
    int64_t evictions = 0;
    int64_t kept = 0;  // positions held at the end, summed over units
};

struct scheduler_stats {
    int64_t steps = 0;
    int64_t prefill_tokens = 0, decode_tokens = 0;  // forwarded
    int max_active = 0;                             // the most sequences active in one step
};

class scheduler {
public:
    static result<std::unique_ptr<scheduler>> create(model::model& m, const scheduler_params& p);
    ~scheduler();

    // Queues a request; its id. Refused at once when it is malformed (the reason names the field) or its
    // cache alone is larger than the pool.
    result<uint64_t> submit(request r);
    // Cancels a waiting or active request; it finishes (`cancelled`) at the next step, which frees its
    // memory. Unknown or finished ids are ignored.
    void cancel(uint64_t id);
    // Cancels every waiting request (an orderly shutdown lets the active ones finish).
    void cancel_waiting();

    // One step: finishes the cancelled, admits what fits, runs one forward pass, samples. Returns the
    // sequences that finished. A failed pass fails the sequences it carried (their results say why).
    result<std::vector<sequence_result>> step();

    bool idle() const { return active_.empty() && waiting_.empty(); }
    int active() const { return static_cast<int>(active_.size()); }
    int waiting() const { return static_cast<int>(waiting_.size()); }
    const kv::memory_pool& pool() const { return pool_; }
    const scheduler_stats& stats() const { return stats_; }
    const scheduler_params& params() const { return params_; }
    // Bytes of the work buffers outside the pool: the model's, the pass's and each active sequence's
    // logits row.
    int64_t work_bytes() const;

private:
    using clock = std::chrono::steady_clock;
    struct sequence;
    scheduler(model::model& m, const scheduler_params& p);
    status admit();
    sequence_result finish(sequence& s, finish_reason why, status error = ok_status());

    model::model* model_;
    scheduler_params params_;
    kv::memory_pool pool_;
    forward_pass pass_;
    uint64_t next_id_ = 1;
    std::vector<std::unique_ptr<sequence>> waiting_;  // in arrival order
    std::vector<std::unique_ptr<sequence>> active_;   // in admission order
    std::vector<sequence_result> finished_;           // of the current step
    std::vector<step_part> parts_;
    std::vector<sequence*> part_seq_;
    scheduler_stats stats_;
};

}  // namespace h2okv::engine
