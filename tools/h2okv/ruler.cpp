// h2okv ruler: RULER-style synthetic long-context tasks (needles, variable tracking, word extraction) per
// policy, budget, length, depth and protocol (query-agnostic / query-aware).
#include "h2okv/eval/ruler.h"

#include <omp.h>

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "commands.h"
#include "h2okv/tokenizer/tokenizer.h"
#include "kv_options.h"

namespace h2okv::cli {
namespace {

struct ruler_options {
    model_options model;
    kv_options kv;
    eval::ruler_params params;
    std::vector<std::string> tasks{"niah_single"};
    std::string protocol = "both";
    std::string haystack_path = default_data_dir() + "/moby-dick/moby_dick.txt";
    bool show = false;
    sweep_options sweep{{"full", "window", "streaming:sinks=4", "h2o", "tova"}, {"0.1", "0.2", "0.4"}};
    std::string jsonl_path;
};

status resolve(ruler_options& o) {
    o.params.tasks.clear();
    for (const auto& t : o.tasks) {
        if (t == "all") {
            for (const auto& info : eval::ruler_tasks()) o.params.tasks.emplace_back(info.name);
        } else {
            o.params.tasks.push_back(t);
        }
    }
    o.params.protocols.clear();
    if (o.protocol == "both") {
        o.params.protocols = {eval::ruler_protocol::agnostic, eval::ruler_protocol::aware};
    } else {
        H2OKV_ASSIGN_OR_RETURN(auto p, eval::parse_ruler_protocol(o.protocol));
        o.params.protocols = {p};
    }
    return o.params.validate();
}

std::string depth_label(double d) {
    return d < 0 ? "-" : fmt::format("{:g}", d);
}

int run_ruler(ruler_options& o) {
    if (auto st = resolve(o); !st.ok()) return fail(st);
    o.model.apply_threads();
    auto lm = load_model(o.model.model_path);
    if (!lm.ok()) return fail(lm.error());
    auto tok = tokenizer::tokenizer::from_gguf(*lm->file);
    if (!tok.ok()) return fail(tok.error());
    auto text = read_text_file(o.haystack_path);
    if (!text.ok()) return fail(text.error().with_context("--haystack"));
    const int64_t max_length = *std::max_element(o.params.lengths.begin(), o.params.lengths.end());
    auto hay = eval::ruler_haystack::make(*tok, *text, 4 * max_length);
    if (!hay.ok()) return fail(hay.error().with_context("--haystack"));

    // Every prompt is built once before any run, so a length too short for a task is refused up front.
    for (const auto& task : o.params.tasks) {
        for (int64_t length : o.params.lengths) {
            const int answer = eval::ruler_answer_tokens(o.params, *eval::find_ruler_task(task));
            auto probe = eval::build_ruler_prompt(*tok, *hay, task, length - answer, o.params.depths.front(),
                                                  eval::ruler_trial_seed(o.params.seed, task, length, 0));
            if (!probe.ok()) return fail(probe.error().with_context("--lengths"));
        }
    }

    auto runs = o.sweep.runs(o.kv, o.model.n_ctx);
    if (!runs.ok()) return fail(runs.error());
    auto jsonl = open_jsonl(o.jsonl_path);
    if (!jsonl.ok()) return fail(jsonl.error());
    const std::string sha = lm->file->sha256();
    fmt::print("ruler: {} trials per (task, length, depth), seed {}, haystack '{}'\n", o.params.trials,
               o.params.seed, o.haystack_path);
    fmt::print("{:<40} {:>7} {:<17} {:>6} {:<8} {:>6} {:>6} {:>7} {:>8}  {}\n", "policy", "budget", "task",
               "length", "protocol", "score", "nll", "trials", "seconds", "score by depth");
    for (const auto& sp : *runs) {
        if (auto st = warn_positions(*lm->model, sp, max_length); !st.ok()) return fail(st);
        progress_line progress(sp.kv.to_string(), "trials");
        auto r = eval::ruler(*lm->model, *tok, *hay, o.params, sp, progress);
        if (!r.ok()) return fail(r.error());
        // Rows per (task, length, protocol) in run order; depths in the order given.
        using key = std::tuple<std::string, int64_t, std::string>;
        std::vector<key> order;
        std::map<key, std::vector<const eval::ruler_trial*>> rows;
        for (const auto& t : *r) {
            key k{t.task, t.length, std::string(eval::ruler_protocol_name(t.protocol))};
            if (!rows.count(k)) order.push_back(k);
            rows[k].push_back(&t);
        }
        for (const auto& k : order) {
            const auto& ts = rows[k];
            double sum = 0.0, nll = 0.0, seconds = 0.0;
            std::vector<double> depths;
            std::map<double, std::pair<double, int>> by_depth;
            for (const auto* t : ts) {
                sum += t->score;
                nll += t->answer_nll;
                seconds += t->seconds;
                if (!by_depth.count(t->depth)) depths.push_back(t->depth);
                by_depth[t->depth].first += t->score;
                by_depth[t->depth].second += 1;
            }
            std::string per_depth;
            for (double d : depths) {
                per_depth += fmt::format("{}{}:{:.2f}", per_depth.empty() ? "" : " ", depth_label(d),
                                         by_depth[d].first / by_depth[d].second);
            }
            const int64_t budget = ts.front()->budget;
            const auto n_ts = static_cast<double>(ts.size());
            fmt::print("{:<40} {:>7} {:<17} {:>6} {:<8} {:>6.3f} {:>6.2f} {:>7} {:>8.2f}  {}\n",
                       sp.kv.to_string(), budget > 0 ? std::to_string(budget) : "-", std::get<0>(k),
                       std::get<1>(k), std::get<2>(k), sum / n_ts, nll / n_ts, ts.size(), seconds, per_depth);
        }
        if (o.show) {
            for (const auto& t : *r) {
                fmt::print("  {} {} {} depth {} trial {}: expected {} got {} score {:.2f} nll {:.3f}\n",
                           t.task, t.length, eval::ruler_protocol_name(t.protocol), depth_label(t.depth),
                           t.trial, nlohmann::json(t.expected).dump(), nlohmann::json(t.generated).dump(),
                           t.score, t.answer_nll);
            }
        }
        std::fflush(stdout);
        if (*jsonl) {
            for (const auto& t : *r) {
                nlohmann::json j = {
                    {"command", "ruler"},
                    {"model", o.model.model_path},
                    {"model_sha256", sha},
                    {"haystack", o.haystack_path},
                    {"task", t.task},
                    {"protocol", eval::ruler_protocol_name(t.protocol)},
                    {"policy", t.policy},
                    {"policy_spec", sp.kv.to_string()},
                    {"policy_name", sp.kv.name},
                    {"budget_spec", sp.kv.budget ? sp.kv.budget->to_string() : ""},
                    {"budget", t.budget},
                    {"granularity", policy::granularity_name(policy::granularity_of(sp.kv))},
                    {"kv_type", kv::kv_type_name(sp.kv_type)},
                    {"prefill_chunk", sp.prefill_chunk},
                    {"threads", omp_get_max_threads()},
                    {"length", t.length},
                    {"prompt_tokens", t.prompt_tokens},
                    {"answer_tokens", t.answer_tokens},
                    {"run_length", t.run_length},
                    {"seed", o.params.seed},
                    {"depth", t.depth < 0 ? nlohmann::json(nullptr) : nlohmann::json(t.depth)},
                    {"trial", t.trial},
                    {"expected", t.expected},
                    {"generated", t.generated},
                    {"score", t.score},
                    {"answer_nll", t.answer_nll},
                    {"answer_nll_tokens", t.answer_nll_tokens},
                    {"evictions", t.evictions},
                    {"seconds", t.seconds}};
                **jsonl << j.dump() << "\n";
            }
        }
    }
    return 0;
}

}  // namespace

void add_ruler_command(CLI::App& app, int* exit_code) {
    auto o = std::make_shared<ruler_options>();
    std::string task_help =
        "Tasks, comma-separated, or all. Each prompt is BOS, the task's instruction, the context and the "
        "question, RULER's wording; scored as RULER's string_match_all (the share of expected answers found, "
        "case-insensitively, in the greedy output):";
    for (const auto& t : eval::ruler_tasks()) {
        task_help += fmt::format(" {}: {}{};", t.name, t.summary, t.uses_depth ? "" : " (no depth)");
    }
    CLI::App* cmd = app.add_subcommand(
        "ruler",
        "RULER-style synthetic long-context evaluation: needles in a haystack (single number/word/UUID, "
        "multi-key, multi-value, multi-query, passkey), variable tracking, common- and frequent-words "
        "extraction, generated from a local haystack text with fixed seeds (the same prompts at every depth, "
        "policy and protocol). Two protocols: agnostic prefills the context in chunks of --kv-prefill-chunk, "
        "evicting after each, and only then processes the question as its own chunk; aware processes the "
        "question in the context's last chunk, so the last eviction sees the question's attention. "
        "Lengths are "
        "whole runs (prompt + answer tokens, as RULER's max_seq_length); fractional budgets are fractions of "
        "the length");
    o->model.add_to(*cmd);
    cmd->add_option("--task", o->tasks, task_help)->delimiter(',')->capture_default_str();
    cmd->add_option(
           "--lengths", o->params.lengths,
           "Run lengths in tokens, comma-separated: the prompt (BOS included) is the length minus the answer "
           "tokens (exactly, for haystack tasks; cwe and fwe grow their lists by whole words up to it), so "
           "the model's context length fits")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option(
           "--depths", o->params.depths,
           "Relative depths of the first needle in the haystack, in [0, 1] (0: right after the "
           "instruction, 1: right before the question); comma-separated; tasks marked (no depth) run "
           "once per trial")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option(
           "--trials", o->params.trials,
           "Prompts per (task, length, depth); trial t has the same keys, values and haystack part at "
           "every depth, policy and protocol")
        ->capture_default_str();
    cmd->add_option("--seed", o->params.seed, "Seed of the prompts")->capture_default_str();
    cmd->add_option(
           "--protocol", o->protocol,
           "agnostic: the question arrives after the context is compressed; aware: the question is in "
           "the context's last chunk, before its compression; both: each prompt under both")
        ->check(CLI::IsMember({"agnostic", "aware", "both"}))
        ->capture_default_str();
    cmd->add_option(
           "--answer-tokens", o->params.answer_tokens,
           "Tokens generated per answer (greedy; fewer when an end-of-generation token comes); 0: each "
           "task's default (passkey 8, niah 12, UUID and multi-value/query 48, vt 30, cwe 40, fwe 30)")
        ->capture_default_str();
    cmd->add_option("--haystack", o->haystack_path,
                    "Haystack text (repeated when too short; default in the data folder: " +
                        data_search_text() + "); cwe draws its words from its vocabulary")
        ->capture_default_str();
    o->kv.add_to(*cmd);
    cmd->add_flag("--show", o->show, "Print every trial's expected answers, output and score");
    o->sweep.add_to(*cmd);
    cmd->add_option(
        "--jsonl", o->jsonl_path,
        "Append one JSON line per trial and protocol (configuration, model sha256, expected answers, "
        "output, score, answer_nll, evictions, timings)");
    cmd->callback([o, exit_code] { *exit_code = run_ruler(*o); });
}

}  // namespace h2okv::cli
