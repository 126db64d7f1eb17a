// h2okv tasks: multiple-choice accuracy (acc and length-normalised acc_norm) under a KV policy.
#include "h2okv/eval/tasks.h"

#include <fmt/ranges.h>
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "kv_options.h"

namespace h2okv::cli {
namespace {

struct tasks_options {
    model_options model;
    kv_options kv;
    std::vector<std::string> tasks;
    std::string split;
    std::string data_dir = default_data_dir();
    int64_t limit = 0;
    int shots = 0;
    uint64_t seed = 1234;
    std::string jsonl_path;
};

int run_tasks(const tasks_options& o) {
    o.model.apply_threads();
    auto sp = o.kv.to_session_params(o.model.n_ctx);
    if (!sp.ok()) return fail(sp.error());
    // Read every task first: a bad name or file fails before any model time is spent.
    std::vector<eval::task_set> sets;
    for (const auto& t : o.tasks) {
        auto set = eval::load_task(t, o.data_dir, o.split);
        if (!set.ok()) return fail(set.error().with_context("--task " + t));
        sets.push_back(std::move(set).value());
    }
    auto lm = load_model(o.model.model_path);
    if (!lm.ok()) return fail(lm.error());
    auto tok = tokenizer::tokenizer::from_gguf(*lm->file);
    if (!tok.ok()) return fail(tok.error());

    auto jsonl = open_jsonl(o.jsonl_path);
    if (!jsonl.ok()) return fail(jsonl.error());
    const std::string sha = lm->file->sha256();
    // The policy column leaves the budget to its own column.
    policy::params shown = sp->kv;
    shown.budget.reset();
    const std::string budget_spec = sp->kv.budget ? sp->kv.budget->to_string() : "";
    for (const auto& set : sets) {
        eval::task_options to;
        to.session = *sp;
        to.limit = o.limit;
        to.shots = o.shots;
        to.seed = o.seed;
        progress_line progress(set.task + " " + sp->kv.to_string(), "items");
        auto r = eval::evaluate_task(*lm->model, *tok, set, to,
                                     [&progress](int64_t d, int64_t t) { progress(d, t); });
        if (!r.ok()) return fail(r.error());
        if (&set == &sets.front()) {
            fmt::print("{:<14} {:<32} {:>7} {:>6} {:>7} {:>9} {:>9}\n", "task", "policy", "budget", "n",
                       "acc", "acc_norm", "seconds");
        }
        fmt::print("{:<14} {:<32} {:>7} {:>6} {:>7.4f} {:>9.4f} {:>9.2f}\n", set.task, shown.to_string(),
                   budget_spec.empty() ? "-" : budget_spec, r->n_items, r->acc, r->acc_norm, r->seconds);
        std::fflush(stdout);
        if (*jsonl) {
            nlohmann::json j = {{"command", "tasks"},
                                {"task", set.task},
                                {"split", set.split},
                                {"data_file", set.path},
                                {"model", o.model.model_path},
                                {"model_sha256", sha},
                                {"policy", sp->kv.to_string()},
                                {"policy_name", sp->kv.name},
                                {"budget_spec", budget_spec},
                                {"mean_budget", r->mean_budget},
                                {"granularity", policy::granularity_name(policy::granularity_of(sp->kv))},
                                {"kv_type", kv::kv_type_name(sp->kv_type)},
                                {"chunk", sp->prefill_chunk},
                                {"n_ctx", o.model.n_ctx},
                                {"threads", omp_get_max_threads()},
                                {"limit", o.limit},
                                {"shots", o.shots},
                                {"seed", o.seed},
                                {"n_items", r->n_items},
                                {"n_sequences", r->n_sequences},
                                {"n_tokens", r->n_tokens},
                                {"correct", r->correct},
                                {"correct_norm", r->correct_norm},
                                {"acc", r->acc},
                                {"acc_stderr", r->acc_stderr},
                                {"acc_norm", r->acc_norm},
                                {"acc_norm_stderr", r->acc_norm_stderr},
                                {"evictions", r->evictions},
                                {"seconds", r->seconds}};
            **jsonl << j.dump() << "\n";
        }
    }
    return 0;
}

}  // namespace

void add_tasks_command(CLI::App& app, int* exit_code) {
    auto o = std::make_shared<tasks_options>();
    // Streaming eviction, token by token, as in the H2O paper's task runs and in `perplexity`.
    o->kv.prefill_chunk = 1;
    CLI::App* cmd = app.add_subcommand(
        "tasks",
        "Multiple-choice accuracy by log-likelihood (lm-eval style): each (context, choice) sequence runs "
        "through a fresh session under the KV policy (fractional budgets: of that sequence's length; "
        "--kv-prefill-chunk defaults to 1, eviction after every token); acc takes the choice with the "
        "highest sum of log p(choice tokens | context), acc_norm the highest per byte of the choice");
    o->model.add_to(*cmd);
    cmd->add_option("--task", o->tasks, "Task(s): " + fmt::format("{}", fmt::join(eval::task_names(), ", ")))
        ->required()
        ->delimiter(',');
    cmd->add_option("--split", o->split,
                    "Split (default: the task's first): copa has val (dev items 401-500, lm-eval's "
                    "validation), dev, test, all; the others test");
    cmd->add_option(
           "--data-dir", o->data_dir,
           "The shared data folder (copa/, llm-adapters-commonsense/; default: " + data_search_text() + ")")
        ->capture_default_str();
    cmd->add_option("--limit", o->limit, "Evaluate the first N items (0: all)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--shots", o->shots,
                    "Solved examples prepended to each item, drawn (seeded) from the same file, never the "
                    "item itself")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    cmd->add_option("--seed", o->seed, "Seed of the few-shot draw")->capture_default_str();
    o->kv.add_to(*cmd);
    cmd->get_option("--kv-prefill-chunk")
        ->description(
            "Tokens of each (context, choice) sequence per chunk (evictions after each; the default 1 "
            "streams "
            "token by token)");
    cmd->add_option("--jsonl", o->jsonl_path,
                    "Append one JSON line per task (configuration, model sha256, timings, accuracies)");
    cmd->callback([o, exit_code] { *exit_code = run_tasks(*o); });
}

}  // namespace h2okv::cli
