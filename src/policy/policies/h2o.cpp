// h2o (Heavy-Hitter Oracle): evicts the evictable token with the lowest accumulated attention, optionally
// decayed once per query; the `recent` newest tokens and the first `sinks` positions are protected. The
// paper splits the budget half heavy hitters, half recent window: the default recent is floor(budget / 2).
#include "policy/registry.h"
#include "policy/unit_table.h"

namespace h2okv::policy::detail {
namespace {

class h2o_policy final : public kv_policy {
public:
    h2o_policy(const resolved_params& config, const layout& l) : kv_policy(config, l) {}
    bool needs_attention() const override { return true; }

protected:
    void choose_victims(unit_table& t, int count) const override { pick_lowest_scores(t, count); }
};

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

}  // namespace

extern const policy_entry h2o_entry{"h2o", "evicts the lowest accumulated attention (heavy hitters stay)",
                                    &resolve, &make_policy<h2o_policy>};

}  // namespace h2okv::policy::detail
