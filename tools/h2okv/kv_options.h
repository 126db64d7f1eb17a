// The flags every subcommand that runs a model shares: the model, threads, context and the KV policy.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

#include "h2okv/engine/session.h"
#include "h2okv/gguf/gguf.h"
#include "h2okv/model/model.h"
#include "h2okv/policy/policy.h"

namespace h2okv::cli {

struct model_options {
    std::string model_path = H2OKV_DEFAULT_MODEL;
    int threads = 0;  // 0: all cores
    int64_t n_ctx = 0;

    void add_to(CLI::App& cmd);
    // Applies the thread count (OpenMP).
    void apply_threads() const;
};

struct kv_options {
    std::string policy = "full";
    std::string budget;
    std::optional<int64_t> recent;  // unset: the policy's default
    std::optional<int64_t> sinks;
    std::optional<double> decay;
    std::string granularity = "head";
    int prefill_chunk = 512;

    void add_to(CLI::App& cmd);
    result<policy::params> to_params() const;
    result<engine::session_params> to_session_params(int64_t n_ctx) const;
};

// A model and the file it lives in (the model's weights point into the mapped file).
struct loaded_model {
    std::unique_ptr<gguf::file> file;
    std::unique_ptr<model::model> model;
};
result<loaded_model> load_model(const std::string& path);

// Prints "h2okv: error: <message>" to stderr and returns 1.
int fail(const status& s);

}  // namespace h2okv::cli
