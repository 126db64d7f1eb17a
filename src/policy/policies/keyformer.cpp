// keyformer (Adnan et al. 2024, "Keyformer: KV Cache Reduction through Key Tokens Selection for Efficient
// Generative Inference"): h2o's accumulated attention, ranked at eviction with seeded Gumbel noise of
// temperature tau added (the stored scores are not changed), so near-ties between old heavy hitters and
// newer tokens are broken by chance rather than always against the newcomer. tau = 0 is h2o bit for bit.
// Parameters: h2o's (budget, recent = floor(budget / 2), sinks 0, decay 1), tau (>= 0, default 1), seed
// (an integer in [0, 2^53], default 0). docs/EVICTION_CONTRACT.md 9.2 is the exact rule, noise included.
#include <cmath>
#include <cstdint>

#include "policy/registry.h"

namespace h2okv::policy::detail {
namespace {

uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

class keyformer_policy final : public scorer {
public:
    keyformer_policy(const resolved_params& config, const layout& l)
        // tau = 0 takes h2o's own victim selection, so it is h2o bit for bit.
        : scorer(config, l,
                 {.source = score_source::attention, .custom_rank = extra_value(config, "tau") != 0.0}),
          tau_(extra_value(config, "tau")),
          seed_(static_cast<uint64_t>(extra_value(config, "seed"))) {}

protected:
    double rank_score(int unit, int32_t slot, int64_t position, double score, int64_t next) const override {
        if (tau_ == 0.0) return score;
        const uint64_t x =
            mix(mix(mix(mix(seed_) ^ static_cast<uint64_t>(unit)) ^ static_cast<uint64_t>(position)) ^
                static_cast<uint64_t>(next));
        const double u = (static_cast<double>(x >> 11) + 0.5) * 0x1.0p-53;
        return score + tau_ * -std::log(-std::log(u));
    }

private:
    double tau_;
    uint64_t seed_;
};

result<resolved_params> resolve(const params& p, int64_t run_length) {
    H2OKV_ASSIGN_OR_RETURN(resolved_params r, resolve_half_recent("keyformer", p, run_length));
    r.decay = p.decay.value_or(1.0);
    if (!(r.decay > 0.0 && r.decay <= 1.0)) {
        return invalid_argument("keyformer: decay {} must be in (0, 1] (1 = no decay)", r.decay);
    }
    const double tau = p.extra.at("tau");
    if (!(tau >= 0.0 && std::isfinite(tau))) {
        return invalid_argument("keyformer: tau {} must be a finite number >= 0 (0 = h2o)", tau);
    }
    const double seed = p.extra.at("seed");
    if (!(seed >= 0 && seed <= 0x1.0p53 && std::floor(seed) == seed)) {
        return invalid_argument("keyformer: seed {} must be an integer in [0, 2^53]", seed);
    }
    return r;
}

constexpr const char* k_sweep[] = {"keyformer"};
constexpr extra_param_def k_extra[] = {
    {"tau", 1.0, "temperature of the Gumbel noise on eviction scores, >= 0 (0: h2o)"},
    {"seed", 0.0, "seed of the noise, an integer in [0, 2^53]"},
    k_proxy_param};

}  // namespace

extern const policy_entry keyformer_entry{
    .name = "keyformer",
    .summary = "evicts the lowest accumulated attention plus seeded Gumbel noise (tau = 0: h2o)",
    .resolve = &resolve,
    .make = &make_policy<keyformer_policy>,
    .defaults = "recent = floor(budget / 2), sinks = 0, decay = 1, tau = 1, seed = 0",
    .source = score_source::attention,
    .sweep = k_sweep,
    .extra = k_extra};

}  // namespace h2okv::policy::detail
