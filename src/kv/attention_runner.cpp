#include "h2okv/kv/attention_runner.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <new>
#include <optional>

#include "h2okv/core/parallel.h"
#include "h2okv/core/phases.h"
#include "h2okv/kernels/kernels.h"

namespace h2okv::kv {
namespace {

// Softmax weights are kept for a block of queries so one parallel region covers the block: 16 MiB of them
// at most, and always one query's.
constexpr size_t k_weights_floats = size_t{1} << 22;
// Below these amounts of work (multiply-adds of a block's attention, row entries of its commits, elements of
// a step's K/V writes) a parallel region costs more than it saves. A K/V write costs far more than its
// elements: its rows are rarely in cache (a decode step of 16 sequences of SmolLM, 3072 elements, spent 5 %
// of its time in them on one thread), so writes fork from 1024 elements.
constexpr int64_t k_attend_min_work = 32768;
constexpr int64_t k_commit_min_work = 16384;
constexpr int64_t k_store_min_work = 1024;
// Tokens whose K/V rows store_kv asks memory for ahead of the one it writes.
constexpr int k_store_prefetch_tokens = 8;
// Heads summed in one pass over a unit's slots.
constexpr int max_unit_heads = 64;
// attention_runner::fused_: the commit sums the heads' weights into the row; the kernel sums them; the item
// hands the row over, or the weights themselves where the unit takes them (kv_policy::add_weights: no row).
constexpr uint8_t k_row_apart = 0, k_row_summed = 1, k_row_handed = 2;

// row[slots[j]] += heads[0][j], then heads[1][j], ... for j < n.
void add_heads(double* row, const int32_t* slots, int n, const float* const* heads, int n_heads) {
    if (n_heads == 0) return;
    for (int j = 0; j < n; ++j) {
        double s = row[slots[j]];
        for (int i = 0; i < n_heads; ++i) s += static_cast<double>(heads[i][j]);
        row[slots[j]] = s;
    }
}

// kernels::attend, or its soft-capped twin when the model caps attention scores (Gemma 2); over keys turned
// to their rolling positions (kernels::attend_turned) where the cache's layer rolls.
// (turns: null, or the keys' turns)
void attend_slots(const model::hparams& hp, const float* q, int n_q, const kernels::kv_rows& k,
                  const kernels::kv_rows& v, const kernels::key_turns* turns, std::span<const int32_t> slots,
                  float* out, float* w, size_t w_stride, double* row) {
    const int n = static_cast<int>(slots.size());
    if (hp.attn_softcap > 0.0f) {
        kernels::attend_softcap(q, n_q, k, v, hp.head_dim, slots.data(), n, hp.attention_scale(),
                                hp.attn_softcap, out, w, w_stride, row, turns);
    } else if (turns != nullptr) {
        kernels::attend_turned(q, n_q, k, v, hp.head_dim, slots.data(), n, *turns, hp.attention_scale(), out,
                               w, w_stride, row);
    } else {
        kernels::attend(q, n_q, k, v, hp.head_dim, slots.data(), n, hp.attention_scale(), out, w, w_stride,
                        row);
    }
}

bool same_shape(const model::hparams& a, const model::hparams& b) {
    return a.n_layer == b.n_layer && a.n_head == b.n_head && a.n_kv_head == b.n_kv_head &&
           a.head_dim == b.head_dim && a.layer_sliding == b.layer_sliding &&
           a.sliding_window == b.sliding_window && a.attn_softcap == b.attn_softcap &&
           a.attn_scale == b.attn_scale;
}

}  // namespace

status attention_runner::begin_step(std::span<kv_cache* const> caches, std::span<const int> n_tok) {
    segs_.clear();
    queries_.clear();
    n_tok_ = 0;
    if (caches.empty() || caches.size() != n_tok.size()) {
        return internal_error("attention_runner: {} caches and {} token counts; expected as many, >= 1",
                              caches.size(), n_tok.size());
    }
    for (size_t i = 0; i < caches.size(); ++i) {
        kv_cache* c = caches[i];
        const int n = n_tok[i];
        if (c == nullptr) return internal_error("attention_runner: sequence {} has no cache", i);
        if (i == 0) hp_ = c->hparams();
        if (!same_shape(hp_, c->hparams())) {
            return internal_error("attention_runner: sequence {}'s cache belongs to a model of another shape",
                                  i);
        }
        if (!c->in_chunk() || n < 1 || c->chunk_done() + n > c->chunk_size()) {
            return internal_error(
                "attention_runner: sequence {} takes {} tokens, but its cache has {} of an open chunk of {} "
                "left",
                i, n, c->chunk_size() - c->chunk_done(), c->chunk_size());
        }
        if (c->token_by_token() && n != 1) {
            return internal_error("attention_runner: sequence {} forwards token by token but takes {} tokens",
                                  i, n);
        }
        for (const segment& s : segs_) {
            if (s.cache == c) return internal_error("attention_runner: sequence {}'s cache appears twice", i);
        }
        segs_.push_back({c, n_tok_, n, c->policy().needs_attention(),
                         c->policy().config().gran == policy::granularity::head});
        for (int t = 0; t < n; ++t) {
            queries_.push_back({static_cast<int>(i), n_tok_ + t, c->chunk_done() + t});
        }
        n_tok_ += n;
    }
    return ok_status();
}

void attention_runner::end_step() {
    for (const segment& s : segs_) s.cache->chunk_done_ += s.n;
    segs_.clear();
    queries_.clear();
    n_tok_ = 0;
}

status attention_runner::attend(int layer, int n_tok, const float* q, const float* k, const float* v,
                                float* out) {
    if (segs_.empty() || n_tok != n_tok_ || layer < 0 || layer >= hp_.n_layer) {
        return internal_error(
            "attention_runner: layer {} with {} tokens; the step has {} tokens in {} layers", layer, n_tok,
            n_tok_, hp_.n_layer);
    }
    store_kv(layer, k, v);
    return path_ == path::reference ? attend_reference(layer, q, out) : attend_parallel(layer, q, out);
}

void attention_runner::store_kv(int layer, const float* k, const float* v) {
    const core::phase_scope timed(core::phase::kv_store);
    const int hd = hp_.head_dim;
    const size_t kv_stride = static_cast<size_t>(hp_.n_kv_head) * hd;
    // Each sequence's rows go to its own cache (store and policy): sequences write in parallel, each one's
    // tokens and heads in order.
    const int n_segs = static_cast<int>(segs_.size());
    const bool fork =
        n_segs > 1 &&
        core::should_fork(core::parallel_site::attention,
                          static_cast<int64_t>(n_tok_) * static_cast<int64_t>(kv_stride), k_store_min_work);
    core::parallel_for<true>(fork, n_segs, [&](int64_t s) {
        const segment& sg = segs_[static_cast<size_t>(s)];
        // The rows' lines (recycled slots, long out of cache) are asked for a few tokens ahead of their
        // writes, so that they arrive in parallel rather than write by write.
        const auto prefetch = [&](int t) {
            for (int g = 0; g < hp_.n_kv_head && t < sg.n; ++g)
                sg.cache->prefetch_for_write(layer, g, sg.cache->chunk_done() + t);
        };
        for (int t = 0; t < k_store_prefetch_tokens; ++t) prefetch(t);
        for (int t = 0; t < sg.n; ++t) {
            prefetch(t + k_store_prefetch_tokens);
            for (int g = 0; g < hp_.n_kv_head; ++g) {
                const size_t off =
                    static_cast<size_t>(sg.first + t) * kv_stride + static_cast<size_t>(g) * hd;
                sg.cache->write(layer, g, sg.cache->chunk_done() + t, k + off, v + off);
            }
        }
    });
}

int attention_runner::n_att(int layer, const query& qu, int g) const {
    const kv_cache& c = *segs_[static_cast<size_t>(qu.seg)].cache;
    return static_cast<int>(c.attended(layer, g, qu.ci).size());
}

status attention_runner::attend_parallel(int layer, const float* q, float* out) {
    const int hd = hp_.head_dim;
    const int group = hp_.gqa_group();
    const int n_kv = hp_.n_kv_head;
    const size_t q_stride = static_cast<size_t>(hp_.n_head) * hd;
    const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    const int nq = static_cast<int>(queries_.size());

    for (int q0 = 0, q1 = 0; q0 < nq; q0 = q1) {
        // The block: queries while their weights fit the buffer's bound (always one).
        w_off_.clear();
        size_t floats = 0;
        for (q1 = q0; q1 < nq; ++q1) {
            size_t need = 0;
            for (int g = 0; g < n_kv; ++g) need += static_cast<size_t>(group) * n_att(layer, queries_[q1], g);
            if (q1 > q0 && floats + need > k_weights_floats) break;
            for (int g = 0; g < n_kv; ++g) {
                w_off_.push_back(floats);
                floats += static_cast<size_t>(group) * n_att(layer, queries_[q1], g);
            }
        }
        block_q0_ = q0;
        if (weights_.size() < floats) {
            try {
                weights_.resize(floats);
            } catch (const std::bad_alloc&) {
                return out_of_memory("attention: cannot allocate {:.1f} MiB of softmax weights",
                                     static_cast<double>(floats) * 4 / (1 << 20));
            }
        }
        const int nb = q1 - q0;
        // Items: (query, KV head, part of the group's query heads). A decode step with fewer KV heads than
        // twice the threads splits each group into single heads to balance the threads, at the cost of
        // reading K/V once per head.
        const int parts = group > 1 && nb * n_kv < 2 * threads ? group : 1;
        const int per_part = group / parts;
        fused_.assign(static_cast<size_t>(nb), 0);
        for (int qi = q0; qi < q1; ++qi) {
            const segment& sg = segs_[static_cast<size_t>(queries_[qi].seg)];
            const int in_block = std::min(q1, sg.first + sg.n) - std::max(q0, sg.first);
            const bool fused =
                sg.scores && sg.per_head && parts == 1 && in_block == 1 && !sg.cache->sliding(layer);
            // Without a row observer the item that completes the row also hands it over.
            const bool hand =
                fused && !sg.cache->observer_ && sg.cache->hands_rows(layer) && group <= max_unit_heads;
            fused_[static_cast<size_t>(qi - q0)] = hand ? k_row_handed : fused ? k_row_summed : k_row_apart;
        }
        const int items = nb * n_kv * parts;
        std::optional<core::phase_scope> timed(std::in_place, core::phase::attention);
        const bool fork =
            items > 1 && core::should_fork(core::parallel_site::attention, static_cast<int64_t>(floats) * hd,
                                           k_attend_min_work);
        core::parallel_for<true>(fork, items, [&](int64_t item) {
            const int it = static_cast<int>(item);
            const int qi = q0 + it / (n_kv * parts);
            const int g = it / parts % n_kv;
            const int p = it % parts;
            const query& qu = queries_[static_cast<size_t>(qi)];
            kv_cache& c = *segs_[static_cast<size_t>(qu.seg)].cache;
            const std::span<const int32_t> slots = c.attended(layer, g, qu.ci);
            const auto n = slots.size();
            float* w = weights_.data() + w_off_[static_cast<size_t>(qi - q0) * n_kv + g] +
                       static_cast<size_t>(p) * per_part * n;
            const size_t qo =
                static_cast<size_t>(qu.token) * q_stride + static_cast<size_t>(g * group + p * per_part) * hd;
            const uint8_t rows = fused_[static_cast<size_t>(qi - q0)];
            const int u = c.unit_of(layer, g);
            // A handed row goes to the policy as the weights themselves where the unit takes them (no row
            // then); its scores and positions, out of cache by now, arrive while the kernel runs.
            const bool weights = rows == k_row_handed && c.policy_->takes_weights(u);
            if (weights) c.policy_->prefetch_scores(u);
            const kernels::key_turns t = c.turned(layer) ? c.turns(layer, g) : kernels::key_turns{};
            attend_slots(hp_, q + qo, per_part, c.keys(layer, g), c.values(layer, g),
                         c.turned(layer) ? &t : nullptr, slots, out + qo, w, n,
                         rows == k_row_apart || weights ? nullptr : c.row(u));
            if (rows == k_row_handed) {
                const core::phase_scope handing(core::phase::handover);
                if (weights) {
                    const float* heads[max_unit_heads];
                    for (int h = 0; h < group; ++h) heads[h] = w + static_cast<size_t>(h) * n;
                    c.policy_->add_weights(u, qu.ci, {heads, static_cast<size_t>(group)});
                } else {
                    hand_over(segs_[static_cast<size_t>(qu.seg)], u, qu.ci);
                }
            }
        });

        timed.emplace(core::phase::scores);
        // Commits: (segment, unit) tasks; each unit owns its row and policy table, so units commit in
        // parallel, each one's queries in order. A row observer sees rows query by query: then serially.
        tasks_.clear();
        bool observed = false;
        const int s0 = queries_[static_cast<size_t>(q0)].seg;
        const int s1 = queries_[static_cast<size_t>(q1 - 1)].seg;
        for (int s = s0; s <= s1; ++s) {
            const segment& sg = segs_[static_cast<size_t>(s)];
            if (!sg.scores || sg.cache->sliding(layer)) continue;  // no policy rows for window layers
            // A segment whose one query of the block was handed over by its items has nothing to commit.
            if (fused_[static_cast<size_t>(std::max(q0, sg.first) - q0)] == k_row_handed) continue;
            observed = observed || static_cast<bool>(sg.cache->observer_);
            for (int u = sg.cache->unit_of(layer, 0); u <= sg.cache->unit_of(layer, n_kv - 1); ++u)
                tasks_.emplace_back(s, u);
        }
        if (observed) {
            for (int qi = q0; qi < q1; ++qi) {
                for (const auto& [s, u] : tasks_) commit_unit(layer, s, u, qi, qi + 1);
            }
        } else {
            const int n_tasks = static_cast<int>(tasks_.size());
            const bool fork_commit =
                n_tasks > 1 && core::should_fork(core::parallel_site::commit, static_cast<int64_t>(floats),
                                                 k_commit_min_work);
            core::parallel_for<true>(fork_commit, n_tasks, [&](int64_t ti) {
                commit_unit(layer, tasks_[static_cast<size_t>(ti)].first,
                            tasks_[static_cast<size_t>(ti)].second, q0, q1);
            });
        }
        emit_weights(layer, q0, q1);
    }
    return ok_status();
}

// The rows of segment s's queries in [q0, q1) (within the current block) for unit u: unless the kernel summed
// them (fused), the unit's heads of this layer are added in ascending order (the same sums in the same order
// as the fused path), then handed to the policy once the unit's last layer is done.
void attention_runner::commit_unit(int layer, int s, int u, int q0, int q1) {
    const segment& sg = segs_[static_cast<size_t>(s)];
    kv_cache& c = *sg.cache;
    const int group = hp_.gqa_group();
    const bool hand = c.hands_rows(layer);
    double* row = c.row(u);
    const int32_t* slots = c.policy_->attended_slots(u).data();
    const int qa = std::max(q0, sg.first);
    const int qb = std::min(q1, sg.first + sg.n);
    for (int qi = qa; qi < qb; ++qi) {
        const query& qu = queries_[static_cast<size_t>(qi)];
        const size_t bi = static_cast<size_t>(qi - block_q0_);
        const int n = c.n_kept(u) + qu.ci + 1;
        if (fused_[bi] == k_row_apart) {
            const float* heads[max_unit_heads];
            int n_heads = 0;
            for (int g = 0; g < hp_.n_kv_head; ++g) {
                if (c.unit_of(layer, g) != u) continue;
                const float* base = weights_.data() + w_off_[bi * static_cast<size_t>(hp_.n_kv_head) + g];
                for (int h = 0; h < group; ++h) heads[n_heads++] = base + static_cast<size_t>(h) * n;
                if (n_heads + group > max_unit_heads) {  // more heads than the array: add these now
                    add_heads(row, slots, n, heads, n_heads);
                    n_heads = 0;
                }
            }
            add_heads(row, slots, n, heads, n_heads);
        }
        if (hand) hand_over(sg, u, qu.ci);
    }
}

void attention_runner::hand_over(const segment& sg, int u, int ci) {
    kv_cache& c = *sg.cache;
    const int32_t* slots = c.policy_->attended_slots(u).data();
    const int n_kept = c.n_kept(u);
    const int n = n_kept + ci + 1;
    double* row = c.row(u);
    if (c.observer_) {
        std::vector<int64_t> positions;
        const auto pos = c.policy_->slot_positions(u);
        for (int j = 0; j < n; ++j) {
            positions.push_back(j < n_kept ? pos[static_cast<size_t>(slots[j])]
                                           : c.chunk_first_ + (j - n_kept));
        }
        std::vector<double> increments;
        for (int j = 0; j < n; ++j) increments.push_back(row[slots[j]]);
        c.observer_(u, c.chunk_first_ + ci, positions, increments);
    }
    c.policy_->add_row(u, ci, row);
    for (int j = 0; j < n; ++j) row[slots[j]] = 0.0;
}

void attention_runner::emit_weights(int layer, int q0, int q1) {
    const int group = hp_.gqa_group();
    std::vector<int64_t> positions;
    for (int qi = q0; qi < q1; ++qi) {
        const query& qu = queries_[static_cast<size_t>(qi)];
        kv_cache& c = *segs_[static_cast<size_t>(qu.seg)].cache;
        if (!c.weights_observer_) continue;
        for (int h = 0; h < hp_.n_head; ++h) {
            const int g = h / group;
            c.attended_positions(layer, g, qu.ci, &positions);
            const auto n = positions.size();
            const float* w = weights_.data() + w_off_[static_cast<size_t>(qi - q0) * hp_.n_kv_head + g] +
                             static_cast<size_t>(h - g * group) * n;
            c.weights_observer_(layer, h, c.chunk_first_ + qu.ci, positions,
                                std::span<const float>(w, static_cast<size_t>(n)));
        }
    }
}

// The textbook loop: one query head at a time, its weights added into its unit's row, each query's rows
// handed over before the next query.
status attention_runner::attend_reference(int layer, const float* q, float* out) {
    const core::phase_scope timed(core::phase::attention);
    const int hd = hp_.head_dim;
    const int group = hp_.gqa_group();
    const size_t q_stride = static_cast<size_t>(hp_.n_head) * hd;
    const int nq = static_cast<int>(queries_.size());
    for (int qi = 0; qi < nq; ++qi) {
        const query& qu = queries_[static_cast<size_t>(qi)];
        const segment& sg = segs_[static_cast<size_t>(qu.seg)];
        kv_cache& c = *sg.cache;
        // This query's weights, [KV head][group head][attended], as the parallel path lays out a block.
        w_off_.clear();
        size_t floats = 0;
        for (int g = 0; g < hp_.n_kv_head; ++g) {
            w_off_.push_back(floats);
            floats += static_cast<size_t>(group) * n_att(layer, qu, g);
        }
        try {
            if (weights_.size() < floats) weights_.resize(floats);
        } catch (const std::bad_alloc&) {
            return out_of_memory("attention: cannot allocate {:.1f} MiB of softmax weights",
                                 static_cast<double>(floats) * 4 / (1 << 20));
        }
        const bool scores = sg.scores && !c.sliding(layer);
        for (int g = 0; g < hp_.n_kv_head; ++g) {
            const std::span<const int32_t> att = c.attended(layer, g, qu.ci);
            const int n = static_cast<int>(att.size());
            const int32_t* slots = att.data();
            for (int h = g * group; h < (g + 1) * group; ++h) {
                const size_t qo = static_cast<size_t>(qu.token) * q_stride + static_cast<size_t>(h) * hd;
                float* w =
                    weights_.data() + w_off_[static_cast<size_t>(g)] + static_cast<size_t>(h - g * group) * n;
                const kernels::key_turns t = c.turned(layer) ? c.turns(layer, g) : kernels::key_turns{};
                attend_slots(hp_, q + qo, 1, c.keys(layer, g), c.values(layer, g),
                             c.turned(layer) ? &t : nullptr, att, out + qo, w, static_cast<size_t>(n),
                             nullptr);
                if (!scores) continue;
                double* row = c.row(c.unit_of(layer, g));
                for (int j = 0; j < n; ++j) row[slots[j]] += static_cast<double>(w[j]);
            }
        }
        if (scores && c.hands_rows(layer)) {
            const core::phase_scope handing(core::phase::handover);
            for (int u = c.unit_of(layer, 0); u <= c.unit_of(layer, hp_.n_kv_head - 1); ++u) {
                hand_over(sg, u, qu.ci);
            }
        }
        emit_weights(layer, qi, qi + 1);
    }
    return ok_status();
}

}  // namespace h2okv::kv
