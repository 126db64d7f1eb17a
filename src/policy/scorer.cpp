// The scorer base (include/h2okv/policy/scorer.h): score sources, per-slot state and the victim order.
#include "h2okv/policy/scorer.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <new>

#include "policy/unit_table.h"

namespace h2okv::policy {

scorer::scorer(const resolved_params& config, const layout& l, rule r) : kv_policy(config, l), rule_(r) {
    switch (config.gran) {
        case granularity::head: heads_per_unit_ = l.n_head / l.n_kv_head; break;
        case granularity::layer: heads_per_unit_ = l.n_head; break;
        case granularity::model: heads_per_unit_ = l.n_head * l.n_layer; break;
    }
}

status scorer::on_init() {
    try {
        const auto cap = static_cast<size_t>(capacity());
        if (rule_.aux_words > 0) {
            aux_.assign(static_cast<size_t>(n_units()),
                        std::vector<uint64_t>(cap * static_cast<size_t>(rule_.aux_words), 0));
        }
        if (rule_.custom_rank) ranked_.assign(cap, 0.0);
    } catch (const std::bad_alloc&) {
        return out_of_memory("{}: cannot allocate the per-slot state of {} units", config().name, n_units());
    }
    return ok_status();
}

void scorer::on_begin_chunk(detail::unit_table& t, int table_index) {
    if (rule_.aux_words == 0) return;
    uint64_t* aux = aux_[static_cast<size_t>(table_index)].data();
    for (int i = 0; i < t.n_chunk; ++i) {
        uint64_t* a = aux + static_cast<size_t>(t.chunk[i]) * rule_.aux_words;
        std::fill(a, a + rule_.aux_words, uint64_t{0});
    }
}

void scorer::on_reset() {
    for (auto& a : aux_) std::fill(a.begin(), a.end(), uint64_t{0});
}

void scorer::update_row(detail::unit_table& t, int unit, int i, const double* row) const {
    row_view v{};
    v.unit = unit;
    v.query = t.pos[static_cast<size_t>(t.chunk[i])];
    v.row = row;
    v.pos = t.pos.data();
    v.score = t.score.data();
    v.aux = rule_.aux_words > 0 ? aux_[static_cast<size_t>(t.unit)].data() : nullptr;
    v.n_slots = t.high_water;
    v.n_attended = int64_t{t.n_kept} + i + 1;
    v.n_heads = heads_per_unit_;
    update_row(v);
}

void scorer::on_key(detail::unit_table& t, int unit, int i, int layer, int kv_head,
                    std::span<const float> key) {
    const int32_t slot = t.chunk[i];
    t.score[slot] = t.score[slot] + key_score({unit, layer, kv_head, t.pos[slot], key});
}

void scorer::choose_victims(detail::unit_table& t, int count) const {
    if (rule_.order == victim_order::oldest) return detail::pick_oldest(t, count);
    if (!rule_.custom_rank) return detail::pick_lowest_scores(t, count);
    // Rank by rank_score(), ties to the lower position; the stored scores stay as they are.
    const int64_t next = t.pos[t.chunk[t.n_chunk - 1]] + 1;
    double* ranked = ranked_.data();
    int32_t m = 0;
    for (int32_t s = 0; s < t.high_water; ++s) {
        if (!t.evictable(s)) continue;
        const double r = rank_score(t.unit, t.pos[s], t.score[s], next);
        ranked[s] = std::isnan(r) ? std::numeric_limits<double>::infinity() : r;  // keeps the order total
        t.scratch[m++] = s;
    }
    assert(m >= count && "validation guarantees enough evictable positions");
    const auto less = [&](int32_t a, int32_t b) {
        return ranked[a] < ranked[b] || (ranked[a] == ranked[b] && t.pos[a] < t.pos[b]);
    };
    count = std::min(count, static_cast<int>(m));
    std::nth_element(t.scratch, t.scratch + (count - 1), t.scratch + m, less);
    std::copy(t.scratch, t.scratch + count, t.victim_slot.begin());
    std::sort(t.victim_slot.begin(), t.victim_slot.begin() + count,
              [&](int32_t a, int32_t b) { return t.pos[a] < t.pos[b]; });
    for (int k = 0; k < count; ++k) t.victim_pos[k] = t.pos[t.victim_slot[k]];
    t.n_victims = count;
}

}  // namespace h2okv::policy
