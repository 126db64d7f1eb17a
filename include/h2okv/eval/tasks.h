// Multiple-choice task accuracy by log-likelihood, as lm-evaluation-harness scores it: every choice of an
// item is a (context, continuation) pair; the model reads BOS + context + continuation and the choice's score
// is the sum of log p(continuation tokens | everything before them). The prediction is the choice with the
// highest sum (`acc`) or the highest sum per byte of continuation (`acc_norm`, lm-eval's length
// normalisation). Ties go to the lower choice index (numpy's argmax).
//
// The KV policy is applied while the sequence is processed, as in the H2O paper's lm-eval runs: each
// (context, choice) sequence goes through a fresh session, so a fractional budget is a fraction of that
// sequence's length (BOS included), and eviction happens after every chunk of `prefill_chunk` tokens (1:
// token by token, as in streaming perplexity).
//
// Data: COPA's original XML release and the instruction-formatted JSON of LLM-Adapters (PIQA, OpenBookQA,
// WinoGrande, ARC, BoolQ, SIQA, MathQA), turned into lm-eval's prompts (load_task documents each).
//
//   H2OKV_ASSIGN_OR_RETURN(auto set, eval::load_task("copa", "../shared/data"));
//   eval::task_options o;
//   o.session.kv = *policy::params::parse("h2o:budget=0.2");
//   H2OKV_ASSIGN_OR_RETURN(auto r, eval::evaluate_task(*model, tok, set, o, nullptr));
//   fmt::print("acc {:.3f} acc_norm {:.3f}\n", r.acc, r.acc_norm);
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "h2okv/core/status.h"
#include "h2okv/engine/session.h"
#include "h2okv/eval/perplexity.h"
#include "h2okv/model/model.h"
#include "h2okv/tokenizer/tokenizer.h"

namespace h2okv::eval {

// One <item> of a COPA XML file.
struct copa_item {
    int64_t id = 0;
    std::string premise, alternative1, alternative2;  // entities decoded
    bool asks_for_cause = false;                      // asks-for="cause" (else "effect")
    int gold = 0;                                     // 0-based: most-plausible-alternative - 1
};

// Every <item> of a COPA file (copa.dtd). `source` names the file in errors; a malformed item is an error
// naming it and the item's 0-based index.
result<std::vector<copa_item>> parse_copa_xml(std::string_view xml, std::string_view source);

// One LLM-Adapters item with its options parsed out of the instruction text.
struct choice_question {
    std::string question;              // the instruction between its header ("Please ...: ") and the options
    std::vector<std::string> options;  // in the file's order; for true/false items {"true", "false"}
    std::vector<std::string> labels;   // what `answer` may be: "answer1", "option2", "true", "A", ...
    int gold = 0;                      // index into options
};

// Every element of an LLM-Adapters test.json array. Three shapes are recognised: options labelled in the
// instruction ("Answer1: ..." / "Option1: ..." / "Solution1: ..." / "Ending1: ...") with an "Answer format:
// answer1/answer2/..." line; a bare "Answer format: true/false"; and MathQA's "The options: A ) x , B ) y".
// A malformed item is an error naming `source` and the item's 0-based index.
result<std::vector<choice_question>> parse_commonsense_json(std::string_view json, std::string_view source);

// One way of completing an item: the model reads `context` and is scored on `continuation`.
struct task_choice {
    std::string context;       // the same for every choice except WinoGrande's (the option fills the blank)
    std::string continuation;  // starts with the space that joins it to the context: " Lily."
};

struct task_item {
    std::string id;                    // COPA's id attribute, else the 0-based index in the file
    std::vector<task_choice> choices;  // at least 2
    int gold = 0;                      // index into choices
};

struct task_set {
    std::string task;              // "copa", "piqa", ...
    std::string split;             // "val", "dev", "test", "all" (COPA) or "test"
    std::string path;              // the file read
    std::vector<task_item> items;  // every item of the file: the few-shot pool
    std::vector<size_t> eval;      // the evaluated items: indices into `items`, in file order
};

// "copa", "piqa", "openbookqa", "winogrande", "arc-easy", "arc-challenge", "boolq", "siqa", "mathqa".
std::vector<std::string> task_names();

// The splits of `task`, its default first: COPA has "val" (dev items 401-500, lm-eval's validation split),
// "dev" (copa-dev.xml), "test" (copa-test.xml) and "all" (copa-all.xml); the others have "test".
std::vector<std::string> task_splits(std::string_view task);

// The file of (task, split) relative to the data folder ("copa/copa-dev.xml",
// "llm-adapters-commonsense/piqa/test.json"). An empty split is the default one.
result<std::string> task_file(std::string_view task, std::string_view split = {});

// Reads and formats a task (`data_dir` is the shared data folder; an empty split is the default one).
// Prompts, as lm-eval's task definitions:
//   copa                  "{premise without its final period} because|therefore"
//                         + " {alternative, first letter lowered}"
//   piqa, arc-*, mathqa   "Question: {question}\nAnswer:" + " {option}"
//   openbookqa            "{question}" + " {option}"
//   siqa                  "Q: {question}\nA:" + " {option}"
//   boolq                 "Question: {question}\nAnswer:" + " no" | " yes" (the data has no passage)
//   winogrande            "{sentence up to _}{option}" + " {rest of the sentence}"
result<task_set> load_task(std::string_view task, const std::string& data_dir, std::string_view split = {});

// A choice as the model sees it: tokens = BOS (when the model adds one) + encode(context + continuation);
// the first n_context of them are context (BOS + encode(context), lm-eval's split of the joint encoding).
struct encoded_choice {
    std::vector<int32_t> tokens;
    size_t n_context = 0;  // >= 1; tokens[n_context..] are scored (at least one)
    int64_t n_bytes = 0;   // bytes of the continuation: the acc_norm divisor
};

// Trailing spaces of the context move to the continuation first (as lm-eval does). Errors when the
// continuation adds no token or nothing precedes it.
result<encoded_choice> encode_choice(const tokenizer::tokenizer& tok, const task_choice& c);

struct sequence_score {
    double loglik = 0.0;    // sum of ln p(token | its prefix) over tokens[n_context..]
    int64_t n_scored = 0;   // tokens.size() - n_context
    int64_t evictions = 0;  // over all eviction units
    int64_t budget = 0;     // the resolved budget (0 under `full`)
};

// Runs `tokens` through a fresh session made with `sp` (run_length = tokens.size(), so a fractional budget
// is a fraction of the sequence), sp.prefill_chunk tokens per step (chunks start at multiples of it), and
// sums the log-probabilities of tokens[n_context..]. The last token is not processed (it predicts nothing);
// chunks that end before the first scored prediction skip the output layer.
result<sequence_score> continuation_loglik(model::model& m, std::span<const int32_t> tokens, size_t n_context,
                                           const engine::session_params& sp);

struct choice_score {
    double loglik = 0.0;
    int64_t n_bytes = 1;  // > 0
};

// The index of the best choice by loglik (`normalized`: loglik / n_bytes); the first one on ties.
int best_choice(std::span<const choice_score> scores, bool normalized);

// K distinct indices of [0, pool_size) other than `exclude`, drawn from `seed` and `exclude` only (the same
// on every platform). Errors when the pool has fewer than K other items.
result<std::vector<size_t>> few_shot_indices(size_t pool_size, size_t exclude, int shots, uint64_t seed);

// `item` with `shots` solved examples of `set` (context + gold continuation each, joined by blank lines)
// prepended to every choice's context.
result<task_item> with_few_shot(const task_set& set, size_t item, int shots, uint64_t seed);

struct task_options {
    engine::session_params session;  // policy, budget (fractions of each sequence) and prefill_chunk
    int64_t limit = 0;               // evaluate the first `limit` items of set.eval; 0: all
    int shots = 0;
    uint64_t seed = 1234;
};

struct item_result {
    size_t index = 0;  // into set.items
    int gold = 0, pred = 0, pred_norm = 0;
    std::vector<choice_score> scores;
};

struct task_result {
    int64_t n_items = 0, correct = 0, correct_norm = 0;
    double acc = 0.0, acc_norm = 0.0;
    double acc_stderr = 0.0, acc_norm_stderr = 0.0;  // sqrt(p (1 - p) / (n - 1)), as lm-eval
    int64_t n_sequences = 0, n_tokens = 0;           // sequences run and their tokens (BOS included)
    int64_t evictions = 0;
    double mean_budget = 0.0;  // resolved budget averaged over sequences (0 under `full`)
    double seconds = 0.0;
    std::vector<item_result> items;
};

// Scores the first o.limit items of set.eval. progress: (items done, items to do).
result<task_result> evaluate_task(model::model& m, const tokenizer::tokenizer& tok, const task_set& set,
                                  const task_options& o, const progress_fn& progress);

}  // namespace h2okv::eval
