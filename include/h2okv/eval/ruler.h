// RULER-style synthetic long-context tasks (Hsieh et al. 2024, "RULER: What's the real context size of your
// long-context language models?"), generated locally from a haystack text with fixed seeds, and run under a
// KV policy with one of two protocols.
//
// Tasks (ruler_tasks() lists them; the prompt text of each is RULER's wording, for a base model):
//   passkey             the `h2okv passkey` format: "The pass key is K. Remember it. K is the pass key." (a
//   5-digit
//                       K) at a depth of the haystack, then "What is the pass key? The pass key is".
//   niah_single         one needle "One of the special magic numbers for KEY is: V." (V: 7 digits; KEY an
//                       adjective-noun pair such as "quiet-harbor"), asked for KEY.
//   niah_single_word    the same, V an adjective-noun pair.        niah_single_uuid: V a version-4 UUID.
//   niah_multikey       the target needle and 3 distractor needles with other keys (and other values).
//   niah_multivalue     4 needles with the same key and 4 values; all 4 must be recalled.
//   niah_multiquery     4 needles with 4 keys; all 4 are asked in one question.
//   vt                  variable tracking: "VAR ABCDE = 12345." then 4 hops "VAR FGHIJ = ABCDE." spread over
//   the
//                       haystack in order; asked which 5 variables equal 12345.
//   cwe                 common-words extraction: a comma-separated list of words (from the haystack's own
//                       vocabulary) in which 5 words occur 6 times each and every other word once; asked for
//                       the 5 most common. No haystack.
//   fwe                 frequent-words extraction: coded words (made-up 4-letter strings) whose counts follow
//                       Zipf's law with exponent 2 (rank r occurs round(K / r^2) times, at least once); asked
//                       for the 3 most frequent. No haystack.
//
// Prompt layout (tokens): BOS, the task's instruction, the context, the question. Every piece is tokenized on
// its own (eval::encode_piece) and joined as token sequences. For the haystack tasks the context is F
// haystack tokens (F = length - all the other tokens, so the prompt is exactly `length` tokens) with the
// needles inserted at the sentence start nearest to token offset round(depth * F) (within 128 tokens; 0 and
// F count as starts, so depths 0 and 1 are exact): the first needle (the one asked for, or the first of the
// asked ones) at the swept depth, the others at depths drawn from the trial's generator; the needles of one
// offset keep their order. Which part of the haystack is used (an offset into the first 4 * length tokens of
// the text, moved to the next sentence start) is drawn per trial. cwe and fwe have no haystack and no depth:
// their list grows by whole words while it fits, so the prompt may be a few tokens shorter than `length`
// (ruler_prompt::tokens.size() says how long). vt does not use the depth either (its statements are at sorted
// random depths). A trial's generator is seeded from (seed, task, length, trial), so every depth, policy and
// protocol sees the same keys, values and haystack part: results are paired. Random numbers come from
// std::mt19937's specified output through ruler_rng's own mapping (no std::*_distribution, whose output
// differs between standard libraries), so prompts are the same on every platform
// (tests/golden/ruler_prompts.txt). A value that would occur anywhere else in the prompt (a 7-digit run in
// the haystack, say) is drawn again.
//
// Lengths: build_ruler_prompt's `length` is the prompt's; ruler() and `h2okv ruler --lengths` take whole
// runs, as RULER's max_seq_length: the prompt is length - answer tokens, so a length equal to the model's
// context fits it, and fractional budgets are fractions of the length.
//
// Protocols (how the prompt reaches the cache; C = --kv-prefill-chunk, Q = the question's tokens):
//   query-agnostic  the instruction and context are prefilled in chunks of C from the start, each chunk
//   followed
//                   by the policy's eviction, so the context is compressed to the budget before the question
//                   exists; the question is then processed as one chunk of its own, and generation follows.
//                   This is kvpress's default and what prompt caching and multi-turn chat do.
//   query-aware     the same chunks, except that the question joins the context's last chunk: the last
//                   eviction of the prompt is scored with the question's attention to everything still held
//                   (with C >= the prompt, the whole prompt is one chunk: the question takes part in the only
//                   compression, as in kvpress's query-aware setting and SnapKV's observation window).
//                   Context evicted by earlier chunks was evicted without the question.
// In both protocols the session's largest chunk is C + Q (its capacity is budget + C + Q), so the two runs of
// a trial hold the same memory and differ only in whether the question is inside the compressed chunk. Under
// `full` the two protocols keep everything.
//
// Scoring (RULER's string_match_all): the fraction of expected answer strings that occur, case-insensitively,
// in the greedy output (answer_tokens tokens, or fewer when an end-of-generation token comes). Beside it,
// answer_nll: the expected answers' teacher-forced negative log-likelihood under the same protocol and policy
// (ruler_trial::answer_nll), which separates policies on models too small to answer.
//
//   H2OKV_ASSIGN_OR_RETURN(auto hay, eval::ruler_haystack::make(tok, moby_dick_text, 1024));
//   eval::ruler_params rp{.tasks = {"niah_single"}, .lengths = {512, 1024}, .depths = {0.0, 0.5, 1.0}};
//   H2OKV_ASSIGN_OR_RETURN(auto r, eval::ruler(*model, tok, hay, rp, session_params, nullptr));
//   for (const auto& t : r.trials) fmt::print("{} {} {:.2f}\n", t.task, t.depth, t.score);
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "h2okv/engine/session.h"
#include "h2okv/model/model.h"
#include "h2okv/tokenizer/tokenizer.h"

namespace h2okv::eval {

// Uniform choices from std::mt19937's 32-bit outputs (specified by the standard) by multiply-shift, so the
// same seed gives the same draws with every standard library.
class ruler_rng {
public:
    explicit ruler_rng(uint64_t seed) : gen_(static_cast<std::mt19937::result_type>(seed ^ (seed >> 32))) {}
    uint32_t below(uint32_t n);  // in [0, n), n >= 1
    double unit();               // in [0, 1)
    std::string digits(int n);   // n decimal digits, the first non-zero
    template <class T>
    void shuffle(std::vector<T>& v) {  // Fisher-Yates with below()
        for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(static_cast<uint32_t>(i))]);
    }

private:
    std::mt19937 gen_;
};

enum class ruler_protocol { agnostic, aware };
std::string_view ruler_protocol_name(ruler_protocol p);  // "agnostic", "aware"
result<ruler_protocol> parse_ruler_protocol(std::string_view name);

struct ruler_task_info {
    std::string_view name;
    std::string_view summary;  // one line for --help
    bool uses_depth;           // whether the swept depths place its first needle
    bool answers_once;         // whether each expected answer occurs exactly once in the prompt
    int answer_tokens;         // default tokens generated per answer
};
// Every task, in the order `--task all` runs them.
std::span<const ruler_task_info> ruler_tasks();
result<ruler_task_info> find_ruler_task(std::string_view name);

// The haystack tokens (the first `n_tokens` of the text, repeated when short) and the text's own vocabulary
// (distinct lowercase alphabetic words of 4..10 letters, sorted), which cwe draws its words from.
struct ruler_haystack {
    std::vector<int32_t> tokens;
    std::vector<std::string> words;
    static result<ruler_haystack> make(const tokenizer::tokenizer& tok, std::string_view text,
                                       int64_t n_tokens);
};

struct ruler_prompt {
    std::vector<int32_t> tokens;        // BOS, instruction, context, question; at most `length`
    int64_t question_begin = 0;         // the question's first token; the question runs to the end
    std::vector<int64_t> needle_begin;  // the needles' first tokens in insertion order (haystack tasks)
    std::vector<std::string> expected;  // the answer strings the output must contain
    std::string question;               // the question's text
};

// Seed of trial `trial` of `task` at `length`: every depth, policy and protocol of a trial shares it.
uint64_t ruler_trial_seed(uint64_t seed, std::string_view task, int64_t length, int trial);

// Builds one prompt of `task` at `length` tokens (depth in [0, 1], ignored by tasks that do not use it) from
// `trial_seed`. hay.tokens: at least 4 * length tokens. Refuses a length too short for the task's fixed
// pieces.
result<ruler_prompt> build_ruler_prompt(const tokenizer::tokenizer& tok, const ruler_haystack& hay,
                                        std::string_view task, int64_t length, double depth,
                                        uint64_t trial_seed);

// RULER's string_match_all: the share of `expected` found case-insensitively in `output` (0 when expected is
// empty).
double ruler_score(std::string_view output, std::span<const std::string> expected);

struct ruler_params {
    std::vector<std::string> tasks{"niah_single"};  // names from ruler_tasks()
    std::vector<int64_t> lengths{512};              // whole runs: prompt (BOS included) + answer tokens
    std::vector<double> depths{0.0, 0.5, 1.0};      // each in [0, 1]
    int trials = 4;                                 // per (task, length, depth)
    uint64_t seed = 1;
    std::vector<ruler_protocol> protocols{ruler_protocol::agnostic, ruler_protocol::aware};
    int answer_tokens = 0;  // tokens generated per answer; 0: each task's default
    status validate() const;
};

struct ruler_trial {
    std::string task;
    ruler_protocol protocol = ruler_protocol::agnostic;
    int64_t length = 0;         // requested: prompt + answer tokens, as RULER's max_seq_length
    int64_t prompt_tokens = 0;  // built: length - answer_tokens (cwe, fwe: at most that)
    double depth = 0.0;         // -1 for tasks that do not use the depth
    int trial = 0;
    int answer_tokens = 0;
    int64_t run_length = 0;  // = length: what fractional budgets are fractions of
    int64_t budget = 0;      // the resolved budget (0 for full)
    std::string policy;      // the policy as it ran (policy::resolved_params::to_string)
    std::vector<std::string> expected;
    std::string generated;
    double score = 0.0;  // ruler_score(generated, expected)
    // Mean negative log-likelihood (nats per token) of the expected answers joined by ", " (their first
    // answer_tokens tokens), teacher-forced after the prompt in a second run with the same protocol and
    // policy: a graded signal where a small model's greedy answers all score 0.
    double answer_nll = 0.0;
    int answer_nll_tokens = 0;
    int64_t evictions = 0;
    double seconds = 0.0;
};

// Called after each trial with (trials done, total).
using ruler_progress_fn = std::function<void(int64_t done, int64_t total)>;

// Tokens generated per answer of `task` under `p` (p.answer_tokens, or the task's default when 0).
int ruler_answer_tokens(const ruler_params& p, const ruler_task_info& task);

// The number of trials ruler() runs for `p` (tasks without depth run once per trial, not once per depth).
int64_t ruler_trial_count(const ruler_params& p);

// Runs one prompt under one protocol in a fresh session (see the protocols above) and greedily generates the
// answer; then, in a second fresh session with the same chunks, teacher-forces the expected answer for
// answer_nll. Both sessions' run length is max(length, prompt + answer_tokens).
result<ruler_trial> run_ruler_prompt(model::model& m, const tokenizer::tokenizer& tok,
                                     const ruler_prompt& prompt, ruler_protocol protocol, int answer_tokens,
                                     int64_t length, const engine::session_params& sp);

// Every (task, length, depth, trial, protocol), task-major (prompts of length - answer tokens) in the order
// of p.tasks, then lengths, depths,
// trials, protocols. hay.tokens: at least 4 * max(lengths).
result<std::vector<ruler_trial>> ruler(model::model& m, const tokenizer::tokenizer& tok,
                                       const ruler_haystack& hay, const ruler_params& p,
                                       const engine::session_params& sp, const ruler_progress_fn& progress);

}  // namespace h2okv::eval
