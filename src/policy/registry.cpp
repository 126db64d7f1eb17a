// The registry built from policies.def, kv_policy::create, and the validation rules policies share.
#include "policy/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

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

constexpr const policy_entry* k_registry[] = {
#define H2OKV_POLICY(name) &name##_entry,
#include "policy/policies.def"
#undef H2OKV_POLICY
};

}  // namespace

std::span<const policy_entry* const> registry() {
    return k_registry;
}

const policy_entry* find_policy(std::string_view name) {
    for (const policy_entry* e : k_registry) {
        if (name == e->name) return e;
    }
    return nullptr;
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

status check_not_given(std::string_view policy, std::string_view what, bool given, std::string_view why) {
    if (given) return invalid_argument("{}: {} does not apply ({}); leave it out", policy, what, why);
    return ok_status();
}

}  // namespace detail

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
    H2OKV_ASSIGN_OR_RETURN(resolved_params config, entry->resolve(p, run_length));
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
