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

// The policy's layers: the global ones (all of them without sliding-window layers).
policy::layout layout_of(const model::hparams& hp, int max_chunk, int64_t n_ctx) {
    policy::layout l;
    l.n_layer = hp.n_layer - hp.n_sliding();
    l.n_kv_head = hp.n_kv_head;
    l.n_head = hp.n_head;
    l.max_chunk = max_chunk;
    l.max_positions = n_ctx;
    return l;
}

// The sliding-window layers' slot table: a `window` policy over those layers with one unit, keeping the last
// W - 1 positions between chunks (a query attends itself and the W - 1 before it).
policy::params window_params(const model::hparams& hp) {
    policy::params p;
    p.name = "window";
    p.budget = policy::budget_spec::count(std::max<int64_t>(1, hp.sliding_window - 1));
    p.gran = policy::granularity::model;
    return p;
}

policy::layout window_layout(const model::hparams& hp, int max_chunk, int64_t n_ctx) {
    policy::layout l = layout_of(hp, max_chunk, n_ctx);
    l.n_layer = hp.n_sliding();
    return l;
}

// Per window unit: the attended slot list and their positions (int32 and int64 per slot).
int64_t window_list_bytes(int64_t capacity) {
    return capacity * 12 + 4;
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
    const int n_sliding = hp.n_sliding();
    if (n_sliding == hp.n_layer) {
        return invalid_argument(
            "every one of the model's {} layers is a sliding-window layer; h2okv needs at least one global "
            "layer for the KV policy to govern",
            hp.n_layer);
    }
    H2OKV_ASSIGN_OR_RETURN(const policy::footprint pf,
                           policy::kv_policy::plan(pp, layout_of(hp, max_chunk, n_ctx), run_length));
    cache_footprint fp;
    fp.capacity = pf.capacity;
    fp.head_capacity = pf.head_capacity;
    fp.kv_bytes = slot_store::bytes_for(hp.head_dim, pf.head_capacity, type);
    if (n_sliding > 0) {
        if (pf.positions == policy::position_mode::rolling) {
            return invalid_argument(
                "rolling positions are not supported for a model with sliding-window layers ({} of its {} "
                "layers); use --kv-positions original",
                n_sliding, hp.n_layer);
        }
        H2OKV_ASSIGN_OR_RETURN(
            const policy::footprint wf,
            policy::kv_policy::plan(window_params(hp), window_layout(hp, max_chunk, n_ctx), run_length));
        fp.window_capacity = wf.capacity;
        fp.kv_bytes += slot_store::bytes_for(n_sliding, hp.n_kv_head, hp.head_dim, wf.capacity, type);
        fp.table_bytes += wf.table_bytes + window_list_bytes(wf.capacity);
    }
    // When the policy reads attention, the score rows of one layer's units (double per slot).
    const int64_t rows = pf.needs_attention ? rows_in_flight(hp, policy::granularity_of(pp)) : 0;
    fp.table_bytes += pf.table_bytes + pf.capacity * 8 * rows;
    // A policy that keeps its own copy of the keys (f32), sized by its largest unit.
    fp.table_bytes += pf.capacity * pf.n_units * pf.stored_keys_per_slot * hp.head_dim * 4;
    // Rolling positions: the turns' tables (2 * rope_dim floats per slot and distinct rope of the layers; the
    // policy's tables count each slot's admission position and turn).
    fp.rolling = pf.positions == policy::position_mode::rolling;
    if (fp.rolling) {
        if (hp.layer_rope.size() != static_cast<size_t>(hp.n_layer) || hp.rope_specs.empty()) {
            return invalid_argument(
                "rolling positions need the model's rope per layer ({} given for {} layers)",
                hp.layer_rope.size(), hp.n_layer);
        }
        const auto specs = static_cast<int64_t>(hp.rope_specs.size());
        fp.table_bytes += pf.capacity * 4 * 2 * hp.rope_dim * specs;
    }
    H2OKV_RETURN_IF_ERROR(check_memory(hp, fp, type));
    return fp;
}

result<int64_t> kv_cache::budget_for_bytes(const model::hparams& hp, const policy::params& pp, int max_chunk,
                                           int64_t n_ctx, int64_t run_length, kv_type type, int64_t bytes) {
    if (!policy::policy_evicts(pp.name)) {
        return invalid_argument("a budget in bytes needs an evicting policy; {} keeps every token", pp.name);
    }
    if (bytes < 1) return invalid_argument("a budget of {} bytes must be >= 1", bytes);
    auto plan_at = [&](int64_t budget) {
        policy::params q = pp;
        q.budget = policy::budget_spec::count(budget);
        return plan(hp, q, max_chunk, n_ctx, run_length, type);
    };
    // kv_bytes grows with the budget. Where the policy refuses a budget (too small for its recent window
    // and sinks), the budget's slots are measured under `window`, which takes any budget and whose slots
    // are every policy's (budget + chunk, capped at the run); the machine's limit (out_of_memory) does not
    // fit.
    auto window_at = [&](int64_t budget) {
        policy::params w;
        w.name = "window";
        w.budget = policy::budget_spec::count(budget);
        w.gran = policy::granularity_of(pp);
        return plan(hp, w, max_chunk, n_ctx, run_length, type);
    };
    // What no budget changes (a KV type the head_dim cannot hold, a model with no global layer) is refused
    // as it is.
    if (const auto probe = window_at(1);
        !probe.ok() && probe.error().code() == status_code::invalid_argument) {
        return probe.error();
    }
    auto kv_bytes_at = [&](int64_t budget) -> int64_t {  // -1: beyond the machine's limit
        auto fp = plan_at(budget);
        if (!fp.ok() && fp.error().code() == status_code::invalid_argument) fp = window_at(budget);
        return fp.ok() ? fp->kv_bytes : -1;
    };
    auto fits = [&](int64_t budget) {
        const int64_t b = kv_bytes_at(budget);
        return b >= 0 && b <= bytes;
    };
    int64_t lo = 0;  // fits (or 0)
    int64_t hi = std::max<int64_t>(run_length, 1) + 1;
    if (fits(hi - 1)) {
        lo = hi - 1;
    } else {
        while (hi - lo > 1) {
            const int64_t mid = lo + (hi - lo) / 2;
            (fits(mid) ? lo : hi) = mid;
        }
    }
    const int64_t per_token =
        slot_store::bytes_for(hp.n_layer - hp.n_sliding(), hp.n_kv_head, hp.head_dim, 1, type);
    if (lo == 0) {
        const int64_t one = kv_bytes_at(1);
        return invalid_argument(
            "{} bytes of K/V hold no budget: one token takes {} bytes ({} layers x {} KV heads x K and V of "
            "{} "
            "bytes in {}), and the cache also holds the prefill chunk's {} slots{}; the smallest budget "
            "needs "
            "{} bytes",
            bytes, per_token, hp.n_layer - hp.n_sliding(), hp.n_kv_head, kv_row_bytes(type, hp.head_dim),
            kv_type_name(type), max_chunk, hp.n_sliding() > 0 ? " and the sliding-window layers' slots" : "",
            one >= 0 ? std::to_string(one) : "more than the machine holds");
    }
    const auto fp = plan_at(lo);
    if (!fp.ok()) {
        return fp.error().with_context(fmt::format(
            "{} bytes of K/V hold a budget of at most {} tokens ({} bytes per token)", bytes, lo, per_token));
    }
    return lo;
}

result<std::unique_ptr<kv_cache>> kv_cache::create(const model::hparams& hp, const policy::params& pp,
                                                   int max_chunk, int64_t n_ctx, int64_t run_length,
                                                   kv_type type) {
    // Refuse a cache that cannot fit before anything is allocated: the policy's slot tables alone can be
    // tens of GiB, and with overcommit an oversized allocation is not refused but killed when touched.
    H2OKV_ASSIGN_OR_RETURN(const cache_footprint fp, plan(hp, pp, max_chunk, n_ctx, run_length, type));
    H2OKV_ASSIGN_OR_RETURN(auto pol,
                           policy::kv_policy::create(pp, layout_of(hp, max_chunk, n_ctx), run_length));
    const int n_sliding = hp.n_sliding();
    H2OKV_ASSIGN_OR_RETURN(auto store, slot_store::create(hp.n_layer - n_sliding, hp.n_kv_head, hp.head_dim,
                                                          fp.head_capacity, type));
    std::unique_ptr<kv_cache> c(new kv_cache(hp, std::move(pol), std::move(store), fp));
    int n_kind[2] = {0, 0};
    for (int l = 0; l < hp.n_layer; ++l) {
        const int kind = hp.sliding(l) ? 1 : 0;
        c->index_.push_back(n_kind[kind]++);
        if (kind == 0) c->last_global_ = l;
    }
    if (n_sliding > 0) {
        H2OKV_ASSIGN_OR_RETURN(
            c->window_,
            policy::kv_policy::create(window_params(hp), window_layout(hp, max_chunk, n_ctx), run_length));
        H2OKV_ASSIGN_OR_RETURN(c->window_store_, slot_store::create(n_sliding, hp.n_kv_head, hp.head_dim,
                                                                    c->window_->capacity(), type));
    }
    try {
        if (c->window_) {
            c->window_attended_.reserve(static_cast<size_t>(c->window_->capacity()));
            c->window_positions_.reserve(static_cast<size_t>(c->window_->capacity()));
        }
        const auto cap = static_cast<size_t>(c->capacity());
        if (c->policy_->needs_attention()) {
            c->rows_.assign(static_cast<size_t>(rows_in_flight(hp, c->policy_->config().gran)),
                            std::vector<double>(cap, 0.0));
        }
        if (c->policy_->config().positions == policy::position_mode::rolling) {
            c->rolling_ = true;
            const auto rd = 2 * static_cast<size_t>(hp.rope_dim);  // a turn's table
            c->turns_.resize(hp.rope_specs.size() * cap * rd);
            for (size_t r = 0; r < hp.rope_specs.size(); ++r) {
                for (size_t d = 0; d < cap; ++d)
                    model::rope_turn_table(hp.rope_specs[r], -static_cast<int64_t>(d),
                                           &c->turns_[(r * cap + d) * rd]);
            }
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
            out.push_back(sliding(l) ? window_->kept_positions(0) : policy_->kept_positions(unit_of(l, g)));
    }
    return out;
}

int32_t kv_cache::chunk_slot(int layer, int g, int ci) const {
    const auto c = static_cast<size_t>(ci);
    return sliding(layer) ? window_->chunk_slots(0)[c] : policy_->chunk_slots(unit_of(layer, g))[c];
}

void kv_cache::write(int layer, int g, int ci, const float* k, const float* v) {
    const int li = index_[static_cast<size_t>(layer)];
    const int32_t slot = chunk_slot(layer, g, ci);
    if (sliding(layer)) {
        window_store_.write(li, g, slot, k, v);
    } else {
        store_.write(li, g, slot, k, v);
        // Key-scored policies see the key as computed, before the store's rounding; layers as the policy
        // counts them (the global ones).
        if (policy_->needs_keys()) {
            policy_->add_key(unit_of(layer, g), ci, li, g,
                             std::span<const float>(k, static_cast<size_t>(hp_.head_dim)));
        }
    }
}

void kv_cache::prefetch_for_write(int layer, int g, int ci) const {
    (sliding(layer) ? window_store_ : store_)
        .prefetch_for_write(index_[static_cast<size_t>(layer)], g, chunk_slot(layer, g, ci));
}

std::span<const int32_t> kv_cache::attended(int layer, int g, int ci) const {
    if (!sliding(layer)) {
        const auto u = static_cast<size_t>(unit_of(layer, g));
        return policy_->attended_slots(static_cast<int>(u)).first(static_cast<size_t>(n_kept(u) + ci + 1));
    }
    // Kept positions ascend, then the chunk's: the window (t - W, t] is a contiguous run ending at t.
    const auto end = static_cast<size_t>(window_n_kept_ + ci + 1);
    const int64_t lo = chunk_first_ + ci - hp_.sliding_window + 1;
    const auto b =
        static_cast<size_t>(std::lower_bound(window_positions_.begin(),
                                             window_positions_.begin() + static_cast<ptrdiff_t>(end), lo) -
                            window_positions_.begin());
    return {window_attended_.data() + b, end - b};
}

void kv_cache::attended_positions(int layer, int g, int ci, std::vector<int64_t>* out) const {
    const std::span<const int32_t> slots = attended(layer, g, ci);
    out->clear();
    if (sliding(layer)) {
        const auto b = static_cast<size_t>(slots.data() - window_attended_.data());
        out->assign(window_positions_.begin() + static_cast<ptrdiff_t>(b),
                    window_positions_.begin() + static_cast<ptrdiff_t>(b + slots.size()));
        return;
    }
    const int u = unit_of(layer, g);
    const int n_kept = this->n_kept(u);
    const auto pos = policy_->slot_positions(u);
    for (size_t j = 0; j < slots.size(); ++j) {
        out->push_back(static_cast<int>(j) < n_kept ? pos[static_cast<size_t>(slots[j])]
                                                    : chunk_first_ + static_cast<int64_t>(j) - n_kept);
    }
}

bool kv_cache::hands_rows(int layer) const {
    return policy_->config().gran != policy::granularity::model || layer == last_global_;
}

kernels::kv_rows kv_cache::values(int layer, int g) const {
    const int li = index_[static_cast<size_t>(layer)];
    return sliding(layer) ? window_store_.v(li, g) : store_.v(li, g);
}

status kv_cache::begin_chunk(int64_t first, int n) {
    H2OKV_RETURN_IF_ERROR(policy_->begin_chunk(first, n));
    if (window_) {
        H2OKV_RETURN_IF_ERROR(window_->begin_chunk(first, n));
        // The window's kept slots in position order, then the chunk's.
        const auto kept = window_->kept_slots(0);
        const auto pos = window_->slot_positions(0);
        window_attended_.assign(kept.begin(), kept.end());
        std::sort(window_attended_.begin(), window_attended_.end(), [&](int32_t a, int32_t b) {
            return pos[static_cast<size_t>(a)] < pos[static_cast<size_t>(b)];
        });
        window_n_kept_ = static_cast<int>(kept.size());
        const auto chunk = window_->chunk_slots(0);
        window_attended_.insert(window_attended_.end(), chunk.begin(), chunk.end());
        window_positions_.clear();
        for (int32_t slot : window_attended_) window_positions_.push_back(pos[static_cast<size_t>(slot)]);
    }
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
    }
    chunk_first_ = first;
    chunk_n_ = n;
    chunk_done_ = 0;
    return ok_status();
}

kernels::kv_rows kv_cache::keys(int layer, int g) const {
    const int li = index_[static_cast<size_t>(layer)];
    return sliding(layer) ? window_store_.k(li, g) : store_.k(li, g);
}

kernels::key_turns kv_cache::turns(int layer, int g) const {
    const size_t cap = static_cast<size_t>(capacity());
    return {policy_->slot_turns(policy_->unit_of(layer, g)).data(),
            &turns_[static_cast<size_t>(hp_.layer_rope[static_cast<size_t>(layer)]) * cap * 2 *
                    static_cast<size_t>(hp_.rope_dim)],
            hp_.rope_dim, hp_.rope(layer).pairing};
}

status kv_cache::end_chunk() {
    if (chunk_n_ > 0 && chunk_done_ != chunk_n_) {
        return internal_error("kv_cache: end_chunk after {} of the chunk's {} tokens were forwarded",
                              chunk_done_, chunk_n_);
    }
    chunk_n_ = 0;
    chunk_done_ = 0;
    if (window_) H2OKV_RETURN_IF_ERROR(window_->end_chunk());
    return policy_->end_chunk();
}

}  // namespace h2okv::kv
