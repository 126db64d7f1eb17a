#include "kv_options.h"

#include <fmt/format.h>
#include <omp.h>

namespace h2okv::cli {

void model_options::add_to(CLI::App& cmd) {
    cmd.add_option("-m,--model", model_path, "GGUF model file (default: the bundled stories260K)")
        ->capture_default_str();
    cmd.add_option("-t,--threads", threads, "Threads (0: all cores)")->check(CLI::NonNegativeNumber);
    cmd.add_option("-c,--ctx-size", n_ctx, "Context length (0: the model's); bounds the run under `full`")
        ->check(CLI::NonNegativeNumber);
}

void model_options::apply_threads() const {
    if (threads > 0) omp_set_num_threads(threads);
}

void kv_options::add_to(CLI::App& cmd) {
    std::string names;
    for (const auto& n : policy::policy_names()) names += (names.empty() ? "" : ", ") + n;
    cmd.add_option("--kv-policy", policy, "KV eviction policy: " + names)->capture_default_str();
    cmd.add_option(
        "--kv-budget", budget,
        "KV budget per eviction unit: a token count (256) or a fraction of the run's length (0.2)");
    cmd.add_option("--kv-recent", recent, "Most recent tokens protected from eviction (default: per policy)");
    cmd.add_option("--kv-sinks", sinks, "First positions protected from eviction (default: per policy)");
    cmd.add_option("--kv-decay", decay, "Score decay per query position, in (0, 1] (h2o; default 1)");
    cmd.add_option("--kv-granularity", granularity, "One kept set per: head, layer or model")
        ->capture_default_str();
    cmd.add_option("--kv-prefill-chunk", prefill_chunk,
                   "Prompt tokens per prefill chunk (evictions after each)")
        ->capture_default_str();
}

result<policy::params> kv_options::to_params() const {
    policy::params p;
    p.name = policy;
    if (!budget.empty()) {
        auto b = policy::budget_spec::parse(budget);
        if (!b.ok()) return b.error().with_context("--kv-budget");
        p.budget = *b;
    }
    p.recent = recent;
    p.sinks = sinks;
    p.decay = decay;
    auto g = policy::parse_granularity(granularity);
    if (!g.ok()) return g.error().with_context("--kv-granularity");
    p.gran = *g;
    return p;
}

result<engine::session_params> kv_options::to_session_params(int64_t n_ctx) const {
    engine::session_params sp;
    H2OKV_ASSIGN_OR_RETURN(sp.kv, to_params());
    sp.prefill_chunk = prefill_chunk;
    sp.n_ctx = n_ctx;
    H2OKV_RETURN_IF_ERROR(sp.validate());
    return sp;
}

result<loaded_model> load_model(const std::string& path) {
    loaded_model lm;
    H2OKV_ASSIGN_OR_RETURN(lm.file, gguf::file::open(path));
    H2OKV_ASSIGN_OR_RETURN(lm.model, model::model::load(*lm.file));
    return lm;
}

int fail(const status& s) {
    fmt::print(stderr, "h2okv: error: {}\n", s.message());
    return 1;
}

}  // namespace h2okv::cli
