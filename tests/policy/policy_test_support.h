// Test helpers of the policy suite: synthetic attention, and a driver that feeds the same rows to a
// kv_policy and to the brute-force reference (reference_policy.h).
//
//   attention_source src(seed);
//   auto pol = must_create(params, layout, length);
//   reference_policy ref = reference_for(*pol);
//   feed_chunk(*pol, &ref, first, n, src, /*null_row_chance=*/0.1);
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "h2okv/policy/policy.h"
#include "policy/reference_policy.h"

namespace h2okv::testing {

// Creates the policy, or fails the test and returns nullptr.
inline std::unique_ptr<policy::kv_policy> must_create(const policy::params& p, const policy::layout& l,
                                                      int64_t run_length) {
    auto r = policy::kv_policy::create(p, l, run_length);
    EXPECT_TRUE(r.ok()) << p.to_string() << ": " << r.error().to_string();
    if (!r.ok()) return nullptr;
    return std::move(r).value();
}

// The reference configured like `pol` (its resolved parameters); nullopt when the reference does not know
// the policy's victim rule.
inline std::optional<reference_policy> reference_for(const policy::kv_policy& pol) {
    const auto rule = reference_policy::rule_of(pol.config().name);
    if (!rule) return std::nullopt;
    const auto& c = pol.config();
    reference_policy ref(*rule, c.budget, c.recent, c.sinks, c.decay, pol.n_units());
    ref.set_policy(c.name, c.extra, static_cast<int>(pol.heads_of(0).size()));
    if (!c.unit_budget.empty()) ref.set_units(c.unit_budget, c.unit_recent, c.unit_decay);
    return ref;
}

// The (layer, KV head) pairs whose keys a unit holds, layer-major ascending (the order engines hand keys).
inline std::vector<std::pair<int, int>> kv_heads_of(const policy::kv_policy& pol, int unit) {
    std::vector<std::pair<int, int>> out;
    const int group = pol.shape().n_head / pol.shape().n_kv_head;
    for (const auto& [layer, h] : pol.heads_of(unit)) {
        const std::pair<int, int> g{layer, h / group};
        if (out.empty() || out.back() != g) out.push_back(g);
    }
    return out;
}

// Attention weights of one query head over the positions it attends, as float (what a kernel produces),
// in patterns that stress the contract: spread and peaked rows, heavy hitters, exact ties.
class attention_source {
public:
    enum class pattern {
        dirichlet_peaked,
        dirichlet_flat,
        heavy_hitters,
        uniform_ties,
        quantized_ties,
        self_only
    };

    // Keys (for policies that score keys) come from their own stream, `key_seed` (default: seed).
    explicit attention_source(uint64_t seed) : rng_(seed), key_rng_(seed) {}
    attention_source(uint64_t seed, uint64_t key_seed) : rng_(seed), key_rng_(key_seed) {}

    std::mt19937_64& rng() { return rng_; }
    std::mt19937_64& key_rng() { return key_rng_; }

    // Draw only the patterns that produce exact ties (uniform, quantized and self-only rows).
    void set_ties_only(bool on) { ties_only_ = on; }

    pattern pick_pattern() {
        static constexpr pattern mixed[] = {pattern::dirichlet_peaked, pattern::dirichlet_peaked,
                                            pattern::dirichlet_flat,   pattern::heavy_hitters,
                                            pattern::heavy_hitters,    pattern::uniform_ties,
                                            pattern::quantized_ties,   pattern::self_only};
        static constexpr pattern ties[] = {pattern::uniform_ties, pattern::quantized_ties,
                                           pattern::self_only};
        if (ties_only_) return ties[std::uniform_int_distribution<int>(0, std::size(ties) - 1)(rng_)];
        return mixed[std::uniform_int_distribution<int>(0, std::size(mixed) - 1)(rng_)];
    }

    // Weights for `attended` (ascending or not; the query's own position `query` is among them).
    std::vector<float> weights(const std::vector<int64_t>& attended, int64_t query, pattern p) {
        const size_t m = attended.size();
        std::vector<double> raw(m, 0.0);
        switch (p) {
            case pattern::dirichlet_peaked:
            case pattern::dirichlet_flat: {
                std::gamma_distribution<double> g(p == pattern::dirichlet_peaked ? 0.2 : 2.0);
                for (auto& r : raw) r = g(rng_) + 1e-300;
                break;
            }
            case pattern::heavy_hitters: {
                // A few positions (multiples of 7, the first one) draw most of the attention, like
                // punctuation and the BOS token do in real models.
                std::normal_distribution<double> noise(0.0, 1.0);
                for (size_t j = 0; j < m; ++j) {
                    const bool hot = attended[j] == 0 || attended[j] % 7 == 3;
                    raw[j] = std::exp(noise(rng_) + (hot ? 4.0 : 0.0));
                }
                break;
            }
            case pattern::uniform_ties: std::fill(raw.begin(), raw.end(), 1.0); break;
            case pattern::quantized_ties: {
                std::uniform_int_distribution<int> level(0, 2);
                for (auto& r : raw) r = level(rng_);
                break;
            }
            case pattern::self_only:
                for (size_t j = 0; j < m; ++j) raw[j] = attended[j] == query ? 1.0 : 0.0;
                break;
        }
        double sum = 0.0;
        for (double r : raw) sum += r;
        std::vector<float> w(m);
        for (size_t j = 0; j < m; ++j) {
            w[j] = sum > 0.0 ? static_cast<float>(raw[j] / sum) : (attended[j] == query ? 1.0f : 0.0f);
        }
        return w;
    }

private:
    std::mt19937_64 rng_;
    std::mt19937_64 key_rng_;
    bool ties_only_ = false;
};

// The rows one chunk fed: rows[i][u] = (position, increment) pairs, or nullopt for a null row.
using chunk_rows = std::vector<std::vector<std::optional<reference_policy::row>>>;

// Runs one chunk [first, first + n) through `pol` (and `ref` when given) with random attention: for each
// query and unit, every head of heads_of(u) draws weights over the unit's attended positions; the unit's row
// increment is their sum in double, in heads_of order. A unit gets a null row with `null_row_chance`.
inline chunk_rows feed_chunk(policy::kv_policy& pol, reference_policy* ref, int64_t first, int n,
                             attention_source& src, double null_row_chance) {
    chunk_rows fed(n, std::vector<std::optional<reference_policy::row>>(pol.n_units()));
    const status begun = pol.begin_chunk(first, n);
    EXPECT_TRUE(begun.ok()) << begun.to_string();
    if (!begun.ok()) return fed;
    if (ref) ref->begin_chunk(first, n);
    std::bernoulli_distribution is_null(null_row_chance);
    std::vector<double> row(pol.capacity());
    if (pol.needs_keys()) {
        // Random keys of 4 dimensions; now and then two tokens share a norm exactly (ties).
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (int i = 0; i < n; ++i) {
            for (int u = 0; u < pol.n_units(); ++u) {
                for (const auto& [layer, g] : kv_heads_of(pol, u)) {
                    std::vector<float> key(4);
                    const bool tie = std::bernoulli_distribution(0.2)(src.key_rng());
                    for (float& x : key) x = tie ? 1.0f : normal(src.key_rng());
                    pol.add_key(u, i, layer, g, key);
                    if (ref) ref->add_key(u, first + i, key);
                }
            }
        }
    }
    for (int i = 0; i < n; ++i) {
        for (int u = 0; u < pol.n_units(); ++u) {
            if (is_null(src.rng())) continue;
            const auto kept = pol.kept_slots(u);
            const auto chunk = pol.chunk_slots(u);
            std::vector<int32_t> slots(kept.begin(), kept.end());
            slots.insert(slots.end(), chunk.begin(), chunk.begin() + i + 1);
            std::vector<int64_t> positions;
            for (int32_t s : slots) positions.push_back(pol.slot_positions(u)[s]);
            std::vector<double> increment(slots.size(), 0.0);
            const auto pat = src.pick_pattern();
            for (size_t h = 0; h < pol.heads_of(u).size(); ++h) {
                const std::vector<float> w = src.weights(positions, first + i, pat);
                for (size_t j = 0; j < slots.size(); ++j) increment[j] += static_cast<double>(w[j]);
            }
            std::fill(row.begin(), row.end(), 0.0);
            reference_policy::row by_position;
            for (size_t j = 0; j < slots.size(); ++j) {
                row[slots[j]] = increment[j];
                by_position.emplace_back(positions[j], increment[j]);
            }
            pol.add_row(u, i, row.data());
            if (ref) ref->add_row(u, i, by_position);
            fed[i][u] = std::move(by_position);
        }
    }
    const status ended = pol.end_chunk();
    EXPECT_TRUE(ended.ok()) << ended.to_string();
    if (ref) ref->end_chunk();
    return fed;
}

// Chunk sizes covering [0, length): `size` each (the last one shorter), or after a prefill of
// `prefill` tokens in chunks of `size`, decode chunks of one token.
inline std::vector<int> chunk_plan(int64_t length, int size, int64_t prefill = -1) {
    std::vector<int> plan;
    for (int64_t first = 0; first < length;) {
        const bool decoding = prefill >= 0 && first >= prefill;
        const int64_t want = decoding ? 1 : (prefill >= 0 ? std::min<int64_t>(size, prefill - first) : size);
        const int n = static_cast<int>(std::min<int64_t>(want, length - first));
        plan.push_back(n);
        first += n;
    }
    return plan;
}

}  // namespace h2okv::testing
