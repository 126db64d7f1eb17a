// The registry built from policies.def, kv_policy::create, and the validation rules policies share.
#include "policy/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <new>
#include <numeric>
#include <string>
#include <vector>

namespace h2okv::policy {
namespace detail {

#define H2OKV_POLICY(name) extern const policy_entry name##_entry;
#include "policy/policies.def"
#undef H2OKV_POLICY

namespace {

constexpr const policy_entry* k_builtin[] = {
#define H2OKV_POLICY(name) &name##_entry,
#include "policy/policies.def"
#undef H2OKV_POLICY
};

std::vector<const policy_entry*>& entries() {
    static std::vector<const policy_entry*> all(std::begin(k_builtin), std::end(k_builtin));
    return all;
}

}  // namespace

std::span<const policy_entry* const> registry() {
    return entries();
}

const policy_entry* find_policy(std::string_view name) {
    for (const policy_entry* e : entries()) {
        if (name == e->name) return e;
    }
    return nullptr;
}

}  // namespace detail

status register_policy(const policy_entry& entry) {
    const std::string_view name = entry.name == nullptr ? "" : entry.name;
    const bool valid = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    });
    if (!valid) return invalid_argument("register_policy: name '{}' must be [a-z0-9_]+", name);
    if (entry.resolve == nullptr || entry.make == nullptr) {
        return invalid_argument("register_policy: '{}' needs resolve and make functions", name);
    }
    if (detail::find_policy(name) != nullptr) {
        return invalid_argument("register_policy: a policy named '{}' is already registered", name);
    }
    detail::entries().push_back(&entry);
    return ok_status();
}

result<int64_t> required_budget(std::string_view policy, const params& p, int64_t run_length) {
    if (!p.budget) {
        return invalid_argument(
            "{} needs a budget: a token count (budget=256) or a fraction of the run (budget=0.2)", policy);
    }
    auto b = p.budget->resolve(run_length);
    if (!b.ok()) return b.error().with_context(std::string(policy));
    return b;
}

status check_non_negative(std::string_view policy, std::string_view what, int64_t value) {
    if (value < 0) return invalid_argument("{}: {} {} must be >= 0", policy, what, value);
    return ok_status();
}

status check_protected_fit(std::string_view policy, int64_t sinks, int64_t recent, int64_t budget,
                           bool strict) {
    // Both are >= 0 here; compare without forming the sum, which could overflow.
    const bool fits = recent <= budget && (strict ? sinks < budget - recent : sinks <= budget - recent);
    if (fits) return ok_status();
    if (strict) {
        return invalid_argument(
            "{}: sinks {} + recent {} must be < budget {} (at least one slot must hold a heavy hitter)",
            policy, sinks, recent, budget);
    }
    return invalid_argument("{}: sinks {} + recent {} must be <= budget {}", policy, sinks, recent, budget);
}

result<resolved_params> resolve_half_recent(std::string_view policy, const params& p, int64_t run_length) {
    resolved_params r;
    H2OKV_ASSIGN_OR_RETURN(r.budget, required_budget(policy, p, run_length));
    r.recent = p.recent.value_or(r.budget / 2);
    r.sinks = p.sinks.value_or(0);
    H2OKV_RETURN_IF_ERROR(check_non_negative(policy, "recent", r.recent));
    H2OKV_RETURN_IF_ERROR(check_non_negative(policy, "sinks", r.sinks));
    if (status fit = check_protected_fit(policy, r.sinks, r.recent, r.budget, true); !fit.ok()) {
        if (p.recent) return fit;
        return invalid_argument("{}; recent defaults to floor(budget / 2), give a smaller one",
                                fit.message());
    }
    return r;
}

status check_not_given(std::string_view policy, std::string_view what, bool given, std::string_view why) {
    if (given) return invalid_argument("{}: {} does not apply ({}); leave it out", policy, what, why);
    return ok_status();
}

double extra_value(const resolved_params& r, std::string_view name) {
    const auto it = r.extra.find(name);
    return it == r.extra.end() ? 0.0 : it->second;
}

const char* score_source_name(score_source s) {
    switch (s) {
        case score_source::none: return "none";
        case score_source::attention: return "attention";
        case score_source::keys: return "keys";
    }
    return "unknown";
}

namespace {

policy_facts facts(const policy_entry& e) {
    policy_facts f;
    f.name = e.name;
    f.summary = e.summary;
    f.defaults = e.defaults;
    f.evicts = e.evicts;
    f.source = e.source;
    f.gran = e.gran;
    for (const char* s : e.sweep) f.sweep.emplace_back(s);
    for (const extra_param_def& x : e.extra) f.extra.push_back({x.name, x.default_value, x.help});
    return f;
}

}  // namespace

std::vector<policy_facts> policy_catalog() {
    std::vector<policy_facts> out;
    for (const policy_entry* e : detail::registry()) out.push_back(facts(*e));
    return out;
}

result<policy_facts> facts_of(std::string_view name) {
    const policy_entry* e = detail::find_policy(name);
    if (e == nullptr) {
        return invalid_argument("unknown policy '{}'; valid: {}", name, fmt::join(policy_names(), ", "));
    }
    return facts(*e);
}

bool policy_evicts(std::string_view name) {
    const policy_entry* e = detail::find_policy(name);
    return e == nullptr || e->evicts;
}

granularity granularity_of(const params& p) {
    if (p.gran) return *p.gran;
    const policy_entry* e = detail::find_policy(p.name);
    return e == nullptr ? granularity::head : e->gran;
}

std::vector<std::string> default_sweep() {
    std::vector<std::string> out;
    for (const policy_entry* e : detail::registry()) {
        for (const char* s : e->sweep) out.emplace_back(s);
    }
    return out;
}

std::vector<std::string> policy_names() {
    std::vector<std::string> names;
    for (const detail::policy_entry* e : detail::registry()) names.emplace_back(e->name);
    return names;
}

namespace {

int units_of(granularity g, const layout& l) {
    switch (g) {
        case granularity::head: return l.n_layer * l.n_kv_head;
        case granularity::layer: return l.n_layer;
        case granularity::model: return 1;
    }
    return 1;
}

// Clause 11: the units' budgets. Weights w_u (pyramid: 1 + ratio * (L - 1 - 2l) / (L - 1) for the units of
// layer l; shares: as given); the total T = n_units * budget is split as x_u = T * w_u / sum(w), each unit
// takes floor(x_u) and the T - sum(floor) tokens left go one each to the largest remainders x_u - floor(x_u)
// (a tie to the lower unit); a unit below 1 token gets 1.
result<std::vector<int64_t>> unit_budgets(const params& p, const resolved_params& base, const layout& l,
                                          int n_units) {
    std::vector<double> w(static_cast<size_t>(n_units), 1.0);
    if (p.schedule == budget_schedule::pyramid) {
        const double r = p.ratio.value_or(0.5);
        if (!(r >= 0.0 && r < 1.0)) {
            return invalid_argument(
                "{}: schedule=pyramid needs ratio in [0, 1) (the last layer keeps (1 - ratio) "
                "x budget); got {}",
                base.name, r);
        }
        if (base.gran == granularity::model) {
            return invalid_argument(
                "{}: schedule=pyramid varies budgets across layers, but granularity=model has one unit for "
                "all of them; use granularity head or layer",
                base.name);
        }
        const int per_layer = n_units / l.n_layer;
        for (int u = 0; u < n_units; ++u) {
            const int layer = u / per_layer;
            w[static_cast<size_t>(u)] =
                l.n_layer == 1 ? 1.0
                               : 1.0 + r * static_cast<double>(l.n_layer - 1 - 2 * layer) / (l.n_layer - 1);
        }
    } else if (p.ratio) {
        return invalid_argument(
            "{}: ratio applies to schedule=pyramid only; leave it out or add schedule=pyramid", base.name);
    }
    if (!p.shares.empty()) {
        if (p.schedule != budget_schedule::uniform) {
            return invalid_argument(
                "{}: shares and schedule={} both set the units' budgets; give one of them", base.name,
                budget_schedule_name(p.schedule));
        }
        if (p.shares.size() != static_cast<size_t>(n_units)) {
            return invalid_argument(
                "{}: {} shares given, but granularity={} has {} units ({} layers x {} KV heads under head, "
                "one "
                "per layer under layer); a calibration is for one model and one granularity",
                base.name, p.shares.size(), granularity_name(base.gran), n_units, l.n_layer, l.n_kv_head);
        }
        for (size_t u = 0; u < p.shares.size(); ++u) {
            if (!(p.shares[u] > 0.0 && std::isfinite(p.shares[u]))) {
                return invalid_argument("{}: share {} of unit {} must be a positive number", base.name,
                                        p.shares[u], u);
            }
        }
        w = p.shares;
    }
    // Far above any context, and small enough that the total and every x_u are exact in a double.
    constexpr int64_t max_total = int64_t{1} << 50;
    if (base.budget > max_total / n_units) {
        return invalid_argument(
            "{}: budget {} over {} units is more tokens than a cache can hold (at most {} in all); give a "
            "smaller budget",
            base.name, base.budget, n_units, max_total);
    }
    double sum = 0.0;
    for (double x : w) sum += x;
    const int64_t total = base.budget * n_units;
    std::vector<int64_t> b(w.size());
    std::vector<double> rest(w.size());
    int64_t given = 0;
    for (size_t u = 0; u < w.size(); ++u) {
        const double x = static_cast<double>(total) * w[u] / sum;
        b[u] = static_cast<int64_t>(std::floor(x));
        rest[u] = x - static_cast<double>(b[u]);
        given += b[u];
    }
    std::vector<size_t> order(w.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t c) { return rest[a] > rest[c]; });
    for (size_t k = 0; given < total && k < order.size(); ++k, ++given) ++b[order[k]];
    for (int64_t& x : b) x = std::max<int64_t>(1, x);
    return b;
}

// A per-layer list (recents, decays) must name every layer.
status check_per_layer(std::string_view policy, std::string_view key, const std::vector<double>& v,
                       const layout& l) {
    if (v.empty() || v.size() == static_cast<size_t>(l.n_layer)) return ok_status();
    return invalid_argument("{}: {} has {} entries; expected one per layer ({})", policy, key, v.size(),
                            l.n_layer);
}

// Resolves every unit with its own budget, recent and decay through the policy's own rule, so each unit is
// validated (and defaulted) exactly as a uniform policy of that budget would be.
status allocate(const policy_entry& entry, const params& given, const layout& l, int64_t run_length,
                resolved_params& config) {
    const bool any = given.schedule != budget_schedule::uniform || given.ratio || !given.shares.empty() ||
                     !given.recents.empty() || !given.decays.empty();
    if (!any || config.budget == 0) return ok_status();  // `full` ignores budgets, and so their allocation
    config.schedule = given.schedule;
    config.ratio = given.schedule == budget_schedule::pyramid ? given.ratio.value_or(0.5) : 0.0;
    config.shares = given.shares;
    config.recents = given.recents;
    config.decays = given.decays;
    H2OKV_RETURN_IF_ERROR(check_per_layer(entry.name, "recents", given.recents, l));
    H2OKV_RETURN_IF_ERROR(check_per_layer(entry.name, "decays", given.decays, l));
    if ((!given.recents.empty() || !given.decays.empty()) && config.gran == granularity::model &&
        l.n_layer > 1) {
        return invalid_argument(
            "{}: recents and decays are per layer, but granularity=model has one unit for "
            "all layers; use granularity head or layer",
            entry.name);
    }
    const int n_units = units_of(config.gran, l);
    H2OKV_ASSIGN_OR_RETURN(const std::vector<int64_t> budgets, unit_budgets(given, config, l, n_units));
    const int per_layer = config.gran == granularity::model ? 1 : n_units / l.n_layer;
    for (int u = 0; u < n_units; ++u) {
        const auto layer = static_cast<size_t>(config.gran == granularity::model ? 0 : u / per_layer);
        params pu = given;
        pu.budget = budget_spec::count(budgets[static_cast<size_t>(u)]);
        if (!given.recents.empty()) {
            const double f = given.recents[layer];
            if (!(f >= 0.0 && f < 1.0)) {
                return invalid_argument(
                    "{}: recents entry {} of layer {} must be in [0, 1) (a share of the unit's budget)",
                    entry.name, f, layer);
            }
            pu.recent =
                static_cast<int64_t>(std::floor(f * static_cast<double>(budgets[static_cast<size_t>(u)])));
        }
        if (!given.decays.empty()) pu.decay = given.decays[layer];
        auto r = entry.resolve(pu, run_length);
        if (!r.ok()) {
            return r.error().with_context(
                fmt::format("unit {} (layer {}) with budget {}", u, layer, budgets[static_cast<size_t>(u)]));
        }
        config.unit_budget.push_back(r->budget);
        config.unit_recent.push_back(r->recent);
        config.unit_decay.push_back(r->decay);
    }
    if (config.uneven_budgets() && given.positions == position_mode::rolling) {
        return invalid_argument(
            "{}: rolling positions need every unit to hold as many tokens (clause 8), but the allocation "
            "gives "
            "budgets from {} to {}; use --kv-positions original or a uniform allocation",
            entry.name, *std::min_element(config.unit_budget.begin(), config.unit_budget.end()),
            *std::max_element(config.unit_budget.begin(), config.unit_budget.end()));
    }
    return ok_status();
}

}  // namespace

result<std::unique_ptr<kv_policy>> kv_policy::make(const params& p, const layout& l, int64_t run_length) {
    const detail::policy_entry* entry = detail::find_policy(p.name);
    if (entry == nullptr) {
        return invalid_argument("unknown policy '{}'; valid: {}", p.name, fmt::join(policy_names(), ", "));
    }
    H2OKV_RETURN_IF_ERROR(l.validate());
    params given = p;
    for (const auto& entry_value : given.extra) {
        const std::string& key = entry_value.first;  // a named variable: clang cannot capture a binding
        const bool known = std::any_of(entry->extra.begin(), entry->extra.end(),
                                       [&](const extra_param_def& x) { return key == x.name; });
        if (!known) return invalid_argument("{}: unknown parameter '{}'", entry->name, key);
    }
    for (const extra_param_def& x : entry->extra) given.extra.emplace(x.name, x.default_value);
    if (const auto proxy = given.extra.find("proxy"); proxy != given.extra.end()) {
        if (proxy->second != 0.0 && proxy->second != 1.0) {
            return invalid_argument("{}: proxy {} must be 0 (attention rows) or 1 (the key-as-query proxy)",
                                    entry->name, proxy->second);
        }
    }
    H2OKV_ASSIGN_OR_RETURN(resolved_params config, entry->resolve(given, run_length));
    for (const extra_param_def& x : entry->extra) config.extra.emplace(x.name, given.extra.at(x.name));
    config.name = entry->name;
    config.gran = granularity_of(p);
    // Nothing moves in a cache that never evicts: its ranks are its positions.
    config.positions = config.budget > 0 ? p.positions : position_mode::original;
    H2OKV_RETURN_IF_ERROR(allocate(*entry, given, l, run_length, config));
    try {
        return entry->make(config, l);
    } catch (const std::bad_alloc&) {
        return out_of_memory("{}: cannot allocate the policy", config.name);
    }
}

result<std::unique_ptr<kv_policy>> kv_policy::create(const params& p, const layout& l, int64_t run_length) {
    H2OKV_ASSIGN_OR_RETURN(auto pol, make(p, l, run_length));
    H2OKV_RETURN_IF_ERROR(pol->init());
    return pol;
}

result<footprint> kv_policy::plan(const params& p, const layout& l, int64_t run_length) {
    H2OKV_ASSIGN_OR_RETURN(auto pol, make(p, l, run_length));
    return pol->measure();
}

}  // namespace h2okv::policy
