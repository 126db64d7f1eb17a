// A brute-force reference of SPEC.md's eviction contract, written as plainly as possible and sharing no
// code with src/policy. It is the oracle of the policy conformance suite, and other test folders use it the
// same way: feed it the attention rows your engine computed and compare its kept sets with your engine's.
//
// Everything is by position (no slots): per unit a std::map position -> float64 score. A chunk's rows come
// per query (in order) and per unit, as (position, increment) pairs or as "null" (skip add_row).
//
//   h2okv::testing::reference_policy ref(h2okv::testing::reference_policy::rule::lowest_score,
//                                        /*budget=*/64, /*recent=*/32, /*sinks=*/0, /*decay=*/1.0,
//                                        /*n_units=*/pol->n_units());
//   ref.begin_chunk(first, n);
//   for i in 0..n-1, for each unit u:
//       ref.add_row(u, i, {{pos, increment}, ...});   // the same doubles the engine passed to add_row
//   ref.end_chunk();
//   EXPECT_EQ(ref.kept(u), pol->kept_positions(u));
//
// The increments must be the contract's row increments: per attended position, the sum in double of the
// unit's query heads' weights (in kv_policy::heads_of order). Misuse (a row attending a position the query
// cannot see, rows out of order) throws std::logic_error, which fails the calling test.
//
// Scores are compared bit for bit with the library: like it, build with floating-point contraction off
// (GCC's C++ default contracts a * b + c into an FMA where the target has one).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace h2okv::testing {

class reference_policy {
    struct unit;

public:
    // Which evictable position leaves first.
    enum class rule {
        none,          // full: nothing is ever evicted
        oldest,        // window, streaming: the lowest position
        lowest_score,  // h2o, tova: the lowest score, a tie evicts the lower position
    };

    // The victim rule of every policy the contract describes; nullopt for a policy it does not know (a new
    // policy's author adds its rule here, and the conformance suite fails until they do).
    static std::optional<rule> rule_of(std::string_view policy_name) {
        if (policy_name == "full") return rule::none;
        if (policy_name == "window" || policy_name == "streaming") return rule::oldest;
        if (policy_name == "h2o" || policy_name == "tova" || policy_name == "scissorhands" ||
            policy_name == "keyformer" || policy_name == "l2norm" || policy_name == "keydiff" ||
            policy_name == "snapkv")
            return rule::lowest_score;
        return std::nullopt;
    }

    // How scores are formed (docs/EVICTION_CONTRACT.md clauses 3 and 9).
    enum class scoring {
        decayed_sum,   // clause 3 (h2o, tova, keyformer)
        fair_share,    // 9.1 scissorhands: set bits of the last `history` steps' above-fair-share flags
        key_norm,      // 9.3 l2norm: -||k|| per key, summed, at arrival; rows ignored
        key_distance,  // 9.4 keydiff: ranked by the summed cosine distance to the held keys' sum; no score
        snap,  // 9.6 snapkv: a decay-free sum; prefill chunks rank by pooled votes of the last queries
    };
    static scoring scoring_of(std::string_view policy_name) {
        if (policy_name == "scissorhands") return scoring::fair_share;
        if (policy_name == "l2norm") return scoring::key_norm;
        if (policy_name == "keydiff") return scoring::key_distance;
        if (policy_name == "snapkv") return scoring::snap;
        return scoring::decayed_sum;
    }

    // The policy's own rules: scoring, its extra parameters (history; tau and seed for keyformer's noise,
    // 9.2) and G, the query heads a unit's row sums.
    void set_policy(std::string_view policy_name, const std::map<std::string, double, std::less<>>& extra,
                    int heads_per_unit) {
        scoring_ = scoring_of(policy_name);
        heads_ = heads_per_unit;
        if (auto it = extra.find("history"); it != extra.end()) history_ = static_cast<int>(it->second);
        if (policy_name == "snapkv") {
            window_ = static_cast<int>(extra.at("window"));
            kernel_ = static_cast<int>(extra.at("kernel"));
            decode_h2o_ = extra.at("decode") != 0.0;
        }
        if (policy_name == "keyformer") {
            tau_ = extra.at("tau");
            seed_ = static_cast<uint64_t>(extra.at("seed"));
        }
        // 9.5: rows from the keys (one softmax per (layer, KV head) pair), not from the caller.
        if (auto it = extra.find("proxy"); it != extra.end() && it->second != 0.0) proxy_ = true;
    }

    // The keys of chunk token `position`, one call per (layer, KV head) pair of the unit in layer-major
    // order.
    void add_key(int unit_index, int64_t position, const std::vector<float>& key) {
        if (!in_chunk_ || position < first_ || position >= first_ + n_)
            throw std::logic_error("reference: add_key outside the chunk");
        unit& u = units_.at(unit_index);
        u.keys[position].push_back(key);
        if (scoring_ != scoring::key_norm) return;
        double sum = 0.0;
        for (float x : key) sum = sum + static_cast<double>(x) * static_cast<double>(x);
        double& s = u.scores[position];
        s = s + -std::sqrt(sum);
    }

    using row = std::vector<std::pair<int64_t, double>>;  // (attended position, increment)

    // budget is ignored by rule::none. decay multiplies every score once per (non-null) query row; tova's is
    // 0.
    reference_policy(rule r, int64_t budget, int64_t recent, int64_t sinks, double decay, int n_units)
        : rule_(r), budget_(budget), recent_(recent), sinks_(sinks), decay_(decay), units_(n_units) {}

    // Clause 11: each unit's own budget, recent and decay (n_units entries each), in place of the shared
    // ones.
    void set_units(std::vector<int64_t> budgets, std::vector<int64_t> recents, std::vector<double> decays) {
        unit_budget_ = std::move(budgets);
        unit_recent_ = std::move(recents);
        unit_decay_ = std::move(decays);
    }

    void begin_chunk(int64_t first, int n) {
        if (in_chunk_ || first != next_ || n < 1) throw std::logic_error("reference: bad begin_chunk");
        first_ = first;
        n_ = n;
        in_chunk_ = true;
        for (unit& u : units_) {
            u.last_row = -1;
            u.victims.clear();
            u.votes.clear();
        }
    }

    // The row of chunk query i (position first + i) for `unit_index`. Not calling it is a null row.
    void add_row(int unit_index, int i, const row& increments) {
        unit& u = units_.at(unit_index);
        if (!in_chunk_ || i < 0 || i >= n_ || i <= u.last_row)
            throw std::logic_error("reference: bad add_row");
        u.last_row = i;
        if (scoring_ == scoring::key_norm || scoring_ == scoring::key_distance || proxy_) return;
        apply_row(u, i, increments);
    }

private:
    // Clauses 3 and 9.1: the row of chunk query i.
    void apply_row(unit& u, int i, const row& increments) {
        const int64_t t = first_ + i;
        if (scoring_ == scoring::fair_share) {
            // m = the positions this query attended; the unit's increment sums G heads' weights (under the
            // proxy, one softmax per key pair).
            const int g = proxy_ ? static_cast<int>(u.keys.at(t).size()) : heads_;
            const double fair = static_cast<double>(g) / static_cast<double>(increments.size());
            for (const auto& [pos, w] : increments) {
                std::vector<int>& h = u.history[pos];  // newest flag last
                h.push_back(w > fair ? 1 : 0);
                if (std::ssize(h) > history_) h.erase(h.begin());
                int count = 0;
                for (int b : h) count += b;
                u.scores[pos] = static_cast<double>(count);
            }
            return;
        }
        // Decay every score present now: kept positions, and chunk positions < t (those a query has touched).
        const double decay = unit_decay_.empty() ? decay_ : unit_decay_.at(unit_of(u));
        if (decay != 1.0) {
            for (auto& [pos, score] : u.scores) score = score * decay;
        }
        for (const auto& [pos, w] : increments) {
            const bool kept = pos < first_ && u.scores.count(pos) == 1;
            const bool chunk_prefix = pos >= first_ && pos <= t;
            if (!kept && !chunk_prefix) {
                throw std::logic_error("reference: query " + std::to_string(t) + " attends position " +
                                       std::to_string(pos) + ", which it cannot see");
            }
            u.scores[pos] = u.scores[pos] + w;  // a newcomer starts at 0
            if (scoring_ == scoring::snap && n_ > 1 && i >= n_ - window_) u.votes[pos] = u.votes[pos] + w;
        }
    }

public:
    void end_chunk() {
        if (!in_chunk_) throw std::logic_error("reference: end_chunk without begin_chunk");
        for (unit& u : units_) {
            if (proxy_ && !u.keys.empty()) proxy_rows(u);
            for (int64_t p = first_; p < first_ + n_; ++p) u.scores.emplace(p, 0.0);  // admit
            const int unit_index = unit_of(u);
            const int64_t budget = unit_budget_.empty() ? budget_ : unit_budget_.at(unit_index);
            if (scoring_ == scoring::key_distance && std::ssize(u.scores) > budget) rank_by_distance(u);
            if (scoring_ == scoring::snap && std::ssize(u.scores) > budget) rank_by_votes(u);
            while (rule_ != rule::none && static_cast<int64_t>(u.scores.size()) > budget) {
                const int64_t victim = pick_victim(u, unit_index);
                u.scores.erase(victim);
                u.history.erase(victim);
                u.keys.erase(victim);
                u.victims.push_back(victim);
            }
            std::sort(u.victims.begin(), u.victims.end());
        }
        next_ = first_ + n_;
        in_chunk_ = false;
    }

    // Positions held, ascending.
    std::vector<int64_t> kept(int unit_index) const {
        std::vector<int64_t> out;
        for (const auto& [pos, score] : units_.at(unit_index).scores) out.push_back(pos);
        return out;
    }
    // Positions the last end_chunk evicted, ascending.
    const std::vector<int64_t>& victims(int unit_index) const { return units_.at(unit_index).victims; }
    // Position -> score of every position held (and, during a chunk, of chunk positions already attended).
    const std::map<int64_t, double>& scores(int unit_index) const { return units_.at(unit_index).scores; }

private:
    struct unit {
        std::map<int64_t, double> scores;
        std::map<int64_t, std::vector<int>> history;  // fair_share: the last `history` flags per position
        std::map<int64_t, std::vector<std::vector<float>>> keys;  // per position, one key per pair
        std::map<int64_t, double> distance;  // key_distance, snap: this chunk's fixed ranks
        std::map<int64_t, double> votes;     // snap: this chunk's observation votes
        std::vector<int64_t> victims;
        int last_row = -1;
    };

    static uint64_t splitmix(uint64_t z) {
        z += 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }

    // The value eviction ranks a position by: its score, plus keyformer's Gumbel noise when tau > 0.
    double ranked(double score, int unit_index, int64_t pos) const {
        if (tau_ == 0.0) return score;
        const uint64_t next = static_cast<uint64_t>(first_ + n_);
        const uint64_t x = splitmix(splitmix(splitmix(splitmix(seed_) ^ static_cast<uint64_t>(unit_index)) ^
                                             static_cast<uint64_t>(pos)) ^
                                    next);
        const double u = (static_cast<double>(x >> 11) + 0.5) / 9007199254740992.0;  // 2^53
        return score + tau_ * -std::log(-std::log(u));
    }

    static double dot(const std::vector<float>& k, const std::vector<double>& a) {
        double s = 0.0;
        for (size_t d = 0; d < k.size(); ++d) s = s + static_cast<double>(k[d]) * a[d];
        return s;
    }

    // 9.5: per chunk query t, per pair, softmax(K k_t / sqrt(d)) over the kept positions and the chunk
    // positions <= t (ascending); the pairs' weights summed in pair order are the row.
    void proxy_rows(unit& u) {
        for (int i = 0; i < n_; ++i) {
            const int64_t t = first_ + i;
            std::vector<int64_t> attended;
            for (const auto& [pos, s] : u.scores) {
                if (pos < first_) attended.push_back(pos);
            }
            for (int64_t p = first_; p <= t; ++p) attended.push_back(p);
            std::map<int64_t, double> inc;
            const auto& query = u.keys.at(t);
            for (size_t pair = 0; pair < query.size(); ++pair) {
                const std::vector<double> q(query[pair].begin(), query[pair].end());
                const double scale = 1.0 / std::sqrt(static_cast<double>(q.size()));
                std::vector<double> z;
                double top = -INFINITY;
                for (int64_t p : attended) {
                    z.push_back(dot(u.keys.at(p)[pair], q) * scale);
                    top = std::max(top, z.back());
                }
                double sum = 0.0;
                for (double& e : z) {
                    e = std::exp(e - top);
                    sum = sum + e;
                }
                for (size_t j = 0; j < attended.size(); ++j) inc[attended[j]] = inc[attended[j]] + z[j] / sum;
            }
            row r(inc.begin(), inc.end());
            apply_row(u, i, r);
        }
    }

    // 9.4: every held position's summed cosine distance to the sum of the held keys, per pair.
    void rank_by_distance(unit& u) {
        u.distance.clear();
        if (u.keys.empty()) return;
        const size_t pairs = u.keys.begin()->second.size();
        const size_t dim = u.keys.begin()->second.front().size();
        std::vector<std::vector<double>> anchor(pairs, std::vector<double>(dim, 0.0));
        std::vector<double> anchor_norm(pairs);
        for (size_t pair = 0; pair < pairs; ++pair) {
            for (const auto& [pos, ks] : u.keys) {
                for (size_t d = 0; d < dim; ++d)
                    anchor[pair][d] = anchor[pair][d] + static_cast<double>(ks[pair][d]);
            }
            double s = 0.0;
            for (double a : anchor[pair]) s = s + a * a;
            anchor_norm[pair] = std::sqrt(s);
        }
        for (const auto& [pos, ks] : u.keys) {
            double distance = 0.0;
            for (size_t pair = 0; pair < pairs; ++pair) {
                double kk = 0.0;
                for (float x : ks[pair]) kk = kk + static_cast<double>(x) * static_cast<double>(x);
                const double nk = std::sqrt(kk);
                const double cos = nk == 0.0 || anchor_norm[pair] == 0.0
                                       ? 0.0
                                       : dot(ks[pair], anchor[pair]) / (nk * anchor_norm[pair]);
                distance = distance + (1.0 - cos);
            }
            u.distance[pos] = distance;
        }
    }

    // 9.6: a prefill chunk ranks each held position by the mean of the votes of the held positions within
    // kernel / 2 places of it (in ascending position order); a decode chunk by position or by the sum.
    void rank_by_votes(unit& u) {
        u.distance.clear();
        std::vector<int64_t> held;
        for (const auto& [pos, s] : u.scores) held.push_back(pos);
        const auto n = static_cast<int64_t>(held.size());
        for (int64_t j = 0; j < n; ++j) {
            const int64_t p = held[static_cast<size_t>(j)];
            if (n_ == 1) {
                u.distance[p] = decode_h2o_ ? u.scores.at(p) : static_cast<double>(p);
                continue;
            }
            const int64_t lo = std::max<int64_t>(0, j - kernel_ / 2),
                          hi = std::min<int64_t>(n - 1, j + kernel_ / 2);
            double sum = 0.0;
            for (int64_t k = lo; k <= hi; ++k) {
                const auto it = u.votes.find(held[static_cast<size_t>(k)]);
                sum = sum + (it == u.votes.end() ? 0.0 : it->second);
            }
            u.distance[p] = sum / static_cast<double>(hi - lo + 1);
        }
    }

    int64_t pick_victim(const unit& u, int unit_index) const {
        const std::map<int64_t, double>& scores = u.scores;
        // Protected: the sinks, and the `recent` largest positions held right now.
        std::set<int64_t> recent_window;
        const int64_t recent = unit_recent_.empty() ? recent_ : unit_recent_.at(unit_index);
        for (auto it = scores.rbegin(); it != scores.rend() && std::ssize(recent_window) < recent; ++it) {
            recent_window.insert(it->first);
        }
        std::optional<int64_t> best;
        for (const auto& [pos, score] : scores) {  // ascending position: a later equal candidate never wins
            if (pos < sinks_ || recent_window.count(pos) == 1) continue;
            if (!best) {
                best = pos;
            } else if (rule_ == rule::lowest_score &&
                       (scoring_ == scoring::key_distance || scoring_ == scoring::snap)) {
                if (u.distance.at(pos) < u.distance.at(*best)) best = pos;
            } else if (rule_ == rule::lowest_score &&
                       ranked(score, unit_index, pos) < ranked(scores.at(*best), unit_index, *best)) {
                best = pos;
            }
        }
        if (!best) throw std::logic_error("reference: over budget with nothing evictable");
        return *best;
    }

    int unit_of(const unit& u) const { return static_cast<int>(&u - units_.data()); }

    rule rule_;
    int64_t budget_, recent_, sinks_;
    double decay_;
    std::vector<int64_t> unit_budget_, unit_recent_;
    std::vector<double> unit_decay_;
    scoring scoring_ = scoring::decayed_sum;
    int heads_ = 1;
    int history_ = 32;
    double tau_ = 0.0;
    uint64_t seed_ = 0;
    bool proxy_ = false;
    int window_ = 8, kernel_ = 5;
    bool decode_h2o_ = false;
    std::vector<unit> units_;
    int64_t next_ = 0, first_ = 0;
    int n_ = 0;
    bool in_chunk_ = false;
};

}  // namespace h2okv::testing
