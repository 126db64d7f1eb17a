// tova (Token Omission Via Attention): evicts the evictable token the latest query attended least. It is h2o
// with the decay forced to 0, so a score is the last row's increment; a null row keeps the previous scores.
#include "policy/registry.h"
#include "policy/unit_table.h"

namespace h2okv::policy::detail {
namespace {

class tova_policy final : public kv_policy {
public:
    tova_policy(const resolved_params& config, const layout& l) : kv_policy(config, l) {}
    bool needs_attention() const override { return true; }

protected:
    void choose_victims(unit_table& t, int count) const override { pick_lowest_scores(t, count); }
};

result<resolved_params> resolve(const params& p, int64_t run_length) {
    resolved_params r;
    H2OKV_ASSIGN_OR_RETURN(r.budget, required_budget("tova", p, run_length));
    r.recent = p.recent.value_or(0);
    r.sinks = p.sinks.value_or(0);
    H2OKV_RETURN_IF_ERROR(check_non_negative("tova", "recent", r.recent));
    H2OKV_RETURN_IF_ERROR(check_non_negative("tova", "sinks", r.sinks));
    H2OKV_RETURN_IF_ERROR(check_protected_fit("tova", r.sinks, r.recent, r.budget, false));
    if (p.decay && *p.decay != 0.0) {
        return invalid_argument("tova: decay {} must be 0 or left out (tova scores only the last query)",
                                *p.decay);
    }
    r.decay = 0.0;
    return r;
}

}  // namespace

extern const policy_entry tova_entry{"tova", "evicts the token the latest query attended least", &resolve,
                                     &make_policy<tova_policy>};

}  // namespace h2okv::policy::detail
