// h2okv passkey: synthetic needle retrieval (a 5-digit key hidden in filler text), per policy, budget and
// depth.
#include "h2okv/eval/passkey.h"

#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "h2okv/tokenizer/tokenizer.h"
#include "kv_options.h"

namespace h2okv::cli {
namespace {

struct passkey_options {
    model_options model;
    kv_options kv;
    eval::passkey_params params;
    std::string filler_path = default_data_dir() + "/tinystories/tinystories_val_head.txt";
    bool show = false;
    sweep_options sweep{policy::default_sweep(), {"0.2", "0.5"}};
    std::string jsonl_path;
};

int run_passkey(const passkey_options& o) {
    auto valid = o.params.validate();
    if (!valid.ok()) return fail(valid);
    o.model.apply_threads();
    auto lm = load_model(o.model.model_path);
    if (!lm.ok()) return fail(lm.error());
    auto tok = tokenizer::tokenizer::from_gguf(*lm->file);
    if (!tok.ok()) return fail(tok.error());
    auto text = read_text_file(o.filler_path);
    if (!text.ok()) return fail(text.error().with_context("--filler"));
    auto filler = eval::passkey_filler(*tok, *text, o.params.length);
    if (!filler.ok()) return fail(filler.error().with_context("--filler"));

    // A length too short for the needle and the question is refused before any run starts.
    auto probe = eval::build_passkey_prompt(*tok, *filler, o.params.length, o.params.depths.front(),
                                            eval::passkey_keys(o.params.seed, 1).front());
    if (!probe.ok()) return fail(probe.error().with_context("--length"));

    auto runs = o.sweep.runs(o.kv, o.model.n_ctx);
    if (!runs.ok()) return fail(runs.error());
    auto jsonl = open_jsonl(o.jsonl_path);
    if (!jsonl.ok()) return fail(jsonl.error());
    const std::string sha = lm->file->sha256();
    fmt::print("passkey: {} tokens per prompt, {} trials per depth, seed {}, filler '{}'\n", o.params.length,
               o.params.trials, o.params.seed, o.filler_path);
    fmt::print("{:<44} {:>7} {:>6} {:>8} {:>9} {:>9}\n", "policy", "budget", "depth", "correct", "accuracy",
               "seconds");
    for (const auto& sp : *runs) {
        const int64_t run_length = int64_t{o.params.length} + o.params.answer_tokens;
        if (auto st = warn_positions(*lm->model, sp, run_length); !st.ok()) return fail(st);
        progress_line progress(sp.kv.to_string(), "trials");
        auto r = eval::passkey(*lm->model, *tok, *filler, o.params, sp, progress);
        if (!r.ok()) return fail(r.error());
        const std::string resolved = r->config.to_string();
        const int64_t budget = r->config.budget;
        for (const auto& d : r->per_depth) {
            fmt::print("{:<44} {:>7} {:>6.2f} {:>8} {:>9.3f} {:>9.2f}\n", resolved,
                       budget > 0 ? std::to_string(budget) : "-", d.depth,
                       fmt::format("{}/{}", d.n_correct, d.n_trials), d.accuracy, r->seconds);
        }
        if (o.show) {
            for (const auto& t : r->trials) {
                fmt::print("  depth {:.2f} trial {}: key {} answered '{}' ({}){}\n", t.depth, t.trial, t.key,
                           t.answer, nlohmann::json(t.generated).dump(), t.success ? " ok" : "");
            }
        }
        std::fflush(stdout);
        if (*jsonl) {
            for (const auto& d : r->per_depth) {
                std::vector<std::string> keys, answers;
                for (const auto& t : r->trials) {
                    if (t.depth != d.depth) continue;
                    keys.push_back(t.key);
                    answers.push_back(t.generated);
                }
                nlohmann::json j = {{"command", "passkey"},
                                    {"model", o.model.model_path},
                                    {"model_sha256", sha},
                                    {"filler", o.filler_path},
                                    {"policy", resolved},
                                    {"policy_name", sp.kv.name},
                                    {"budget_spec", sp.kv.budget ? sp.kv.budget->to_string() : ""},
                                    {"budget", budget},
                                    {"granularity", policy::granularity_name(policy::granularity_of(sp.kv))},
                                    {"kv_type", kv::kv_type_name(sp.kv_type)},
                                    {"prefill_chunk", sp.prefill_chunk},
                                    {"threads", omp_get_max_threads()},
                                    {"length", o.params.length},
                                    {"answer_tokens", o.params.answer_tokens},
                                    {"run_length", r->run_length},
                                    {"seed", o.params.seed},
                                    {"depth", d.depth},
                                    {"trials", d.n_trials},
                                    {"correct", d.n_correct},
                                    {"accuracy", d.accuracy},
                                    {"keys", keys},
                                    {"generated", answers},
                                    {"evictions", r->evictions},
                                    {"seconds", r->seconds}};
                **jsonl << j.dump() << "\n";
            }
        }
    }
    return 0;
}

}  // namespace

void add_passkey_command(CLI::App& app, int* exit_code) {
    auto o = std::make_shared<passkey_options>();
    CLI::App* cmd = app.add_subcommand(
        "passkey",
        "Synthetic passkey retrieval: a random 5-digit key is hidden at a relative depth of filler text as "
        "\"The pass key is K. Remember it. K is the pass key.\"; the prompt (exactly --length tokens, BOS "
        "included) ends with \"What is the pass key? The pass key is\" and the model answers greedily. A "
        "trial "
        "succeeds when the digits the answer starts with equal the key. Fractional budgets are fractions of "
        "--length + --answer-tokens");
    o->model.add_to(*cmd);
    cmd->add_option("--length", o->params.length,
                    "Prompt length in tokens, BOS included (the filler is trimmed)")
        ->required();
    cmd->add_option(
           "--depth", o->params.depths,
           "Relative depths of the key in the filler, in [0, 1] (0: right after BOS, 1: right before "
           "the question); comma-separated")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--trials", o->params.trials, "Keys per depth (the same keys at every depth)")
        ->capture_default_str();
    cmd->add_option("--seed", o->params.seed, "Seed of the keys")->capture_default_str();
    cmd->add_option("--answer-tokens", o->params.answer_tokens, "Tokens generated per answer")
        ->capture_default_str();
    cmd->add_option(
           "--filler", o->filler_path,
           "Filler text (repeated when too short; default in the data folder: " + data_search_text() + ")")
        ->capture_default_str();
    o->kv.add_to(*cmd);
    cmd->add_flag("--show", o->show, "Print every trial's key and answer");
    o->sweep.add_to(*cmd);
    cmd->add_option(
        "--jsonl", o->jsonl_path,
        "Append one JSON line per run and depth (configuration, model sha256, keys, answers, timings)");
    cmd->callback([o, exit_code] { *exit_code = run_passkey(*o); });
}

}  // namespace h2okv::cli
