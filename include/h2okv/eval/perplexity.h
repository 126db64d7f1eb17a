// Streaming perplexity: BOS + a text's tokens processed in chunks (1 by default: eviction after every token),
// the negative log-likelihood of each next token summed in double.
//
//   auto r = eval::perplexity(*model, tokens, session_params, /*chunk=*/1, progress);
//   fmt::print("{:.4f}\n", r->perplexity);
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "h2okv/engine/session.h"
#include "h2okv/model/model.h"

namespace h2okv::eval {

struct perplexity_result {
    int64_t n_tokens = 0;     // processed, BOS included
    int64_t n_predicted = 0;  // n_tokens - 1
    double mean_nll = 0.0;
    double perplexity = 0.0;  // exp(mean_nll)
    double seconds = 0.0;
    int64_t evictions = 0;  // over all units
    int64_t kv_bytes = 0;
    // With a window W > 0: the mean NLL of predictions [i*W, (i+1)*W), the last window possibly shorter
    // (prediction j is of token j + 1), for perplexity against position.
    std::vector<double> window_nll;
    // perplexity over several runs: run k's mean NLL (one entry for a single run).
    std::vector<double> run_nll;
    policy::resolved_params config;  // the policy as it ran (defaults applied, budget resolved)
};

// Called now and then with (tokens processed, total).
using progress_fn = std::function<void(int64_t done, int64_t total)>;

// tokens[0] should be BOS. The session is created here with run_length = tokens.size() (fractional budgets
// are fractions of it); `chunk` tokens are processed per step (sp.prefill_chunk is ignored).
result<perplexity_result> perplexity(model::model& m, std::span<const int32_t> tokens,
                                     engine::session_params sp, int chunk, const progress_fn& progress,
                                     int window = 0);

// Several runs (each BOS + tokens, each its own session and run length), one after another and pooled:
// n_tokens, n_predicted, evictions and seconds summed, mean_nll over every run's predictions, run_nll per
// run; kv_bytes and config are the first run's. `progress` counts tokens over all runs.
result<perplexity_result> perplexity(model::model& m, std::span<const std::vector<int32_t>> runs,
                                     const engine::session_params& sp, int chunk,
                                     const progress_fn& progress);

// -log softmax(logits)[target], in double.
double token_nll(std::span<const float> logits, int32_t target);

}  // namespace h2okv::eval
