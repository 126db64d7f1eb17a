#include "kv_options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "h2okv/tokenizer/tokenizer.h"

namespace h2okv::cli {

void model_options::add_to(CLI::App& cmd) {
    cmd.add_option("-m,--model", model_path,
                   "GGUF model file (default: the bundled stories260K: " + model_search_text() + ")")
        ->capture_default_str();
    cmd.add_option("-t,--threads", threads, "Threads (0: all cores)")->check(CLI::NonNegativeNumber);
    cmd.add_option("-c,--ctx-size", n_ctx, "Context length (0: the model's); bounds the run under `full`")
        ->check(CLI::NonNegativeNumber);
}

void model_options::apply_threads() const {
    if (threads > 0) omp_set_num_threads(threads);
}

void kv_options::add_to(CLI::App& cmd) {
    // Each policy's own parameters, grouped by name: "proxy (h2o, tova; default 0: ...)".
    std::string names;
    std::vector<std::pair<policy::extra_param, std::string>> extras;
    for (const auto& f : policy::policy_catalog()) {
        names += (names.empty() ? "" : ", ") + f.name;
        for (const auto& x : f.extra) {
            auto it = std::find_if(extras.begin(), extras.end(),
                                   [&](const auto& e) { return e.first.name == x.name; });
            if (it == extras.end()) {
                extras.emplace_back(x, f.name);
            } else {
                it->second += ", " + f.name;
            }
        }
    }
    std::string params_help;
    for (const auto& [x, owners] : extras) {
        params_help += fmt::format("{}{} ({}; default {}): {}", params_help.empty() ? "" : "; ", x.name,
                                   owners, x.default_value, x.help);
    }
    policy_option_ =
        cmd.add_option("--kv-policy", policy, "KV eviction policy: " + names)->capture_default_str();
    cmd.add_option("--kv-param", policy_params,
                   "A parameter of the policy's own, NAME=VALUE (repeatable): " + params_help);
    budget_option_ = cmd.add_option(
        "--kv-budget", budget,
        "KV budget per eviction unit: a token count (256) or a fraction of the run's length (0.2); "
        "always tokens, whatever --kv-type (a q4_0 cache of budget 0.2 keeps as many tokens as an "
        "f16 one, in fewer bytes); with --kv-schedule or --kv-config, the mean over the units");
    cmd.add_option(
        "--kv-budget-bytes", budget_bytes,
        "KV budget as bytes of K/V per sequence (64MiB, 512KiB, bytes) instead of --kv-budget: the "
        "largest token budget whose K/V rows (budget + prefill chunk slots, at --kv-type's row size) "
        "fit; an evicting policy with uniform budgets only");
    cmd.add_option("--kv-schedule", schedule,
                   "Budgets across layers: uniform, or pyramid (PyramidKV: (1 + ratio) x budget at the first "
                   "layer falling linearly to (1 - ratio) x budget at the last, same total; real per-unit "
                   "capacities)")
        ->capture_default_str();
    cmd.add_option("--kv-ratio", ratio, "The pyramid schedule's ratio, in [0, 1) (default 0.5)");
    cmd.add_option("--kv-config", config_path,
                   "A KV configuration from `h2okv calibrate` (JSON): per-head budget shares, per-layer "
                   "recent shares and decays; its policy and budget apply unless --kv-policy / --kv-budget "
                   "are given");
    cmd.add_option("--kv-recent", recent, "Most recent tokens protected from eviction (default: per policy)");
    cmd.add_option("--kv-sinks", sinks, "First positions protected from eviction (default: per policy)");
    cmd.add_option("--kv-decay", decay, "Score decay per query position, in (0, 1] (h2o; default 1)");
    cmd.add_option("--kv-granularity", granularity,
                   "One kept set per: head, layer or model (default: the policy's; layer for tova, as its "
                   "paper averages a layer's heads, head for the others)");
    cmd.add_option("--kv-positions", positions,
                   "RoPE positions of cached tokens: original (their place in the text) or rolling (their "
                   "place in the cache, 0..k-1, so evicting policies stream past the trained context)")
        ->capture_default_str();
    cmd.add_option("--kv-prefill-chunk", prefill_chunk,
                   "Prompt tokens per prefill chunk (evictions after each)")
        ->capture_default_str();
    cmd.add_option(
           "--kv-type", kv_type,
           "Element type of stored K and V: " + kv::kv_type_names() +
               " (q8_0, q4_0, q4_1: ggml's blocks of 32, as llama.cpp's -ctk/-ctv; they need head_dim a "
               "multiple of 32)")
        ->capture_default_str();
}

result<kv_config> read_kv_config(const std::string& path) {
    const auto fail = [&](const std::string& what) {
        return invalid_argument("--kv-config '{}': {}", path, what);
    };
    H2OKV_ASSIGN_OR_RETURN(const std::string text, read_text_file(path));
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        return fail(fmt::format("not JSON ({})", e.what()));
    }
    if (!j.is_object() || j.value("format", std::string()) != "h2okv-kv-config") {
        return fail(
            "expected a JSON object with \"format\": \"h2okv-kv-config\" (what h2okv calibrate writes)");
    }
    if (!j.contains("version") || j["version"] != 1) return fail("version must be 1");
    kv_config c;
    try {
        c.policy = j.value("policy", std::string());
        c.budget = j.value("budget", std::string());
        c.n_layer = j.at("n_layer").get<int>();
        c.n_kv_head = j.at("n_kv_head").get<int>();
        auto g = policy::parse_granularity(j.value("granularity", std::string("head")));
        if (!g.ok()) return fail(g.error().message());
        c.gran = *g;
        if (j.contains("sinks")) c.sinks = j["sinks"].get<int64_t>();
        for (const char* key : {"shares", "recents", "decays"}) {
            if (!j.contains(key)) continue;
            auto& v = std::string_view(key) == "shares"    ? c.shares
                      : std::string_view(key) == "recents" ? c.recents
                                                           : c.decays;
            v = j[key].get<std::vector<double>>();
        }
    } catch (const nlohmann::json::exception& e) {
        return fail(fmt::format("a field is missing or of the wrong type ({})", e.what()));
    }
    for (const auto& item : j.items()) {
        static const std::set<std::string> known = {
            "format",       "version", "policy", "budget",   "granularity", "n_layer",
            "n_kv_head",    "sinks",   "shares", "recents",  "decays",      "model",
            "model_sha256", "text",    "tokens", "segments", "statistics",  "candidates"};
        if (known.count(item.key()) == 0) {
            return fail(
                fmt::format("unknown field '{}' (a field this version does not read could change the "
                            "configuration)",
                            item.key()));
        }
    }
    if (c.n_layer < 1 || c.n_kv_head < 1) return fail("n_layer and n_kv_head must be >= 1");
    return c;
}

result<policy::params> kv_options::to_params() const {
    policy::params p;
    p.name = policy;
    std::optional<kv_config> config;
    if (!config_path.empty()) {
        H2OKV_ASSIGN_OR_RETURN(config, read_kv_config(config_path));
        const bool policy_given = policy_option_ != nullptr && policy_option_->count() > 0;
        if (!policy_given && !config->policy.empty()) p.name = config->policy;
    }
    // Eviction flags under a policy that keeps everything would be silently ignored: refuse them.
    if (policy::facts_of(p.name).ok() && !policy::policy_evicts(p.name)) {
        std::vector<std::string> given;
        if (!budget.empty()) given.push_back("--kv-budget");
        if (!budget_bytes.empty()) given.push_back("--kv-budget-bytes");
        if (recent) given.push_back("--kv-recent");
        if (sinks) given.push_back("--kv-sinks");
        if (decay) given.push_back("--kv-decay");
        if (schedule != "uniform") given.push_back("--kv-schedule");
        if (ratio) given.push_back("--kv-ratio");
        if (!config_path.empty()) given.push_back("--kv-config");
        if (!given.empty()) {
            std::string evicting;
            for (const auto& f : policy::policy_catalog()) {
                if (policy::policy_evicts(f.name)) evicting += (evicting.empty() ? "" : ", ") + f.name;
            }
            return invalid_argument(
                "{} given, but --kv-policy is {}{}, which keeps every token and takes no budget; name an "
                "evicting policy with --kv-policy ({})",
                fmt::join(given, ", "), p.name, p.name == policy::params{}.name ? " (the default)" : "",
                evicting);
        }
    }
    if (!budget.empty()) {
        auto b = policy::budget_spec::parse(budget);
        if (!b.ok()) return b.error().with_context("--kv-budget");
        p.budget = *b;
    } else if (config && !config->budget.empty()) {
        auto b = policy::budget_spec::parse(config->budget);
        if (!b.ok()) return b.error().with_context(fmt::format("--kv-config '{}': budget", config_path));
        p.budget = *b;
    }
    auto sched = policy::parse_budget_schedule(schedule);
    if (!sched.ok()) return sched.error().with_context("--kv-schedule");
    p.schedule = *sched;
    p.ratio = ratio;
    p.recent = recent;
    p.sinks = sinks;
    p.decay = decay;
    if (!policy_params.empty()) {
        // The policy's spec parser validates the names against the policy and the values as numbers.
        std::string spec = policy + ":";
        for (size_t i = 0; i < policy_params.size(); ++i) spec += (i > 0 ? "," : "") + policy_params[i];
        auto parsed = policy::params::parse(spec);
        if (!parsed.ok()) return parsed.error().with_context("--kv-param");
        if (parsed->budget || parsed->recent || parsed->sinks || parsed->decay ||
            spec.find("granularity=") != std::string::npos || spec.find("positions=") != std::string::npos) {
            return invalid_argument(
                "--kv-param takes the policy's own parameters; give budget, recent, sinks, decay, "
                "granularity and positions with their --kv-* flags");
        }
        p.extra = parsed->extra;
    }
    if (!granularity.empty()) {
        auto g = policy::parse_granularity(granularity);
        if (!g.ok()) return g.error().with_context("--kv-granularity");
        p.gran = *g;
    }
    auto m = policy::parse_position_mode(positions);
    if (!m.ok()) return m.error().with_context("--kv-positions");
    p.positions = *m;
    if (config) {
        if (p.gran && *p.gran != config->gran) {
            return invalid_argument(
                "--kv-config '{}' was calibrated for granularity {}, but --kv-granularity is {}; give "
                "--kv-granularity {} or leave it out",
                config_path, policy::granularity_name(config->gran), policy::granularity_name(*p.gran),
                policy::granularity_name(config->gran));
        }
        p.gran = config->gran;
        if (p.schedule != policy::budget_schedule::uniform && !config->shares.empty()) {
            return invalid_argument(
                "--kv-schedule and --kv-config's shares both set the units' budgets; give one");
        }
        if (!p.sinks) p.sinks = config->sinks;
        p.shares = config->shares;
        p.recents = config->recents;
        p.decays = config->decays;
    }
    return p;
}

result<engine::session_params> kv_options::to_session_params(int64_t n_ctx) const {
    engine::session_params sp;
    H2OKV_ASSIGN_OR_RETURN(sp.kv, to_params());
    auto type = kv::parse_kv_type(kv_type);
    if (!type.ok()) return type.error().with_context("--kv-type");
    sp.kv_type = *type;
    if (!budget_bytes.empty()) {
        if (!budget.empty()) {
            return invalid_argument(
                "--kv-budget {} and --kv-budget-bytes {} given; give the budget in tokens or in bytes, not "
                "both",
                budget, budget_bytes);
        }
        auto bytes = kv::parse_bytes(budget_bytes);
        if (!bytes.ok()) return bytes.error().with_context("--kv-budget-bytes");
        if (*bytes < 1)
            return invalid_argument("--kv-budget-bytes {}: expected at least 1 byte", budget_bytes);
        sp.kv_budget_bytes = *bytes;
    }
    sp.prefill_chunk = prefill_chunk;
    sp.n_ctx = n_ctx;
    H2OKV_RETURN_IF_ERROR(sp.validate());
    return sp;
}

void generation_options::add_to(CLI::App& cmd) {
    cmd.add_option("-n,--n-predict", n_predict, "Tokens to generate (BOS and prompt not included)")
        ->capture_default_str();
    cmd.add_option("--temp", temperature, "Sampling temperature (0: greedy, ties to the lowest id)")
        ->capture_default_str();
    cmd.add_option("--top-k", top_k, "Sample among the k most likely tokens (0: all)")->capture_default_str();
    cmd.add_option("--top-p", top_p, "Sample among the most likely tokens whose mass reaches p")
        ->capture_default_str();
    cmd.add_option("--seed", seed, "Random seed of the sampler")->capture_default_str();
    cmd.add_flag("--ignore-eos", ignore_eos, "Keep generating past end-of-generation tokens");
}

result<engine::generation_params> generation_options::to_params() const {
    engine::generation_params gp;
    gp.n_predict = n_predict;
    gp.sampling = {temperature, top_k, top_p, seed};
    gp.ignore_eos = ignore_eos;
    H2OKV_RETURN_IF_ERROR(gp.validate());
    return gp;
}

void batching_options::add_to(CLI::App& cmd) {
    cmd.add_option("--parallel", parallel, "The most sequences processed at once (one forward pass per step)")
        ->capture_default_str();
    cmd.add_option(
           "--kv-memory", kv_memory,
           std::string("KV memory pool for all sequences (512MiB, 1.5GiB, bytes") +
               (unlimited_memory ? "; 0: no limit" : "; must be bounded") +
               "): a sequence starts only when its cache (K/V and slot tables) fits, and waits otherwise")
        ->capture_default_str();
    cmd.add_option("--step-tokens", step_tokens,
                   "Tokens per forward pass: every decoding sequence's next token, then prompt tokens")
        ->capture_default_str();
}

result<engine::scheduler_params> batching_options::to_params() const {
    engine::scheduler_params p;
    p.parallel = parallel;
    p.step_tokens = step_tokens;
    auto bytes = kv::parse_bytes(kv_memory);
    if (!bytes.ok()) return bytes.error().with_context("--kv-memory");
    if (*bytes == 0 && !unlimited_memory) {
        return invalid_argument("--kv-memory 0: this command needs a bounded KV memory pool (e.g. 1GiB)");
    }
    p.kv_memory = *bytes;
    H2OKV_RETURN_IF_ERROR(p.validate());
    return p;
}

void sweep_options::add_to(CLI::App& cmd) {
    cmd.add_flag("--sweep", sweep, "Run the grid --sweep-policies x --sweep-budgets instead of one policy");
    policies_option_ =
        cmd.add_option("--sweep-policies", policies, "Policy specs of the sweep (implies --sweep)")
            ->capture_default_str();
    budgets_option_ = cmd.add_option("--sweep-budgets", budgets,
                                     "Budgets of the sweep, counts or fractions (implies --sweep)")
                          ->capture_default_str();
}

bool sweep_options::active() const {
    return sweep || (policies_option_ != nullptr && policies_option_->count() > 0) ||
           (budgets_option_ != nullptr && budgets_option_->count() > 0);
}

result<std::vector<engine::session_params>> sweep_options::runs(const kv_options& kv, int64_t n_ctx) const {
    H2OKV_ASSIGN_OR_RETURN(engine::session_params base, kv.to_session_params(n_ctx));
    std::vector<engine::session_params> out;
    if (!active()) {
        out.push_back(base);
        return out;
    }
    if (base.kv_budget_bytes > 0) {
        return invalid_argument(
            "--kv-budget-bytes with a sweep: the sweep's budgets (--sweep-budgets) are tokens; give one "
            "or the other");
    }
    bool have_full = false;
    for (const auto& spec : policies) {
        auto p = policy::params::parse(spec);
        if (!p.ok()) return p.error().with_context("--sweep-policies");
        if (!p->gran) p->gran = base.kv.gran;
        if (spec.find("positions=") == std::string::npos) p->positions = base.kv.positions;
        // The KV flags' allocation (--kv-schedule, --kv-config) applies to every spec without its own.
        const bool own_allocation = p->schedule != policy::budget_schedule::uniform || !p->shares.empty() ||
                                    !p->recents.empty() || !p->decays.empty();
        if (!own_allocation && policy::policy_evicts(p->name)) {
            p->schedule = base.kv.schedule;
            p->ratio = base.kv.ratio;
            p->shares = base.kv.shares;
            p->recents = base.kv.recents;
            p->decays = base.kv.decays;
        }
        for (const auto& b : budgets) {
            engine::session_params sp = base;
            sp.kv = *p;
            if (!policy::policy_evicts(p->name)) {
                if (have_full) continue;
                have_full = true;
            } else {
                auto budget = policy::budget_spec::parse(b);
                if (!budget.ok()) return budget.error().with_context("--sweep-budgets");
                sp.kv.budget = *budget;
            }
            out.push_back(sp);
        }
    }
    if (out.empty()) return invalid_argument("--sweep: the grid is empty (give policies and budgets)");
    return out;
}

progress_line::progress_line(std::string label, std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      start_(clock::now()),
      tty_(isatty(fileno(stderr)) != 0) {}

void progress_line::operator()(int64_t done, int64_t total) {
    const double elapsed = std::chrono::duration<double>(clock::now() - start_).count();
    const double every = tty_ ? 0.25 : 10.0;
    if (elapsed < 1.0 || (elapsed - last_ < every && done < total)) return;
    last_ = elapsed;
    const double eta = done > 0 ? elapsed * static_cast<double>(total - done) / static_cast<double>(done) : 0;
    fmt::print(stderr, "{}{}: {}/{} {}, {:.0f} s elapsed, ETA {:.0f} s{}", tty_ ? "\r" : "", label_, done,
               total, unit_, elapsed, eta, tty_ ? "   " : "\n");
    if (tty_ && done == total) fmt::print(stderr, "\n");
}

result<std::string> read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return io_error("cannot open '{}' for reading", path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

result<std::unique_ptr<std::ofstream>> open_jsonl(const std::string& path) {
    if (path.empty()) return std::unique_ptr<std::ofstream>();
    auto out = std::make_unique<std::ofstream>(path, std::ios::app);
    if (!*out) return io_error("--jsonl: cannot open '{}' for appending", path);
    return out;
}

result<loaded_model> load_model(const std::string& path) {
    if (path.empty()) return no_model_error();
    loaded_model lm;
    H2OKV_ASSIGN_OR_RETURN(lm.file, gguf::file::open(path));
    H2OKV_ASSIGN_OR_RETURN(lm.model, model::model::load(*lm.file));
    return lm;
}

result<text_tokens> read_text_tokens(const gguf::file& file, const std::string& text_path) {
    H2OKV_ASSIGN_OR_RETURN(auto tok, tokenizer::tokenizer::from_gguf(file));
    auto text = read_text_file(text_path);
    if (!text.ok()) return text.error().with_context("-f");
    H2OKV_ASSIGN_OR_RETURN(auto ids, tok.encode(*text, /*add_special=*/false, /*parse_special=*/false));
    return text_tokens{tok.bos(), std::move(ids)};
}

result<std::vector<std::vector<int32_t>>> text_tokens::runs(int64_t run_length, int count,
                                                            const std::string& path) const {
    if (run_length < 2) return invalid_argument("a run of {} tokens has nothing to predict", run_length);
    const auto per = static_cast<size_t>(run_length - 1);
    if (count == 0) count = static_cast<int>(std::min<size_t>(ids.size() / per, 1 << 30));
    const size_t need = per * static_cast<size_t>(std::max(count, 1));
    if (count < 1 || ids.size() < need) {
        return invalid_argument("-f '{}' has {} tokens; {} runs of {} (BOS + {} each) need {}", path,
                                ids.size(), count, run_length, per, need);
    }
    std::vector<std::vector<int32_t>> out;
    for (size_t k = 0; k < static_cast<size_t>(count); ++k) {
        std::vector<int32_t> run{bos};
        run.insert(run.end(), ids.begin() + static_cast<ptrdiff_t>(k * per),
                   ids.begin() + static_cast<ptrdiff_t>((k + 1) * per));
        out.push_back(std::move(run));
    }
    return out;
}

status no_model_error() {
    std::string tried = "$H2OKV_MODEL (unset)";
    for (const auto& p : model_candidates()) tried += ", " + p;
    return invalid_argument(
        "no model: -m not given and no bundled model found (tried {}); give -m FILE or set H2OKV_MODEL",
        tried);
}

std::string kv_saving_text(int64_t allocated, int64_t full) {
    if (allocated <= 0 || full <= 0) return fmt::format("{} for a full cache of the run", full);
    const double a = static_cast<double>(allocated);
    const double f = static_cast<double>(full);
    return allocated <= full ? fmt::format("{} for a full cache of the run: {:.2f}x smaller", full, f / a)
                             : fmt::format("{} for a full cache of the run: {:.2f}x larger", full, a / f);
}

status warn_positions(const model::model& m, const engine::session_params& p, int64_t run_length) {
    H2OKV_ASSIGN_OR_RETURN(const std::string w, engine::session::position_warning(m, p, run_length));
    static std::set<std::string> printed;
    if (!w.empty() && printed.insert(w).second) fmt::print(stderr, "h2okv: warning: {}\n", w);
    return ok_status();
}

int64_t current_rss_bytes() {
    std::FILE* f = std::fopen("/proc/self/statm", "r");
    if (f == nullptr) return 0;
    long size = 0, resident = 0;
    const int got = std::fscanf(f, "%ld %ld", &size, &resident);
    std::fclose(f);
    return got == 2 ? static_cast<int64_t>(resident) * ::sysconf(_SC_PAGE_SIZE) : 0;
}

int fail(const status& s) {
    fmt::print(stderr, "h2okv: error: {}\n", s.message());
    return 1;
}

}  // namespace h2okv::cli
