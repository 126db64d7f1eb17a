// h2okv bench: prefill and decode throughput at a given KV depth, in the manner of llama-bench, for one
// sequence or many advancing together (--sequences), in the manner of llama-batched-bench.
//
// One repeat: a wave of `c` fresh sessions; `depth` random tokens are first put into each cache by chunked
// prefill (untimed); then a prompt of p random tokens per sequence is processed (timed: prefill tokens/s,
// all sequences' prompts together in passes of at most --step-tokens); then n random tokens are decoded per
// sequence, one forward pass per step carrying one token of every sequence (timed: decode tokens/s). The
// run length each session is created with, and against which fractional budgets (--kv-budget 0.2)
// resolve, is depth + p + n, and the context is that run length unless -c says otherwise (as llama-bench
// sizes its context; a full cache then holds exactly the run, whatever the model's trained context).
// Evicting policies allocate budget + prefill-chunk slots per unit (the chunk's new tokens need room before
// its evictions), so --kv-prefill-chunk bounds their KV bytes too.
//
// --sequences S with --kv-memory M: the sequences that fit M at once (each charged its cache's footprint,
// K/V and slot tables, as the scheduler admits them) run together; the rest follow in further waves of the
// same size. Throughputs aggregate every sequence's tokens over the timed phases. Each figure is reported as
// the median of the repeats with their min and max, with the KV bytes allocated (at the --kv-type's element
// size), the bytes a full cache of the run would take in the same type, the process's peak RSS and what it
// is made of (the process with the model after one token has read every weight, the KV pool's peak, the
// work buffers).
//
// --phases splits the decode steps' wall time by core::phase (include/h2okv/core/phases.h): the products, K/V
// writes, attention, score commits and chunk opens and closes (the policy's evictions), the rest as `other`;
// and reports the thread time of the score hand-overs inside the attention items.
//
//   h2okv bench -m smollm.gguf -p 512 -n 128 --depth 2048 -t 2 --kv-policy h2o --kv-budget 0.2 --json
//   h2okv bench -m smollm.gguf -p 128 -n 64 --sequences 16 --kv-memory 256MiB --kv-policy h2o --kv-budget 0.2
//   h2okv bench -m smollm.gguf -p 0 -n 64 --depth 512 --sequences 16 --kv-policy h2o --kv-budget 0.2 --phases
#include <fmt/format.h>
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "commands.h"
#include "h2okv/core/phases.h"
#include "h2okv/engine/forward_pass.h"
#include "h2okv/engine/session.h"
#include "h2okv/kernels/kernels.h"
#include "h2okv/kv/memory_pool.h"
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
    int sequences = 1;
    std::string kv_memory = "0";
    int step_tokens = 512;
    bool phases = false;
};

// The decode steps' wall seconds by phase, `other` the rest of `seconds`, and the hand-overs' thread seconds.
nlohmann::json phases_json(const core::phase_times& t, double seconds) {
    nlohmann::json j = {{"seconds", seconds}};
    double rest = seconds;
    for (int k = 0; k < core::k_phases; ++k) {
        const auto p = static_cast<core::phase>(k);
        if (p == core::phase::handover) continue;
        j[core::phase_name(p)] = t.wall[static_cast<size_t>(k)];
        rest -= t.wall[static_cast<size_t>(k)];
    }
    j["other"] = rest;
    j["handover_thread_seconds"] = t.busy[static_cast<size_t>(core::phase_index(core::phase::handover))];
    return j;
}

void print_phases(const core::phase_times& t, double seconds, int threads) {
    const nlohmann::json j = phases_json(t, seconds);
    std::string line;
    for (const char* name : {"products", "attention", "kv_store", "scores", "chunks", "other"})
        line += fmt::format("{}{} {:.1f} %", line.empty() ? "" : ", ", name,
                            100.0 * j[name].get<double>() / seconds);
    fmt::print("decode phases (share of the decode time): {}\n", line);
    fmt::print("score hand-overs inside attention: {:.1f} % of the {} threads' decode time\n",
               100.0 * j["handover_thread_seconds"].get<double>() / (seconds * threads), threads);
}

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

// The CPU's model name with its family and model numbers, as /proc/cpuinfo gives them (virtual machines often
// name only the vendor's line, "Intel(R) Xeon(R) Processor").
std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string line, name = "unknown", family, model;
    auto value = [&line] {
        const auto colon = line.find(':');
        const auto start =
            colon == std::string::npos ? std::string::npos : line.find_first_not_of(" \t", colon + 1);
        return start == std::string::npos ? std::string() : line.substr(start);
    };
    while (std::getline(in, line) && line.find_first_not_of(" \t") != std::string::npos) {
        if (line.rfind("model name", 0) == 0) name = value();
        if (line.rfind("cpu family", 0) == 0) family = value();
        if (line.rfind("model", 0) == 0 && line.rfind("model name", 0) != 0) model = value();
    }
    return family.empty() ? name : fmt::format("{} (family {}, model {})", name, family, model);
}

struct repeat_result {
    double prefill_tps = 0.0, decode_tps = 0.0, depth_seconds = 0.0;
    double prefill_seconds = 0.0, decode_seconds = 0.0;
    int64_t kv_bytes = 0;    // of one sequence
    int64_t work_bytes = 0;  // the pass's and the model's buffers and the sequences' logits, at their largest
    core::phase_times decode_phases;  // with --phases
};

// Forwards each session's run of tokens together, chunk by chunk (the chunks a lone session makes), in
// passes of at most step_tokens tokens; the logits of each run's last token go to last[i] when given.
// on_pass(tokens done) reports progress.
status forward_runs(engine::forward_pass& pass, std::span<const std::unique_ptr<engine::session>> sessions,
                    std::span<const std::vector<int32_t>> runs, int step_tokens, std::span<float* const> last,
                    const std::function<void(int64_t)>& on_pass) {
    std::vector<size_t> fed(sessions.size(), 0);
    std::vector<engine::step_part> parts;
    int64_t done = 0;
    for (;;) {
        parts.clear();
        int budget = step_tokens;
        for (size_t i = 0; i < sessions.size() && budget > 0; ++i) {
            const size_t remaining = runs[i].size() - fed[i];
            H2OKV_ASSIGN_OR_RETURN(const int n, sessions[i]->next_part(remaining, budget));
            if (n == 0) continue;
            engine::step_part part{sessions[i].get(),
                                   std::span<const int32_t>(runs[i]).subspan(fed[i], static_cast<size_t>(n))};
            if (fed[i] + static_cast<size_t>(n) == runs[i].size() && !last.empty() && last[i] != nullptr) {
                part.logits = model::logits_mode::last;
                part.out = last[i];
            }
            parts.push_back(part);
            fed[i] += static_cast<size_t>(n);
            budget -= n;
        }
        if (parts.empty()) return ok_status();
        H2OKV_RETURN_IF_ERROR(pass.run(parts));
        for (const auto& p : parts) done += static_cast<int64_t>(p.tokens.size());
        if (on_pass) on_pass(done);
    }
}

// One wave of `c` sequences through depth, prompt and decode.
result<repeat_result> run_wave(model::model& m, const engine::session_params& sp, const bench_options& o,
                               int64_t run_length, int c, std::mt19937_64& rng, const std::string& label) {
    using clock = std::chrono::steady_clock;
    auto seconds = [](clock::time_point a, clock::time_point b) {
        return std::chrono::duration<double>(b - a).count();
    };
    std::vector<std::unique_ptr<engine::session>> sessions;
    for (int i = 0; i < c; ++i) {
        H2OKV_ASSIGN_OR_RETURN(auto s, engine::session::create(m, sp, run_length));
        sessions.push_back(std::move(s));
    }
    const int64_t n_vocab = m.params().n_vocab;
    engine::forward_pass pass(m);
    std::vector<std::vector<float>> logits(static_cast<size_t>(c),
                                           std::vector<float>(static_cast<size_t>(n_vocab)));
    std::vector<float*> last;
    for (auto& l : logits) last.push_back(l.data());
    repeat_result r;
    std::vector<std::vector<int32_t>> runs(static_cast<size_t>(c));
    if (o.depth > 0) {
        for (auto& run : runs) run = random_tokens(o.depth, n_vocab, rng);
        progress_line progress(label, "depth tokens");
        const int64_t total = o.depth * c;
        const auto t0 = clock::now();
        H2OKV_RETURN_IF_ERROR(forward_runs(pass, sessions, runs, o.step_tokens, {},
                                           [&](int64_t done) { progress(done, total); }));
        r.depth_seconds = seconds(t0, clock::now());
    }
    if (o.n_prompt > 0) {
        for (auto& run : runs) run = random_tokens(o.n_prompt, n_vocab, rng);
        const auto t0 = clock::now();
        H2OKV_RETURN_IF_ERROR(forward_runs(pass, sessions, runs, o.step_tokens, last, nullptr));
        r.prefill_seconds = seconds(t0, clock::now());
        r.prefill_tps = static_cast<double>(o.n_prompt) * c / r.prefill_seconds;
    }
    if (o.n_gen > 0) {
        for (auto& run : runs) run = random_tokens(o.n_gen, n_vocab, rng);
        std::vector<engine::step_part> parts(static_cast<size_t>(c));
        core::phases::reset();
        core::phases::enable(o.phases);
        const auto t0 = clock::now();
        for (int t = 0; t < o.n_gen; ++t) {
            for (int i = 0; i < c; ++i) {
                auto& s = *sessions[static_cast<size_t>(i)];
                H2OKV_RETURN_IF_ERROR(s.open_chunk(1));
                parts[static_cast<size_t>(i)] = {&s,
                                                 {&runs[static_cast<size_t>(i)][static_cast<size_t>(t)], 1},
                                                 model::logits_mode::last,
                                                 last[static_cast<size_t>(i)]};
            }
            H2OKV_RETURN_IF_ERROR(pass.run(parts));
        }
        r.decode_seconds = seconds(t0, clock::now());
        core::phases::enable(false);
        r.decode_phases = core::phases::read();
        r.decode_tps = static_cast<double>(o.n_gen) * c / r.decode_seconds;
    }
    r.kv_bytes = sessions[0]->cache().bytes();
    r.work_bytes = m.work_bytes() + pass.work_bytes() + static_cast<int64_t>(c) * n_vocab * 4;
    return r;
}

int run_bench(const bench_options& o) {
    o.model.apply_threads();
    auto lm = load_model(o.model.model_path);
    if (!lm.ok()) return fail(lm.error());
    // The process with its libraries, the model's metadata and every weight read once (a one-token pass):
    // what the sequences' caches and the work buffers come on top of.
    {
        auto warm = engine::session::create(*lm->model, engine::session_params{}, 1);
        if (!warm.ok()) return fail(warm.error());
        std::vector<float> logits;
        const int32_t token = static_cast<int32_t>(std::min<int64_t>(3, lm->model->params().n_vocab - 1));
        if (auto st =
                (*warm)->process(std::span<const int32_t>(&token, 1), model::logits_mode::last, &logits);
            !st.ok()) {
            return fail(st);
        }
    }
    const int64_t rss_base = current_rss_bytes();
    const model::hparams& hp = lm->model->params();
    const int64_t run_length = o.depth + o.n_prompt + o.n_gen;
    if (run_length < 1) return fail(invalid_argument("depth + p + n is 0; nothing to run"));
    if (o.step_tokens < 1) return fail(invalid_argument("--step-tokens {} must be >= 1", o.step_tokens));
    const int64_t n_ctx = o.model.n_ctx > 0 ? o.model.n_ctx : run_length;
    auto sp = o.kv.to_session_params(n_ctx);
    if (!sp.ok()) return fail(sp.error());
    auto pool = kv::parse_bytes(o.kv_memory);
    if (!pool.ok()) return fail(pool.error().with_context("--kv-memory"));
    auto fp = engine::session::plan(*lm->model, *sp, run_length);
    if (!fp.ok()) return fail(fp.error());
    if (auto st = warn_positions(*lm->model, *sp, run_length); !st.ok()) return fail(st);
    // The sequences that fit the pool at once, as the scheduler would admit them.
    const int64_t fit = *pool > 0 ? *pool / fp->total() : o.sequences;
    const int concurrent = static_cast<int>(std::min<int64_t>(o.sequences, fit));
    if (concurrent < 1) {
        return fail(out_of_memory("one sequence's KV cache needs {} ({} of K/V), more than --kv-memory {}",
                                  kv::format_bytes(fp->total()), kv::format_bytes(fp->kv_bytes),
                                  kv::format_bytes(*pool)));
    }
    const int waves = (o.sequences + concurrent - 1) / concurrent;

    std::mt19937_64 rng(o.seed);
    std::vector<double> prefill, decode, depth_s;
    int64_t kv_bytes = 0, work_bytes = 0;
    core::phase_times phase_sum;  // over every repeat's decode
    double decode_sum = 0.0;
    for (int i = 0; i < o.repeats; ++i) {
        double pf_s = 0.0, dc_s = 0.0, depth = 0.0;
        for (int w = 0; w < waves; ++w) {
            const int c = std::min(concurrent, o.sequences - w * concurrent);
            auto r = run_wave(
                *lm->model, *sp, o, run_length, c, rng,
                waves == 1 ? fmt::format("bench: repeat {}/{}", i + 1, o.repeats)
                           : fmt::format("bench: repeat {}/{}, wave {}/{}", i + 1, o.repeats, w + 1, waves));
            if (!r.ok()) return fail(r.error());
            pf_s += r->prefill_seconds;
            dc_s += r->decode_seconds;
            for (int k = 0; k < core::k_phases; ++k) {
                phase_sum.wall[static_cast<size_t>(k)] += r->decode_phases.wall[static_cast<size_t>(k)];
                phase_sum.busy[static_cast<size_t>(k)] += r->decode_phases.busy[static_cast<size_t>(k)];
            }
            depth += r->depth_seconds;
            kv_bytes = r->kv_bytes;
            work_bytes = std::max(work_bytes, r->work_bytes);
        }
        prefill.push_back(pf_s > 0 ? static_cast<double>(o.n_prompt) * o.sequences / pf_s : 0.0);
        decode.push_back(dc_s > 0 ? static_cast<double>(o.n_gen) * o.sequences / dc_s : 0.0);
        depth_s.push_back(depth);
        decode_sum += dc_s;
    }
    const summary pf = summarize(prefill);
    const summary dc = summarize(decode);
    // What a `full` cache of this run allocates (sliding-window layers at their window).
    const auto full_fp =
        kv::kv_cache::plan(hp, policy::params{}, sp->prefill_chunk, run_length, run_length, sp->kv_type);
    const int64_t full_kv_bytes = full_fp.ok() ? full_fp->kv_bytes : 0;
    const int64_t rss = peak_rss_bytes();
    const int64_t pool_peak = fp->total() * concurrent;
    const int64_t accounted = rss_base + pool_peak + work_bytes;
    const int threads = o.model.threads > 0 ? o.model.threads : omp_get_max_threads();
    const double itl_ms = dc.median > 0 ? 1000.0 * concurrent / dc.median : 0.0;
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
            {"cpu", cpu_model()},
            {"isa", kernels::isa_name(kernels::active_isa())},
            {"repeats", o.repeats},
            {"sequences", o.sequences},
            {"concurrent", concurrent},
            {"waves", waves},
            {"kv_memory", *pool},
            {"step_tokens", o.step_tokens},
            {"prefill_tps", pf.median},
            {"prefill_tps_min", pf.min},
            {"prefill_tps_max", pf.max},
            {"decode_tps", dc.median},
            {"decode_tps_min", dc.min},
            {"decode_tps_max", dc.max},
            {"decode_ms_per_step", itl_ms},
            {"depth_fill_seconds", summarize(depth_s).median},
            {"kv_bytes", kv_bytes},
            {"kv_bytes_full", full_kv_bytes},
            {"kv_footprint", fp->total()},
            {"kv_pool_peak", pool_peak},
            {"work_bytes", work_bytes},
            {"rss_base_bytes", rss_base},
            {"rss_accounted_bytes", accounted},
            {"peak_rss_bytes", rss},
        };
        if (o.phases) j["decode_phases"] = phases_json(phase_sum, decode_sum);
        fmt::print("{}\n", j.dump());
        return 0;
    }
    fmt::print("model: {} ({:.1f} MiB of matrices), cpu: {}\n", o.model.model_path,
               static_cast<double>(lm->model->weight_bytes()) / (1 << 20), cpu_model());
    fmt::print(
        "kv policy: {}, kv type: {}, threads: {}, kernels: {}, repeats: {}, run length {} (depth {} + p {} + "
        "n {})\n",
        sp->kv.to_string(), kv::kv_type_name(sp->kv_type), threads, kernels::isa_name(kernels::active_isa()),
        o.repeats, run_length, o.depth, o.n_prompt, o.n_gen);
    if (o.sequences > 1) {
        fmt::print("sequences: {} ({} at once, {} wave{}), throughputs summed over the sequences\n",
                   o.sequences, concurrent, waves, waves == 1 ? "" : "s");
    }
    fmt::print("{:<10} {:>12} {:>12} {:>12}\n", "test", "t/s median", "min", "max");
    if (o.n_prompt > 0) {
        fmt::print("{:<10} {:>12.2f} {:>12.2f} {:>12.2f}\n", fmt::format("pp{}@d{}", o.n_prompt, o.depth),
                   pf.median, pf.min, pf.max);
    }
    if (o.n_gen > 0) {
        fmt::print("{:<10} {:>12.2f} {:>12.2f} {:>12.2f}\n", fmt::format("tg{}@d{}", o.n_gen, o.depth),
                   dc.median, dc.min, dc.max);
    }
    if (o.sequences > 1 && o.n_gen > 0)
        fmt::print("decode step: {:.2f} ms (one token of each sequence)\n", itl_ms);
    fmt::print("kv bytes: {} allocated per sequence (K and V in {}), {}; footprint with slot tables {}\n",
               kv_bytes, kv::kv_type_name(sp->kv_type), kv_saving_text(kv_bytes, full_kv_bytes), fp->total());
    fmt::print(
        "peak rss: {} (the process with the model, every weight read: {} + kv pool {} + work buffers {} = "
        "{})\n",
        kv::format_bytes(rss), kv::format_bytes(rss_base), kv::format_bytes(pool_peak),
        kv::format_bytes(work_bytes), kv::format_bytes(accounted));
    if (o.phases && decode_sum > 0) print_phases(phase_sum, decode_sum, threads);
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
    cmd->add_option("--sequences", o->sequences,
                    "Sequences advancing together (one forward pass per step; throughputs summed over them)")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option(
           "--kv-memory", o->kv_memory,
           "KV memory pool (512MiB, 1.5GiB; 0: no limit): the sequences that fit run at once, the rest "
           "in further waves")
        ->capture_default_str();
    cmd->add_option("--step-tokens", o->step_tokens,
                    "Most tokens per forward pass while prompts are processed")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    o->kv.add_to(*cmd);
    cmd->add_flag(
        "--phases", o->phases,
        "Split the decode time by phase: products, attention, K/V writes, score commits, chunk "
        "opens and closes (the evictions), other; and the score hand-overs' share inside attention");
    cmd->add_flag("--json", o->json, "Print one JSON object (prefill_tps, decode_tps, kv_bytes, cpu, ...)");
    cmd->callback([o, exit_code] { *exit_code = run_bench(*o); });
}

}  // namespace h2okv::cli
