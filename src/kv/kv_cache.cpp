#include "h2okv/kv/kv_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

namespace h2okv::kv {
namespace {

// The most one cache may take: 64 GiB, and no more than the machine's physical memory.
status check_memory(const model::hparams& hp, const cache_footprint& fp, kv_type type) {
    constexpr double k_gib = 1ull << 30;
    constexpr double k_max_bytes = 64.0 * k_gib;
    const auto total = static_cast<double>(fp.total());
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
        total / k_gib, fp.capacity, hp.n_layer, hp.n_kv_head, hp.head_dim, kv_type_name(type),
        static_cast<double>(fp.table_bytes) / k_gib, limit);
}

policy::layout layout_of(const model::hparams& hp, int max_chunk, int64_t n_ctx) {
    policy::layout l;
    l.n_layer = hp.n_layer;
    l.n_kv_head = hp.n_kv_head;
    l.n_head = hp.n_head;
    l.max_chunk = max_chunk;
    l.max_positions = n_ctx;
    return l;
}

// Score rows summed at once: a layer's units (a head unit's row lives while its layer is attended).
int64_t rows_in_flight(const model::hparams& hp, policy::granularity g) {
    return g == policy::granularity::head ? hp.n_kv_head : 1;
}

}  // namespace

result<cache_footprint> kv_cache::plan(const model::hparams& hp, const policy::params& pp, int max_chunk,
                                       int64_t n_ctx, int64_t run_length, kv_type type) {
    if (max_chunk < 1) return invalid_argument("prefill chunk {} must be >= 1", max_chunk);
    if (n_ctx < 1) return invalid_argument("context length {} must be >= 1", n_ctx);
    if (!kernels::attend_supports(kv_tensor_type(type), hp.head_dim)) {
        return invalid_argument(
            "KV type {} stores blocks of 32 elements, but this model's head_dim is {}, not a multiple of 32; "
            "use --kv-type f16 or f32",
            kv_type_name(type), hp.head_dim);
    }
    H2OKV_ASSIGN_OR_RETURN(const policy::footprint pf,
                           policy::kv_policy::plan(pp, layout_of(hp, max_chunk, n_ctx), run_length));
    cache_footprint fp;
    fp.capacity = pf.capacity;
    fp.kv_bytes = slot_store::bytes_for(hp.n_layer, hp.n_kv_head, hp.head_dim, pf.capacity, type);
    // Per unit: the attended slot list (int32 per slot); when the policy reads attention, the score rows of
    // one layer's units (double per slot).
    const int64_t rows = pf.needs_attention ? rows_in_flight(hp, pp.gran) : 0;
    fp.table_bytes = pf.table_bytes + (pf.capacity * 4 + 4) * pf.n_units + pf.capacity * 8 * rows;
    // A policy that keeps its own copy of the keys (f32).
    fp.table_bytes += pf.capacity * pf.n_units * pf.stored_keys_per_slot * hp.head_dim * 4;
    // Rolling positions: the admission positions (int32 per slot and unit), the turns' tables (2 rope_dim
    // floats per slot and distinct rope of the layers), one layer's keys in f32 (head_dim floats per slot and
    // KV head).
    fp.rolling = pf.positions == policy::position_mode::rolling;
    if (fp.rolling) {
        if (hp.layer_rope.size() != static_cast<size_t>(hp.n_layer) || hp.rope_specs.empty()) {
            return invalid_argument(
                "rolling positions need the model's rope per layer ({} given for {} layers)",
                hp.layer_rope.size(), hp.n_layer);
        }
        const auto specs = static_cast<int64_t>(hp.rope_specs.size());
        fp.table_bytes +=
            pf.capacity * (4 * pf.n_units + 8 * hp.rope_dim * specs + 4 * hp.n_kv_head * hp.head_dim);
    }
    H2OKV_RETURN_IF_ERROR(check_memory(hp, fp, type));
    return fp;
}

result<std::unique_ptr<kv_cache>> kv_cache::create(const model::hparams& hp, const policy::params& pp,
                                                   int max_chunk, int64_t n_ctx, int64_t run_length,
                                                   kv_type type) {
    // Refuse a cache that cannot fit before anything is allocated: the policy's slot tables alone can be
    // tens of GiB, and with overcommit an oversized allocation is not refused but killed when touched.
    H2OKV_ASSIGN_OR_RETURN(const cache_footprint fp, plan(hp, pp, max_chunk, n_ctx, run_length, type));
    H2OKV_ASSIGN_OR_RETURN(auto pol,
                           policy::kv_policy::create(pp, layout_of(hp, max_chunk, n_ctx), run_length));
    H2OKV_ASSIGN_OR_RETURN(auto store,
                           slot_store::create(hp.n_layer, hp.n_kv_head, hp.head_dim, pol->capacity(), type));
    std::unique_ptr<kv_cache> c(new kv_cache(hp, std::move(pol), std::move(store), fp));
    try {
        const auto units = static_cast<size_t>(c->policy_->n_units());
        const auto cap = static_cast<size_t>(c->capacity());
        c->attended_.resize(units);
        c->n_kept_.assign(units, 0);
        for (auto& a : c->attended_) a.reserve(cap);
        if (c->policy_->needs_attention()) {
            c->rows_.assign(static_cast<size_t>(rows_in_flight(hp, pp.gran)), std::vector<double>(cap, 0.0));
        }
        if (c->policy_->config().positions == policy::position_mode::rolling) {
            c->rolling_ = true;
            const auto rd = static_cast<size_t>(hp.rope_dim);
            c->admitted_.assign(units * cap, 0);
            c->turns_.resize(hp.rope_specs.size() * cap * 2 * rd);
            for (size_t r = 0; r < hp.rope_specs.size(); ++r) {
                for (size_t d = 0; d < cap; ++d)
                    model::rope_turn_table(hp.rope_specs[r], -static_cast<int64_t>(d),
                                           &c->turns_[(r * cap + d) * 2 * rd]);
            }
            const size_t rows = static_cast<size_t>(hp.n_kv_head) * cap * static_cast<size_t>(hp.head_dim);
            c->rolled_k_.assign(rows, 0.0f);
        }
    } catch (const std::bad_alloc&) {
        return out_of_memory("could not allocate the KV cache's slot lists ({} units of {} slots)",
                             c->policy_->n_units(), c->capacity());
    }
    return c;
}

kv_cache::kv_cache(const model::hparams& hp, std::unique_ptr<policy::kv_policy> pol, slot_store store,
                   cache_footprint fp)
    : hp_(hp), policy_(std::move(pol)), store_(std::move(store)), footprint_(fp) {}

kv_cache::~kv_cache() = default;

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
    chunk_base_ = first;
    if (rolling_) {
        // Every unit admits the same tokens and evicts down to the same budget, so all hold as many: the
        // chunk's queries have one rolling position for every head, and the model can rotate them.
        chunk_base_ = policy_->n_kept(0);
        for (int u = 1; u < policy_->n_units(); ++u) {
            if (policy_->n_kept(u) != chunk_base_) {
                return internal_error(
                    "kv_cache: rolling positions need equal kept counts; unit {} holds {}, "
                    "unit 0 holds {}",
                    u, policy_->n_kept(u), chunk_base_);
            }
        }
        const size_t cap = static_cast<size_t>(capacity());
        for (int u = 0; u < policy_->n_units(); ++u) {
            auto chunk = policy_->chunk_slots(u);
            int32_t* adm = &admitted_[static_cast<size_t>(u) * cap];
            for (int i = 0; i < n; ++i)
                adm[chunk[static_cast<size_t>(i)]] = static_cast<int32_t>(chunk_base_ + i);
        }
    }
    chunk_first_ = first;
    chunk_n_ = n;
    chunk_done_ = 0;
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

kernels::kv_rows kv_cache::keys(int layer, int g) const {
    if (!rolling_) return store_.k(layer, g);
    const size_t rows = static_cast<size_t>(capacity()) * static_cast<size_t>(hp_.head_dim);
    return {gguf::tensor_type::f32,
            reinterpret_cast<const std::byte*>(&rolled_k_[static_cast<size_t>(g) * rows]),
            static_cast<size_t>(hp_.head_dim) * sizeof(float)};
}

void kv_cache::roll_keys(int layer, int g, int n_chunk) {
    const int u = policy_->unit_of(layer, g);
    const auto& slots = attended_[static_cast<size_t>(u)];
    const int n_kept = n_kept_[static_cast<size_t>(u)];
    const auto hd = static_cast<size_t>(hp_.head_dim);
    const auto rd = static_cast<size_t>(hp_.rope_dim);
    const size_t cap = static_cast<size_t>(capacity());
    float* k = &rolled_k_[static_cast<size_t>(g) * cap * hd];
    const kernels::kv_rows sk = store_.k(layer, g);
    const auto rolling = policy_->slot_rolling_positions(u);
    const int32_t* adm = &admitted_[static_cast<size_t>(u) * cap];
    const kernels::rope_spec& rope = hp_.rope(layer);
    const float* turns =
        &turns_[static_cast<size_t>(hp_.layer_rope[static_cast<size_t>(layer)]) * cap * 2 * rd];
    const int n = n_kept + n_chunk;
    // Rows to convert: those attended, or in one call every row up to the highest attended when they are at
    // least half of them (decode: nearly all slots are held).
    int32_t high = n_kept > 0 ? slots[static_cast<size_t>(n_kept - 1)] : 0;  // kept slots ascend
    for (int j = n_kept; j < n; ++j) high = std::max(high, slots[static_cast<size_t>(j)]);
    const bool dense = 2 * static_cast<int64_t>(n) > high;
    if (dense) kernels::dequantize_row(sk.type, sk.data, (int64_t{high} + 1) * hp_.head_dim, k);
    for (int j = 0; j < n; ++j) {
        const auto slot = static_cast<size_t>(slots[static_cast<size_t>(j)]);
        float* row = k + slot * hd;
        if (!dense) kernels::dequantize_row(sk.type, sk.data + slot * sk.row_bytes, hp_.head_dim, row);
        // A chunk token is attended at its admission position; a kept one has dropped by d >= 0 since.
        const int32_t d = j < n_kept ? adm[slot] - rolling[slot] : 0;
        if (d != 0) model::rope_turn(rope, row, &turns[static_cast<size_t>(d) * 2 * rd]);
    }
}

status kv_cache::end_chunk() {
    if (chunk_n_ > 0 && chunk_done_ != chunk_n_) {
        return internal_error("kv_cache: end_chunk after {} of the chunk's {} tokens were forwarded",
                              chunk_done_, chunk_n_);
    }
    chunk_n_ = 0;
    chunk_done_ = 0;
    return policy_->end_chunk();
}

}  // namespace h2okv::kv
