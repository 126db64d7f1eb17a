// Synthetic passkey retrieval: a random 5-digit key hidden at a relative depth of filler text, then asked
// for at the end; the model answers greedily and succeeds when its answer's digits equal the key.
//
// The prompt, exactly `length` tokens, is BOS, filler, the needle, filler, the question:
//   needle:   "The pass key is 12345. Remember it. 12345 is the pass key."
//   question: "What is the pass key? The pass key is"
// Needle and question are tokenized on their own (with a leading space where the tokenizer adds none), the
// filler once; the pieces are joined as token sequences, so the length is exact. The filler tokens (F =
// length - 1 - needle - question of them) are split at round(depth * F): depth 0 puts the needle right
// after BOS, depth 1 right before the question.
//
//   H2OKV_ASSIGN_OR_RETURN(auto filler, eval::passkey_filler(tok, text, 1024));
//   eval::passkey_params pp{.length = 1024, .depths = {0.0, 0.5, 1.0}, .trials = 10};
//   H2OKV_ASSIGN_OR_RETURN(auto r, eval::passkey(*model, tok, filler, pp, session_params, nullptr));
//   for (const auto& d : r.per_depth) fmt::print("{:.2f} {:.2f}\n", d.depth, d.accuracy);
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "h2okv/engine/session.h"
#include "h2okv/model/model.h"
#include "h2okv/tokenizer/tokenizer.h"

namespace h2okv::eval {

std::string passkey_needle(std::string_view key);
inline constexpr std::string_view passkey_question = "What is the pass key? The pass key is";

struct passkey_prompt {
    std::vector<int32_t> tokens;  // [length]: BOS, filler, needle, filler, question
    int64_t needle_begin = 0;     // index of the needle's first token in `tokens`
    int64_t needle_end = 0;       // one past its last
    int64_t question_begin = 0;   // index of the question's first token; the question runs to the end
    int64_t filler_tokens = 0;    // before and after the needle together
};

// The first n_tokens tokens of `text` (tokenized without BOS), the text repeated when it is too short.
// Only as much of the text as needed is tokenized. Refuses a text that gives no tokens.
result<std::vector<int32_t>> passkey_filler(const tokenizer::tokenizer& tok, std::string_view text,
                                            int64_t n_tokens);

// Builds the prompt for `key` (ASCII digits) at `depth` in [0, 1], `length` tokens with BOS. filler: at
// least length tokens (passkey_filler); its first F are used. Refuses a length too short to hold BOS,
// needle and question.
result<passkey_prompt> build_passkey_prompt(const tokenizer::tokenizer& tok, std::span<const int32_t> filler,
                                            int64_t length, double depth, std::string_view key);

// The digits the generated text starts with, after leading whitespace ("" when it starts otherwise).
std::string passkey_answer(std::string_view generated);

// `trials` 5-digit keys (10000..99999) drawn from a generator seeded with `seed`.
std::vector<std::string> passkey_keys(uint64_t seed, int trials);

struct passkey_params {
    int64_t length = 1024;            // prompt tokens, BOS included
    std::vector<double> depths{0.5};  // each in [0, 1]
    int trials = 10;                  // keys per depth; the same keys at every depth
    uint64_t seed = 1;
    int answer_tokens = 8;  // tokens generated per answer (fewer when an end-of-generation token comes)
    status validate() const;
};

struct passkey_trial {
    double depth = 0.0;
    int trial = 0;
    std::string key;
    std::string generated;  // the decoded answer tokens
    std::string answer;     // passkey_answer(generated)
    bool success = false;   // answer == key
    int64_t needle_begin = 0;
};

struct passkey_depth {
    double depth = 0.0;
    int n_trials = 0;
    int n_correct = 0;
    double accuracy = 0.0;  // n_correct / n_trials
};

struct passkey_result {
    std::vector<passkey_trial> trials;     // depth-major, in the order of params.depths
    std::vector<passkey_depth> per_depth;  // in the order of params.depths
    int64_t run_length = 0;                // length + answer_tokens: what fractional budgets are fractions of
    int64_t evictions = 0;                 // summed over the trials
    double seconds = 0.0;
    policy::resolved_params config;  // the policy as it ran
};

// Called after each trial with (trials done, total).
using passkey_progress_fn = std::function<void(int64_t done, int64_t total)>;

// Runs every (depth, trial): a fresh session per trial with run_length = length + answer_tokens, greedy
// generation of answer_tokens tokens after the prompt. filler: at least p.length tokens.
result<passkey_result> passkey(model::model& m, const tokenizer::tokenizer& tok,
                               std::span<const int32_t> filler, const passkey_params& p,
                               const engine::session_params& sp, const passkey_progress_fn& progress);

}  // namespace h2okv::eval
