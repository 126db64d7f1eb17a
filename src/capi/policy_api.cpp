// The policy library's C functions (include/h2okv.h): a policy::kv_policy behind an opaque handle, every
// argument checked here so that the C++ policy only ever sees calls its contract allows.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "capi.h"

struct h2okv_policy {
    std::unique_ptr<h2okv::policy::kv_policy> impl;
    std::string config;  // impl->config().to_string(), kept for h2okv_policy_config's pointer
    int32_t head_dim = 0;
    bool open = false;              // between begin_chunk and end_chunk
    int32_t chunk_n = 0;            // the open chunk's tokens
    std::vector<int32_t> next_row;  // per unit: the smallest chunk query add_row accepts next
};

namespace h2okv::capi {
namespace {

using policy::kv_policy;

status check_unit(const h2okv_policy* p, int32_t unit, const char* where) {
    if (p == nullptr) return invalid_argument("{}: policy is NULL", where);
    if (unit < 0 || unit >= p->impl->n_units()) {
        return invalid_argument("{}: unit {} is out of range; the policy has units 0 to {}", where, unit,
                                p->impl->n_units() - 1);
    }
    return ok_status();
}

}  // namespace

h2okv_status copy_kept(const kv_policy& p, int32_t unit, int64_t* out, size_t capacity, size_t* n,
                       const char* where) {
    if (n == nullptr) return fail_invalid("{}: n is NULL", where);
    if (out == nullptr && capacity > 0)
        return fail_invalid("{}: out is NULL with capacity {}", where, capacity);
    const std::vector<int64_t> kept = p.kept_positions(unit);
    *n = kept.size();
    if (capacity < kept.size()) {
        return fail(out_of_range("{}: unit {} keeps {} positions, the buffer has room for {}", where, unit,
                                 kept.size(), capacity));
    }
    std::copy(kept.begin(), kept.end(), out);
    return H2OKV_OK;
}

}  // namespace h2okv::capi

using h2okv::capi::fail;
using h2okv::capi::fail_invalid;
using h2okv::capi::guard;

extern "C" {

h2okv_status h2okv_policy_create(const char* spec, const h2okv_policy_layout* layout, int64_t run_length,
                                 h2okv_policy** out) {
    return guard("h2okv_policy_create", [&]() -> h2okv_status {
        if (spec == nullptr || layout == nullptr || out == nullptr) {
            return fail_invalid("h2okv_policy_create: spec, layout and out must not be NULL");
        }
        if (layout->head_dim < 1) {
            return fail_invalid("h2okv_policy_create: layout head_dim {} must be >= 1", layout->head_dim);
        }
        auto params = h2okv::policy::params::parse(spec);
        if (!params.ok()) return fail(params.error().with_context("kv spec"));
        const h2okv::policy::layout l{.n_layer = layout->n_layer,
                                      .n_kv_head = layout->n_kv_head,
                                      .n_head = layout->n_head,
                                      .max_chunk = layout->max_chunk,
                                      .max_positions = layout->max_positions};
        if (auto st = l.validate(); !st.ok()) return fail(st.with_context("layout"));
        if (run_length < 1 || run_length > l.max_positions) {
            return fail_invalid("h2okv_policy_create: run_length {} must be in [1, max_positions {}]",
                                run_length, l.max_positions);
        }
        auto impl = h2okv::policy::kv_policy::create(*params, l, run_length);
        if (!impl.ok()) return fail(impl.error());
        auto p = std::make_unique<h2okv_policy>();
        p->impl = std::move(*impl);
        p->config = p->impl->config().to_string();
        p->head_dim = layout->head_dim;
        p->next_row.assign(static_cast<size_t>(p->impl->n_units()), 0);
        *out = p.release();
        return H2OKV_OK;
    });
}

void h2okv_policy_free(h2okv_policy* policy) {
    delete policy;
}

const char* h2okv_policy_catalog(void) {
    static const std::string catalog = [] {
        std::string s;
        try {
            for (const auto& f : h2okv::policy::policy_catalog())
                s += f.name + ": " + f.summary + "; " + f.defaults + "\n";
        } catch (...) {
            s.clear();
        }
        return s;
    }();
    return catalog.c_str();
}

const char* h2okv_policy_config(const h2okv_policy* policy) {
    return policy != nullptr ? policy->config.c_str() : "";
}

int h2okv_policy_needs_attention(const h2okv_policy* policy) {
    return policy != nullptr && policy->impl->needs_attention() ? 1 : 0;
}

int h2okv_policy_needs_keys(const h2okv_policy* policy) {
    return policy != nullptr && policy->impl->needs_keys() ? 1 : 0;
}

int32_t h2okv_policy_n_units(const h2okv_policy* policy) {
    return policy != nullptr ? policy->impl->n_units() : 0;
}

int32_t h2okv_policy_unit_of(const h2okv_policy* policy, int32_t layer, int32_t kv_head) {
    if (policy == nullptr) return -1;
    const auto& l = policy->impl->shape();
    if (layer < 0 || layer >= l.n_layer || kv_head < 0 || kv_head >= l.n_kv_head) return -1;
    return policy->impl->unit_of(layer, kv_head);
}

int64_t h2okv_policy_capacity(const h2okv_policy* policy) {
    return policy != nullptr ? policy->impl->capacity() : 0;
}

int64_t h2okv_policy_next_position(const h2okv_policy* policy) {
    return policy != nullptr ? policy->impl->next_position() : 0;
}

h2okv_status h2okv_policy_begin_chunk(h2okv_policy* policy, int64_t first, int32_t n) {
    return guard("h2okv_policy_begin_chunk", [&]() -> h2okv_status {
        if (policy == nullptr) return fail_invalid("h2okv_policy_begin_chunk: policy is NULL");
        if (auto st = policy->impl->begin_chunk(first, n); !st.ok()) return fail(st);
        policy->open = true;
        policy->chunk_n = n;
        std::fill(policy->next_row.begin(), policy->next_row.end(), 0);
        return H2OKV_OK;
    });
}

h2okv_status h2okv_policy_kept_slots(const h2okv_policy* policy, int32_t unit, const int32_t** slots,
                                     size_t* n) {
    return guard("h2okv_policy_kept_slots", [&]() -> h2okv_status {
        if (auto st = h2okv::capi::check_unit(policy, unit, "h2okv_policy_kept_slots"); !st.ok())
            return fail(st);
        if (slots == nullptr || n == nullptr)
            return fail_invalid("h2okv_policy_kept_slots: slots and n must not be NULL");
        const auto s = policy->impl->kept_slots(unit);
        *slots = s.data();
        *n = s.size();
        return H2OKV_OK;
    });
}

h2okv_status h2okv_policy_chunk_slots(const h2okv_policy* policy, int32_t unit, const int32_t** slots,
                                      size_t* n) {
    return guard("h2okv_policy_chunk_slots", [&]() -> h2okv_status {
        if (auto st = h2okv::capi::check_unit(policy, unit, "h2okv_policy_chunk_slots"); !st.ok())
            return fail(st);
        if (slots == nullptr || n == nullptr)
            return fail_invalid("h2okv_policy_chunk_slots: slots and n must not be NULL");
        if (policy->impl->next_position() == 0 && !policy->open) {
            return fail_invalid(
                "h2okv_policy_chunk_slots: no chunk has begun; call h2okv_policy_begin_chunk first");
        }
        const auto s = policy->impl->chunk_slots(unit);
        *slots = s.data();
        *n = s.size();
        return H2OKV_OK;
    });
}

h2okv_status h2okv_policy_slot_positions(const h2okv_policy* policy, int32_t unit, const int64_t** positions,
                                         size_t* n) {
    return guard("h2okv_policy_slot_positions", [&]() -> h2okv_status {
        if (auto st = h2okv::capi::check_unit(policy, unit, "h2okv_policy_slot_positions"); !st.ok())
            return fail(st);
        if (positions == nullptr || n == nullptr) {
            return fail_invalid("h2okv_policy_slot_positions: positions and n must not be NULL");
        }
        const auto s = policy->impl->slot_positions(unit);
        *positions = s.data();
        *n = s.size();
        return H2OKV_OK;
    });
}

h2okv_status h2okv_policy_add_row(h2okv_policy* policy, int32_t unit, int32_t i, const double* row) {
    return guard("h2okv_policy_add_row", [&]() -> h2okv_status {
        if (auto st = h2okv::capi::check_unit(policy, unit, "h2okv_policy_add_row"); !st.ok())
            return fail(st);
        if (row == nullptr) return fail_invalid("h2okv_policy_add_row: row is NULL");
        if (!policy->open)
            return fail_invalid(
                "h2okv_policy_add_row: no chunk is open; call h2okv_policy_begin_chunk first");
        auto& next = policy->next_row[static_cast<size_t>(unit)];
        if (i < next || i >= policy->chunk_n) {
            return fail_invalid(
                "h2okv_policy_add_row: query {} of unit {}; expected {} to {} (the chunk's queries, each "
                "unit's in "
                "increasing order)",
                i, unit, next, policy->chunk_n - 1);
        }
        policy->impl->add_row(unit, i, row);
        next = i + 1;
        return H2OKV_OK;
    });
}

h2okv_status h2okv_policy_add_key(h2okv_policy* policy, int32_t i, int32_t layer, int32_t kv_head,
                                  const float* key, size_t n) {
    return guard("h2okv_policy_add_key", [&]() -> h2okv_status {
        if (policy == nullptr || key == nullptr)
            return fail_invalid("h2okv_policy_add_key: policy and key must not be NULL");
        if (!policy->open)
            return fail_invalid(
                "h2okv_policy_add_key: no chunk is open; call h2okv_policy_begin_chunk first");
        const int32_t unit = h2okv_policy_unit_of(policy, layer, kv_head);
        if (unit < 0) {
            const auto& l = policy->impl->shape();
            return fail_invalid(
                "h2okv_policy_add_key: layer {} / KV head {} out of range; the layout has {} layers of {} KV "
                "heads",
                layer, kv_head, l.n_layer, l.n_kv_head);
        }
        if (i < 0 || i >= policy->chunk_n) {
            return fail_invalid("h2okv_policy_add_key: chunk token {}; the open chunk has tokens 0 to {}", i,
                                policy->chunk_n - 1);
        }
        if (n != static_cast<size_t>(policy->head_dim)) {
            return fail_invalid("h2okv_policy_add_key: a key of {} floats; the layout's head_dim is {}", n,
                                policy->head_dim);
        }
        policy->impl->add_key(unit, i, layer, kv_head, std::span<const float>(key, n));
        return H2OKV_OK;
    });
}

h2okv_status h2okv_policy_end_chunk(h2okv_policy* policy) {
    return guard("h2okv_policy_end_chunk", [&]() -> h2okv_status {
        if (policy == nullptr) return fail_invalid("h2okv_policy_end_chunk: policy is NULL");
        if (auto st = policy->impl->end_chunk(); !st.ok()) return fail(st);
        policy->open = false;
        return H2OKV_OK;
    });
}

h2okv_status h2okv_policy_victims(const h2okv_policy* policy, int32_t unit, const int64_t** positions,
                                  const int32_t** slots, size_t* n) {
    return guard("h2okv_policy_victims", [&]() -> h2okv_status {
        if (auto st = h2okv::capi::check_unit(policy, unit, "h2okv_policy_victims"); !st.ok())
            return fail(st);
        if (n == nullptr) return fail_invalid("h2okv_policy_victims: n is NULL");
        const auto v = policy->impl->victims(unit);
        if (positions != nullptr) *positions = v.data();
        if (slots != nullptr) *slots = policy->impl->victim_slots(unit).data();
        *n = v.size();
        return H2OKV_OK;
    });
}

h2okv_status h2okv_policy_kept_positions(const h2okv_policy* policy, int32_t unit, int64_t* out,
                                         size_t capacity, size_t* n) {
    return guard("h2okv_policy_kept_positions", [&]() -> h2okv_status {
        if (auto st = h2okv::capi::check_unit(policy, unit, "h2okv_policy_kept_positions"); !st.ok())
            return fail(st);
        return h2okv::capi::copy_kept(*policy->impl, unit, out, capacity, n, "h2okv_policy_kept_positions");
    });
}

int64_t h2okv_policy_total_evictions(const h2okv_policy* policy) {
    return policy != nullptr ? policy->impl->total_evictions() : 0;
}

void h2okv_policy_reset(h2okv_policy* policy) {
    if (policy == nullptr) return;
    policy->impl->reset();
    policy->open = false;
    policy->chunk_n = 0;
}

}  // extern "C"
