// window: keeps the `budget` most recent tokens; the oldest leaves first. The window is the budget, so recent
// is the budget (giving another value is refused) and there are no sinks.
#include "policy/builtin_scorers.h"
#include "policy/registry.h"

namespace h2okv::policy::detail {
namespace {

result<resolved_params> resolve(const params& p, int64_t run_length) {
    resolved_params r;
    H2OKV_ASSIGN_OR_RETURN(r.budget, required_budget("window", p, run_length));
    if (p.recent && *p.recent != r.budget) {
        return invalid_argument(
            "window: recent {} must equal budget {} (the window is the budget); leave it out", *p.recent,
            r.budget);
    }
    if (p.sinks && *p.sinks != 0) {
        return invalid_argument("window: sinks {} must be 0 (use streaming for sinks + window)", *p.sinks);
    }
    H2OKV_RETURN_IF_ERROR(
        check_not_given("window", "decay", p.decay.has_value(), "window never reads attention"));
    r.recent = r.budget;
    r.sinks = 0;
    return r;
}

constexpr const char* k_sweep[] = {"window"};

}  // namespace

extern const policy_entry window_entry{.name = "window",
                                       .summary = "keeps the budget most recent tokens",
                                       .resolve = &resolve,
                                       .make = &make_policy<recency>,
                                       .defaults = "recent = budget, sinks = 0, no decay",
                                       .source = score_source::none,
                                       .sweep = k_sweep};

}  // namespace h2okv::policy::detail
