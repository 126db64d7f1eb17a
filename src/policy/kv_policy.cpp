// kv_policy: the chunk protocol, slot assignment and eviction bookkeeping every policy shares.
#include <algorithm>
#include <cassert>
#include <functional>
#include <limits>
#include <new>
#include <numeric>

#include "h2okv/policy/policy.h"
#include "policy/score_pass.h"
#include "policy/unit_table.h"

namespace h2okv::policy {
namespace detail {

struct policy_state {
    std::vector<unit_table> tables;  // one per unit, or one that every unit shares (`shared`)
    std::vector<int32_t> scratch;    // the tables' shared selection scratch
    bool shared = false;
    bool reads_attention = false;
    bool reads_keys = false;
    bool custom_rows = false;
    const score_pass_fns* pass = nullptr;
    int n_units = 1;
    int32_t capacity = 0;  // the largest table's
    int64_t next = 0;      // the first position of the next chunk
    int64_t chunk_first = 0;
    int chunk_n = 0;
    bool in_chunk = false;
};

}  // namespace detail

namespace {

using detail::unit_table;

void reset_table(unit_table& t) {
    std::fill(t.pos.begin(), t.pos.end(), -1);
    std::fill(t.score.begin(), t.score.end(), 0.0);
    // Ascending order is already a valid min-heap.
    t.free_heap.resize(t.pos.size());
    std::iota(t.free_heap.begin(), t.free_heap.end(), 0);
    t.n_kept = t.n_chunk = t.n_victims = t.high_water = 0;
    t.evictions = 0;
    t.evictable_lo = t.evictable_hi = 0;
    t.victims_due = 0;
    t.lowest_hint = -1;
}

void allocate_table(unit_table& t, int32_t capacity, int max_chunk, bool rolling) {
    t.pos.resize(capacity);
    if (rolling) {
        t.admitted.assign(capacity, 0);
        t.drop.assign(capacity, 0);
    }
    t.score.resize(capacity);
    t.kept.resize(capacity);
    t.free_heap.reserve(capacity);
    t.chunk.resize(max_chunk);
    t.victim_slot.resize(max_chunk);
    t.victim_pos.resize(max_chunk);
    reset_table(t);
}

int32_t take_lowest_free(unit_table& t) {
    std::pop_heap(t.free_heap.begin(), t.free_heap.end(), std::greater<>());
    const int32_t slot = t.free_heap.back();
    t.free_heap.pop_back();
    return slot;
}

// `kept` stays in ascending slot order, so attention reads a unit's K/V store front to back however
// scattered the evictions left it (measured: half the attention time of the order evictions leave). A removal
// or an admission moves the entries after it: O(n_kept), like the score pass every step already makes.
void release(unit_table& t, int32_t slot) {
    const auto kept_end = t.kept.begin() + t.n_kept;
    const auto k = std::lower_bound(t.kept.begin(), kept_end, slot);
    if (k != kept_end && *k == slot) {  // a kept slot (a chunk token evicted at once was never kept)
        std::copy(k + 1, kept_end, k);
        --t.n_kept;
    }
    t.pos[slot] = -1;
    t.score[slot] = 0.0;
    t.free_heap.push_back(slot);  // within the reserved capacity: no allocation
    std::push_heap(t.free_heap.begin(), t.free_heap.end(), std::greater<>());
    ++t.evictions;
}

// After an eviction, each survivor's rolling position drops by the number of victims older than it (their
// ranks were below its own), which keeps the kept positions at 0..n_kept-1 in position order. One dense pass
// over the occupied slots [0, high_water) (free and evicted slots hold position -1, below every victim, and
// their drop is reset when a token takes them), so the usual single victim is a vectorised compare and add.
// The drop is what attention turns the stored key by (kernels::key_turns reads it by slot).
void renumber(unit_table& t, const detail::score_pass_fns& pass) {
    if (t.n_victims == 0) return;
    const int64_t* pos = t.pos.data();
    int32_t* drop = t.drop.data();
    const int32_t n = t.high_water;
    if (t.n_victims == 1) {
        pass.count_older(pos, n, t.victim_pos[0], drop);
        return;
    }
    const int64_t* vb = t.victim_pos.data();
    const int64_t* ve = vb + t.n_victims;
    for (int32_t s = 0; s < n; ++s) {
        if (pos[s] >= 0) drop[s] += static_cast<int32_t>(std::lower_bound(vb, ve, pos[s]) - vb);
    }
}

}  // namespace

int64_t footprint::total_slots() const {
    return std::accumulate(unit_capacity.begin(), unit_capacity.end(), int64_t{0});
}

kv_policy::kv_policy(resolved_params config, layout l)
    : config_(std::move(config)), layout_(l), state_(std::make_unique<detail::policy_state>()) {}

kv_policy::~kv_policy() = default;

result<footprint> kv_policy::measure() const {
    footprint f;
    switch (config_.gran) {
        case granularity::head: f.n_units = layout_.n_layer * layout_.n_kv_head; break;
        case granularity::layer: f.n_units = layout_.n_layer; break;
        case granularity::model: f.n_units = 1; break;
    }
    const auto capacity_of = [&](int64_t budget) {
        return budget > 0 && budget <= layout_.max_positions - layout_.max_chunk ? budget + layout_.max_chunk
                                                                                 : layout_.max_positions;
    };
    constexpr int64_t k_max_slots = std::numeric_limits<int32_t>::max();
    f.needs_attention = needs_attention();
    f.stored_keys_per_slot = stored_keys_per_slot();
    f.positions = config_.positions;
    // A decision that reads neither attention nor keys cannot differ between units: they share one table,
    // unless the units have budgets or protections of their own.
    const bool own = !config_.unit_budget.empty();
    f.n_tables = f.needs_attention || needs_keys() || own ? f.n_units : 1;
    // allocate_table's vectors: pos, score, kept, free_heap (and admitted, drop) per slot; chunk,
    // victim_slot, victim_pos per chunk token; and the shared scratch.
    const int64_t rolling = config_.positions == position_mode::rolling ? 8 : 0;
    std::vector<int64_t> unit_capacity(static_cast<size_t>(f.n_units));
    for (int u = 0; u < f.n_units; ++u) {
        const int64_t capacity =
            capacity_of(own ? config_.unit_budget[static_cast<size_t>(u)] : config_.budget);
        if (capacity > k_max_slots) {
            return invalid_argument(
                "{}: {} slots per unit exceed the limit of {} (max_positions {}, budget {})", config_.name,
                capacity, k_max_slots, layout_.max_positions,
                own ? config_.unit_budget[static_cast<size_t>(u)] : config_.budget);
        }
        unit_capacity[static_cast<size_t>(u)] = capacity;
        f.capacity = std::max(f.capacity, capacity);
        if (u < f.n_tables) {
            const int64_t chunk = std::min<int64_t>(layout_.max_chunk, capacity);
            f.table_bytes += capacity * (8 + 8 + 4 + 4 + rolling) + chunk * (4 + 4 + 8);
        }
    }
    f.table_bytes += f.capacity * 4;
    f.unit_capacity = unit_capacity;
    f.head_capacity.resize(static_cast<size_t>(layout_.n_layer) * layout_.n_kv_head);
    for (int layer = 0; layer < layout_.n_layer; ++layer) {
        for (int g = 0; g < layout_.n_kv_head; ++g) {
            f.head_capacity[static_cast<size_t>(layer * layout_.n_kv_head + g)] =
                unit_capacity[static_cast<size_t>(unit_of(layer, g))];
        }
    }
    return f;
}

status kv_policy::init() {
    H2OKV_ASSIGN_OR_RETURN(const footprint f, measure());
    auto& st = *state_;
    st.n_units = f.n_units;
    st.capacity = static_cast<int32_t>(f.capacity);
    st.reads_attention = f.needs_attention;
    st.reads_keys = needs_keys();
    st.custom_rows = custom_rows();
    st.shared = f.n_tables == 1 && f.n_units > 1;
    st.pass = &detail::score_pass();
    try {
        st.tables.resize(static_cast<size_t>(f.n_tables));
        st.scratch.resize(static_cast<size_t>(st.capacity));
        for (auto& t : st.tables) {
            t.unit = static_cast<int>(&t - st.tables.data());
            t.scratch = st.scratch.data();
            t.budget = budget(t.unit);
            t.recent = recent(t.unit);
            t.decay = decay(t.unit);
            // A table serves one unit, or all of them alike (then every unit has the same capacity).
            const auto cap = static_cast<int32_t>(f.unit_capacity[static_cast<size_t>(t.unit)]);
            // A chunk never holds more tokens than there are slots.
            allocate_table(t, cap, static_cast<int>(std::min<int64_t>(layout_.max_chunk, cap)),
                           config_.positions == position_mode::rolling);
            t.scores_all_zero = !st.reads_attention && !st.reads_keys;
        }
    } catch (const std::bad_alloc&) {
        return out_of_memory("{}: cannot allocate {} slot tables of {} slots", config_.name, st.tables.size(),
                             st.capacity);
    }
    return on_init();
}

bool kv_policy::token_by_token() const {
    return needs_attention() && config_.gran == granularity::model && layout_.n_layer > 1;
}

detail::unit_table& kv_policy::table(int unit) const {
    assert(unit >= 0 && unit < state_->n_units);
    return state_->tables[state_->shared ? 0 : unit];
}

int kv_policy::n_units() const {
    return state_->n_units;
}

int kv_policy::unit_of(int layer, int kv_head) const {
    switch (config_.gran) {
        case granularity::head: return layer * layout_.n_kv_head + kv_head;
        case granularity::layer: return layer;
        case granularity::model: return 0;
    }
    return 0;
}

std::vector<std::pair<int, int>> kv_policy::heads_of(int unit) const {
    std::vector<std::pair<int, int>> heads;
    const auto add_layer = [&](int layer, int first_head, int n) {
        for (int h = first_head; h < first_head + n; ++h) heads.emplace_back(layer, h);
    };
    switch (config_.gran) {
        case granularity::head: {
            const int group = layout_.n_head / layout_.n_kv_head;
            add_layer(unit / layout_.n_kv_head, (unit % layout_.n_kv_head) * group, group);
            break;
        }
        case granularity::layer: add_layer(unit, 0, layout_.n_head); break;
        case granularity::model:
            for (int layer = 0; layer < layout_.n_layer; ++layer) add_layer(layer, 0, layout_.n_head);
            break;
    }
    return heads;
}

int64_t kv_policy::capacity() const {
    return state_->capacity;
}

int64_t kv_policy::capacity(int unit) const {
    return static_cast<int64_t>(table(unit).pos.size());
}

int64_t kv_policy::budget(int unit) const {
    return config_.unit_budget.empty() ? config_.budget : config_.unit_budget[static_cast<size_t>(unit)];
}

int64_t kv_policy::recent(int unit) const {
    return config_.unit_recent.empty() ? config_.recent : config_.unit_recent[static_cast<size_t>(unit)];
}

double kv_policy::decay(int unit) const {
    return config_.unit_decay.empty() ? config_.decay : config_.unit_decay[static_cast<size_t>(unit)];
}

status kv_policy::begin_chunk(int64_t first, int n) {
    auto& st = *state_;
    if (st.in_chunk) {
        return invalid_argument("begin_chunk({}, {}): the chunk at {} has not ended; call end_chunk first",
                                first, n, st.chunk_first);
    }
    if (first != st.next) {
        return invalid_argument(
            "begin_chunk: first position {} does not follow the previous chunk; expected {}", first, st.next);
    }
    if (n < 1 || n > layout_.max_chunk) {
        return invalid_argument("begin_chunk: a chunk of {} tokens; expected 1 to max_chunk {}", n,
                                layout_.max_chunk);
    }
    if (n > layout_.max_positions - first) {
        return out_of_range("begin_chunk: chunk [{}, {}) goes past max_positions {}{}", first, first + n,
                            layout_.max_positions,
                            config_.budget == 0 ? " (the capacity of a policy that never evicts)" : "");
    }
    for (auto& t : st.tables) {
        for (int i = 0; i < n; ++i) {
            const int32_t slot = take_lowest_free(t);
            t.pos[slot] = first + i;
            t.score[slot] = 0.0;
            t.chunk[i] = slot;
            t.kept[static_cast<size_t>(t.n_kept + i)] = slot;  // attended_slots: the kept, then the chunk
            t.high_water = std::max(t.high_water, slot + 1);
            if (!t.drop.empty()) {
                t.admitted[slot] = t.n_kept + i;
                t.drop[slot] = 0;
            }
        }
        t.n_chunk = n;
        const int64_t over = t.budget > 0 ? t.n_kept + n - t.budget : 0;
        t.victims_due = static_cast<int32_t>(std::max<int64_t>(0, over));
        t.evictable_lo = config_.sinks;
        t.evictable_hi = first + n - t.recent;
        t.lowest_hint = -1;
    }
    for (size_t k = 0; k < st.tables.size(); ++k) on_begin_chunk(st.tables[k], static_cast<int>(k));
    st.chunk_first = first;
    st.chunk_n = n;
    st.in_chunk = true;
    return ok_status();
}

std::span<const int32_t> kv_policy::kept_slots(int unit) const {
    const auto& t = table(unit);
    return {t.kept.data(), static_cast<size_t>(t.n_kept)};
}

std::span<const int32_t> kv_policy::chunk_slots(int unit) const {
    const auto& t = table(unit);
    return {t.chunk.data(), static_cast<size_t>(t.n_chunk)};
}

std::span<const int32_t> kv_policy::attended_slots(int unit) const {
    const auto& t = table(unit);
    assert(state_->in_chunk);
    return {t.kept.data(), static_cast<size_t>(t.n_kept + t.n_chunk)};
}

void kv_policy::add_row(int unit, int i, const double* row) {
    if (!state_->reads_attention) return;
    apply_row(unit, i, row);
}

bool kv_policy::takes_weights(int unit) const {
    const auto& st = *state_;
    return st.reads_attention && !st.custom_rows && table(unit).decay == 1.0;
}

void kv_policy::add_weights(int unit, int i, std::span<const float* const> heads) {
    const auto& st = *state_;
    assert(st.in_chunk && i >= 0 && i < st.chunk_n && takes_weights(unit));
    auto& t = table(unit);
    // apply_row's two cases. The chunk's last query attended every occupied slot (the kept and the whole
    // chunk), so the lowest among its slots is the lowest of the unit.
    const bool find = i == st.chunk_n - 1 && t.victims_due == 1;
    const int32_t lowest = detail::add_weights(t.score.data(), t.pos.data(), t.kept.data(), t.n_kept + i + 1,
                                               heads, find, t.evictable_lo, t.evictable_hi);
    t.lowest_hint = find ? lowest : -1;
}

void kv_policy::prefetch_scores(int unit) const {
    const auto& st = *state_;
    if (!st.reads_attention) return;
    const auto& t = table(unit);
    const auto* score = reinterpret_cast<const char*>(t.score.data());
    const auto* pos = reinterpret_cast<const char*>(t.pos.data());
    const size_t bytes = static_cast<size_t>(t.high_water) * sizeof(double);
    for (size_t b = 0; b < bytes; b += 64) {
        __builtin_prefetch(score + b, 1);
        __builtin_prefetch(pos + b);
    }
}

void kv_policy::apply_row(int unit, int i, const double* row) {
    const auto& st = *state_;
    assert(st.in_chunk && i >= 0 && i < st.chunk_n);
    auto& t = table(unit);
    if (st.custom_rows) {
        update_row(t, unit, i, row);
        t.lowest_hint = -1;
        return;
    }
    if (i == st.chunk_n - 1 && t.victims_due == 1) {
        // The chunk's last row: its pass also finds the victim, so end_chunk needs no second pass.
        t.lowest_hint = st.pass->add_row_find_lowest(t.score.data(), row, t.pos.data(), t.high_water, t.decay,
                                                     t.evictable_lo, t.evictable_hi);
    } else {
        st.pass->add_row(t.score.data(), row, t.high_water, t.decay);
        t.lowest_hint = -1;
    }
}

void kv_policy::add_key(int unit, int i, int layer, int kv_head, std::span<const float> key) {
    const auto& st = *state_;
    if (!st.reads_keys) return;
    assert(st.in_chunk && i >= 0 && i < st.chunk_n);
    on_key(table(unit), unit, i, layer, kv_head, key);
}

status kv_policy::end_chunk() {
    auto& st = *state_;
    if (!st.in_chunk) return invalid_argument("end_chunk: no chunk in progress; call begin_chunk first");
    on_end_chunk();
    for (auto& t : st.tables) {
        t.n_victims = 0;
        if (t.victims_due > 0) {
            choose_victims(t, t.victims_due);
            assert(t.n_victims == t.victims_due);
            for (int k = 0; k < t.n_victims; ++k) release(t, t.victim_slot[k]);
        }
        for (int i = 0; i < t.n_chunk; ++i) {
            const int32_t slot = t.chunk[i];
            if (t.pos[slot] < 0) continue;  // evicted on arrival
            const auto kept_end = t.kept.begin() + t.n_kept;
            const auto k = std::lower_bound(t.kept.begin(), kept_end, slot);
            std::copy_backward(k, kept_end, kept_end + 1);
            *k = slot;
            ++t.n_kept;
        }
        while (t.high_water > 0 && t.pos[t.high_water - 1] < 0) --t.high_water;
        t.lowest_hint = -1;
        if (!t.drop.empty()) renumber(t, *st.pass);
    }
    st.next = st.chunk_first + st.chunk_n;
    st.in_chunk = false;
    return ok_status();
}

std::span<const int64_t> kv_policy::victims(int unit) const {
    const auto& t = table(unit);
    return {t.victim_pos.data(), static_cast<size_t>(t.n_victims)};
}

std::span<const int32_t> kv_policy::victim_slots(int unit) const {
    const auto& t = table(unit);
    return {t.victim_slot.data(), static_cast<size_t>(t.n_victims)};
}

std::span<const int32_t> kv_policy::slot_turns(int unit) const {
    return table(unit).drop;
}

std::vector<int32_t> kv_policy::slot_rolling_positions(int unit) const {
    const auto& t = table(unit);
    std::vector<int32_t> r(t.admitted.size());
    for (size_t s = 0; s < r.size(); ++s) r[s] = t.admitted[s] - t.drop[s];
    return r;
}

int64_t kv_policy::next_position() const {
    return state_->next;
}

std::vector<int64_t> kv_policy::kept_positions(int unit) const {
    const auto& t = table(unit);
    std::vector<int64_t> out;
    out.reserve(t.n_kept);
    for (int32_t k = 0; k < t.n_kept; ++k) out.push_back(t.pos[t.kept[k]]);
    std::sort(out.begin(), out.end());
    return out;
}

std::span<const int64_t> kv_policy::slot_positions(int unit) const {
    return table(unit).pos;
}

std::span<const double> kv_policy::slot_scores(int unit) const {
    return table(unit).score;
}

int64_t kv_policy::n_kept(int unit) const {
    return table(unit).n_kept;
}

int64_t kv_policy::evictions(int unit) const {
    return table(unit).evictions;
}

int64_t kv_policy::total_evictions() const {
    int64_t total = 0;
    for (int u = 0; u < n_units(); ++u) total += evictions(u);
    return total;
}

void kv_policy::reset() {
    auto& st = *state_;
    for (auto& t : st.tables) reset_table(t);
    st.next = 0;
    st.chunk_first = 0;
    st.chunk_n = 0;
    st.in_chunk = false;
    on_reset();
}

}  // namespace h2okv::policy
