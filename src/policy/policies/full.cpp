// full: keeps every token (no eviction); the reference every other policy is measured against.
// budget, recent, sinks and decay are ignored, so one sweep can pass the same flags to every policy.
#include "policy/registry.h"
#include "policy/unit_table.h"

namespace h2okv::policy::detail {
namespace {

class full_policy final : public kv_policy {
public:
    full_policy(const resolved_params& config, const layout& l) : kv_policy(config, l) {}
    bool needs_attention() const override { return false; }

protected:
    // budget 0 means unbounded: end_chunk never asks for victims.
    void choose_victims(unit_table& t, int count) const override { t.n_victims = 0; }
};

result<resolved_params> resolve(const params& p, int64_t run_length) {
    resolved_params r;
    r.budget = 0;
    return r;
}

}  // namespace

extern const policy_entry full_entry{"full", "keeps every token (capacity = the context length)", &resolve,
                                     &make_policy<full_policy>};

}  // namespace h2okv::policy::detail
