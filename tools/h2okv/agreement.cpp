// h2okv agreement: greedy agreement with the full cache and retained attention mass, per policy and budget.
#include "h2okv/eval/agreement.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "h2okv/tokenizer/tokenizer.h"
#include "kv_options.h"

namespace h2okv::cli {
namespace {

struct agreement_options {
    model_options model;
    kv_options kv;
    std::string prompts_path;
    int64_t n_steps = 64;
    std::string reference_kv_type;  // empty: the run's own
    sweep_options sweep{policy::default_sweep(), {"0.1", "0.2", "0.4"}};
    std::string jsonl_path;
};

// The prompts of a file, one per line; blank lines are skipped.
result<std::vector<std::string>> read_prompts(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return io_error("cannot open '{}' for reading", path);
    std::vector<std::string> out;
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        out.push_back(line);
    }
    if (out.empty()) return invalid_argument("'{}' holds no prompt (expected one per line)", path);
    return out;
}

int run_agreement(const agreement_options& o) {
    if (o.n_steps < 1) return fail(invalid_argument("-n {} must be >= 1", o.n_steps));
    o.model.apply_threads();
    auto lm = load_model(o.model.model_path);
    if (!lm.ok()) return fail(lm.error());
    auto tok = tokenizer::tokenizer::from_gguf(*lm->file);
    if (!tok.ok()) return fail(tok.error());
    auto lines = read_prompts(o.prompts_path);
    if (!lines.ok()) return fail(lines.error().with_context("-f"));
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& line : *lines) {
        auto ids = tok->encode(line, /*add_special=*/false, /*parse_special=*/false);
        if (!ids.ok()) return fail(ids.error());
        std::vector<int32_t> t{tok->bos()};
        t.insert(t.end(), ids->begin(), ids->end());
        prompts.push_back(std::move(t));
    }

    std::optional<kv::kv_type> reference;
    if (!o.reference_kv_type.empty()) {
        auto t = kv::parse_kv_type(o.reference_kv_type);
        if (!t.ok()) return fail(t.error().with_context("--reference-kv-type"));
        reference = *t;
    }
    auto runs = o.sweep.runs(o.kv, o.model.n_ctx);
    if (!runs.ok()) return fail(runs.error());
    auto jsonl = open_jsonl(o.jsonl_path);
    if (!jsonl.ok()) return fail(jsonl.error());
    const std::string sha = lm->file->sha256();
    fmt::print("{} prompts, {} steps each (teacher-forced on the full cache's greedy tokens)\n",
               prompts.size(), o.n_steps);
    fmt::print("{:<40} {:>7} {:>8} {:>9} {:>9} {:>12} {:>9}\n", "policy", "budget", "match", "mass",
               "diverged", "first_div", "seconds");
    size_t longest = 0;
    for (const auto& t : prompts) longest = std::max(longest, t.size());
    for (const auto& sp : *runs) {
        const std::string spec = sp.kv.to_string();
        const int64_t run_length = static_cast<int64_t>(longest) + o.n_steps;
        if (auto st = warn_positions(*lm->model, sp, run_length); !st.ok()) return fail(st);
        progress_line progress(spec, "steps");
        const int64_t total = static_cast<int64_t>(prompts.size()) * o.n_steps;
        std::vector<eval::agreement_result> results;
        for (size_t i = 0; i < prompts.size(); ++i) {
            const auto done_before = static_cast<int64_t>(i) * o.n_steps;
            auto r = eval::agreement(
                *lm->model, prompts[i], o.n_steps, sp,
                [&](int64_t d, int64_t) { progress(done_before + d, total); }, reference);
            if (!r.ok()) return fail(r.error().with_context(fmt::format("prompt {}", i + 1)));
            if (*jsonl) {
                nlohmann::json j = {
                    {"command", "agreement"},
                    {"record", "prompt"},
                    {"model", o.model.model_path},
                    {"model_sha256", sha},
                    {"prompts", o.prompts_path},
                    {"prompt_index", i},
                    {"policy", r->config.to_string()},
                    {"policy_spec", spec},
                    {"kv_type", kv::kv_type_name(sp.kv_type)},
                    {"reference_kv_type", kv::kv_type_name(reference.value_or(sp.kv_type))},
                    {"budget", r->config.budget},
                    {"prompt_tokens", r->prompt_tokens},
                    {"n_steps", r->n_steps},
                    {"run_length", r->run_length},
                    {"matches", r->matches},
                    {"match_rate", r->match_rate},
                    {"first_divergence", r->first_divergence >= 0 ? nlohmann::json(r->first_divergence)
                                                                  : nlohmann::json(nullptr)},
                    {"retained_mass", r->retained_mass},
                    {"evictions", r->evictions},
                    {"seconds", r->seconds}};
                **jsonl << j.dump() << "\n";
            }
            results.push_back(std::move(*r));
        }
        const auto s = eval::summarize(results);
        const std::string budget = !policy::policy_evicts(sp.kv.name) ? "-"
                                   : sp.kv.budget                     ? sp.kv.budget->to_string()
                                                                      : "?";
        fmt::print("{:<40} {:>7} {:>8.4f} {:>9.4f} {:>9} {:>12} {:>9.2f}\n", spec, budget, s.match_rate,
                   s.retained_mass, fmt::format("{}/{}", s.n_diverged, s.n_prompts),
                   s.n_diverged > 0 ? fmt::format("{:.1f}", s.mean_first_divergence) : "-", s.seconds);
        std::fflush(stdout);
        if (*jsonl) {
            nlohmann::json j = {
                {"command", "agreement"},
                {"record", "summary"},
                {"model", o.model.model_path},
                {"model_sha256", sha},
                {"prompts", o.prompts_path},
                {"n_prompts", s.n_prompts},
                {"n_steps", o.n_steps},
                {"policy_spec", spec},
                {"policy_name", sp.kv.name},
                {"budget_spec", sp.kv.budget ? sp.kv.budget->to_string() : ""},
                {"granularity", policy::granularity_name(policy::granularity_of(sp.kv))},
                {"kv_type", kv::kv_type_name(sp.kv_type)},
                {"reference_kv_type", kv::kv_type_name(reference.value_or(sp.kv_type))},
                {"prefill_chunk", sp.prefill_chunk},
                {"threads", omp_get_max_threads()},
                {"match_rate", s.match_rate},
                {"retained_mass", s.retained_mass},
                {"n_diverged", s.n_diverged},
                {"mean_first_divergence",
                 s.n_diverged > 0 ? nlohmann::json(s.mean_first_divergence) : nlohmann::json(nullptr)},
                {"seconds", s.seconds}};
            **jsonl << j.dump() << "\n";
        }
    }
    return 0;
}

}  // namespace

void add_agreement_command(CLI::App& app, int* exit_code) {
    auto o = std::make_shared<agreement_options>();
    CLI::App* cmd = app.add_subcommand(
        "agreement",
        "Greedy agreement with the full cache. Teacher-forced: a full-cache session and the policy's session "
        "are fed the same tokens (the full cache's greedy choices), so every step compares the two on "
        "identical inputs. Reports the token match rate (steps where the policy's greedy token equals the "
        "full cache's), the first divergence step (0-based) and the retained attention mass (the share of "
        "the full cache's attention, per layer and query head, on the positions the policy still attends; "
        "averaged over steps, layers and heads). Fractional budgets are fractions of BOS + prompt + N");
    o->model.add_to(*cmd);
    cmd->add_option("-f,--file", o->prompts_path, "Prompts, one per line (blank lines are skipped)")
        ->required();
    cmd->add_option("-n,--n-predict", o->n_steps, "Steps (greedy tokens) compared per prompt")
        ->capture_default_str();
    o->kv.add_to(*cmd);
    cmd->add_option("--reference-kv-type", o->reference_kv_type,
                    "KV type of the full-cache reference (default: --kv-type's), e.g. f16 to measure what "
                    "q4_0 storage and eviction cost together");
    o->sweep.add_to(*cmd);
    cmd->add_option("--jsonl", o->jsonl_path,
                    "Append JSON lines: one per prompt and run, one summary per run (configuration, model "
                    "sha256, timings)");
    cmd->callback([o, exit_code] { *exit_code = run_agreement(*o); });
}

}  // namespace h2okv::cli
