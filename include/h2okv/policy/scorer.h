// The scorer base: how to write an eviction policy (in the tree or outside it) as a score rule.
//
// A scorer says how a slot's score starts and changes; the base does everything else the contract
// (docs/EVICTION_CONTRACT.md) fixes: the protected sinks and recent window, the victim order (lowest score
// first, a tie evicts the lower position; or the oldest position first), the slot bookkeeping and the chunk
// protocol of kv_policy. A score comes from one of three sources (`rule::source`):
//
//   - attention rows: by default the contract's score = score * decay + row (the shared SIMD pass; h2o,
//     tova, keyformer); with `custom_rows` the policy's update_row runs instead (scissorhands);
//   - keys at insertion: key_score() of each (layer, KV head) key of a chunk token, summed in double in the
//     order the engine hands them (l2norm); add_row is then a no-op and engines materialise no attention;
//   - none: the victim is the oldest evictable position (window, streaming).
//
// The key-as-query proxy (docs/EVICTION_CONTRACT.md 9.5) turns any attention scorer into a key-scored one:
// with the extra parameter proxy=1 the base keeps the unit's keys and, at the chunk's end, computes each
// chunk token's row as softmax(K k_new / sqrt(d)) over what that token would attend, per (layer, KV head),
// and feeds it to the policy's own score update; the engine computes no attention rows for it. Every
// built-in attention policy declares `proxy` (k_proxy_param below).
//
// An out-of-tree policy registers itself before its first use:
//
//   class mine final : public policy::scorer {
//   public:
//       mine(const policy::resolved_params& c, const policy::layout& l)
//           : scorer(c, l, {.source = policy::score_source::keys}) {}
//   protected:
//       double key_score(const key_view& k) const override { return -k.key[0]; }
//   };
//   const policy::policy_entry mine_entry{.name = "mine", .summary = "...", .resolve = &resolve_mine,
//                                         .make = &policy::make_policy<mine>, .source = score_source::keys};
//   H2OKV_RETURN_IF_ERROR(policy::register_policy(mine_entry));
//
// Registration is not thread-safe: register before any thread parses specs or creates policies.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "h2okv/policy/policy.h"

namespace h2okv::policy {

// A policy's own parameter, as its registry entry declares it.
struct extra_param_def {
    const char* name;
    double default_value;
    const char* help;  // one line: meaning and valid range
};

// One registered policy: its name, facts, parameter rules and factory.
struct policy_entry {
    const char* name;
    const char* summary;  // one line: what the policy evicts
    // Applies defaults and validates (name, granularity and positions are filled in by kv_policy::create);
    // extra parameters not given take their extra_param_def defaults before resolve sees them.
    result<resolved_params> (*resolve)(const params& p, int64_t run_length);
    std::unique_ptr<kv_policy> (*make)(const resolved_params& config, const layout& l);
    const char* defaults = "";  // one line: the defaults of budget, recent, sinks, decay
    bool evicts = true;
    score_source source = score_source::none;  // with default parameters
    granularity gran = granularity::head;      // when params::gran is unset
    std::span<const char* const> sweep = {};   // default sweep members (spec strings)
    std::span<const extra_param_def> extra = {};
};

template <class Policy>
std::unique_ptr<kv_policy> make_policy(const resolved_params& config, const layout& l) {
    return std::make_unique<Policy>(config, l);
}

// The proxy parameter every attention scorer may declare in its entry's `extra`.
inline constexpr extra_param_def k_proxy_param{
    "proxy", 0.0, "1: scores from the key-as-query proxy softmax(K k / sqrt(d)) instead of attention rows"};

// Adds an entry after the built-in ones (it must outlive every use; a static object does). Refuses a name
// already registered or one that is not [a-z0-9_]+.
status register_policy(const policy_entry& entry);

// Rules most policies share, for resolve functions.
// The budget of an evicting policy: required; a fraction resolves against run_length.
result<int64_t> required_budget(std::string_view policy, const params& p, int64_t run_length);
// Refuses a negative `value` of the parameter `what`.
status check_non_negative(std::string_view policy, std::string_view what, int64_t value);
// Refuses sinks + recent > budget (or >= budget when `strict`), naming the three values.
status check_protected_fit(std::string_view policy, int64_t sinks, int64_t recent, int64_t budget,
                           bool strict);
// The budget (required), recent (default floor(budget / 2), the paper's split) and sinks (default 0) of a
// heavy-hitter policy, validated: both >= 0 and sinks + recent < budget. decay is left for the caller.
result<resolved_params> resolve_half_recent(std::string_view policy, const params& p, int64_t run_length);
// Refuses a parameter the policy has no use for (`why` says why), when it was given.
status check_not_given(std::string_view policy, std::string_view what, bool given, std::string_view why);
// The value of extra parameter `name` (resolve fills every declared one; 0 when absent).
double extra_value(const resolved_params& r, std::string_view name);

// Which evictable position leaves first.
enum class victim_order {
    lowest_score,  // the lowest (ranked) score; a tie evicts the lower position
    oldest,        // the lowest position
};

class scorer : public kv_policy {
public:
    struct rule {
        score_source source = score_source::attention;
        victim_order order = victim_order::lowest_score;
        // Attention rows: update_row replaces the contract's score * decay + row.
        bool custom_rows = false;
        // Eviction ranks slots by rank_score() instead of their stored score (the stored scores stay).
        bool custom_rank = false;
        // Words of per-slot state the base keeps for the policy (zeroed when a token takes the slot).
        int aux_words = 0;
        // Keep every held token's keys (stored_key()); implied by the proxy.
        bool store_keys = false;
    };

    bool needs_attention() const final { return rule_.source == score_source::attention; }
    bool needs_keys() const final { return rule_.source == score_source::keys; }
    int stored_keys_per_slot() const final { return rule_.store_keys ? key_pairs_ : 0; }

protected:
    scorer(const resolved_params& config, const layout& l, rule r);

    // One attention row of one unit, slot-indexed arrays of n_slots entries (1 + the highest occupied slot).
    struct row_view {
        int unit;
        int64_t query;       // the query's position
        const double* row;   // the row increment (0 where not attended)
        const int64_t* pos;  // the position held, -1 for a free slot; attended: 0 <= pos <= query
        double* score;       // updated in place
        uint64_t* aux;       // aux_words per slot, or nullptr
        int32_t n_slots;
        int64_t n_attended;  // positions the query attended (kept + chunk prefix)
        int n_heads;         // query heads whose weights each row entry sums
        int i;               // the query's index in its chunk
        int n_chunk;         // the chunk's size
        int64_t chunk_first;
    };
    virtual void update_row(const row_view& v) const {}

    // One key of chunk token `position` for (layer, kv_head) of `unit`; the scores of a token's keys add up.
    struct key_view {
        int unit;
        int layer;
        int kv_head;
        int64_t position;
        std::span<const float> key;
    };
    virtual double key_score(const key_view& k) const { return 0.0; }

    // custom_rank: prepare_rank(unit, pos, n_slots, n_chunk) runs once before a unit's victims are ranked
    // (pos: the slot-indexed positions, -1 free, chunk tokens included; n_chunk: the size of the chunk
    // ending); then each evictable slot `slot` (position
    // `position`, stored `score`) is ranked by rank_score() when the chunk ending before `next` evicts.
    // NaN ranks as +infinity.
    virtual void prepare_rank(int unit, const int64_t* pos, int32_t n_slots, int n_chunk) const {}
    // The aux words of `unit` (aux_words per slot), as update_row sees them.
    const uint64_t* aux_of(int unit) const { return aux_[static_cast<size_t>(unit)].data(); }
    virtual double rank_score(int unit, int32_t slot, int64_t position, double score, int64_t next) const {
        return score;
    }

    int heads_per_unit() const { return heads_per_unit_; }
    bool proxy() const { return proxy_; }
    // store_keys: the (layer, KV head) pairs a unit holds keys of (layer-major; 1 under `head`), the key
    // length (0 before the first key), and the key of pair `pair` stored in `slot` (zeros if none was given).
    int key_pairs() const { return key_pairs_; }
    int key_dim() const { return key_dim_; }
    std::span<const float> stored_key(int unit, int32_t slot, int pair) const;

private:
    void choose_victims(detail::unit_table& t, int count) const final;
    bool custom_rows() const final { return rule_.custom_rows; }
    void update_row(detail::unit_table& t, int unit, int i, const double* row) const final;
    status on_init() final;
    void on_begin_chunk(detail::unit_table& t, int table_index) final;
    void on_reset() final;
    void on_key(detail::unit_table& t, int unit, int i, int layer, int kv_head,
                std::span<const float> key) final;
    void on_end_chunk() final;
    int pair_of(int layer, int kv_head) const;
    // The proxy's rows of the open chunk, fed through apply_row.
    void proxy_rows(detail::unit_table& t);

    rule rule_;
    bool proxy_ = false;
    int heads_per_unit_ = 1;
    int key_pairs_ = 1;
    int key_dim_ = 0;
    std::vector<std::vector<float>>
        keys_;                       // per unit: capacity * key_pairs * key_dim, allocated at the first key
    std::vector<double> proxy_row_;  // capacity entries
    std::vector<std::pair<int64_t, int32_t>> by_position_;  // capacity entries: (position, slot)
    std::vector<double> logits_;                            // capacity entries
    mutable std::vector<std::vector<uint64_t>> aux_;        // per unit: capacity * aux_words
    mutable std::vector<double> ranked_;                    // custom_rank: capacity entries of ranking scores
};

}  // namespace h2okv::policy
