// The generation loop: process the prompt, then sample and feed back one token at a time.
//
//   engine::generation_params gp{.n_predict = 200};
//   auto r = engine::generate(*session, prompt_ids, gp, [&](int32_t id) { return id == eos; },
//                             [&](int32_t id) { print(tok.piece(id)); });
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "h2okv/engine/sampler.h"
#include "h2okv/engine/session.h"

namespace h2okv::engine {

struct generation_params {
    int n_predict = 128;  // tokens to generate (the prompt not included)
    sampler_params sampling;
    bool ignore_eos = false;
    // false: generation::tokens stays empty (on_token sees every token; generation::n_generated counts them),
    // so an unbounded stream under an evicting policy holds nothing that grows with its length.
    bool keep_tokens = true;
    status validate() const;
};

struct generation {
    std::vector<int32_t> tokens;  // generated tokens (an end-of-generation token that stopped it included)
    int64_t n_generated = 0;      // how many, whether or not they are kept (generation_params::keep_tokens)
    bool stopped_at_eos = false;
};

// Generates after `prompt` (which must hold at least one token, e.g. BOS). `is_end(id)` tells
// end-of-generation tokens; `on_token(id)` sees each generated token as soon as it is sampled. The last
// sampled token is not processed (its logits are never needed).
result<generation> generate(session& s, std::span<const int32_t> prompt, const generation_params& p,
                            const std::function<bool(int32_t)>& is_end,
                            const std::function<void(int32_t)>& on_token);

}  // namespace h2okv::engine
