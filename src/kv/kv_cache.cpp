#include "h2okv/kv/kv_cache.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>

#include "h2okv/kernels/kernels.h"

namespace h2okv::kv {
namespace {

// The most a cache may take: 64 GiB, and no more than the machine's physical memory.
status check_memory(const model::hparams& hp, int64_t cap) {
    constexpr double k_gib = 1ull << 30;
    constexpr double k_max_bytes = 64.0 * k_gib;
    const double kv_bytes =
        2.0 * hp.n_layer * hp.n_kv_head * static_cast<double>(cap) * hp.head_dim * sizeof(float);
    // Per slot and unit: the policy's slot table (~32 bytes) and the cache's row and attended-slot list
    // (12 bytes); per slot and query head, the softmax weights (4 bytes). Units: at most one per KV head.
    const double table_bytes =
        static_cast<double>(cap) * (44.0 * hp.n_layer * hp.n_kv_head + 4.0 * hp.n_head);
    const double total = kv_bytes + table_bytes;
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page_size = ::sysconf(_SC_PAGE_SIZE);
    const double physical = pages > 0 && page_size > 0 ? static_cast<double>(pages) * page_size : 0.0;
    const bool over_physical = physical > 0.0 && total > physical;
    if (total <= k_max_bytes && !over_physical) return ok_status();
    const std::string limit =
        over_physical && physical < k_max_bytes
            ? fmt::format("this machine's physical memory of {:.1f} GiB", physical / k_gib)
            : fmt::format("the {:.0f} GiB limit", k_max_bytes / k_gib);
    return out_of_memory(
        "the KV cache would need {:.1f} GiB ({} slots x {} layers x {} KV heads x head_dim {} x K and V "
        "in f32, plus {:.1f} GiB of slot tables), more than {}; lower the budget, the context or the run's "
        "length",
        total / k_gib, cap, hp.n_layer, hp.n_kv_head, hp.head_dim, table_bytes / k_gib, limit);
}

}  // namespace

result<std::unique_ptr<kv_cache>> kv_cache::create(const model::hparams& hp, const policy::params& pp,
                                                   int max_chunk, int64_t n_ctx, int64_t run_length) {
    if (max_chunk < 1) return invalid_argument("prefill chunk {} must be >= 1", max_chunk);
    if (n_ctx < 1) return invalid_argument("context length {} must be >= 1", n_ctx);
    // Refuse a cache that cannot fit before anything is allocated: the policy's slot tables alone can be
    // tens of GiB, and with overcommit an oversized allocation is not refused but killed when touched.
    // The slots per unit are kv_policy::capacity()'s: budget + chunk, or the whole context for `full` or
    // when the budget leaves no room for a chunk.
    int64_t expected_cap = n_ctx;
    if (pp.name != "full" && pp.budget) {
        auto budget = pp.budget->resolve(run_length);
        if (budget.ok() && *budget <= n_ctx - max_chunk) expected_cap = *budget + max_chunk;
    }
    H2OKV_RETURN_IF_ERROR(check_memory(hp, expected_cap));

    policy::layout l;
    l.n_layer = hp.n_layer;
    l.n_kv_head = hp.n_kv_head;
    l.n_head = hp.n_head;
    l.max_chunk = max_chunk;
    l.max_positions = n_ctx;
    H2OKV_ASSIGN_OR_RETURN(auto pol, policy::kv_policy::create(pp, l, run_length));
    const int64_t cap = pol->capacity();
    const double bytes =
        2.0 * hp.n_layer * hp.n_kv_head * static_cast<double>(cap) * hp.head_dim * sizeof(float);
    std::unique_ptr<kv_cache> c(new kv_cache(hp, std::move(pol)));
    try {
        const auto n =
            static_cast<size_t>(hp.n_layer) * hp.n_kv_head * static_cast<size_t>(cap) * hp.head_dim;
        c->k_.assign(n, 0.0f);
        c->v_.assign(n, 0.0f);
        const int units = c->policy_->n_units();
        c->attended_.resize(static_cast<size_t>(units));
        c->n_kept_.assign(static_cast<size_t>(units), 0);
        for (auto& a : c->attended_) a.reserve(static_cast<size_t>(cap));
        if (c->policy_->needs_attention()) {
            c->rows_.assign(static_cast<size_t>(units), std::vector<double>(static_cast<size_t>(cap), 0.0));
        }
        c->weights_.assign(static_cast<size_t>(hp.n_head) * static_cast<size_t>(cap), 0.0f);
    } catch (const std::bad_alloc&) {
        return out_of_memory("could not allocate the KV cache of {:.1f} MiB", bytes / (1 << 20));
    }
    return c;
}

kv_cache::kv_cache(const model::hparams& hp, std::unique_ptr<policy::kv_policy> pol)
    : hp_(hp), policy_(std::move(pol)), capacity_(policy_->capacity()) {}

kv_cache::~kv_cache() = default;

bool kv_cache::token_by_token() const {
    return policy_->needs_attention() && policy_->config().gran == policy::granularity::model &&
           hp_.n_layer > 1;
}

float* kv_cache::k_at(int layer, int kv_head, int32_t slot) {
    const size_t head = static_cast<size_t>(layer) * hp_.n_kv_head + static_cast<size_t>(kv_head);
    return &k_[(head * static_cast<size_t>(capacity_) + static_cast<size_t>(slot)) * hp_.head_dim];
}

float* kv_cache::v_at(int layer, int kv_head, int32_t slot) {
    const size_t head = static_cast<size_t>(layer) * hp_.n_kv_head + static_cast<size_t>(kv_head);
    return &v_[(head * static_cast<size_t>(capacity_) + static_cast<size_t>(slot)) * hp_.head_dim];
}

int64_t kv_cache::bytes() const {
    return static_cast<int64_t>((k_.size() + v_.size()) * sizeof(float));
}

int64_t kv_cache::kept_total() const {
    int64_t total = 0;
    for (int u = 0; u < policy_->n_units(); ++u) total += policy_->n_kept(u);
    return total;
}

std::vector<std::vector<int64_t>> kv_cache::kept_per_head() const {
    std::vector<std::vector<int64_t>> out;
    out.reserve(static_cast<size_t>(hp_.n_layer) * hp_.n_kv_head);
    for (int l = 0; l < hp_.n_layer; ++l) {
        for (int g = 0; g < hp_.n_kv_head; ++g)
            out.push_back(policy_->kept_positions(policy_->unit_of(l, g)));
    }
    return out;
}

status kv_cache::begin_chunk(int64_t first, int n) {
    H2OKV_RETURN_IF_ERROR(policy_->begin_chunk(first, n));
    chunk_first_ = first;
    chunk_n_ = n;
    for (int u = 0; u < policy_->n_units(); ++u) {
        auto kept = policy_->kept_slots(u);
        auto chunk = policy_->chunk_slots(u);
        auto& a = attended_[static_cast<size_t>(u)];
        a.assign(kept.begin(), kept.end());
        a.insert(a.end(), chunk.begin(), chunk.end());
        n_kept_[static_cast<size_t>(u)] = static_cast<int>(kept.size());
    }
    return ok_status();
}

status kv_cache::end_chunk() {
    chunk_n_ = 0;
    return policy_->end_chunk();
}

status kv_cache::attend(int layer, int64_t first_pos, int n_tok, const float* q, const float* k,
                        const float* v, float* out) {
    const int64_t base = first_pos - chunk_first_;
    if (chunk_n_ == 0 || base < 0 || base + n_tok > chunk_n_) {
        return internal_error("kv_cache: positions [{}, {}) are outside the current chunk [{}, {})",
                              first_pos, first_pos + n_tok, chunk_first_, chunk_first_ + chunk_n_);
    }
    const int hd = hp_.head_dim;
    const int group = hp_.gqa_group();
    const size_t q_stride = static_cast<size_t>(hp_.n_head) * hd;
    const size_t kv_stride = static_cast<size_t>(hp_.n_kv_head) * hd;
    const bool scores = policy_->needs_attention();
    const bool per_head_unit = policy_->config().gran == policy::granularity::head;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

    for (int t = 0; t < n_tok; ++t) {
        const int ci = static_cast<int>(base) + t;
        for (int g = 0; g < hp_.n_kv_head; ++g) {
            const int32_t slot = policy_->chunk_slots(policy_->unit_of(layer, g))[static_cast<size_t>(ci)];
            std::memcpy(k_at(layer, g, slot),
                        k + static_cast<size_t>(t) * kv_stride + static_cast<size_t>(g) * hd,
                        sizeof(float) * static_cast<size_t>(hd));
            std::memcpy(v_at(layer, g, slot),
                        v + static_cast<size_t>(t) * kv_stride + static_cast<size_t>(g) * hd,
                        sizeof(float) * static_cast<size_t>(hd));
        }
    }
    for (int t = 0; t < n_tok; ++t) {
        const int ci = static_cast<int>(base) + t;
        // Threads only pay off when a query's attention over all heads is more than a few microseconds of
        // work.
        const int64_t work = static_cast<int64_t>(attended_[0].size()) * hd * hp_.n_head;
#pragma omp parallel for schedule(static) if (hp_.n_kv_head > 1 && work >= 32768)
        for (int g = 0; g < hp_.n_kv_head; ++g) {
            const int u = policy_->unit_of(layer, g);
            const auto& slots = attended_[static_cast<size_t>(u)];
            const int n = n_kept_[static_cast<size_t>(u)] + ci + 1;
            double* row = scores && per_head_unit ? rows_[static_cast<size_t>(u)].data() : nullptr;
            for (int h = g * group; h < (g + 1) * group; ++h) {
                kernels::attend(q + static_cast<size_t>(t) * q_stride + static_cast<size_t>(h) * hd,
                                k_at(layer, g, 0), v_at(layer, g, 0), hd, slots.data(), n, scale,
                                out + static_cast<size_t>(t) * q_stride + static_cast<size_t>(h) * hd,
                                &weights_[static_cast<size_t>(h) * static_cast<size_t>(capacity_)], row);
            }
        }
        if (scores) commit_rows(layer, ci);
        if (weights_observer_) emit_weights(layer, ci);
    }
    return ok_status();
}

// Completes the rows of chunk query `ci` for the units whose last contributing layer is `layer` and hands
// them to the policy. Rows of coarser units are summed here from the per-head weights, in head order.
void kv_cache::commit_rows(int layer, int ci) {
    const int group = hp_.gqa_group();
    const auto gran = policy_->config().gran;
    if (gran != policy::granularity::head) {
        for (int h = 0; h < hp_.n_head; ++h) {
            const int u = policy_->unit_of(layer, h / group);
            const auto& slots = attended_[static_cast<size_t>(u)];
            const int n = n_kept_[static_cast<size_t>(u)] + ci + 1;
            double* row = rows_[static_cast<size_t>(u)].data();
            const float* w = &weights_[static_cast<size_t>(h) * static_cast<size_t>(capacity_)];
            for (int j = 0; j < n; ++j) row[slots[static_cast<size_t>(j)]] += static_cast<double>(w[j]);
        }
    }
    if (gran == policy::granularity::model && layer != hp_.n_layer - 1) return;
    const int first_unit = policy_->unit_of(layer, 0);
    const int last_unit = policy_->unit_of(layer, hp_.n_kv_head - 1);
    for (int u = first_unit; u <= last_unit; ++u) {
        const auto& slots = attended_[static_cast<size_t>(u)];
        const int n = n_kept_[static_cast<size_t>(u)] + ci + 1;
        double* row = rows_[static_cast<size_t>(u)].data();
        if (observer_) {
            obs_positions_.clear();
            obs_increments_.clear();
            const auto pos = policy_->slot_positions(u);
            const int n_kept = n_kept_[static_cast<size_t>(u)];
            for (int j = 0; j < n; ++j) {
                const int32_t s = slots[static_cast<size_t>(j)];
                obs_positions_.push_back(j < n_kept ? pos[static_cast<size_t>(s)]
                                                    : chunk_first_ + (j - n_kept));
                obs_increments_.push_back(row[s]);
            }
            observer_(u, chunk_first_ + ci, obs_positions_, obs_increments_);
        }
        policy_->add_row(u, ci, row);
        for (int j = 0; j < n; ++j) row[slots[static_cast<size_t>(j)]] = 0.0;
    }
}

void kv_cache::emit_weights(int layer, int ci) {
    const int group = hp_.gqa_group();
    for (int h = 0; h < hp_.n_head; ++h) {
        const int u = policy_->unit_of(layer, h / group);
        const auto& slots = attended_[static_cast<size_t>(u)];
        const int n_kept = n_kept_[static_cast<size_t>(u)];
        const int n = n_kept + ci + 1;
        const auto pos = policy_->slot_positions(u);
        obs_positions_.clear();
        for (int j = 0; j < n; ++j) {
            obs_positions_.push_back(j < n_kept ? pos[static_cast<size_t>(slots[static_cast<size_t>(j)])]
                                                : chunk_first_ + (j - n_kept));
        }
        weights_observer_(
            layer, h, chunk_first_ + ci, obs_positions_,
            std::span<const float>(&weights_[static_cast<size_t>(h) * static_cast<size_t>(capacity_)],
                                   static_cast<size_t>(n)));
    }
}

}  // namespace h2okv::kv
