// What the subcommands that run a model share: the model, threads, context and KV policy flags, policy
// sweeps, progress lines, text files and JSONL output.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "h2okv/engine/generate.h"
#include "h2okv/engine/scheduler.h"
#include "h2okv/engine/session.h"
#include "h2okv/gguf/gguf.h"
#include "h2okv/model/model.h"
#include "h2okv/policy/policy.h"
#include "resources.h"

namespace h2okv::cli {

struct model_options {
    std::string model_path = default_model_path();
    int threads = 0;  // 0: all cores
    int64_t n_ctx = 0;

    void add_to(CLI::App& cmd);
    // Applies the thread count (OpenMP).
    void apply_threads() const;
};

struct kv_options {
    std::string policy = policy::params{}.name;
    std::string budget;
    std::string budget_bytes;       // --kv-budget-bytes: "64MiB", "512KiB", bytes
    std::optional<int64_t> recent;  // unset: the policy's default
    std::optional<int64_t> sinks;
    std::optional<double> decay;
    std::vector<std::string> policy_params;  // --kv-param NAME=VALUE: the policy's own parameters
    std::string granularity;                 // empty: the policy's default (policy_facts::gran)
    std::string positions = "original";
    int prefill_chunk = 512;
    std::string kv_type = "f16";
    // Budgets per unit (docs/EVICTION_CONTRACT.md clause 11): --kv-schedule/--kv-ratio (PyramidKV), or a
    // --kv-config file (`h2okv calibrate`'s): per-unit budget shares, per-layer recent shares and decays,
    // and the policy and budget used when --kv-policy / --kv-budget are not given.
    std::string schedule = "uniform";
    std::optional<double> ratio;
    std::string config_path;

    void add_to(CLI::App& cmd);
    result<policy::params> to_params() const;
    result<engine::session_params> to_session_params(int64_t n_ctx) const;

private:
    CLI::Option* policy_option_ = nullptr;
    CLI::Option* budget_option_ = nullptr;
};

// A --kv-config file: what `h2okv calibrate` writes and every KV subcommand reads.
struct kv_config {
    std::string policy;  // the policy spec it was calibrated for ("h2o"), may be empty
    std::string budget;  // the budget it was calibrated at ("0.2"), may be empty
    policy::granularity gran = policy::granularity::head;
    std::optional<int64_t> sinks;  // every unit's, when the configuration sets them
    int n_layer = 0;               // of the policy's (global) layers
    int n_kv_head = 0;
    std::vector<double> shares, recents, decays;
};
// Reads and validates a --kv-config file; errors name the file and the field.
result<kv_config> read_kv_config(const std::string& path);

// -n, --temp, --top-k, --top-p, --seed, --ignore-eos: how `generate` and `batch` generate.
struct generation_options {
    int n_predict = 128;
    float temperature = 0.0f;
    int top_k = 0;
    float top_p = 1.0f;
    uint64_t seed = 0;
    bool ignore_eos = false;

    void add_to(CLI::App& cmd);
    result<engine::generation_params> to_params() const;  // validated
};

// --parallel, --kv-memory, --step-tokens: how many sequences run at once and in how much KV memory.
struct batching_options {
    int parallel = 8;
    std::string kv_memory = "0";
    int step_tokens = 512;
    bool unlimited_memory = true;  // whether --kv-memory 0 (no limit) is allowed; set before add_to

    void add_to(CLI::App& cmd);
    result<engine::scheduler_params> to_params() const;  // validated
};

// --sweep, --sweep-policies, --sweep-budgets: a grid of policy specs x budgets instead of the one policy of
// the KV flags. Giving either list implies --sweep.
struct sweep_options {
    sweep_options(std::vector<std::string> default_policies, std::vector<std::string> default_budgets)
        : policies(std::move(default_policies)), budgets(std::move(default_budgets)) {}

    bool sweep = false;
    std::vector<std::string> policies;
    std::vector<std::string> budgets;

    void add_to(CLI::App& cmd);
    bool active() const;  // after parsing: --sweep or either list given
    // The runs: the KV flags' policy alone, or the grid (`full` once; a spec without granularity= takes
    // --kv-granularity when it is given, else its policy's default).
    result<std::vector<engine::session_params>> runs(const kv_options& kv, int64_t n_ctx) const;

private:
    CLI::Option* policies_option_ = nullptr;
    CLI::Option* budgets_option_ = nullptr;
};

// Progress with an ETA on stderr for runs longer than a second: a terminal gets its line rewritten four times
// a second, a log a line every 10 s.
class progress_line {
public:
    progress_line(std::string label, std::string unit);
    void operator()(int64_t done, int64_t total);

private:
    using clock = std::chrono::steady_clock;
    std::string label_, unit_;
    clock::time_point start_;
    double last_ = 0.0;
    bool tty_;
};

result<std::string> read_text_file(const std::string& path);
// The process's resident memory now (/proc/self/statm; 0 where it cannot be read).
int64_t current_rss_bytes();
// Opens `path` for appending JSON lines; null when path is empty.
result<std::unique_ptr<std::ofstream>> open_jsonl(const std::string& path);

// A model and the file it lives in (the model's weights point into the mapped file).
struct loaded_model {
    std::unique_ptr<gguf::file> file;
    std::unique_ptr<model::model> model;
};
// An empty path (no -m and no bundled model found) is refused with the paths tried.
result<loaded_model> load_model(const std::string& path);
// The error of a command run without -m where no default model exists.
status no_model_error();

// A text file (-f) as the model's token ids, without BOS, and the BOS id (perplexity, calibrate).
struct text_tokens {
    int32_t bos = 0;
    std::vector<int32_t> ids;

    // `count` runs of `run_length` tokens each: BOS + consecutive stretches of the text (run k: BOS + ids
    // [k (run_length - 1), (k + 1) (run_length - 1))); count 0: every whole run the text holds. An error
    // names `path` and how many tokens it lacks.
    result<std::vector<std::vector<int32_t>>> runs(int64_t run_length, int count,
                                                   const std::string& path) const;
};
result<text_tokens> read_text_tokens(const gguf::file& file, const std::string& text_path);

// "<full> for a full cache of the run: <r>x smaller" (or larger), r = full / allocated: how generate and
// bench state what the KV cache saves.
std::string kv_saving_text(int64_t allocated, int64_t full);

// Prints session::position_warning's sentence, if any, as "h2okv: warning: ..." to stderr, once per process
// (a sweep's runs share it).
status warn_positions(const model::model& m, const engine::session_params& p, int64_t run_length);

// Prints "h2okv: error: <message>" to stderr and returns 1.
int fail(const status& s);

}  // namespace h2okv::cli
