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

constexpr kv_type k_types[] = {kv_type::f32, kv_type::f16, kv_type::q8_0};

gguf::tensor_type tensor_type_of(kv_type t) {
    switch (t) {
        case kv_type::f16: return gguf::tensor_type::f16;
        case kv_type::q8_0: return gguf::tensor_type::q8_0;
        case kv_type::f32: break;
    }
    return gguf::tensor_type::f32;
}

// Softmax weights are kept for a block of queries so one parallel region covers the block; 16 MiB of them
// at most, and always one query's.
constexpr int64_t k_weights_floats = int64_t{1} << 22;

int weights_block_tokens(const model::hparams& hp, int64_t cap, int max_chunk) {
    const int64_t per_token = std::max<int64_t>(1, static_cast<int64_t>(hp.n_head) * cap);
    return static_cast<int>(std::clamp<int64_t>(k_weights_floats / per_token, 1, max_chunk));
}

// The most a cache may take: 64 GiB, and no more than the machine's physical memory.
status check_memory(const model::hparams& hp, int64_t cap, int max_chunk, kv_type type) {
    constexpr double k_gib = 1ull << 30;
    constexpr double k_max_bytes = 64.0 * k_gib;
    const double kv_bytes = 2.0 * hp.n_layer * hp.n_kv_head * static_cast<double>(cap) *
                            static_cast<double>(kv_row_bytes(type, hp.head_dim));
    // Per slot and unit: the policy's slot table (~32 bytes) and the cache's row and attended-slot list
    // (12 bytes); per slot, query head and query of a weights block, the softmax weights (4 bytes). Units:
    // at most one per KV head.
    const double table_bytes =
        static_cast<double>(cap) *
        (44.0 * hp.n_layer * hp.n_kv_head + 4.0 * hp.n_head * weights_block_tokens(hp, cap, max_chunk));
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
        "in {}, plus {:.1f} GiB of slot tables), more than {}; lower the budget, the context or the run's "
        "length, or store K/V in a smaller type (--kv-type)",
        total / k_gib, cap, hp.n_layer, hp.n_kv_head, hp.head_dim, kv_type_name(type), table_bytes / k_gib,
        limit);
}

}  // namespace

const char* kv_type_name(kv_type t) noexcept {
    switch (t) {
        case kv_type::f32: return "f32";
        case kv_type::f16: return "f16";
        case kv_type::q8_0: return "q8_0";
    }
    return "unknown";
}

std::string kv_type_names() {
    std::string out;
    for (kv_type t : k_types) out += (out.empty() ? "" : ", ") + std::string(kv_type_name(t));
    return out;
}

result<kv_type> parse_kv_type(std::string_view name) {
    for (kv_type t : k_types) {
        if (name == kv_type_name(t)) return t;
    }
    return invalid_argument("unknown KV type '{}' (valid: {})", name, kv_type_names());
}

size_t kv_row_bytes(kv_type t, int head_dim) noexcept {
    return head_dim < 1 ? 0 : kernels::row_size(tensor_type_of(t), head_dim);
}

result<std::unique_ptr<kv_cache>> kv_cache::create(const model::hparams& hp, const policy::params& pp,
                                                   int max_chunk, int64_t n_ctx, int64_t run_length,
                                                   kv_type type) {
    if (max_chunk < 1) return invalid_argument("prefill chunk {} must be >= 1", max_chunk);
    if (n_ctx < 1) return invalid_argument("context length {} must be >= 1", n_ctx);
    if (!kernels::attend_supports(tensor_type_of(type), hp.head_dim)) {
        return invalid_argument(
            "KV type {} stores blocks of 32 elements, but this model's head_dim is {}, not a multiple of 32; "
            "use --kv-type f16 or f32",
            kv_type_name(type), hp.head_dim);
    }
    // Refuse a cache that cannot fit before anything is allocated: the policy's slot tables alone can be
    // tens of GiB, and with overcommit an oversized allocation is not refused but killed when touched.
    // The slots per unit are kv_policy::capacity()'s: budget + chunk, or the whole context for `full` or
    // when the budget leaves no room for a chunk.
    int64_t expected_cap = n_ctx;
    if (pp.name != "full" && pp.budget) {
        auto budget = pp.budget->resolve(run_length);
        if (budget.ok() && *budget <= n_ctx - max_chunk) expected_cap = *budget + max_chunk;
    }
    H2OKV_RETURN_IF_ERROR(check_memory(hp, expected_cap, max_chunk, type));

    policy::layout l;
    l.n_layer = hp.n_layer;
    l.n_kv_head = hp.n_kv_head;
    l.n_head = hp.n_head;
    l.max_chunk = max_chunk;
    l.max_positions = n_ctx;
    H2OKV_ASSIGN_OR_RETURN(auto pol, policy::kv_policy::create(pp, l, run_length));
    const int64_t cap = pol->capacity();
    const size_t row_bytes = kv_row_bytes(type, hp.head_dim);
    const double bytes = 2.0 * hp.n_layer * hp.n_kv_head * static_cast<double>(cap) * row_bytes;
    std::unique_ptr<kv_cache> c(new kv_cache(hp, std::move(pol), type));
    try {
        const size_t n =
            static_cast<size_t>(hp.n_layer) * hp.n_kv_head * static_cast<size_t>(cap) * row_bytes;
        c->k_.assign(n, std::byte{0});
        c->v_.assign(n, std::byte{0});
        const int units = c->policy_->n_units();
        c->attended_.resize(static_cast<size_t>(units));
        c->n_kept_.assign(static_cast<size_t>(units), 0);
        for (auto& a : c->attended_) a.reserve(static_cast<size_t>(cap));
        if (c->policy_->needs_attention()) {
            c->rows_.assign(static_cast<size_t>(units), std::vector<double>(static_cast<size_t>(cap), 0.0));
        }
        c->block_tokens_ = weights_block_tokens(hp, cap, max_chunk);
        c->weights_.assign(
            static_cast<size_t>(c->block_tokens_) * static_cast<size_t>(hp.n_head) * static_cast<size_t>(cap),
            0.0f);
    } catch (const std::bad_alloc&) {
        return out_of_memory("could not allocate the KV cache of {:.1f} MiB ({})", bytes / (1 << 20),
                             kv_type_name(type));
    }
    return c;
}

kv_cache::kv_cache(const model::hparams& hp, std::unique_ptr<policy::kv_policy> pol, kv_type type)
    : hp_(hp),
      policy_(std::move(pol)),
      capacity_(policy_->capacity()),
      type_(type),
      row_bytes_(kv_row_bytes(type, hp.head_dim)) {}

kv_cache::~kv_cache() = default;

bool kv_cache::token_by_token() const {
    return policy_->needs_attention() && policy_->config().gran == policy::granularity::model &&
           hp_.n_layer > 1;
}

kernels::kv_rows kv_cache::rows(const std::vector<std::byte>& store, int layer, int kv_head) const {
    const size_t head = static_cast<size_t>(layer) * hp_.n_kv_head + static_cast<size_t>(kv_head);
    return {tensor_type_of(type_), store.data() + head * static_cast<size_t>(capacity_) * row_bytes_,
            row_bytes_};
}

void kv_cache::store_row(std::vector<std::byte>& store, int layer, int kv_head, int32_t slot,
                         const float* x) {
    const size_t head = static_cast<size_t>(layer) * hp_.n_kv_head + static_cast<size_t>(kv_head);
    std::byte* dst =
        store.data() + (head * static_cast<size_t>(capacity_) + static_cast<size_t>(slot)) * row_bytes_;
    if (type_ == kv_type::f32) {
        std::memcpy(dst, x, row_bytes_);
    } else {
        // Cannot fail: the type and head_dim were checked by create().
        kernels::quantize_row(tensor_type_of(type_), x, hp_.head_dim, dst);
    }
}

int64_t kv_cache::bytes() const {
    return static_cast<int64_t>(k_.size() + v_.size());
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
    const auto cap = static_cast<size_t>(capacity_);

    for (int t = 0; t < n_tok; ++t) {
        const int ci = static_cast<int>(base) + t;
        for (int g = 0; g < hp_.n_kv_head; ++g) {
            const int32_t slot = policy_->chunk_slots(policy_->unit_of(layer, g))[static_cast<size_t>(ci)];
            store_row(k_, layer, g, slot,
                      k + static_cast<size_t>(t) * kv_stride + static_cast<size_t>(g) * hd);
            store_row(v_, layer, g, slot,
                      v + static_cast<size_t>(t) * kv_stride + static_cast<size_t>(g) * hd);
        }
    }
    const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    for (int t0 = 0; t0 < n_tok; t0 += block_tokens_) {
        const int tb = std::min(block_tokens_, n_tok - t0);
        // Items: (query, KV head, part of the group's query heads). A head's result is the same in any part
        // (kernels::attend), so a decode step with fewer KV heads than twice the threads splits each group
        // into single heads to balance the threads, at the cost of reading K/V once per head.
        const int parts = group > 1 && tb * hp_.n_kv_head < 2 * threads ? group : 1;
        const int per_part = group / parts;
        // The kernel sums a head unit's row itself when no other item touches that row at the same time.
        const bool fused = scores && per_head_unit && tb == 1 && parts == 1;
        const int items = tb * hp_.n_kv_head * parts;
        // Threads only pay off when the block's attention is more than a few microseconds of work.
        const int64_t work = static_cast<int64_t>(attended_[0].size()) * hd * hp_.n_head * tb;
#pragma omp parallel for schedule(static, 1) if (threads > 1 && items > 1 && work >= 32768)
        for (int it = 0; it < items; ++it) {
            const int t = t0 + it / (hp_.n_kv_head * parts);
            const int g = it / parts % hp_.n_kv_head;
            const int h0 = g * group + it % parts * per_part;
            const int ci = static_cast<int>(base) + t;
            const int u = policy_->unit_of(layer, g);
            const auto& slots = attended_[static_cast<size_t>(u)];
            const int n = n_kept_[static_cast<size_t>(u)] + ci + 1;
            float* w = &weights_[(static_cast<size_t>(t - t0) * hp_.n_head + static_cast<size_t>(h0)) * cap];
            const size_t qo = static_cast<size_t>(t) * q_stride + static_cast<size_t>(h0) * hd;
            kernels::attend(q + qo, per_part, rows(k_, layer, g), rows(v_, layer, g), hd, slots.data(), n,
                            scale, out + qo, w, cap, fused ? rows_[static_cast<size_t>(u)].data() : nullptr);
        }
        for (int t = t0; t < t0 + tb; ++t) {
            const int ci = static_cast<int>(base) + t;
            const float* w = &weights_[static_cast<size_t>(t - t0) * hp_.n_head * cap];
            if (scores) commit_rows(layer, ci, w, fused);
            if (weights_observer_) emit_weights(layer, ci, w);
        }
    }
    return ok_status();
}

namespace {

// Heads summed in one pass over a unit's slots by commit_rows.
constexpr int max_unit_heads = 64;

// row[slots[j]] += heads[0][j], then heads[1][j], ... for j < n.
void add_heads(double* row, const int32_t* slots, int n, const float* const* heads, int n_heads) {
    if (n_heads == 0) return;
    for (int j = 0; j < n; ++j) {
        double s = row[slots[j]];
        for (int i = 0; i < n_heads; ++i) s += static_cast<double>(heads[i][j]);
        row[slots[j]] = s;
    }
}

}  // namespace

// Completes the rows of chunk query `ci` for the units whose last contributing layer is `layer` and hands
// them to the policy. Unless the kernel summed them (`fused`), the rows are summed here from the per-head
// weights, in head order: the same sums in the same order as the fused path.
void kv_cache::commit_rows(int layer, int ci, const float* weights, bool fused) {
    const int group = hp_.gqa_group();
    const bool hand_over = policy_->config().gran != policy::granularity::model || layer == hp_.n_layer - 1;
    const int first_unit = policy_->unit_of(layer, 0);
    const int n_units = policy_->unit_of(layer, hp_.n_kv_head - 1) - first_unit + 1;
    // Each unit owns its row and its policy table, so units are committed in parallel (a unit's heads are
    // still summed in ascending order, whatever the thread count). The observer shares buffers and sees the
    // units in order: with one, the loop stays serial.
    const int64_t work = static_cast<int64_t>(attended_[static_cast<size_t>(first_unit)].size()) * hp_.n_head;
    const bool parallel =
        n_units > 1 && !observer_ && !omp_in_parallel() && omp_get_max_threads() > 1 && work >= 16384;
#pragma omp parallel for schedule(static, 1) if (parallel)
    for (int u = first_unit; u < first_unit + n_units; ++u) {
        const auto& slots = attended_[static_cast<size_t>(u)];
        const int n = n_kept_[static_cast<size_t>(u)] + ci + 1;
        double* row = rows_[static_cast<size_t>(u)].data();
        if (!fused) {
            // The unit's heads in ascending order; each slot's entry adds them in that order (slots are
            // distinct, so one pass over the slots adds every head: one gather and scatter, not one per
            // head).
            const float* heads[max_unit_heads];
            int n_heads = 0;
            for (int g = 0; g < hp_.n_kv_head; ++g) {
                if (policy_->unit_of(layer, g) != u) continue;
                for (int h = g * group; h < (g + 1) * group; ++h)
                    heads[n_heads++] = weights + static_cast<size_t>(h) * static_cast<size_t>(capacity_);
                if (n_heads + group > max_unit_heads) {  // more heads than the array: add these now
                    add_heads(row, slots.data(), n, heads, n_heads);
                    n_heads = 0;
                }
            }
            add_heads(row, slots.data(), n, heads, n_heads);
        }
        if (!hand_over) continue;
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

void kv_cache::emit_weights(int layer, int ci, const float* weights) {
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
            std::span<const float>(weights + static_cast<size_t>(h) * static_cast<size_t>(capacity_),
                                   static_cast<size_t>(n)));
    }
}

}  // namespace h2okv::kv
