// keydiff (Park et al. 2025, "KeyDiff: Key Similarity-Based KV Cache Eviction for Long-Context LLM
// Inference"): evicts the keys most similar to the mean key, keeping the most distinctive ones. A position's
// rank is the sum over the unit's (layer, KV head) pairs of 1 - cos(k, a), with a the sum of the keys held
// when the chunk ends (kept and chunk tokens); the lowest leaves. Reads keys, no attention: engines compute
// no attention rows for it. The policy keeps a float copy of the held keys (head_dim floats per slot and
// pair). Parameters: budget (required), recent (default floor(budget / 2)), sinks (0); no decay.
// docs/EVICTION_CONTRACT.md 9.4 is the exact rule.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "policy/registry.h"

namespace h2okv::policy::detail {
namespace {

class keydiff_policy final : public scorer {
public:
    keydiff_policy(const resolved_params& config, const layout& l)
        : scorer(config, l, {.source = score_source::keys, .custom_rank = true, .store_keys = true}) {}

protected:
    void prepare_rank(int unit, const int64_t* pos, int32_t n_slots, int n_chunk) const override {
        const size_t dim = static_cast<size_t>(key_dim());
        if (dim == 0) return;
        held_.clear();
        for (int32_t s = 0; s < n_slots; ++s) {
            if (pos[s] >= 0) held_.emplace_back(pos[s], s);
        }
        std::sort(held_.begin(), held_.end());
        anchor_.assign(static_cast<size_t>(key_pairs()) * dim, 0.0);
        anchor_norm_.assign(static_cast<size_t>(key_pairs()), 0.0);
        for (int pair = 0; pair < key_pairs(); ++pair) {
            double* a = &anchor_[static_cast<size_t>(pair) * dim];
            for (const auto& [p, s] : held_) {
                const auto k = stored_key(unit, s, pair);
                for (size_t d = 0; d < dim; ++d) a[d] = a[d] + static_cast<double>(k[d]);
            }
            anchor_norm_[static_cast<size_t>(pair)] = norm(a, dim);
        }
    }

    double rank_score(int unit, int32_t slot, int64_t position, double score, int64_t next) const override {
        const size_t dim = static_cast<size_t>(key_dim());
        if (dim == 0) return 0.0;  // no key given yet: ties, the oldest leaves
        double distance = 0.0;
        for (int pair = 0; pair < key_pairs(); ++pair) {
            const auto k = stored_key(unit, slot, pair);
            const double* a = &anchor_[static_cast<size_t>(pair) * dim];
            double dot = 0.0, kk = 0.0;
            for (size_t d = 0; d < dim; ++d) {
                const double x = static_cast<double>(k[d]);
                dot = dot + x * a[d];
                kk = kk + x * x;
            }
            const double nk = std::sqrt(kk), na = anchor_norm_[static_cast<size_t>(pair)];
            const double cos = nk == 0.0 || na == 0.0 ? 0.0 : dot / (nk * na);
            distance = distance + (1.0 - cos);
        }
        return distance;
    }

private:
    static double norm(const double* a, size_t dim) {
        double sum = 0.0;
        for (size_t d = 0; d < dim; ++d) sum = sum + a[d] * a[d];
        return std::sqrt(sum);
    }
    // Rank scratch: sized at the first eviction (capacity entries at most), reused after.
    mutable std::vector<std::pair<int64_t, int32_t>> held_;
    mutable std::vector<double> anchor_;
    mutable std::vector<double> anchor_norm_;
};

result<resolved_params> resolve(const params& p, int64_t run_length) {
    H2OKV_ASSIGN_OR_RETURN(resolved_params r, resolve_half_recent("keydiff", p, run_length));
    H2OKV_RETURN_IF_ERROR(check_not_given("keydiff", "decay", p.decay.has_value(),
                                          "keydiff ranks keys at each eviction, it never reads attention"));
    return r;
}

constexpr const char* k_sweep[] = {"keydiff"};

}  // namespace

extern const policy_entry keydiff_entry{
    .name = "keydiff",
    .summary = "evicts the key most similar to the mean key (reads no attention)",
    .resolve = &resolve,
    .make = &make_policy<keydiff_policy>,
    .defaults = "recent = floor(budget / 2), sinks = 0, no decay",
    .source = score_source::keys,
    .sweep = k_sweep};

}  // namespace h2okv::policy::detail
