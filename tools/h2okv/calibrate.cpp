// h2okv calibrate: measures a model's attention on a calibration text and writes the KV configuration
// (a policy; for h2o per-layer recent shares, decay, sinks and per-head budget shares) that --kv-config
// loads.
//
// The text is cut into --segments consecutive runs of --max-tokens (BOS + text tokens each), the run length
// the configuration is for.
// 1. Statistics (a full-cache pass per segment): per global layer, the attention mass by distance (t - p) of
//    every query past the budget; per (layer, KV head), the positions a row needs to cover 90 % of its mass
//    (how concentrated the head's attention is).
// 2. Candidates: the baselines (window, streaming, h2o's defaults, h2o with decay 0.98); per-layer recent
//    shares from the mass by distance (layer l protects the distance that holds a fraction q of its
//    attention mass, as a share of the budget) next to uniform shares; decays; 4 sinks; per-head budget
//    shares (Ada-KV: a layer's total split in proportion to the heads' 90 % counts, each head at least
//    --head-floor of the layer's mean), which become fixed per-head capacities.
// 3. Selection: a coordinate search (decay; then recent shares at that decay; sinks; decay again; then the
//    per-head shares), each candidate scored by its streaming perplexity over the segments under its policy
//    at the budget; the one-standard-error rule picks the simplest candidate within the segments' noise of
//    the lowest (docs/EVICTION_CONTRACT.md clause 11). Held-out evaluation is the user's
//    (scripts/run_calibrate.sh): the text a configuration was chosen on says nothing about its quality
//    elsewhere.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "h2okv/eval/perplexity.h"
#include "h2okv/tokenizer/tokenizer.h"
#include "kv_options.h"

namespace h2okv::cli {
namespace {

struct calibrate_options {
    model_options model;
    std::string text_path;
    std::string budget;
    std::string output_path;
    int64_t max_tokens = 0;
    int segments = 4;
    int chunk = 1;
    double head_floor = 0.5;
    std::string kv_type = "f16";
};

// What the full-cache pass measures, per global layer l and KV head g.
struct attention_stats {
    int n_layer = 0, n_kv_head = 0;
    std::vector<std::vector<double>> mass_at;  // [l][d]: attention weight at distance d, summed
    std::vector<double> need90;                // [l * n_kv_head + g]: mean positions to 90 % of a row's mass
    int64_t rows = 0;                          // query rows per (layer, query head) counted
};

// Distance within which layer l's queries put a fraction q of their attention mass.
int64_t distance_holding(const std::vector<double>& mass_at, double q) {
    double total = 0.0;
    for (double m : mass_at) total += m;
    double acc = 0.0;
    for (size_t d = 0; d < mass_at.size(); ++d) {
        acc += mass_at[d];
        if (acc >= q * total) return static_cast<int64_t>(d) + 1;
    }
    return static_cast<int64_t>(mass_at.size());
}

// One full-cache pass per segment (each BOS + text tokens, all of one length), accumulated.
result<attention_stats> measure(model::model& m, const std::vector<std::vector<int32_t>>& segments,
                                int64_t budget, int chunk) {
    const model::hparams& hp = m.params();
    attention_stats st;
    st.n_layer = hp.n_layer - hp.n_sliding();
    st.n_kv_head = hp.n_kv_head;
    const auto n = segments.front().size();
    st.mass_at.assign(static_cast<size_t>(st.n_layer), std::vector<double>(n, 0.0));
    st.need90.assign(static_cast<size_t>(st.n_layer) * st.n_kv_head, 0.0);
    std::vector<int> global_index(static_cast<size_t>(hp.n_layer), -1);
    for (int l = 0, k = 0; l < hp.n_layer; ++l) {
        if (!hp.sliding(l)) global_index[static_cast<size_t>(l)] = k++;
    }
    engine::session_params sp;
    sp.prefill_chunk = chunk;
    sp.n_ctx = static_cast<int64_t>(n);
    const int group = hp.gqa_group();
    std::vector<float> sorted;
    int64_t rows = 0;
    for (const auto& tokens : segments) {
        H2OKV_ASSIGN_OR_RETURN(auto s, engine::session::create(m, sp, static_cast<int64_t>(n)));
        s->cache().set_weights_observer([&](int layer, int head, int64_t t,
                                            std::span<const int64_t> positions, std::span<const float> w) {
            const int li = global_index[static_cast<size_t>(layer)];
            if (li < 0 || t < budget) return;  // rows of a cache within budget evict nothing
            if (li == 0 && head == 0) ++rows;
            auto& mass = st.mass_at[static_cast<size_t>(li)];
            double total = 0.0;
            for (size_t j = 0; j < w.size(); ++j) {
                mass[static_cast<size_t>(t - positions[j])] += static_cast<double>(w[j]);
                total += static_cast<double>(w[j]);
            }
            sorted.assign(w.begin(), w.end());
            std::sort(sorted.begin(), sorted.end(), std::greater<>());
            double acc = 0.0;
            size_t k = 0;
            while (k < sorted.size() && acc < 0.9 * total) acc += static_cast<double>(sorted[k++]);
            st.need90[static_cast<size_t>(li * st.n_kv_head + head / group)] += static_cast<double>(k);
        });
        std::vector<float> logits;
        H2OKV_RETURN_IF_ERROR(s->process(tokens, model::logits_mode::none, &logits));
    }
    st.rows = rows;
    const double per_head = std::max<int64_t>(1, rows) * static_cast<double>(group);
    for (double& x : st.need90) x /= per_head;
    return st;
}

// Per-head budget shares: within each layer, proportional to the heads' 90 % counts, floored at
// `floor` x the layer's mean, then scaled so the layer's shares average 1 (its total is kept).
std::vector<double> head_shares(const attention_stats& st, double floor) {
    std::vector<double> out(st.need90.size());
    for (int l = 0; l < st.n_layer; ++l) {
        const auto b = static_cast<size_t>(l * st.n_kv_head);
        double mean = 0.0;
        for (int g = 0; g < st.n_kv_head; ++g) mean += st.need90[b + static_cast<size_t>(g)];
        mean /= st.n_kv_head;
        double sum = 0.0;
        for (int g = 0; g < st.n_kv_head; ++g) {
            const double x = mean > 0.0 ? st.need90[b + static_cast<size_t>(g)] / mean : 1.0;
            out[b + static_cast<size_t>(g)] = std::max(floor, x);
            sum += out[b + static_cast<size_t>(g)];
        }
        for (int g = 0; g < st.n_kv_head; ++g) out[b + static_cast<size_t>(g)] *= st.n_kv_head / sum;
    }
    return out;
}

struct candidate {
    std::string label;
    std::string policy = "h2o";
    std::optional<int64_t> sinks;  // the policy's default when empty
    std::vector<double> recents, decays, shares;
    std::vector<double> segment_nll;  // mean NLL of each segment's predictions
    double perplexity = std::numeric_limits<double>::infinity();
    bool baseline = false;  // one of the defaults a calibration is compared with

    bool same(const candidate& o) const {
        return policy == o.policy && sinks == o.sinks && recents == o.recents && decays == o.decays &&
               shares == o.shares;
    }
};

// How far a candidate departs from the simplest policies: window 0, streaming 1, h2o's defaults 2, and one
// more for each of a decay, recent shares other than h2o's half, sinks and per-head shares.
int complexity(const candidate& c) {
    if (c.policy != "h2o") return c.policy == "window" ? 0 : 1;
    const bool default_recents =
        std::all_of(c.recents.begin(), c.recents.end(), [](double f) { return f == 0.5; });
    return 2 + !c.decays.empty() + !default_recents + c.sinks.has_value() + !c.shares.empty();
}

// The one-standard-error rule: the simplest candidate whose mean NLL exceeds the lowest one's by at most
// the standard error of their per-segment differences (segments of one length, so the mean over segments is
// the pooled mean). A difference within the segments' noise does not buy a more complex configuration; with
// one segment there is no error estimate and the lowest is chosen.
candidate choose(const std::vector<candidate>& tried, const candidate& lowest) {
    const size_t k = lowest.segment_nll.size();
    const candidate* best = &lowest;
    for (const candidate& c : tried) {
        double mean = 0.0, sq = 0.0;
        for (size_t i = 0; i < k; ++i) mean += c.segment_nll[i] - lowest.segment_nll[i];
        mean /= static_cast<double>(k);
        for (size_t i = 0; i < k; ++i) {
            const double d = c.segment_nll[i] - lowest.segment_nll[i] - mean;
            sq += d * d;
        }
        const double se = k > 1 ? std::sqrt(sq / static_cast<double>(k - 1) / static_cast<double>(k)) : 0.0;
        if (mean > se) continue;
        if (complexity(c) < complexity(*best) ||
            (complexity(c) == complexity(*best) && c.perplexity < best->perplexity)) {
            best = &c;
        }
    }
    return *best;
}

int run_calibrate(const calibrate_options& o) {
    o.model.apply_threads();
    auto lm = load_model(o.model.model_path);
    if (!lm.ok()) return fail(lm.error());
    auto text = read_text_tokens(*lm->file, o.text_path);
    if (!text.ok()) return fail(text.error());
    const model::hparams& hp = lm->model->params();
    const int64_t limit = o.max_tokens > 0 ? o.max_tokens : hp.n_ctx_train;
    if (limit < 16) return fail(invalid_argument("--max-tokens {} must be >= 16 (BOS + 15)", limit));
    // Segments: consecutive stretches of the text, each BOS + limit - 1 tokens (the runs the configuration
    // is for); choosing on several makes the choice less the accident of one passage.
    auto cut = text->runs(limit, o.segments, o.text_path);
    if (!cut.ok())
        return fail(invalid_argument("{} (lower --segments or --max-tokens)", cut.error().message()));
    const std::vector<std::vector<int32_t>>& segments = *cut;
    if (!(o.head_floor > 0.0 && o.head_floor <= 1.0)) {
        return fail(invalid_argument("--head-floor {} must be in (0, 1] (a share of the layer's mean budget)",
                                     o.head_floor));
    }
    auto bspec = policy::budget_spec::parse(o.budget);
    if (!bspec.ok()) return fail(bspec.error().with_context("--kv-budget"));
    const auto n = static_cast<int64_t>(limit);
    auto budget = bspec->resolve(n);
    if (!budget.ok()) return fail(budget.error().with_context("--kv-budget"));
    const int64_t b = *budget;
    if (b < 4 || b >= n) {
        return fail(
            invalid_argument("--kv-budget {} is {} tokens of the calibration run's {}; calibration needs 4 "
                             "<= budget < the run",
                             o.budget, b, n));
    }
    auto type = kv::parse_kv_type(o.kv_type);
    if (!type.ok()) return fail(type.error().with_context("--kv-type"));

    fmt::print(stderr, "calibrate: {} segments of {} tokens of '{}', budget {} ({} tokens)\n",
               segments.size(), n, o.text_path, o.budget, b);
    auto st = measure(*lm->model, segments, b, 64);
    if (!st.ok()) return fail(st.error());
    const int n_layer = st->n_layer;

    // Recent shares: uniform ones, and per layer the distance holding a fraction q of its mass. A share
    // below 1 - 0.5 / b keeps at least one heavy-hitter slot (recent = floor(share x budget) < budget).
    const double max_share = 1.0 - 0.5 / static_cast<double>(b);
    std::vector<candidate> recents;
    for (double f : {0.5, 0.75, 0.875, max_share}) {
        candidate c;
        c.label = fmt::format("uniform recent share {:.3f}", f);
        c.recents.assign(static_cast<size_t>(n_layer), f);
        recents.push_back(c);
    }
    for (double q : {0.6, 0.75, 0.85, 0.95}) {
        candidate c;
        c.label = fmt::format("per-layer recent holding {:.2f} of the mass", q);
        for (int l = 0; l < n_layer; ++l) {
            const int64_t d = distance_holding(st->mass_at[static_cast<size_t>(l)], q);
            c.recents.push_back(std::min(max_share, static_cast<double>(d) / static_cast<double>(b)));
        }
        recents.push_back(c);
    }
    const std::vector<double> ada = head_shares(*st, o.head_floor);

    const auto evaluate = [&](candidate& c) -> status {
        engine::session_params sp;
        sp.kv.name = c.policy;
        sp.kv.budget = *bspec;
        sp.kv.sinks = c.sinks;
        sp.kv.recents = c.recents;
        sp.kv.decays = c.decays;
        sp.kv.shares = c.shares;
        sp.kv_type = *type;
        sp.prefill_chunk = o.chunk;
        sp.n_ctx = n;
        // exp of the mean NLL over every segment's predictions.
        H2OKV_ASSIGN_OR_RETURN(const eval::perplexity_result r,
                               eval::perplexity(*lm->model, segments, sp, o.chunk, nullptr));
        c.segment_nll = r.run_nll;
        c.perplexity = r.perplexity;
        fmt::print(stderr, "calibrate: {:<52} decay {:<5} shares {:<3} perplexity {:.4f}\n", c.label,
                   c.decays.empty() ? 1.0 : c.decays[0], c.shares.empty() ? "no" : "yes", c.perplexity);
        return ok_status();
    };
    // The baselines (window, streaming, h2o's defaults, h2o with decay 0.98), then a coordinate search over
    // h2o: the decays at h2o's half-budget window, the recent candidates at the best decay, sinks at the best
    // recent shares, the decays again, then the best with the per-head shares. A candidate the policy refuses
    // at this budget (sinks and recent window leaving no slot to evict) is reported and left out.
    std::vector<candidate> tried;
    candidate lowest;  // the lowest calibration perplexity so far
    const auto consider = [&](candidate c) -> status {
        for (const candidate& t : tried) {
            if (t.same(c)) return ok_status();
        }
        if (status s = evaluate(c); !s.ok()) {
            if (s.code() != status_code::invalid_argument || c.baseline) return s;
            fmt::print(stderr, "calibrate: {:<52} left out: {}\n", c.label, s.message());
            return ok_status();
        }
        tried.push_back(c);
        if (c.perplexity < lowest.perplexity) lowest = c;
        return ok_status();
    };
    const auto with_decay = [&](candidate c, double d) {
        c.decays.clear();
        if (d != 1.0) c.decays.assign(static_cast<size_t>(n_layer), d);
        return c;
    };
    for (const char* name : {"window", "streaming"}) {
        candidate c;
        c.label = fmt::format("{} (its defaults)", name);
        c.policy = name;
        c.baseline = true;
        if (status s = consider(c); !s.ok()) return fail(s);
    }
    candidate defaults = recents.front();
    defaults.baseline = true;
    constexpr double k_decays[] = {1.0, 0.98, 0.99, 0.95, 0.9};
    for (double d : k_decays) {
        candidate c = with_decay(defaults, d);
        c.baseline = d == 1.0 || d == 0.98;
        if (status s = consider(c); !s.ok()) return fail(s);
    }
    // The measured candidate with c's configuration, if any; keep_better moves `current` to it when lower.
    const auto measured = [&](const candidate& c) -> const candidate* {
        for (const candidate& t : tried) {
            if (t.same(c)) return &t;
        }
        return nullptr;
    };
    const auto keep_better = [&](candidate& current, const candidate& c) {
        if (const candidate* t = measured(c); t != nullptr && t->perplexity < current.perplexity)
            current = *t;
    };
    candidate best_recent;
    for (double d : k_decays) keep_better(best_recent, with_decay(defaults, d));
    const std::vector<double> best_decays = best_recent.decays;
    for (candidate r : recents) {
        r.decays = best_decays;
        if (status s = consider(r); !s.ok()) return fail(s);
        keep_better(best_recent, r);
    }
    candidate sunk = best_recent;
    sunk.sinks = 4;
    for (double& f : sunk.recents) f = std::min(f, 1.0 - 4.5 / static_cast<double>(b));
    sunk.baseline = false;
    sunk.label += ", 4 sinks";
    if (status s = consider(sunk); !s.ok()) return fail(s);
    keep_better(best_recent, sunk);
    for (double d : k_decays) {
        candidate c = with_decay(best_recent, d);
        c.baseline = false;
        if (status s = consider(c); !s.ok()) return fail(s);
        keep_better(best_recent, c);
    }
    candidate with_shares = best_recent;
    with_shares.baseline = false;
    with_shares.shares = ada;
    if (status s = consider(with_shares); !s.ok()) return fail(s);
    const candidate best = choose(tried, lowest);
    fmt::print(stderr, "calibrate: chosen: {} (perplexity {:.4f}; the lowest, {}, {:.4f})\n", best.label,
               best.perplexity, lowest.label, lowest.perplexity);

    nlohmann::json stats = nlohmann::json::array();
    for (int l = 0; l < n_layer; ++l) {
        const auto& mass = st->mass_at[static_cast<size_t>(l)];
        double total = 0.0;
        for (double m : mass) total += m;
        // Mass by distance in doubling buckets [0, 1), [1, 2), [2, 4), ...
        nlohmann::json buckets = nlohmann::json::array();
        for (size_t lo = 0, hi = 1; lo < mass.size(); lo = hi, hi *= 2) {
            double sum = 0.0;
            for (size_t d = lo; d < std::min(hi, mass.size()); ++d) sum += mass[d];
            buckets.push_back(
                {{"from", lo}, {"to", std::min(hi, mass.size())}, {"mass", total > 0 ? sum / total : 0.0}});
        }
        nlohmann::json heads = nlohmann::json::array();
        for (int g = 0; g < st->n_kv_head; ++g)
            heads.push_back(st->need90[static_cast<size_t>(l * st->n_kv_head + g)]);
        stats.push_back({{"layer", l}, {"mass_by_distance", buckets}, {"positions_to_90_percent", heads}});
    }
    nlohmann::json candidates = nlohmann::json::array();
    for (const candidate& c : tried) {
        nlohmann::json j = {{"label", c.label},
                            {"policy", c.policy},
                            {"recents", c.recents},
                            {"decay", c.decays.empty() ? 1.0 : c.decays[0]},
                            {"shares", c.shares},
                            {"baseline", c.baseline},
                            {"complexity", complexity(c)},
                            {"segment_nll", c.segment_nll},
                            {"perplexity", c.perplexity},
                            {"chosen", c.same(best)}};
        if (c.sinks) j["sinks"] = *c.sinks;
        candidates.push_back(std::move(j));
    }
    nlohmann::json out = {{"format", "h2okv-kv-config"},
                          {"version", 1},
                          {"policy", best.policy},
                          {"budget", bspec->to_string()},
                          {"granularity", "head"},
                          {"n_layer", n_layer},
                          {"n_kv_head", st->n_kv_head},
                          {"model", o.model.model_path},
                          {"model_sha256", lm->file->sha256()},
                          {"text", o.text_path},
                          {"tokens", n},
                          {"segments", segments.size()},
                          {"statistics", stats},
                          {"candidates", candidates}};
    if (best.sinks) out["sinks"] = *best.sinks;
    if (!best.recents.empty()) out["recents"] = best.recents;
    if (!best.decays.empty()) out["decays"] = best.decays;
    if (!best.shares.empty()) out["shares"] = best.shares;
    std::ofstream f(o.output_path);
    if (!f) return fail(invalid_argument("-o '{}': cannot open for writing", o.output_path));
    f << out.dump(1) << "\n";
    if (!f) return fail(invalid_argument("-o '{}': write failed", o.output_path));
    fmt::print("{}: {} (decay {}, per-head shares {}), calibration perplexity {:.4f}\n", o.output_path,
               best.label, best.decays.empty() ? 1.0 : best.decays[0], best.shares.empty() ? "no" : "yes",
               best.perplexity);
    return 0;
}

}  // namespace

void add_calibrate_command(CLI::App& app, int* exit_code) {
    auto o = std::make_shared<calibrate_options>();
    CLI::App* cmd = app.add_subcommand(
        "calibrate",
        "Measure attention on a calibration text (mass by distance per layer, concentration per head) and "
        "write the KV configuration chosen on it: among the baselines (window, streaming, h2o, h2o with "
        "decay 0.98) and h2o with per-layer recent shares, decay, sinks and per-head budget shares, the "
        "simplest "
        "within one standard error of the lowest perplexity over its runs (load it with --kv-config; "
        "evaluate it on a different text)");
    o->model.add_to(*cmd);
    cmd->add_option("-f,--file", o->text_path, "Calibration text")->required();
    cmd->add_option("--kv-budget", o->budget,
                    "The budget to calibrate for: a token count or a fraction of the run (0.2)")
        ->required();
    cmd->add_option("-o,--output", o->output_path, "The configuration file to write (JSON)")->required();
    cmd->add_option("--max-tokens", o->max_tokens,
                    "Tokens per calibration run, BOS included: the run length the configuration is for "
                    "(default: the model's trained context)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--segments", o->segments,
                    "Consecutive stretches of the text, of --max-tokens each, that statistics and candidates "
                    "are measured on (perplexity over all of them); 0: every whole run the text holds")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    cmd->add_option("--kv-prefill-chunk", o->chunk,
                    "Text tokens per chunk of the candidates' perplexity runs (default 1, as perplexity)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--head-floor", o->head_floor,
                    "Per-head budget floor, a share of the layer's mean head budget, in (0, 1]")
        ->capture_default_str();
    cmd->add_option("--kv-type", o->kv_type, "Element type of stored K and V: " + kv::kv_type_names())
        ->capture_default_str();
    cmd->callback([o, exit_code] { *exit_code = run_calibrate(*o); });
}

}  // namespace h2okv::cli
