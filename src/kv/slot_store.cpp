#include "h2okv/kv/slot_store.h"

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

result<slot_store> slot_store::create(int n_layer, int n_kv_head, int head_dim, int64_t capacity,
                                      kv_type type) {
    if (!kernels::attend_supports(kv_tensor_type(type), head_dim)) {
        return invalid_argument(
            "KV type {} stores blocks of 32 elements, but this model's head_dim is {}, not a multiple of 32; "
            "use --kv-type f16 or f32",
            kv_type_name(type), head_dim);
    }
    if (n_layer < 1 || n_kv_head < 1 || capacity < 1) {
        return invalid_argument("slot store: {} layers, {} KV heads, {} slots; expected each >= 1", n_layer,
                                n_kv_head, capacity);
    }
    slot_store s;
    s.n_kv_head_ = n_kv_head;
    s.head_dim_ = head_dim;
    s.capacity_ = capacity;
    s.type_ = type;
    s.row_bytes_ = kv_row_bytes(type, head_dim);
    const auto n = static_cast<size_t>(bytes_for(n_layer, n_kv_head, head_dim, capacity, type) / 2);
    try {
        s.k_.assign(n, std::byte{0});
        s.v_.assign(n, std::byte{0});
    } catch (const std::bad_alloc&) {
        return out_of_memory("could not allocate the KV cache of {:.1f} MiB ({})",
                             2.0 * static_cast<double>(n) / (1 << 20), kv_type_name(type));
    }
    return s;
}

kernels::kv_rows slot_store::view(const std::vector<std::byte>& store, int layer,
                                  int kv_head) const noexcept {
    const size_t head = static_cast<size_t>(layer) * n_kv_head_ + static_cast<size_t>(kv_head);
    return {kv_tensor_type(type_), store.data() + head * static_cast<size_t>(capacity_) * row_bytes_,
            row_bytes_};
}

void slot_store::put(std::vector<std::byte>& store, size_t head, int32_t slot, const float* x) noexcept {
    std::byte* dst =
        store.data() + (head * static_cast<size_t>(capacity_) + static_cast<size_t>(slot)) * row_bytes_;
    if (type_ == kv_type::f32) {
        std::memcpy(dst, x, row_bytes_);
    } else {
        // Cannot fail: create() checked the type against head_dim.
        kernels::quantize_row(kv_tensor_type(type_), x, head_dim_, dst);
    }
}

void slot_store::write(int layer, int kv_head, int32_t slot, const float* k, const float* v) noexcept {
    const size_t head = static_cast<size_t>(layer) * n_kv_head_ + static_cast<size_t>(kv_head);
    put(k_, head, slot, k);
    put(v_, head, slot, v);
}

}  // namespace h2okv::kv
