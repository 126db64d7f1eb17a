// streaming (StreamingLLM): keeps the first `sinks` positions (attention sinks) and the most recent tokens;
// the oldest non-sink leaves first. recent is accepted (sinks + recent <= budget) but the victim does not
// depend on it: the window is whatever the sinks leave of the budget.
#include "policy/builtin_scorers.h"
#include "policy/registry.h"

namespace h2okv::policy::detail {
namespace {

constexpr int64_t k_default_sinks = 4;

result<resolved_params> resolve(const params& p, int64_t run_length) {
    resolved_params r;
    H2OKV_ASSIGN_OR_RETURN(r.budget, required_budget("streaming", p, run_length));
    r.sinks = p.sinks.value_or(k_default_sinks);
    H2OKV_RETURN_IF_ERROR(check_non_negative("streaming", "sinks", r.sinks));
    if (r.sinks >= r.budget) {
        return invalid_argument(
            "streaming: sinks {}{} must be < budget {} (the window needs at least one slot)", r.sinks,
            p.sinks ? "" : " (the default)", r.budget);
    }
    if (p.recent) {
        H2OKV_RETURN_IF_ERROR(check_non_negative("streaming", "recent", *p.recent));
        H2OKV_RETURN_IF_ERROR(check_protected_fit("streaming", r.sinks, *p.recent, r.budget, false));
    }
    H2OKV_RETURN_IF_ERROR(
        check_not_given("streaming", "decay", p.decay.has_value(), "streaming never reads attention"));
    r.recent = p.recent.value_or(r.budget - r.sinks);
    return r;
}

constexpr const char* k_sweep[] = {"streaming:sinks=4"};

}  // namespace

extern const policy_entry streaming_entry{.name = "streaming",
                                          .summary = "keeps the first sinks tokens and the most recent ones",
                                          .resolve = &resolve,
                                          .make = &make_policy<recency>,
                                          .defaults = "sinks = 4, recent = budget - sinks, no decay",
                                          .source = score_source::none,
                                          .sweep = k_sweep};

}  // namespace h2okv::policy::detail
