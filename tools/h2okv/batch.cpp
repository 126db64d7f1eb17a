// h2okv batch: generation for many prompts at once (continuous batching over one KV memory pool).
//
// Every line of the prompts file is a prompt (blank lines are skipped; --escape turns \n, \t and \\ into
// characters). The sequences advance together, one forward pass per step, each with the KV flags' policy and
// its own fractional budget (BOS + prompt + -n, as `generate`). stdout: each prompt's text as `generate`
// prints it, in input order, as soon as it and every earlier prompt are done; stderr: progress and the
// totals; --jsonl: one record per prompt.
//
//   h2okv batch -f prompts.txt -n 128 --parallel 16 --kv-memory 256MiB --kv-policy h2o --kv-budget 0.2
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "h2okv/engine/scheduler.h"
#include "h2okv/tokenizer/tokenizer.h"
#include "kv_options.h"

namespace h2okv::cli {
namespace {

struct batch_options {
    model_options model;
    kv_options kv;
    generation_options gen;
    batching_options batching;
    std::string prompts_path;
    bool escape = false;
    bool special = false;
    std::string jsonl_path;
};

std::string unescape(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\\' || i + 1 == s.size()) {
            out += s[i];
            continue;
        }
        switch (const char c = s[++i]) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case '\\': out += '\\'; break;
            default: out += {'\\', c};  // not an escape: kept as written
        }
    }
    return out;
}

std::vector<std::string> read_prompts(const std::string& text, bool escape) {
    std::vector<std::string> prompts;
    size_t start = 0;
    while (start <= text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(start, end - start);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") != std::string::npos)
            prompts.push_back(escape ? unescape(line) : line);
        start = end + 1;
    }
    return prompts;
}

struct prompt_state {
    std::string text;
    std::vector<int32_t> ids;
    bool done = false;
    engine::sequence_result result;
};

int run_batch(const batch_options& o) {
    o.model.apply_threads();
    auto text = read_text_file(o.prompts_path);
    if (!text.ok()) return fail(text.error().with_context("-f"));
    const std::vector<std::string> lines = read_prompts(*text, o.escape);
    if (lines.empty())
        return fail(invalid_argument("-f: '{}' holds no prompt (one per line)", o.prompts_path));
    auto lm = load_model(o.model.model_path);
    if (!lm.ok()) return fail(lm.error());
    auto tok = tokenizer::tokenizer::from_gguf(*lm->file);
    if (!tok.ok()) return fail(tok.error());
    auto gp = o.gen.to_params();
    if (!gp.ok()) return fail(gp.error());
    auto sp = o.kv.to_session_params(o.model.n_ctx);
    if (!sp.ok()) return fail(sp.error());
    auto bp = o.batching.to_params();
    if (!bp.ok()) return fail(bp.error());
    auto out_jsonl = open_jsonl(o.jsonl_path);
    if (!out_jsonl.ok()) return fail(out_jsonl.error());
    auto sch = engine::scheduler::create(*lm->model, *bp);
    if (!sch.ok()) return fail(sch.error());

    std::vector<prompt_state> prompts(lines.size());
    std::vector<size_t> index_of_id;  // id - 1 -> prompt index (ids are 1, 2, ... in submit order)
    const tokenizer::tokenizer& t = *tok;
    int64_t longest = 0;  // the longest run, for the positions warning
    for (size_t i = 0; i < lines.size(); ++i) {
        prompts[i].text = lines[i];
        auto ids = t.encode(lines[i], /*add_bos=*/true, o.special);
        if (!ids.ok()) return fail(ids.error().with_context(fmt::format("prompt {}", i + 1)));
        prompts[i].ids = *ids;
        longest = std::max(longest, static_cast<int64_t>(ids->size()) + gp->n_predict);
        engine::request r;
        r.prompt = *ids;
        r.session = *sp;
        r.generation = *gp;
        r.is_end = [&t](int32_t id) { return t.is_eog(id); };
        auto id = (*sch)->submit(std::move(r));
        if (!id.ok()) return fail(id.error().with_context(fmt::format("prompt {}", i + 1)));
        index_of_id.push_back(i);
    }

    if (auto st = warn_positions(*lm->model, *sp, longest); !st.ok()) return fail(st);
    const auto start = std::chrono::steady_clock::now();
    progress_line progress("batch", "prompts");
    size_t n_done = 0, next_print = 0;
    int64_t generated = 0;
    int errors = 0;
    while (!(*sch)->idle()) {
        auto finished = (*sch)->step();
        if (!finished.ok()) return fail(finished.error());
        for (auto& r : *finished) {
            prompt_state& p = prompts[index_of_id[r.id - 1]];
            p.result = std::move(r);
            p.done = true;
            ++n_done;
            generated += static_cast<int64_t>(p.result.tokens.size());
        }
        for (; next_print < prompts.size() && prompts[next_print].done; ++next_print) {
            const prompt_state& p = prompts[next_print];
            std::string completion;
            for (int32_t id : p.result.tokens) completion += t.piece(id);
            fmt::print("{}{}\n", p.text, completion);
            std::fflush(stdout);
            if (p.result.reason == engine::finish_reason::error) {
                ++errors;
                fmt::print(stderr, "h2okv: error: prompt {}: {}\n", next_print + 1, p.result.error.message());
            }
            if (*out_jsonl) {
                const auto& r = p.result;
                const double decode_tps = r.decode_seconds > 0 && r.tokens.size() > 1
                                              ? static_cast<double>(r.tokens.size() - 1) / r.decode_seconds
                                              : 0.0;
                nlohmann::json j = {{"index", next_print},
                                    {"prompt", p.text},
                                    {"completion", completion},
                                    {"prompt_tokens", r.prompt_tokens},
                                    {"completion_tokens", r.tokens.size()},
                                    {"finish_reason", engine::finish_reason_name(r.reason)},
                                    {"kv_policy", r.policy},
                                    {"kv_type", kv::kv_type_name(r.kv_type)},
                                    {"kv_capacity", r.kv_capacity},
                                    {"kv_bytes", r.kv_bytes},
                                    {"kv_footprint", r.kv_footprint},
                                    {"evictions", r.evictions},
                                    {"queued_seconds", r.queued_seconds},
                                    {"prefill_seconds", r.prefill_seconds},
                                    {"decode_seconds", r.decode_seconds},
                                    {"decode_tps", decode_tps},
                                    {"model_sha256", lm->file->sha256()},
                                    {"seed", gp->sampling.seed}};
                if (r.reason == engine::finish_reason::error) j["error"] = r.error.message();
                **out_jsonl << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
            }
        }
        progress(static_cast<int64_t>(n_done), static_cast<int64_t>(prompts.size()));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto& st = (*sch)->stats();
    fmt::print(stderr, "\n--- h2okv batch ---\n");
    fmt::print(
        stderr, "prompts: {} ({} prompt tokens, {} generated) in {:.3f} s: {:.1f} generated tokens/s\n",
        prompts.size(), st.prefill_tokens, generated, seconds, seconds > 0 ? generated / seconds : 0.0);
    fmt::print(stderr, "steps: {}, most sequences at once: {} (--parallel {})\n", st.steps, st.max_active,
               bp->parallel);
    fmt::print(stderr, "kv memory: peak {} of {}\n", kv::format_bytes((*sch)->pool().peak()),
               bp->kv_memory > 0 ? kv::format_bytes(bp->kv_memory) : std::string("no limit"));
    return errors > 0 ? 1 : 0;
}

}  // namespace

void add_batch_command(CLI::App& app, int* exit_code) {
    auto o = std::make_shared<batch_options>();
    CLI::App* cmd = app.add_subcommand(
        "batch",
        "Generate for every prompt of a file (one per line) with continuous batching: many sequences in one "
        "forward pass per step, each with its own KV cache, admitted while they fit --kv-memory. stdout: "
        "each "
        "prompt's text as `generate` prints it, in input order");
    o->model.add_to(*cmd);
    cmd->add_option("-f,--file", o->prompts_path, "Prompts, one per line (blank lines skipped)")->required();
    cmd->add_flag("--escape", o->escape, "Read \\n, \\t, \\r and \\\\ in the prompts as characters");
    cmd->add_flag("--special", o->special, "Parse special-token text (</s>, <|endoftext|>) in the prompts");
    o->gen.add_to(*cmd);
    o->batching.add_to(*cmd);
    o->kv.add_to(*cmd);
    cmd->add_option(
        "--jsonl", o->jsonl_path,
        "Append one JSON line per prompt (prompt, completion, token counts, KV statistics, timings)");
    cmd->callback([o, exit_code] { *exit_code = run_batch(*o); });
}

}  // namespace h2okv::cli
