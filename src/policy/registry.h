// The policy registry: one entry per line of policies.def, defined by the policy's own file.
//
//   // src/policy/policies/mine.cpp
//   extern const policy_entry mine_entry{"mine", "what it evicts", &resolve, &make_policy<mine_policy>};
//   // src/policy/policies.def
//   H2OKV_POLICY(mine)
//
// resolve() applies the policy's defaults and validates (SPEC.md's table); name and granularity are filled
// in by kv_policy::create. Helpers for the rules most policies share are below.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "h2okv/policy/policy.h"

namespace h2okv::policy::detail {

struct policy_entry {
    const char* name;
    const char* summary;  // one line: what the policy evicts
    result<resolved_params> (*resolve)(const params& p, int64_t run_length);
    std::unique_ptr<kv_policy> (*make)(const resolved_params& config, const layout& l);
};

template <class Policy>
std::unique_ptr<kv_policy> make_policy(const resolved_params& config, const layout& l) {
    return std::make_unique<Policy>(config, l);
}

// Every registered policy, in policies.def order.
std::span<const policy_entry* const> registry();
// nullptr when no policy has that name.
const policy_entry* find_policy(std::string_view name);

// The budget of an evicting policy: required; a fraction resolves against run_length.
result<int64_t> required_budget(std::string_view policy, const params& p, int64_t run_length);
// Refuses a negative `value` of the parameter `what`.
status check_non_negative(std::string_view policy, std::string_view what, int64_t value);
// Refuses sinks + recent > budget (or >= budget when `strict`), naming the three values.
status check_protected_fit(std::string_view policy, int64_t sinks, int64_t recent, int64_t budget,
                           bool strict);
// Refuses a parameter the policy has no use for (`why` says why), when it was given.
status check_not_given(std::string_view policy, std::string_view what, bool given, std::string_view why);

}  // namespace h2okv::policy::detail
