// Greedy agreement with the full cache: how often an evicting policy's greedy token equals the full cache's,
// and how much of the full cache's attention falls on the positions the policy has kept.
//
// The comparison is teacher-forced: a `full` session and the policy's session run side by side on the same
// tokens, the full cache's greedy choices, so every step compares the two on identical inputs (after a
// first divergence the policy is not left to wander off on its own continuation). The prompt except its
// last token is prefilled in chunks; each step is then a one-token decode step (the last prompt token, then
// the full cache's tokens), and its logits give the step's prediction.
//
// Retained attention mass of a step: for each layer and query head, the share of the full cache's softmax
// weight that falls on the positions the policy's session attends at that step (its kept positions of the
// head's unit plus the current token), averaged over layers and query heads; a run's mass is the mean
// over its steps.
//
//   engine::session_params sp;
//   sp.kv = *policy::params::parse("h2o:budget=0.2");
//   H2OKV_ASSIGN_OR_RETURN(auto r, eval::agreement(*model, prompt_ids /* BOS + prompt */, 64, sp, nullptr));
//   fmt::print("match {:.3f} mass {:.3f}\n", r.match_rate, r.retained_mass);
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "h2okv/engine/session.h"
#include "h2okv/model/model.h"

namespace h2okv::eval {

struct agreement_result {
    int64_t prompt_tokens = 0;          // BOS included
    int64_t n_steps = 0;                // predictions compared (N)
    int64_t run_length = 0;             // prompt_tokens + n_steps: what fractional budgets are fractions of
    std::vector<int32_t> reference;     // [n_steps] the full cache's greedy tokens
    std::vector<int32_t> predicted;     // [n_steps] the policy's greedy token at each step
    std::vector<double> mass_per_step;  // [n_steps] retained attention mass, in [0, 1]
    int64_t matches = 0;                // steps where predicted == reference
    double match_rate = 0.0;            // matches / n_steps
    int64_t first_divergence = -1;      // the first step (0-based) where they differ; -1 when none
    double retained_mass = 0.0;         // mean of mass_per_step
    int64_t evictions = 0;              // by the policy's session, over all units
    double seconds = 0.0;               // both sessions together
    policy::resolved_params config;     // the policy as it ran
};

// Called after each step with (steps done, total).
using agreement_progress_fn = std::function<void(int64_t done, int64_t total)>;

// prompt: BOS + the prompt's tokens (at least one token); n_steps >= 1. sp: the policy under test; the
// reference session uses the same parameters with the `full` policy, and its KV type is reference_kv_type
// when given (to measure what a KV type costs against, say, a full f16 cache), sp's otherwise. Both sessions
// are created with run_length = prompt.size() + n_steps.
result<agreement_result> agreement(model::model& m, std::span<const int32_t> prompt, int64_t n_steps,
                                   const engine::session_params& sp, const agreement_progress_fn& progress,
                                   std::optional<kv::kv_type> reference_kv_type = std::nullopt);

// Means over several prompts' results of one configuration.
struct agreement_summary {
    int64_t n_prompts = 0;
    double match_rate = 0.0;              // mean of match_rate
    double retained_mass = 0.0;           // mean of retained_mass
    int64_t n_diverged = 0;               // prompts with a first divergence
    double mean_first_divergence = -1.0;  // over the diverged prompts; -1 when none diverged
    double seconds = 0.0;                 // summed
};
agreement_summary summarize(std::span<const agreement_result> runs);

}  // namespace h2okv::eval
