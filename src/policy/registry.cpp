// The registry built from policies.def, kv_policy::create, and the validation rules policies share.
#include "policy/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <new>
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
    config.gran = p.gran;
    // Nothing moves in a cache that never evicts: its ranks are its positions.
    config.positions = config.budget > 0 ? p.positions : position_mode::original;
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
