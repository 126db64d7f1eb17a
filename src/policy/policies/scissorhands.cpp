// scissorhands (Liu et al. 2023, "Scissorhands: Exploiting the Persistence of Importance Hypothesis for LLM
// KV Cache Compression at Test Time"): a position's score is how many of the last `history` queries gave it
// more than its fair share of attention (its row increment > G / m: G query heads read the unit, m
// positions were attended). A stale spike stops counting once it leaves the history, unlike h2o's sum.
// Parameters: budget (required), recent (default floor(budget / 2)), sinks (0), history (1..64, default
// 32); no decay. docs/EVICTION_CONTRACT.md 9.1 is the exact rule.
#include <bit>
#include <cmath>

#include "policy/registry.h"

namespace h2okv::policy::detail {
namespace {

constexpr double k_default_history = 32;

class scissorhands_policy final : public scorer {
public:
    scissorhands_policy(const resolved_params& config, const layout& l)
        : scorer(config, l, {.source = score_source::attention, .custom_rows = true, .aux_words = 1}),
          mask_(history_mask(static_cast<int>(extra_value(config, "history")))) {}

protected:
    void update_row(const row_view& v) const override {
        const double fair = static_cast<double>(v.n_heads) / static_cast<double>(v.n_attended);
        for (int32_t s = 0; s < v.n_slots; ++s) {
            const int64_t p = v.pos[s];
            if (p < 0 || p > v.query) continue;  // free, or a chunk token this query does not see
            const uint64_t h = ((v.aux[s] << 1) | (v.row[s] > fair ? 1u : 0u)) & mask_;
            v.aux[s] = h;
            v.score[s] = static_cast<double>(std::popcount(h));
        }
    }

private:
    static uint64_t history_mask(int h) { return h >= 64 ? ~uint64_t{0} : (uint64_t{1} << h) - 1; }
    uint64_t mask_;
};

result<resolved_params> resolve(const params& p, int64_t run_length) {
    H2OKV_ASSIGN_OR_RETURN(resolved_params r, resolve_half_recent("scissorhands", p, run_length));
    H2OKV_RETURN_IF_ERROR(check_not_given("scissorhands", "decay", p.decay.has_value(),
                                          "scores count recent steps, the history bounds them"));
    const double h = p.extra.at("history");
    if (!(h >= 1 && h <= 64 && std::floor(h) == h)) {
        return invalid_argument("scissorhands: history {} must be an integer in [1, 64] (steps counted)", h);
    }
    return r;
}

constexpr const char* k_sweep[] = {"scissorhands"};
constexpr extra_param_def k_extra[] = {{"history", k_default_history, "steps counted, an integer in [1, 64]"},
                                       k_proxy_param};

}  // namespace

extern const policy_entry scissorhands_entry{
    .name = "scissorhands",
    .summary = "evicts the token that most rarely drew more than its fair share of attention lately",
    .resolve = &resolve,
    .make = &make_policy<scissorhands_policy>,
    .defaults = "recent = floor(budget / 2), sinks = 0, history = 32, no decay",
    .source = score_source::attention,
    .sweep = k_sweep,
    .extra = k_extra};

}  // namespace h2okv::policy::detail
