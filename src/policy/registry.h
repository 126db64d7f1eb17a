// The policy registry: the built-in entries (one per line of policies.def, each defined by the policy's own
// file) followed by those register_policy() added.
//
//   // src/policy/policies/mine.cpp
//   extern const policy_entry mine_entry{.name = "mine", .summary = "what it evicts", .resolve = &resolve,
//                                        .make = &make_policy<mine_policy>, ...};
//   // src/policy/policies.def
//   H2OKV_POLICY(mine)
//
// The entry type, the shared validation helpers and the scorer base are public:
// include/h2okv/policy/scorer.h.
#pragma once

#include <span>
#include <string_view>

#include "h2okv/policy/policy.h"
#include "h2okv/policy/scorer.h"

namespace h2okv::policy::detail {

using policy::policy_entry;

// Every registered policy, built-ins in policies.def order first.
std::span<const policy_entry* const> registry();
// nullptr when no policy has that name.
const policy_entry* find_policy(std::string_view name);

}  // namespace h2okv::policy::detail
