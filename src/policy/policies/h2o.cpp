// h2o (Heavy-Hitter Oracle): evicts the evictable token with the lowest accumulated attention, optionally
// decayed once per query; the `recent` newest tokens and the first `sinks` positions are protected. The
// paper splits the budget half heavy hitters, half recent window: the default recent is floor(budget / 2).
#include "policy/builtin_scorers.h"
#include "policy/registry.h"

namespace h2okv::policy::detail {
namespace {

result<resolved_params> resolve(const params& p, int64_t run_length) {
    resolved_params r;
    H2OKV_ASSIGN_OR_RETURN(r.budget, required_budget("h2o", p, run_length));
    r.recent = p.recent.value_or(r.budget / 2);
    r.sinks = p.sinks.value_or(0);
    r.decay = p.decay.value_or(1.0);
    H2OKV_RETURN_IF_ERROR(check_non_negative("h2o", "recent", r.recent));
    H2OKV_RETURN_IF_ERROR(check_non_negative("h2o", "sinks", r.sinks));
    if (status fit = check_protected_fit("h2o", r.sinks, r.recent, r.budget, true); !fit.ok()) {
        if (p.recent) return fit;
        return invalid_argument("{}; recent defaults to floor(budget / 2), give a smaller one",
                                fit.message());
    }
    if (!(r.decay > 0.0 && r.decay <= 1.0)) {
        return invalid_argument("h2o: decay {} must be in (0, 1] (1 = no decay)", r.decay);
    }
    return r;
}

constexpr extra_param_def k_extra[] = {k_proxy_param};
constexpr const char* k_sweep[] = {"h2o", "h2o:decay=0.98"};

}  // namespace

extern const policy_entry h2o_entry{.name = "h2o",
                                    .summary = "evicts the lowest accumulated attention (heavy hitters stay)",
                                    .resolve = &resolve,
                                    .make = &make_policy<accumulated_attention>,
                                    .defaults = "recent = floor(budget / 2), sinks = 0, decay = 1",
                                    .source = score_source::attention,
                                    .sweep = k_sweep,
                                    .extra = k_extra};

}  // namespace h2okv::policy::detail
