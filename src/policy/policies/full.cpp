// full: keeps every token (no eviction); the reference every other policy is measured against.
// budget, recent, sinks and decay are ignored, so one sweep can pass the same flags to every policy.
#include "policy/builtin_scorers.h"
#include "policy/registry.h"

namespace h2okv::policy::detail {
namespace {

// budget 0 means unbounded: end_chunk never asks for victims.
result<resolved_params> resolve(const params& p, int64_t run_length) {
    resolved_params r;
    r.budget = 0;
    return r;
}

constexpr const char* k_sweep[] = {"full"};

}  // namespace

extern const policy_entry full_entry{.name = "full",
                                     .summary = "keeps every token (capacity = the context length)",
                                     .resolve = &resolve,
                                     .make = &make_policy<recency>,
                                     .defaults = "budget, recent, sinks and decay are ignored",
                                     .evicts = false,
                                     .source = score_source::none,
                                     .sweep = k_sweep};

}  // namespace h2okv::policy::detail
