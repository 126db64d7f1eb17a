// snapkv (Li et al. 2024, "SnapKV: LLM Knows What You are Looking for Before Generation"): at the end of each
// prefill chunk, the chunk's last `window` queries vote: a position's vote is the attention they gave it,
// smoothed by an average over `kernel` neighbouring held positions, and the lowest votes leave. Decode
// chunks (one token) then evict the oldest evictable token (decode=0) or the lowest accumulated attention,
// h2o's sum over every row so far (decode=1). Parameters: budget (required), recent (default: window, so the
// observation window stays), sinks (0), window (default 8), kernel (odd, default 5), decode (0 or 1,
// default 0); no decay. docs/EVICTION_CONTRACT.md 9.6 is the exact rule.
#include <algorithm>
#include <bit>
#include <cmath>
#include <utility>
#include <vector>

#include "policy/registry.h"

namespace h2okv::policy::detail {
namespace {

class snapkv_policy final : public scorer {
public:
    snapkv_policy(const resolved_params& config, const layout& l)
        : scorer(
              config, l,
              {.source = score_source::attention, .custom_rows = true, .custom_rank = true, .aux_words = 2}),
          window_(static_cast<int>(extra_value(config, "window"))),
          radius_(static_cast<int>(extra_value(config, "kernel")) / 2),
          decode_h2o_(extra_value(config, "decode") != 0.0) {}

protected:
    // aux per slot: [0] the observation vote (double bits), [1] 1 + the first position of the chunk it
    // belongs to (a vote of an earlier chunk counts as 0).
    void update_row(const row_view& v) const override {
        const bool observe = v.n_chunk > 1 && v.i >= v.n_chunk - window_;
        const auto tag = static_cast<uint64_t>(v.chunk_first + 1);
        for (int32_t s = 0; s < v.n_slots; ++s) {
            const int64_t p = v.pos[s];
            if (p < 0 || p > v.query) continue;
            v.score[s] = v.score[s] + v.row[s];
            if (!observe) continue;
            uint64_t* a = v.aux + 2 * static_cast<size_t>(s);
            const double vote = a[1] == tag ? std::bit_cast<double>(a[0]) : 0.0;
            a[0] = std::bit_cast<uint64_t>(vote + v.row[s]);
            a[1] = tag;
        }
    }

    void prepare_rank(int unit, const int64_t* pos, int32_t n_slots, int n_chunk) const override {
        prefill_ = n_chunk > 1;
        if (!prefill_) return;
        held_.clear();
        int64_t last = -1;
        for (int32_t s = 0; s < n_slots; ++s) {
            if (pos[s] < 0) continue;
            held_.emplace_back(pos[s], s);
            last = std::max(last, pos[s]);
        }
        std::sort(held_.begin(), held_.end());
        const auto tag = static_cast<uint64_t>(last - n_chunk + 2);  // 1 + the chunk's first position
        const uint64_t* aux = aux_of(unit);
        votes_.resize(held_.size());
        for (size_t j = 0; j < held_.size(); ++j) {
            const uint64_t* a = aux + 2 * static_cast<size_t>(held_[j].second);
            votes_[j] = a[1] == tag ? std::bit_cast<double>(a[0]) : 0.0;
        }
        pooled_.resize(static_cast<size_t>(n_slots));
        const auto n = static_cast<int64_t>(held_.size());
        for (int64_t j = 0; j < n; ++j) {
            const int64_t lo = std::max<int64_t>(0, j - radius_), hi = std::min<int64_t>(n - 1, j + radius_);
            double sum = 0.0;
            for (int64_t k = lo; k <= hi; ++k) sum = sum + votes_[static_cast<size_t>(k)];
            pooled_[static_cast<size_t>(held_[static_cast<size_t>(j)].second)] =
                sum / static_cast<double>(hi - lo + 1);
        }
    }

    double rank_score(int unit, int32_t slot, int64_t position, double score, int64_t next) const override {
        if (prefill_) return pooled_[static_cast<size_t>(slot)];
        return decode_h2o_ ? score : static_cast<double>(position);
    }

private:
    int window_;
    int radius_;
    bool decode_h2o_;
    // Rank scratch, sized at the first eviction and reused.
    mutable bool prefill_ = false;
    mutable std::vector<std::pair<int64_t, int32_t>> held_;
    mutable std::vector<double> votes_;
    mutable std::vector<double> pooled_;
};

bool is_integer_in(double v, double lo, double hi) {
    return v >= lo && v <= hi && std::floor(v) == v;
}

result<resolved_params> resolve(const params& p, int64_t run_length) {
    resolved_params r;
    H2OKV_ASSIGN_OR_RETURN(r.budget, required_budget("snapkv", p, run_length));
    const double window = p.extra.at("window"), kernel = p.extra.at("kernel"), decode = p.extra.at("decode");
    if (!is_integer_in(window, 1, 1 << 20)) {
        return invalid_argument("snapkv: window {} must be an integer >= 1 (the observing queries)", window);
    }
    if (!is_integer_in(kernel, 1, 1 << 20) || static_cast<int64_t>(kernel) % 2 == 0) {
        return invalid_argument("snapkv: kernel {} must be an odd integer >= 1 (positions pooled)", kernel);
    }
    if (decode != 0.0 && decode != 1.0) {
        return invalid_argument("snapkv: decode {} must be 0 (oldest leaves) or 1 (h2o's sum)", decode);
    }
    r.recent = p.recent.value_or(static_cast<int64_t>(window));
    r.sinks = p.sinks.value_or(0);
    H2OKV_RETURN_IF_ERROR(check_non_negative("snapkv", "recent", r.recent));
    H2OKV_RETURN_IF_ERROR(check_non_negative("snapkv", "sinks", r.sinks));
    if (status fit = check_protected_fit("snapkv", r.sinks, r.recent, r.budget, true); !fit.ok()) {
        if (p.recent) return fit;
        return invalid_argument("{}; recent defaults to the window, give a smaller one", fit.message());
    }
    H2OKV_RETURN_IF_ERROR(check_not_given("snapkv", "decay", p.decay.has_value(),
                                          "prefill votes and decode scores are plain sums"));
    return r;
}

constexpr const char* k_sweep[] = {"snapkv"};
constexpr extra_param_def k_extra[] = {
    {"window", 8.0, "prefill queries that vote, at the end of each prefill chunk, an integer >= 1"},
    {"kernel", 5.0, "held positions a vote is averaged over, an odd integer >= 1"},
    {"decode", 0.0, "decode chunks evict 0: the oldest, 1: the lowest accumulated attention"},
    k_proxy_param};

}  // namespace

extern const policy_entry snapkv_entry{
    .name = "snapkv",
    .summary = "prefill: evicts the lowest pooled vote of the chunk's last queries; decode: oldest or h2o",
    .resolve = &resolve,
    .make = &make_policy<snapkv_policy>,
    .defaults = "recent = window, sinks = 0, window = 8, kernel = 5, decode = 0, no decay",
    .source = score_source::attention,
    .sweep = k_sweep,
    .extra = k_extra};

}  // namespace h2okv::policy::detail
