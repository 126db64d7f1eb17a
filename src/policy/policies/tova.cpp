// tova (Token Omission Via Attention): evicts the evictable token the latest query attended least. It is h2o
// with the decay forced to 0, so a score is the last row's increment; a null row keeps the previous scores.
// Paper: Oren et al., "Transformers are Multi-State RNNs" (2024); it averages the weights over a layer's
// heads, which keep one set, so its default granularity is layer (granularity=head gives each KV head its
// own set; docs/RESULTS.md, "Rolling positions", compares the two).
#include "policy/builtin_scorers.h"
#include "policy/registry.h"

namespace h2okv::policy::detail {
namespace {

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

constexpr extra_param_def k_extra[] = {k_proxy_param};
constexpr const char* k_sweep[] = {"tova"};

}  // namespace

extern const policy_entry tova_entry{
    .name = "tova",
    .summary = "evicts the token the latest query attended least",
    .resolve = &resolve,
    .make = &make_policy<accumulated_attention>,
    .defaults = "recent = 0, sinks = 0, decay forced to 0, granularity layer",
    .source = score_source::attention,
    .gran = granularity::layer,
    .sweep = k_sweep,
    .extra = k_extra};

}  // namespace h2okv::policy::detail
