// h2okv generate: text generation with a policy-managed KV cache.
#include "h2okv/engine/generate.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "h2okv/core/parallel.h"
#include "h2okv/tokenizer/tokenizer.h"
#include "kv_options.h"

namespace h2okv::cli {
namespace {

struct generate_options {
    model_options model;
    kv_options kv;
    generation_options gen;
    std::string prompt;
    std::string prompt_path;
    bool special = false;
    std::string trace_path;
    std::string stream_stats_path;
    int stream_every = 10000;
};

// One JSON line per processed chunk: {"pos": t, "kept": [[...], ...]} (layer-major, one list per KV head).
void write_trace_line(std::FILE* out, int64_t pos, const std::vector<std::vector<int64_t>>& kept) {
    fmt::print(out, "{{\"pos\": {}, \"kept\": [", pos);
    for (size_t i = 0; i < kept.size(); ++i)
        fmt::print(out, "{}[{}]", i ? ", " : "", fmt::join(kept[i], ", "));
    fmt::print(out, "]}}\n");
}

void print_stats(const engine::session& s, const engine::generation& g, int64_t full_bytes) {
    const auto& st = s.stats();
    const auto& cfg = s.cache().policy().config();
    const auto& pol = s.cache().policy();
    auto tps = [](int64_t n, double sec) { return sec > 0 ? static_cast<double>(n) / sec : 0.0; };
    fmt::print(stderr, "\n--- h2okv generate ---\n");
    fmt::print(stderr, "prefill: {} tokens in {:.3f} s ({:.1f} tokens/s)\n", st.prefill_tokens,
               st.prefill_seconds, tps(st.prefill_tokens, st.prefill_seconds));
    fmt::print(stderr, "decode:  {} tokens in {:.3f} s ({:.1f} tokens/s){}\n", st.decode_tokens,
               st.decode_seconds, tps(st.decode_tokens, st.decode_seconds),
               g.stopped_at_eos ? ", stopped at end-of-generation" : "");
    fmt::print(stderr, "threads: {} (parallel regions: matmul {}, attention {}, commit {})\n",
               omp_get_max_threads(), core::fork_count(core::parallel_site::matmul),
               core::fork_count(core::parallel_site::attention),
               core::fork_count(core::parallel_site::commit));
    fmt::print(stderr, "kv policy: {}\n", cfg.to_string());
    const int units = pol.n_units();
    fmt::print(stderr, "kv units: {} ({}), slots per unit: {}, positions processed: {}\n", units,
               policy::granularity_name(cfg.gran), s.cache().capacity(), s.n_past());
    fmt::print(stderr, "kv kept: {} positions per unit on average ({} in all), evicted: {} ({} per unit)\n",
               static_cast<double>(s.cache().kept_total()) / units, s.cache().kept_total(),
               pol.total_evictions(), static_cast<double>(pol.total_evictions()) / units);
    if (s.cache().window_policy() != nullptr) {
        const auto& hp = s.cache().hparams();
        fmt::print(stderr,
                   "kv window layers: {} of {} layers slide over {} positions, outside the policy (its units "
                   "above are the other layers'): {} slots per KV head each\n",
                   hp.n_sliding(), hp.n_layer, hp.sliding_window, s.cache().window_capacity());
    }
    fmt::print(stderr, "kv bytes: {} allocated (K and V in {}), {}\n", s.cache().bytes(),
               kv::kv_type_name(s.cache().type()), kv_saving_text(s.cache().bytes(), full_bytes));
}

int run_generate(const generate_options& o) {
    o.model.apply_threads();
    auto lm = load_model(o.model.model_path);
    if (!lm.ok()) return fail(lm.error());
    auto tok = tokenizer::tokenizer::from_gguf(*lm->file);
    if (!tok.ok()) return fail(tok.error());
    std::string text = o.prompt;
    if (!o.prompt_path.empty()) {
        auto t = read_text_file(o.prompt_path);
        if (!t.ok()) return fail(t.error().with_context("-f"));
        text = std::move(*t);
    }
    auto prompt = tok->encode(text, /*add_bos=*/true, o.special);
    if (!prompt.ok()) return fail(prompt.error());

    auto gp = o.gen.to_params();
    if (!gp.ok()) return fail(gp.error());
    gp->keep_tokens = false;  // printed as they come: a million-token stream holds no list of them

    auto sp = o.kv.to_session_params(o.model.n_ctx);
    if (!sp.ok()) return fail(sp.error());
    // The prompt is the only multi-token chunk: slots beyond it would never be used.
    sp->prefill_chunk = std::min(sp->prefill_chunk, static_cast<int>(prompt->size()));
    const int64_t run_length = static_cast<int64_t>(prompt->size()) + gp->n_predict;
    auto session = engine::session::create(*lm->model, *sp, run_length);
    if (!session.ok()) return fail(session.error());
    if (auto st = warn_positions(*lm->model, *sp, run_length); !st.ok()) return fail(st);

    std::unique_ptr<std::FILE, int (*)(std::FILE*)> trace(nullptr, &std::fclose);
    if (!o.trace_path.empty()) {
        trace.reset(std::fopen(o.trace_path.c_str(), "w"));
        if (!trace) return fail(io_error("--kv-trace: cannot open '{}' for writing", o.trace_path));
        engine::session* s = session->get();
        std::FILE* f = trace.get();
        (*session)->set_chunk_observer(
            [s, f](int64_t pos) { write_trace_line(f, pos, s->cache().kept_per_head()); });
    }

    auto stats = open_jsonl(o.stream_stats_path);
    if (!stats.ok()) return fail(stats.error().with_context("--stream-stats"));
    if (o.stream_every < 1) return fail(invalid_argument("--stream-every {} must be >= 1", o.stream_every));

    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    const tokenizer::tokenizer& t = *tok;
    // --stream-stats: every stream_every generated tokens, the tokens processed so far, the resident memory
    // and the speed over those tokens, so a long stream shows whether memory and time per token stay flat.
    using clock = std::chrono::steady_clock;
    auto window_start = clock::now();
    int64_t generated = 0;
    const engine::session& s = **session;
    std::ofstream* stats_out = stats->get();
    auto g = engine::generate(
        **session, *prompt, *gp, [&t](int32_t id) { return t.is_eog(id); },
        [&](int32_t id) {
            const std::string piece = t.piece(id);
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            if (stats_out == nullptr || ++generated % o.stream_every != 0) return;
            const auto now = clock::now();
            const double seconds = std::chrono::duration<double>(now - window_start).count();
            window_start = now;
            const nlohmann::json j = {{"tokens", s.n_past()},
                                      {"generated", generated},
                                      {"rss_bytes", current_rss_bytes()},
                                      {"tokens_per_s", seconds > 0 ? o.stream_every / seconds : 0.0},
                                      {"kept", s.cache().kept_total()},
                                      {"policy", s.cache().policy().config().to_string()}};
            *stats_out << j.dump() << "\n";
            stats_out->flush();
        });
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (!g.ok()) return fail(g.error());

    // What a `full` cache of this run allocates (sliding-window layers at their window).
    const auto full = kv::kv_cache::plan(lm->model->params(), policy::params{}, sp->prefill_chunk, run_length,
                                         run_length, (*session)->cache().type());
    print_stats(**session, *g, full.ok() ? full->kv_bytes : 0);
    return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, int* exit_code) {
    auto o = std::make_shared<generate_options>();
    CLI::App* cmd = app.add_subcommand(
        "generate",
        "Generate text after a prompt; the prompt and the generated text go to stdout, statistics "
        "(speed, KV slots, bytes, evictions) to stderr");
    o->model.add_to(*cmd);
    auto* p = cmd->add_option("-p,--prompt", o->prompt, "The prompt (BOS is added first)");
    auto* f = cmd->add_option("-f,--file", o->prompt_path,
                              "Read the prompt from this file (as -p; its bytes as they are)");
    p->excludes(f);
    f->excludes(p);
    o->gen.add_to(*cmd);
    o->kv.add_to(*cmd);
    cmd->add_flag("--special", o->special, "Parse special-token text (</s>, <|endoftext|>) in the prompt");
    cmd->add_option(
        "--kv-trace", o->trace_path,
        "Write one JSON line per processed chunk with the kept positions of every (layer, KV head)");
    cmd->add_option("--stream-stats", o->stream_stats_path,
                    "Append a JSON line every --stream-every generated tokens: tokens processed, resident "
                    "memory, tokens/s over those tokens, positions kept (for curves of long streams)");
    cmd->add_option("--stream-every", o->stream_every, "Generated tokens between --stream-stats lines")
        ->capture_default_str();
    cmd->callback([o, exit_code, p, f] {
        if (p->count() == 0 && f->count() == 0) {
            *exit_code = fail(invalid_argument("generate needs a prompt: -p TEXT or -f FILE"));
            return;
        }
        *exit_code = run_generate(*o);
    });
}

}  // namespace h2okv::cli
