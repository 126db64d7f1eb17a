// h2o (Heavy-Hitter Oracle): evicts the evictable token with the lowest accumulated attention, optionally
// decayed once per query; the `recent` newest tokens and the first `sinks` positions are protected. The
// paper splits the budget half heavy hitters, half recent window: the default recent is floor(budget / 2).
#include "policy/builtin_scorers.h"
#include "policy/registry.h"

namespace h2okv::policy::detail {
namespace {

result<resolved_params> resolve(const params& p, int64_t run_length) {
    H2OKV_ASSIGN_OR_RETURN(resolved_params r, resolve_half_recent("h2o", p, run_length));
    r.decay = p.decay.value_or(1.0);
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
