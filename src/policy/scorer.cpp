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
        case granularity::head:
            heads_per_unit_ = l.n_head / l.n_kv_head;
            key_pairs_ = 1;
            break;
        case granularity::layer:
            heads_per_unit_ = l.n_head;
            key_pairs_ = l.n_kv_head;
            break;
        case granularity::model:
            heads_per_unit_ = l.n_head * l.n_layer;
            key_pairs_ = l.n_kv_head * l.n_layer;
            break;
    }
    if (rule_.source == score_source::attention && extra_value(config, "proxy") != 0.0) {
        proxy_ = true;
        rule_.source = score_source::keys;
        rule_.store_keys = true;
    }
}

int scorer::pair_of(int layer, int kv_head) const {
    switch (config().gran) {
        case granularity::head: return 0;
        case granularity::layer: return kv_head;
        case granularity::model: return layer * shape().n_kv_head + kv_head;
    }
    return 0;
}

std::span<const float> scorer::stored_key(int unit, int32_t slot, int pair) const {
    if (keys_.empty()) return {};
    const size_t dim = static_cast<size_t>(key_dim_);
    const size_t at =
        (static_cast<size_t>(slot) * static_cast<size_t>(key_pairs_) + static_cast<size_t>(pair)) * dim;
    return {keys_[static_cast<size_t>(unit)].data() + at, dim};
}

status scorer::on_init() {
    try {
        const auto cap = static_cast<size_t>(capacity());
        if (rule_.aux_words > 0) {
            aux_.assign(static_cast<size_t>(n_units()),
                        std::vector<uint64_t>(cap * static_cast<size_t>(rule_.aux_words), 0));
        }
        if (rule_.custom_rank) ranked_.assign(cap, 0.0);
        if (rule_.store_keys) by_position_.resize(cap);
        if (proxy_) {
            proxy_row_.assign(cap, 0.0);
            logits_.assign(cap, 0.0);
        }
    } catch (const std::bad_alloc&) {
        return out_of_memory("{}: cannot allocate the per-slot state of {} units", config().name, n_units());
    }
    return ok_status();
}

void scorer::on_begin_chunk(detail::unit_table& t, int table_index) {
    if (!keys_.empty()) {
        const size_t per_slot = static_cast<size_t>(key_pairs_) * static_cast<size_t>(key_dim_);
        float* k = keys_[static_cast<size_t>(table_index)].data();
        for (int i = 0; i < t.n_chunk; ++i) {
            float* row = k + static_cast<size_t>(t.chunk[i]) * per_slot;
            std::fill(row, row + per_slot, 0.0f);
        }
    }
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
    v.i = i;
    v.n_chunk = t.n_chunk;
    v.chunk_first = t.pos[static_cast<size_t>(t.chunk[0])];
    v.n_heads = proxy_ ? key_pairs_ : heads_per_unit_;  // the proxy's row sums one softmax per key
    update_row(v);
}

void scorer::on_key(detail::unit_table& t, int unit, int i, int layer, int kv_head,
                    std::span<const float> key) {
    const int32_t slot = t.chunk[i];
    if (rule_.store_keys) {
        if (keys_.empty()) {
            // The key length is known from the first key: one allocation, during the first chunk.
            key_dim_ = static_cast<int>(key.size());
            keys_.assign(static_cast<size_t>(n_units()),
                         std::vector<float>(static_cast<size_t>(capacity()) * key_pairs_ * key.size(), 0.0f));
        }
        assert(static_cast<int>(key.size()) == key_dim_);
        float* dst = keys_[static_cast<size_t>(unit)].data() +
                     (static_cast<size_t>(slot) * key_pairs_ + pair_of(layer, kv_head)) * key_dim_;
        std::copy_n(key.begin(), std::min(key.size(), static_cast<size_t>(key_dim_)), dst);
    }
    if (proxy_) return;
    t.score[slot] = t.score[slot] + key_score({unit, layer, kv_head, t.pos[slot], key});
}

void scorer::on_end_chunk() {
    if (!proxy_ || keys_.empty()) return;
    for (int u = 0; u < n_units(); ++u) proxy_rows(table(u));
}

void scorer::proxy_rows(detail::unit_table& t) {
    const int unit = t.unit;
    int32_t m = 0;
    for (int32_t k = 0; k < t.n_kept; ++k) by_position_[m++] = {t.pos[t.kept[k]], t.kept[k]};
    std::sort(by_position_.begin(), by_position_.begin() + m);
    const double scale = 1.0 / std::sqrt(static_cast<double>(key_dim_));
    for (int i = 0; i < t.n_chunk; ++i) {
        // Query c + i attends the kept positions and the chunk prefix, in ascending position order.
        by_position_[m++] = {t.pos[t.chunk[i]], t.chunk[i]};
        std::fill(proxy_row_.begin(), proxy_row_.begin() + t.high_water, 0.0);
        for (int pair = 0; pair < key_pairs_; ++pair) {
            const auto q = stored_key(unit, t.chunk[i], pair);
            double top = -std::numeric_limits<double>::infinity();
            for (int32_t j = 0; j < m; ++j) {
                const auto k = stored_key(unit, by_position_[j].second, pair);
                double dot = 0.0;
                for (int d = 0; d < key_dim_; ++d)
                    dot = dot + static_cast<double>(k[d]) * static_cast<double>(q[d]);
                logits_[j] = dot * scale;
                top = std::max(top, logits_[j]);
            }
            double sum = 0.0;
            for (int32_t j = 0; j < m; ++j) {
                logits_[j] = std::exp(logits_[j] - top);
                sum = sum + logits_[j];
            }
            for (int32_t j = 0; j < m; ++j) {
                double& r = proxy_row_[by_position_[j].second];
                r = r + logits_[j] / sum;
            }
        }
        apply_row(unit, i, proxy_row_.data());
    }
}

void scorer::choose_victims(detail::unit_table& t, int count) const {
    if (rule_.order == victim_order::oldest) return detail::pick_oldest(t, count);
    if (!rule_.custom_rank) return detail::pick_lowest_scores(t, count);
    // Rank by rank_score(), ties to the lower position; the stored scores stay as they are.
    const int64_t next = t.pos[t.chunk[t.n_chunk - 1]] + 1;
    prepare_rank(t.unit, t.pos.data(), t.high_water, t.n_chunk);
    double* ranked = ranked_.data();
    int32_t m = 0;
    for (int32_t s = 0; s < t.high_water; ++s) {
        if (!t.evictable(s)) continue;
        const double r = rank_score(t.unit, s, t.pos[s], t.score[s], next);
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
