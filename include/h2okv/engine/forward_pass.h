// One forward pass over tokens of many sessions: the weight products take all the pass's tokens at once,
// while attention, score bookkeeping and eviction run per session over its own cache and policy (through a
// kv::attention_runner). Each part is the next tokens of one session's open chunk; the chunks the pass
// completes are closed (evictions) before it returns. A session's logits and kept sets are the same bits
// in any pass, alone or beside others (kernels and runner are independent of the batch, see
// h2okv/kv/attention_runner.h).
//
//   engine::forward_pass pass(model);
//   a->open_chunk(n_prompt);                                   // sessions open their chunks
//   engine::step_part parts[] = {{a, prompt, model::logits_mode::last, a_logits},
//                                {b, {&next_b, 1}, model::logits_mode::last, b_logits}};
//   H2OKV_RETURN_IF_ERROR(pass.run(parts));
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "h2okv/core/status.h"
#include "h2okv/kv/attention_runner.h"
#include "h2okv/model/model.h"

namespace h2okv::engine {

class session;

struct step_part {
    session* s;
    // The session's next tokens: at most what is left of its open chunk (one for a session that forwards
    // token by token).
    std::span<const int32_t> tokens;
    // `last`: the logits of the part's last token; `all`: of every token.
    model::logits_mode logits = model::logits_mode::none;
    // [rows][n_vocab] floats for the wanted rows; may be null when logits is `none`.
    float* out = nullptr;
};

class forward_pass {
public:
    explicit forward_pass(model::model& m,
                          kv::attention_runner::path p = kv::attention_runner::path::parallel);

    // Runs the parts (distinct sessions of this model) in one pass of the model.
    status run(std::span<const step_part> parts);

    // Bytes of the buffers the pass holds: the runner's softmax weights and the logits of a multi-part
    // pass (the model's own work buffers: model::work_bytes()).
    int64_t work_bytes() const;

private:
    model::model* model_;
    kv::attention_runner runner_;
    std::vector<kv::kv_cache*> caches_;
    std::vector<int> counts_;
    std::vector<int32_t> tokens_;
    std::vector<int64_t> positions_;
    std::vector<uint8_t> output_;
    std::vector<float> logits_;
    std::vector<size_t> first_row_;  // each part's first row in logits_
    std::vector<session*> closing_;  // the sessions whose chunk a pass completed
    std::vector<status> closed_;     // what closing each one's chunk returned
};

}  // namespace h2okv::engine
