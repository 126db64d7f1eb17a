// streaming (StreamingLLM): keeps the first `sinks` positions (attention sinks) and the most recent tokens;
// the oldest non-sink leaves first. recent is accepted (sinks + recent <= budget) but the victim does not
// depend on it: the window is whatever the sinks leave of the budget.
#include "policy/registry.h"
#include "policy/unit_table.h"

namespace h2okv::policy::detail {
namespace {

constexpr int64_t k_default_sinks = 4;

class streaming_policy final : public kv_policy {
public:
    streaming_policy(const resolved_params& config, const layout& l) : kv_policy(config, l) {}
    bool needs_attention() const override { return false; }

protected:
    void choose_victims(unit_table& t, int count) const override { pick_oldest(t, count); }
};

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

}  // namespace

extern const policy_entry streaming_entry{"streaming",
                                          "keeps the first sinks tokens and the most recent ones", &resolve,
                                          &make_policy<streaming_policy>};

}  // namespace h2okv::policy::detail
