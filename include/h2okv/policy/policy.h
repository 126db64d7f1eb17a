// KV eviction policies: the engine-agnostic heart of h2okv (no model, no kernels, no I/O).
//
// A policy manages one *slot table* per eviction unit (per (layer, KV head), per layer or per model, see
// `granularity`). A slot table has `capacity()` slots; each slot is free or holds one token position and its
// float64 score. The engine stores the K/V of a token in the slot with the same index in its own cache, so a
// victim's slot is simply overwritten by a newcomer: nothing moves in memory.
//
// The chunk protocol implements SPEC.md's eviction contract exactly:
//
//   H2OKV_ASSIGN_OR_RETURN(auto pol, policy::kv_policy::create(params, layout, run_length));
//   for each chunk [first, first + n):
//       pol->begin_chunk(first, n);           // every unit gives chunk token i the slot chunk_slots(u)[i]
//       for i in 0..n-1, for each unit u:     // query first + i attends kept_slots(u) + chunk_slots(u)[0..i]
//           row[slot] = sum over the unit's query heads of their softmax weight on that slot (as double)
//           pol->add_row(u, i, row);          // skip it for a null row; rows of a unit in increasing i
//       pol->end_chunk();                     // evicts down to budget; victims(u) lists who left
//
// Policies that do not read attention (`needs_attention() == false`: full, window, streaming) need no rows.
//
// Slots are assigned deterministically (chunk tokens take the lowest free slots, in order), so every KV head
// of a unit, and every run with the same inputs, sees the same slot layout. The decode path (chunks of one
// token) costs one pass over the occupied slots per unit and allocates nothing.
//
// Threads: add_row for distinct units may run concurrently; every other call comes from one thread.
//
// New policies: one file in src/policy/policies/ plus one line in src/policy/policies.def
// (docs/ADDING_A_POLICY.md).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "h2okv/core/status.h"

namespace h2okv::policy {

// How many kept sets a model has: one per (layer, KV head), one per layer, or one for the whole model.
enum class granularity { head, layer, model };
const char* granularity_name(granularity g);
result<granularity> parse_granularity(std::string_view s);  // "head" | "layer" | "model"

// The RoPE positions of cached tokens (docs/EVICTION_CONTRACT.md). `original`: a token keeps its place in
// the text. `rolling`: per unit, its place in the cache: the kept positions, in ascending order, take 0..k-1
// and the chunk's tokens follow at k, k+1, ... (StreamingLLM's assignment); positions then stay below the
// capacity however long the run. Kept sets and scores are the same concept in both modes (tokens are named
// by their original position); only what the engine rotates differs.
enum class position_mode { original, rolling };
const char* position_mode_name(position_mode m);
result<position_mode> parse_position_mode(std::string_view s);  // "original" | "rolling"

// A KV budget: a token count ("256", >= 1) or a fraction of the run's length ("0.2", in (0, 1]).
struct budget_spec {
    bool is_fraction = false;
    int64_t tokens = 0;     // when !is_fraction
    double fraction = 0.0;  // when is_fraction

    static budget_spec count(int64_t n) { return {false, n, 0.0}; }
    static budget_spec of_length(double f) { return {true, 0, f}; }
    // A value with a decimal point is a fraction; otherwise a count.
    static result<budget_spec> parse(std::string_view text);
    // max(1, floor(fraction * run_length)) for a fraction (computed in double); the count otherwise.
    result<int64_t> resolve(int64_t run_length) const;
    // Parses back to the same value: a fraction always carries a decimal point ("1.0", "0.2").
    std::string to_string() const;
    bool operator==(const budget_spec&) const = default;
};

// How a model's budget is spread over its units (docs/EVICTION_CONTRACT.md clause 11). `uniform`: every unit
// holds `budget`. `pyramid` (PyramidKV): budgets fall linearly with depth, from (1 + ratio) x budget at the
// first layer to (1 - ratio) x budget at the last, with the same total.
enum class budget_schedule { uniform, pyramid };
const char* budget_schedule_name(budget_schedule s);
result<budget_schedule> parse_budget_schedule(std::string_view s);  // "uniform" | "pyramid"

// What the user asked for. Unset optionals take the policy's defaults (SPEC.md, the contract's table).
struct params {
    std::string name = "full";
    std::optional<budget_spec> budget;
    std::optional<int64_t> recent;
    std::optional<int64_t> sinks;
    std::optional<double> decay;
    // Unset: the policy's own default (policy_facts::gran; granularity_of applies it).
    std::optional<granularity> gran;
    position_mode positions = position_mode::original;  // ignored by `full` (nothing moves)
    // The policy's own parameters (policy_facts::extra names them): "keyformer:tau=0.5,seed=7".
    std::map<std::string, double, std::less<>> extra;
    // Budgets per unit (clause 11; empty or uniform: every unit holds `budget`). `shares` (spec key
    // shares=w0/w1/..., what `h2okv calibrate` writes): one positive weight per unit, layer-major (n_layer x
    // n_kv_head under `head`, n_layer under `layer`); the model's total n_units x budget is split in
    // proportion. `schedule`/`ratio`: PyramidKV's per-layer schedule (ratio in [0, 1), default 0.5); not
    // with shares.
    budget_schedule schedule = budget_schedule::uniform;
    std::optional<double> ratio;
    std::vector<double> shares;
    // Per layer (n_layer entries each, spec keys recents=f0/f1/... and decays=d0/d1/...): a layer's units
    // protect recent = floor(f x the unit's budget) (f in [0, 1)) and decay their scores by d, in place of
    // the shared recent and decay.
    std::vector<double> recents;
    std::vector<double> decays;

    // "h2o:budget=256,recent=192,decay=0.98,sinks=0,granularity=layer,positions=rolling" (the part after ':'
    // is optional).
    // Unknown policy or parameter names are refused with the list of valid ones.
    static result<params> parse(std::string_view spec);
    // The spec string parse() reads back to an equal value; unset parameters are left out.
    std::string to_string() const;
    bool operator==(const params&) const = default;
};

// The parameters after defaults are applied and budgets resolved; what a policy actually runs with.
struct resolved_params {
    std::string name;
    int64_t budget = 0;  // 0 for `full` (unbounded up to layout::max_positions)
    int64_t recent = 0;
    int64_t sinks = 0;
    double decay = 1.0;
    granularity gran = granularity::head;
    position_mode positions = position_mode::original;  // always original for `full`
    // Every parameter of policy_facts::extra, defaults applied.
    std::map<std::string, double, std::less<>> extra;
    // The allocation as given (params' fields of the same names), and what it resolves to: per unit, its
    // budget, recent and decay (n_units entries each; empty when every unit runs with budget, recent and
    // decay above).
    budget_schedule schedule = budget_schedule::uniform;
    double ratio = 0.0;
    std::vector<double> shares;
    std::vector<double> recents;
    std::vector<double> decays;
    std::vector<int64_t> unit_budget;
    std::vector<int64_t> unit_recent;
    std::vector<double> unit_decay;
    // Whether any unit's budget differs from another's (then rolling positions are refused: clause 8 needs
    // equal kept counts).
    bool uneven_budgets() const;
    // "h2o:budget=256,recent=128,sinks=0,granularity=head" (decay only when it is not 1, positions only when
    // rolling, then the policy's own parameters that differ from their defaults); params::parse of it creates
    // the same configuration.
    std::string to_string() const;
    bool operator==(const resolved_params&) const = default;
};

// The model as the policy sees it.
struct layout {
    int n_layer = 1;
    int n_kv_head = 1;          // per layer
    int n_head = 1;             // query heads per layer; a multiple of n_kv_head
    int max_chunk = 1;          // the largest chunk begin_chunk will be given
    int64_t max_positions = 0;  // the context length: capacity of `full`, and the largest position + 1
    status validate() const;
};

// The names of every registered policy, in registry order.
std::vector<std::string> policy_names();

// What a policy's scores are computed from.
enum class score_source {
    none,       // no score: the victim follows from positions alone (full, window, streaming)
    attention,  // attention rows (add_row)
    keys,       // the keys of the chunk's tokens, at insertion (add_key); no attention rows
};
const char* score_source_name(score_source s);

// A parameter of a policy beyond the shared budget/recent/sinks/decay (params::extra).
struct extra_param {
    std::string name;
    double default_value = 0.0;
    std::string help;  // one line: meaning and valid range
};

// Facts about a registered policy, from its registry entry: what the engine and the CLI read instead of
// comparing policy names.
struct policy_facts {
    std::string name;
    std::string summary;   // one line: what it evicts
    std::string defaults;  // one line: its defaults of budget, recent, sinks and decay
    bool evicts = true;    // false: keeps every token, its capacity is the context length (`full`)
    score_source source = score_source::none;  // with default parameters
    // Its default granularity: head for every built-in but tova, whose paper averages a layer's heads
    // (layer).
    granularity gran = granularity::head;
    // Spec strings the default --sweep-policies of the evaluation commands include (may be empty).
    std::vector<std::string> sweep;
    std::vector<extra_param> extra;
};

// Every registered policy's facts, in registry order.
std::vector<policy_facts> policy_catalog();
// The facts of `name`; an unknown name is refused with the list of valid ones.
result<policy_facts> facts_of(std::string_view name);
// The default sweep: every registered policy's sweep specs, in registry order.
std::vector<std::string> default_sweep();
// Whether the policy named `name` evicts (policy_facts::evicts); true for a name no policy has, which
// kv_policy::create refuses anyway.
bool policy_evicts(std::string_view name);
// The granularity `p` runs with: its own, else its policy's default (head for a name no policy has).
granularity granularity_of(const params& p);

namespace detail {
struct unit_table;  // one unit's slot table (src/policy/unit_table.h)
struct policy_state;
}  // namespace detail

// What kv_policy::create would allocate, computed without allocating anything: an engine sizes a sequence's
// cache, and admits it, before it exists.
struct footprint {
    int64_t capacity = 0;  // slots of the largest unit, as kv_policy::capacity()
    int n_units = 0;
    // Slots per (layer, KV head) of the layout, layer-major (n_layer x n_kv_head): the rows an engine's K/V
    // store needs for that head (its unit's capacity).
    std::vector<int64_t> head_capacity;
    std::vector<int64_t> unit_capacity;  // slots per unit (n_units entries)
    int64_t total_slots() const;         // the sum of unit_capacity
    int n_tables = 0;  // slot tables allocated: one per unit, or one all units share (no attention read)
    bool needs_attention = false;
    position_mode positions = position_mode::original;  // as resolved (original for `full`)
    int64_t table_bytes = 0;                            // bytes of the slot tables
    // Keys the policy copies per slot and unit (keydiff, the proxy): that many head_dim floats each, which
    // the engine adds (the policy does not know head_dim).
    int stored_keys_per_slot = 0;
};

class kv_policy {
public:
    // Applies the policy's defaults, resolves a fractional budget against `run_length` and validates the
    // result (the error names the values and the rule they break).
    static result<std::unique_ptr<kv_policy>> create(const params& p, const layout& l, int64_t run_length);
    // What create() with the same arguments would allocate (the same validation, nothing allocated).
    static result<footprint> plan(const params& p, const layout& l, int64_t run_length);
    virtual ~kv_policy();
    kv_policy(const kv_policy&) = delete;
    kv_policy& operator=(const kv_policy&) = delete;

    const resolved_params& config() const { return config_; }
    const layout& shape() const { return layout_; }
    // Whether add_row has any effect; engines skip score accumulation (and never materialise attention
    // rows) when false.
    virtual bool needs_attention() const = 0;
    // Whether add_key has any effect: the policy scores tokens from their keys at insertion.
    virtual bool needs_keys() const { return false; }
    // Keys the policy keeps a copy of per slot and unit (footprint::stored_keys_per_slot).
    virtual int stored_keys_per_slot() const { return 0; }
    // True when an engine must forward a chunk one token at a time through all layers: a `model`-granularity
    // policy that reads attention needs the rows of every layer for a query before the next query's row.
    // Chunk boundaries, and so evictions, do not change; only how the chunk's tokens are batched.
    bool token_by_token() const;

    int n_units() const;
    int unit_of(int layer, int kv_head) const;
    // Query heads that read `unit`: (layer, query head) pairs, layer-major, in ascending order. A row
    // increment is the sum, in double and in this order, of these heads' weights.
    std::vector<std::pair<int, int>> heads_of(int unit) const;
    // Slots of the largest unit: budget + max_chunk, but never more than max_positions (a unit cannot hold
    // more positions than exist); `full`: max_positions.
    int64_t capacity() const;
    // Slots of `unit` (its own budget + max_chunk, capped the same way); every slot index of the unit is
    // below it.
    int64_t capacity(int unit) const;
    // The budget, recent and decay `unit` runs with (config().unit_* or the shared ones).
    int64_t budget(int unit) const;
    int64_t recent(int unit) const;
    double decay(int unit) const;

    // Starts the chunk of positions [first, first + n): first must follow the previous chunk (0 after
    // create() or reset()), 1 <= n <= max_chunk and first + n <= max_positions.
    status begin_chunk(int64_t first, int n);
    // Slots held before the chunk (each query of the chunk attends all of them), in ascending slot order.
    // After end_chunk: every slot held.
    std::span<const int32_t> kept_slots(int unit) const;
    // The slot of chunk token i, for i in [0, n), of the current (or last) chunk.
    std::span<const int32_t> chunk_slots(int unit) const;
    // Between begin_chunk and end_chunk: kept_slots(unit) then chunk_slots(unit), in one array, so that
    // chunk query i attends its first n_kept(unit) + i + 1 entries without a copy.
    std::span<const int32_t> attended_slots(int unit) const;
    // The row increment of chunk query i of `unit`: `row` has capacity() entries indexed by slot (zero
    // where the query did not attend, free slots included). Decays then adds, per the contract. Not calling
    // it for (unit, i) is a null row. Rows of one unit must come in increasing i.
    void add_row(int unit, int i, const double* row);
    // Whether add_weights may stand in for add_row for `unit`: the policy reads attention and adds rows to
    // its scores as they come (no decay, no scorer rule of its own), so a slot the query did not attend keeps
    // its score.
    bool takes_weights(int unit) const;
    // add_row's increment given as the query's attention weights themselves, for a unit that takes_weights:
    // chunk query i of `unit` attended the first n_kept(unit) + i + 1 entries of attended_slots(unit) with
    // weights heads[h][j], and its row would hold ((0 + heads[0][j]) + heads[1][j]) + ... (in double, head
    // by head) at slot j. The same scores and victims, bit for bit, as add_row with that row, reading and
    // writing the attended slots' entries only where add_row reads the whole row.
    void add_weights(int unit, int i, std::span<const float* const> heads);
    // A hint that add_weights or add_row for `unit` follows soon: asks memory for the unit's scores and
    // positions, which a decode step's attention otherwise finds out of cache.
    void prefetch_scores(int unit) const;
    // The key of chunk token i as KV head `kv_head` of `layer` stores it (head_dim floats, rotated as the
    // engine attends it), for every (layer, KV head) of `unit`: call it once per (layer, KV head) and chunk
    // token, in any order, before end_chunk. A no-op unless needs_keys().
    void add_key(int unit, int i, int layer, int kv_head, std::span<const float> key);
    // Admits the chunk and evicts, per unit, down to the budget.
    status end_chunk();

    // The positions the last end_chunk evicted from `unit`, ascending, and their (now free) slots.
    std::span<const int64_t> victims(int unit) const;
    std::span<const int32_t> victim_slots(int unit) const;

    // Rolling positions (config().positions == rolling; empty otherwise): capacity() entries, the rolling
    // position of each occupied slot's token, its rank among the unit's positions. Between chunks the kept
    // slots hold 0..n_kept-1 in position order; from begin_chunk on, chunk token i holds n_kept + i (the
    // kept slots keep theirs until end_chunk, which renumbers the survivors). Free slots hold stale values.
    // slot_turns: by how much each slot's rolling position has dropped since its token was admitted (0 for
    // the chunk's tokens), the turn attention gives a key stored at its admission position
    // (kernels::key_turns); slot_rolling_positions: the positions themselves (introspection, computed).
    std::span<const int32_t> slot_turns(int unit) const;
    std::vector<int32_t> slot_rolling_positions(int unit) const;

    // The first position of the next chunk (the number of tokens seen so far).
    int64_t next_position() const;

    // Introspection (not for hot paths).
    std::vector<int64_t> kept_positions(int unit) const;      // ascending
    std::span<const int64_t> slot_positions(int unit) const;  // capacity() entries, -1 for a free slot;
                                                              // chunk slots hold their positions from
                                                              // begin_chunk on
    std::span<const double> slot_scores(int unit) const;      // capacity() entries
    int64_t n_kept(int unit) const;
    int64_t evictions(int unit) const;  // since creation or reset()
    int64_t total_evictions() const;

    // Back to the state right after create().
    void reset();

protected:
    kv_policy(resolved_params config, layout l);

    // The per-policy victim rule. Called by end_chunk for each unit that holds more than `budget` positions
    // with count = how many must leave (1 <= count <= n of the chunk). It writes `count` distinct slots whose
    // positions are evictable (t.evictable_lo <= position < t.evictable_hi) into t.victim_slot[0..count)
    // and their positions into t.victim_pos, ascending by position. src/policy/unit_table.h has the
    // selections the built-in policies use.
    virtual void choose_victims(detail::unit_table& t, int count) const = 0;

    // Hooks of policies whose scores are not the contract's decayed sum (the scorer base, scorer.h, uses
    // them). custom_rows(): add_row calls update_row instead of the shared score pass. on_init: after the
    // tables are allocated. on_begin_chunk: after the chunk's slots are assigned, per table. on_reset: from
    // reset(). add_key forwards to on_key when needs_keys().
    virtual bool custom_rows() const { return false; }
    virtual void update_row(detail::unit_table& t, int unit, int i, const double* row) const {}
    virtual status on_init() { return ok_status(); }
    virtual void on_begin_chunk(detail::unit_table& t, int table_index) {}
    virtual void on_reset() {}
    virtual void on_key(detail::unit_table& t, int unit, int i, int layer, int kv_head,
                        std::span<const float> key) {}
    // From end_chunk, before anything is admitted or evicted (the chunk is still open).
    virtual void on_end_chunk() {}
    // add_row's score update, whether or not the policy reads attention rows from the engine (a policy
    // that computes its own rows, such as the key-as-query proxy, feeds them here).
    void apply_row(int unit, int i, const double* row);
    // The table of `unit` (shared by every unit when the policy reads neither attention nor keys).
    detail::unit_table& table(int unit) const;

private:
    // Allocates the slot tables; create() calls it once the policy's type (and so needs_attention()) is
    // known.
    status init();
    // The sizes init() allocates, validated.
    result<footprint> measure() const;
    static result<std::unique_ptr<kv_policy>> make(const params& p, const layout& l, int64_t run_length);

    resolved_params config_;
    layout layout_;
    std::unique_ptr<detail::policy_state> state_;
};

}  // namespace h2okv::policy
