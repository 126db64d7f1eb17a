// h2okv bench: prefill and decode throughput at a given KV depth, in the manner of llama-bench.
//
// One repeat: a fresh session; `depth` random tokens are first put into the cache by chunked prefill
// (untimed); then a prompt of p random tokens is processed as one prefill (timed: prefill tokens/s); then n
// random tokens are decoded one at a time (timed: decode tokens/s). The run length the session is created
// with, and against which fractional budgets (--kv-budget 0.2) resolve, is depth + p + n, and the context
// is that run length unless -c says otherwise (as llama-bench sizes its context; a full cache then holds
// exactly the run, whatever the model's trained context). Evicting policies allocate budget + prefill-chunk
// slots per unit (the chunk's new tokens need room before its evictions), so --kv-prefill-chunk bounds
// their KV bytes too. Each figure is reported as the median of the repeats with their min and max, with the
// KV bytes allocated (at the --kv-type's element size), the bytes a full cache of the run would take in the
// same type, and the process's peak RSS.
//
//   h2okv bench -m smollm.gguf -p 512 -n 128 --depth 2048 -t 2 --kv-policy h2o --kv-budget 0.2 --json
#include <fmt/format.h>
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "commands.h"
#include "h2okv/engine/session.h"
#include "h2okv/kernels/kernels.h"
#include "kv_options.h"

namespace h2okv::cli {
namespace {

struct bench_options {
    model_options model;
    kv_options kv;
    int n_prompt = 512;
    int n_gen = 128;
    int64_t depth = 0;
    int repeats = 3;
    uint64_t seed = 1;
    bool json = false;
};

struct summary {
    double median = 0.0, min = 0.0, max = 0.0;
};

summary summarize(std::vector<double> v) {
    if (v.empty()) return {};
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    const double med = n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return {med, v.front(), v.back()};
}

std::vector<int32_t> random_tokens(int64_t n, int64_t n_vocab, std::mt19937_64& rng) {
    // Ids from 3 up: past <unk>, <s>, </s> in llama vocabularies, so no control token steers the run.
    std::uniform_int_distribution<int64_t> dist(std::min<int64_t>(3, n_vocab - 1), n_vocab - 1);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& id : t) id = static_cast<int32_t>(dist(rng));
    return t;
}

int64_t peak_rss_bytes() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

struct repeat_result {
    double prefill_tps = 0.0, decode_tps = 0.0, depth_seconds = 0.0;
    int64_t kv_bytes = 0;
};

result<repeat_result> run_once(model::model& m, const engine::session_params& sp, const bench_options& o,
                               int64_t run_length, std::mt19937_64& rng, const std::string& label) {
    using clock = std::chrono::steady_clock;
    auto seconds = [](clock::time_point a, clock::time_point b) {
        return std::chrono::duration<double>(b - a).count();
    };
    H2OKV_ASSIGN_OR_RETURN(auto s, engine::session::create(m, sp, run_length));
    const int64_t n_vocab = m.params().n_vocab;
    repeat_result r;
    std::vector<float> logits;
    if (o.depth > 0) {
        const auto fill = random_tokens(o.depth, n_vocab, rng);
        // In slices of whole prefill chunks (the same chunks as one call), so a long fill reports progress.
        const int64_t slice = int64_t{sp.prefill_chunk} * ((511 + sp.prefill_chunk) / sp.prefill_chunk);
        progress_line progress(label, "depth tokens");
        const auto t0 = clock::now();
        for (int64_t i = 0; i < o.depth; i += slice) {
            const auto n = static_cast<size_t>(std::min(slice, o.depth - i));
            H2OKV_RETURN_IF_ERROR(
                s->process(std::span<const int32_t>(fill).subspan(static_cast<size_t>(i), n),
                           model::logits_mode::none, &logits));
            progress(i + static_cast<int64_t>(n), o.depth);
        }
        r.depth_seconds = seconds(t0, clock::now());
    }
    if (o.n_prompt > 0) {
        const auto prompt = random_tokens(o.n_prompt, n_vocab, rng);
        const auto t0 = clock::now();
        H2OKV_RETURN_IF_ERROR(s->process(prompt, model::logits_mode::last, &logits));
        r.prefill_tps = o.n_prompt / seconds(t0, clock::now());
    }
    if (o.n_gen > 0) {
        const auto gen = random_tokens(o.n_gen, n_vocab, rng);
        const auto t0 = clock::now();
        for (int32_t id : gen) {
            H2OKV_RETURN_IF_ERROR(
                s->process(std::span<const int32_t>(&id, 1), model::logits_mode::last, &logits));
        }
        r.decode_tps = o.n_gen / seconds(t0, clock::now());
    }
    r.kv_bytes = s->cache().bytes();
    return r;
}

int run_bench(const bench_options& o) {
    o.model.apply_threads();
    auto lm = load_model(o.model.model_path);
    if (!lm.ok()) return fail(lm.error());
    const model::hparams& hp = lm->model->params();
    const int64_t run_length = o.depth + o.n_prompt + o.n_gen;
    if (run_length < 1) return fail(invalid_argument("depth + p + n is 0; nothing to run"));
    const int64_t n_ctx = o.model.n_ctx > 0 ? o.model.n_ctx : run_length;
    auto sp = o.kv.to_session_params(n_ctx);
    if (!sp.ok()) return fail(sp.error());

    std::mt19937_64 rng(o.seed);
    std::vector<double> prefill, decode, depth_s;
    int64_t kv_bytes = 0;
    for (int i = 0; i < o.repeats; ++i) {
        auto r = run_once(*lm->model, *sp, o, run_length, rng,
                          fmt::format("bench: repeat {}/{}", i + 1, o.repeats));
        if (!r.ok()) return fail(r.error());
        prefill.push_back(r->prefill_tps);
        decode.push_back(r->decode_tps);
        depth_s.push_back(r->depth_seconds);
        kv_bytes = r->kv_bytes;
    }
    const summary pf = summarize(prefill);
    const summary dc = summarize(decode);
    const int64_t full_kv_bytes = 2 * int64_t{hp.n_layer} * hp.n_kv_head * run_length *
                                  static_cast<int64_t>(kv::kv_row_bytes(sp->kv_type, hp.head_dim));
    const int64_t rss = peak_rss_bytes();
    const int threads = o.model.threads > 0 ? o.model.threads : omp_get_max_threads();
    if (o.json) {
        nlohmann::json j = {
            {"model", o.model.model_path},
            {"weight_bytes", lm->model->weight_bytes()},
            {"kv_policy", sp->kv.to_string()},
            {"kv_type", kv::kv_type_name(sp->kv_type)},
            {"n_prompt", o.n_prompt},
            {"n_gen", o.n_gen},
            {"depth", o.depth},
            {"run_length", run_length},
            {"n_ctx", n_ctx},
            {"threads", threads},
            {"isa", kernels::isa_name(kernels::active_isa())},
            {"repeats", o.repeats},
            {"prefill_tps", pf.median},
            {"prefill_tps_min", pf.min},
            {"prefill_tps_max", pf.max},
            {"decode_tps", dc.median},
            {"decode_tps_min", dc.min},
            {"decode_tps_max", dc.max},
            {"depth_fill_seconds", summarize(depth_s).median},
            {"kv_bytes", kv_bytes},
            {"kv_bytes_full", full_kv_bytes},
            {"peak_rss_bytes", rss},
        };
        fmt::print("{}\n", j.dump());
        return 0;
    }
    fmt::print("model: {} ({:.1f} MiB of matrices)\n", o.model.model_path,
               static_cast<double>(lm->model->weight_bytes()) / (1 << 20));
    fmt::print(
        "kv policy: {}, kv type: {}, threads: {}, kernels: {}, repeats: {}, run length {} (depth {} + p {} + "
        "n "
        "{})\n",
        sp->kv.to_string(), kv::kv_type_name(sp->kv_type), threads, kernels::isa_name(kernels::active_isa()),
        o.repeats, run_length, o.depth, o.n_prompt, o.n_gen);
    fmt::print("{:<10} {:>12} {:>12} {:>12}\n", "test", "t/s median", "min", "max");
    if (o.n_prompt > 0) {
        fmt::print("{:<10} {:>12.2f} {:>12.2f} {:>12.2f}\n", fmt::format("pp{}@d{}", o.n_prompt, o.depth),
                   pf.median, pf.min, pf.max);
    }
    if (o.n_gen > 0) {
        fmt::print("{:<10} {:>12.2f} {:>12.2f} {:>12.2f}\n", fmt::format("tg{}@d{}", o.n_gen, o.depth),
                   dc.median, dc.min, dc.max);
    }
    fmt::print("kv bytes: {} allocated (K and V in {}), {} for a full cache of the run ({:.3f}x)\n", kv_bytes,
               kv::kv_type_name(sp->kv_type), full_kv_bytes,
               full_kv_bytes > 0 ? static_cast<double>(kv_bytes) / static_cast<double>(full_kv_bytes) : 0.0);
    fmt::print("peak rss: {:.1f} MiB\n", static_cast<double>(rss) / (1 << 20));
    return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, int* exit_code) {
    auto o = std::make_shared<bench_options>();
    CLI::App* cmd = app.add_subcommand(
        "bench",
        "Measure prefill and decode tokens/s after `depth` tokens of KV cache (random tokens; median, min "
        "and max of the repeats), with KV bytes and peak RSS. The run is depth + p + n tokens, which is also "
        "the context unless -c is given, and what fractional budgets refer to");
    o->model.add_to(*cmd);
    cmd->add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens processed as one timed prefill")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    cmd->add_option("-n,--n-gen", o->n_gen, "Tokens decoded one at a time, timed")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    cmd->add_option("--depth", o->depth, "Tokens put into the KV cache (chunked prefill) before timing")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    cmd->add_option("-r,--repeats", o->repeats, "Repeats (a fresh session each)")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--seed", o->seed, "Seed of the random tokens")->capture_default_str();
    o->kv.add_to(*cmd);
    cmd->add_flag("--json", o->json, "Print one JSON object (prefill_tps, decode_tps, kv_bytes, ...)");
    cmd->callback([o, exit_code] { *exit_code = run_bench(*o); });
}

}  // namespace h2okv::cli
