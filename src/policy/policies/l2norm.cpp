// l2norm (Devoto et al. 2024, "A Simple and Effective L2 Norm-Based Strategy for KV Cache Compression"):
// keeps the keys of low L2 norm, which the paper finds draw high attention. The score is -||k||, summed over
// the unit's (layer, KV head) keys, set once when the token arrives; no attention is read, so engines never
// materialise attention rows for it. Parameters: budget (required), recent (default floor(budget / 2)),
// sinks (0); no decay. docs/EVICTION_CONTRACT.md 9.3 is the exact rule.
#include <cmath>

#include "policy/registry.h"

namespace h2okv::policy::detail {
namespace {

class l2norm_policy final : public scorer {
public:
    l2norm_policy(const resolved_params& config, const layout& l)
        : scorer(config, l, {.source = score_source::keys}) {}

protected:
    double key_score(const key_view& k) const override {
        double sum = 0.0;
        for (float x : k.key) {
            const double d = static_cast<double>(x);
            sum = sum + d * d;
        }
        return -std::sqrt(sum);
    }
};

result<resolved_params> resolve(const params& p, int64_t run_length) {
    H2OKV_ASSIGN_OR_RETURN(resolved_params r, resolve_half_recent("l2norm", p, run_length));
    H2OKV_RETURN_IF_ERROR(check_not_given("l2norm", "decay", p.decay.has_value(),
                                          "l2norm scores keys once, it never reads attention"));
    return r;
}

constexpr const char* k_sweep[] = {"l2norm"};

}  // namespace

extern const policy_entry l2norm_entry{.name = "l2norm",
                                       .summary = "evicts the key of largest L2 norm (reads no attention)",
                                       .resolve = &resolve,
                                       .make = &make_policy<l2norm_policy>,
                                       .defaults = "recent = floor(budget / 2), sinks = 0, no decay",
                                       .source = score_source::keys,
                                       .sweep = k_sweep};

}  // namespace h2okv::policy::detail
