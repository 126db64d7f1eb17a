// h2okv perplexity: streaming perplexity of a text under a KV policy (or a sweep of policies and budgets).
#include "h2okv/eval/perplexity.h"

#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "h2okv/tokenizer/tokenizer.h"
#include "kv_options.h"

namespace h2okv::cli {
namespace {

struct perplexity_options {
    model_options model;
    kv_options kv;
    std::string text_path;
    int64_t max_tokens = 0;
    sweep_options sweep{policy::default_sweep(), {"0.05", "0.1", "0.2", "0.4", "0.6", "1.0"}};
    std::string jsonl_path;
    int nll_window = 0;
    int segments = 1;
};

int run_perplexity(const perplexity_options& o) {
    o.model.apply_threads();
    auto lm = load_model(o.model.model_path);
    if (!lm.ok()) return fail(lm.error());
    auto text = read_text_tokens(*lm->file, o.text_path);
    if (!text.ok()) return fail(text.error());
    // The runs evaluated: the first --max-tokens of the text, or --segments consecutive runs of it.
    std::vector<std::vector<int32_t>> segments;
    if (o.segments != 1) {
        if (o.max_tokens < 2) {
            return fail(invalid_argument("--segments {} needs --max-tokens (each run's length, BOS included)",
                                         o.segments));
        }
        if (o.nll_window > 0) {
            return fail(invalid_argument(
                "--nll-window is perplexity against position in one run; give it without --segments"));
        }
        auto cut = text->runs(o.max_tokens, o.segments, o.text_path);
        if (!cut.ok()) return fail(cut.error());
        segments = std::move(*cut);
    } else {
        std::vector<int32_t> tokens{text->bos};
        tokens.insert(tokens.end(), text->ids.begin(), text->ids.end());
        if (o.max_tokens > 0) {
            if (o.max_tokens < 2)
                return fail(invalid_argument("--max-tokens {} must be >= 2 (BOS + one)", o.max_tokens));
            if (static_cast<int64_t>(tokens.size()) < o.max_tokens) {
                return fail(invalid_argument("--max-tokens {} but '{}' has only {} tokens (BOS included)",
                                             o.max_tokens, o.text_path, tokens.size()));
            }
            tokens.resize(static_cast<size_t>(o.max_tokens));
        }
        segments.push_back(std::move(tokens));
    }
    const auto run_length = static_cast<int64_t>(segments.front().size());

    auto runs = o.sweep.runs(o.kv, o.model.n_ctx);
    if (!runs.ok()) return fail(runs.error());
    auto jsonl = open_jsonl(o.jsonl_path);
    if (!jsonl.ok()) return fail(jsonl.error());
    const std::string sha = lm->file->sha256();
    fmt::print("{:<44} {:>8} {:>10} {:>12} {:>10} {:>9}\n", "policy", "budget", "tokens", "perplexity",
               "evictions", "seconds");
    for (const auto& sp : *runs) {
        if (auto st = warn_positions(*lm->model, sp, run_length); !st.ok()) return fail(st);
        progress_line progress(sp.kv.to_string(), "tokens");
        auto r = segments.size() > 1
                     ? eval::perplexity(*lm->model, segments, sp, o.kv.prefill_chunk,
                                        [&progress](int64_t d, int64_t t) { progress(d, t); })
                     : eval::perplexity(
                           *lm->model, segments.front(), sp, o.kv.prefill_chunk,
                           [&progress](int64_t d, int64_t t) { progress(d, t); }, o.nll_window);
        if (!r.ok()) return fail(r.error());
        const std::string resolved = r->config.to_string();
        const int64_t budget = r->config.budget;
        fmt::print("{:<44} {:>8} {:>10} {:>12.4f} {:>10} {:>9.2f}\n", resolved,
                   budget > 0 ? std::to_string(budget) : "-", r->n_tokens, r->perplexity, r->evictions,
                   r->seconds);
        std::fflush(stdout);
        if (*jsonl) {
            nlohmann::json j = {{"command", "perplexity"},
                                {"model", o.model.model_path},
                                {"model_sha256", sha},
                                {"text", o.text_path},
                                {"policy", resolved},
                                {"policy_name", sp.kv.name},
                                {"budget_spec", sp.kv.budget ? sp.kv.budget->to_string() : ""},
                                {"budget", budget},
                                {"granularity", policy::granularity_name(policy::granularity_of(sp.kv))},
                                {"positions", policy::position_mode_name(r->config.positions)},
                                {"kv_type", kv::kv_type_name(sp.kv_type)},
                                {"chunk", o.kv.prefill_chunk},
                                {"threads", omp_get_max_threads()},
                                {"n_tokens", r->n_tokens},
                                {"n_predicted", r->n_predicted},
                                {"mean_nll", r->mean_nll},
                                {"perplexity", r->perplexity},
                                {"evictions", r->evictions},
                                {"kv_bytes", r->kv_bytes},
                                {"seconds", r->seconds}};
            if (!o.kv.config_path.empty()) j["kv_config"] = o.kv.config_path;
            if (segments.size() > 1) {
                j["segments"] = segments.size();
                j["run_nll"] = r->run_nll;
            }
            if (o.nll_window > 0) {
                j["nll_window"] = o.nll_window;
                j["window_nll"] = r->window_nll;
            }
            **jsonl << j.dump() << "\n";
        }
    }
    return 0;
}

}  // namespace

void add_perplexity_command(CLI::App& app, int* exit_code) {
    auto o = std::make_shared<perplexity_options>();
    o->kv.prefill_chunk = 1;
    CLI::App* cmd = app.add_subcommand("perplexity",
                                       "Streaming perplexity of a text: BOS + the text's tokens, one at a "
                                       "time (eviction after every token), "
                                       "exp(mean NLL of each next token)");
    o->model.add_to(*cmd);
    cmd->add_option("-f,--file", o->text_path, "The text file (tokenized as one text)")->required();
    cmd->add_option("--max-tokens", o->max_tokens,
                    "Evaluate the first N tokens, BOS included (N - 1 predictions); default: the whole file");
    cmd->add_option(
           "--segments", o->segments,
           "Evaluate this many consecutive runs of --max-tokens each (BOS + the next stretch of "
           "the text), one perplexity over all their predictions (as calibrate's segments); 0: every "
           "whole run the text holds")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    o->kv.add_to(*cmd);
    cmd->get_option("--kv-prefill-chunk")
        ->description("Text tokens per chunk (evictions after each; the default 1 streams token by token)");
    o->sweep.add_to(*cmd);
    cmd->add_option("--nll-window", o->nll_window,
                    "With --jsonl: also record the mean NLL of every N consecutive predictions (perplexity "
                    "against position; 0: none)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--jsonl", o->jsonl_path,
                    "Append one JSON line per run (configuration, model sha256, timings)");
    cmd->callback([o, exit_code] { *exit_code = run_perplexity(*o); });
}

}  // namespace h2okv::cli
