#include "h2okv/kv/slot_store.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace h2okv::kv {
namespace {

constexpr kv_type k_types[] = {kv_type::f32, kv_type::f16, kv_type::q8_0, kv_type::q4_0, kv_type::q4_1};

}  // namespace

const char* kv_type_name(kv_type t) noexcept {
    switch (t) {
        case kv_type::f32: return "f32";
        case kv_type::f16: return "f16";
        case kv_type::q8_0: return "q8_0";
        case kv_type::q4_0: return "q4_0";
        case kv_type::q4_1: return "q4_1";
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

core::tensor_type kv_tensor_type(kv_type t) noexcept {
    switch (t) {
        case kv_type::f16: return core::tensor_type::f16;
        case kv_type::q8_0: return core::tensor_type::q8_0;
        case kv_type::q4_0: return core::tensor_type::q4_0;
        case kv_type::q4_1: return core::tensor_type::q4_1;
        case kv_type::f32: break;
    }
    return core::tensor_type::f32;
}

size_t kv_row_bytes(kv_type t, int head_dim) noexcept {
    return head_dim < 1 ? 0 : kernels::row_size(kv_tensor_type(t), head_dim);
}

int64_t slot_store::bytes_for(int n_layer, int n_kv_head, int head_dim, int64_t capacity,
                              kv_type type) noexcept {
    return 2 * int64_t{n_layer} * n_kv_head * capacity * static_cast<int64_t>(kv_row_bytes(type, head_dim));
}

int64_t slot_store::bytes_for(int head_dim, std::span<const int64_t> head_capacity, kv_type type) noexcept {
    int64_t rows = 0;
    for (int64_t c : head_capacity) rows += c;
    return 2 * rows * static_cast<int64_t>(kv_row_bytes(type, head_dim));
}

result<slot_store> slot_store::create(int n_layer, int n_kv_head, int head_dim, int64_t capacity,
                                      kv_type type) {
    const std::vector<int64_t> each(static_cast<size_t>(std::max(0, n_layer) * std::max(0, n_kv_head)),
                                    capacity);
    if (n_layer < 1 || n_kv_head < 1 || capacity < 1) {
        return invalid_argument("slot store: {} layers, {} KV heads, {} slots; expected each >= 1", n_layer,
                                n_kv_head, capacity);
    }
    return create(n_layer, n_kv_head, head_dim, each, type);
}

result<slot_store> slot_store::create(int n_layer, int n_kv_head, int head_dim,
                                      std::span<const int64_t> head_capacity, kv_type type) {
    if (!kernels::attend_supports(kv_tensor_type(type), head_dim)) {
        return invalid_argument(
            "KV type {} stores blocks of 32 elements, but this model's head_dim is {}, not a multiple of 32; "
            "use --kv-type f16 or f32",
            kv_type_name(type), head_dim);
    }
    if (n_layer < 1 || n_kv_head < 1) {
        return invalid_argument("slot store: {} layers, {} KV heads; expected each >= 1", n_layer, n_kv_head);
    }
    const size_t heads = static_cast<size_t>(n_layer) * static_cast<size_t>(n_kv_head);
    if (head_capacity.size() != heads) {
        return invalid_argument("slot store: {} head capacities for {} layers x {} KV heads",
                                head_capacity.size(), n_layer, n_kv_head);
    }
    slot_store s;
    s.n_kv_head_ = n_kv_head;
    s.head_dim_ = head_dim;
    s.type_ = type;
    s.row_bytes_ = kv_row_bytes(type, head_dim);
    s.first_row_.resize(heads + 1, 0);
    for (size_t h = 0; h < heads; ++h) {
        if (head_capacity[h] < 1) {
            return invalid_argument("slot store: head {} has {} slots; expected >= 1", h, head_capacity[h]);
        }
        s.capacity_ = std::max(s.capacity_, head_capacity[h]);
        s.first_row_[h + 1] = s.first_row_[h] + static_cast<size_t>(head_capacity[h]);
    }
    const size_t n = s.first_row_[heads] * s.row_bytes_;
    try {
        s.k_.assign(n, std::byte{0});
        s.v_.assign(n, std::byte{0});
    } catch (const std::bad_alloc&) {
        return out_of_memory("could not allocate the KV cache of {:.1f} MiB ({})",
                             2.0 * static_cast<double>(n) / (1 << 20), kv_type_name(type));
    }
    return s;
}

int64_t slot_store::capacity(int layer, int kv_head) const noexcept {
    const size_t head = static_cast<size_t>(layer) * n_kv_head_ + static_cast<size_t>(kv_head);
    return static_cast<int64_t>(first_row_[head + 1] - first_row_[head]);
}

kernels::kv_rows slot_store::view(const byte_rows& store, int layer, int kv_head) const noexcept {
    const size_t head = static_cast<size_t>(layer) * n_kv_head_ + static_cast<size_t>(kv_head);
    return {kv_tensor_type(type_), store.data() + first_row_[head] * row_bytes_, row_bytes_};
}

void slot_store::put(byte_rows& store, size_t head, int32_t slot, const float* x) noexcept {
    std::byte* dst = store.data() + (first_row_[head] + static_cast<size_t>(slot)) * row_bytes_;
    if (type_ == kv_type::f32) {
        std::memcpy(dst, x, row_bytes_);
    } else {
        // Cannot fail: create() checked the type against head_dim.
        kernels::quantize_row(kv_tensor_type(type_), x, head_dim_, dst);
    }
}

void slot_store::prefetch_for_write(int layer, int kv_head, int32_t slot) const noexcept {
    for (const kernels::kv_rows& rows : {k(layer, kv_head), v(layer, kv_head)}) {
        const std::byte* p = rows.data + static_cast<size_t>(slot) * rows.row_bytes;
        for (size_t b = 0; b < rows.row_bytes; b += 64) __builtin_prefetch(p + b, 1);
    }
}

void slot_store::write(int layer, int kv_head, int32_t slot, const float* k, const float* v) noexcept {
    const size_t head = static_cast<size_t>(layer) * n_kv_head_ + static_cast<size_t>(kv_head);
    put(k_, head, slot, k);
    put(v_, head, slot, v);
}

}  // namespace h2okv::kv
