// window: keeps the `budget` most recent tokens; the oldest leaves first. The window is the budget, so recent
// is the budget (giving another value is refused) and there are no sinks.
#include "policy/registry.h"
#include "policy/unit_table.h"

namespace h2okv::policy::detail {
namespace {

class window_policy final : public kv_policy {
public:
    window_policy(const resolved_params& config, const layout& l) : kv_policy(config, l) {}
    bool needs_attention() const override { return false; }

protected:
    void choose_victims(unit_table& t, int count) const override { pick_oldest(t, count); }
};

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

}  // namespace

extern const policy_entry window_entry{"window", "keeps the budget most recent tokens", &resolve,
                                       &make_policy<window_policy>};

}  // namespace h2okv::policy::detail
