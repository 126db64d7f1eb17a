// The storage of a sequence's K and V: per (layer, KV head), its own number of slot rows (`capacity`, or
// per head as the policy's units are sized, docs/EVICTION_CONTRACT.md clause 11) of head_dim elements in
// one element type. Slot s of a head is written once per token that occupies it (the policy decides which)
// and read by attention through a kernels::kv_rows view; nothing is ever moved.
//
// Element types: f32, f16 (the default, as llama.cpp), q8_0, q4_0 or q4_1 (ggml's blocks of 32 with an fp16
// scale, and q4_1's fp16 minimum, as llama.cpp's -ctk/-ctv of those names; head_dim must be a multiple of
// 32). The stored value is the rounding of the f32 row, and attention reads the stored values.
//
//   H2OKV_ASSIGN_OR_RETURN(auto store,
//                          kv::slot_store::create(n_layer, n_kv_head, head_dim, 320, kv_type::f16));
//   store.write(layer, head, slot, k_row, v_row);
//   kernels::attend(q, n_q, store.k(layer, head), store.v(layer, head), ...);
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "h2okv/core/huge_pages.h"
#include "h2okv/core/status.h"
#include "h2okv/kernels/kernels.h"

namespace h2okv::kv {

// The element type of stored K and V.
enum class kv_type { f32, f16, q8_0, q4_0, q4_1 };
const char* kv_type_name(kv_type t) noexcept;  // "f32", "f16", "q8_0", "q4_0", "q4_1"
std::string kv_type_names();                   // "f32, f16, q8_0, q4_0, q4_1"
// Parses a name of kv_type_name; the error lists the valid names.
result<kv_type> parse_kv_type(std::string_view name);
// Bytes of one stored row of head_dim elements: 4 or 2 per element, 34 per 32 for q8_0, 18 per 32 for q4_0,
// 20 per 32 for q4_1; 0 when a block type's 32 does not divide head_dim.
size_t kv_row_bytes(kv_type t, int head_dim) noexcept;
// The kernels' name of the type.
core::tensor_type kv_tensor_type(kv_type t) noexcept;

class slot_store {
public:
    slot_store() = default;
    // Refuses a type that cannot hold head_dim (the block types need a multiple of 32) and reports a failed
    // allocation.
    static result<slot_store> create(int n_layer, int n_kv_head, int head_dim, int64_t capacity,
                                     kv_type type);
    // Per-head capacities: head_capacity has n_layer * n_kv_head entries (layer-major), each >= 1.
    static result<slot_store> create(int n_layer, int n_kv_head, int head_dim,
                                     std::span<const int64_t> head_capacity, kv_type type);
    // Bytes create() allocates: K and V, n_layer * n_kv_head * capacity rows each (or the sum of
    // head_capacity).
    static int64_t bytes_for(int n_layer, int n_kv_head, int head_dim, int64_t capacity,
                             kv_type type) noexcept;
    static int64_t bytes_for(int head_dim, std::span<const int64_t> head_capacity, kv_type type) noexcept;

    // Rounds the f32 rows k and v (head_dim floats each) to the type and stores them in `slot`.
    void write(int layer, int kv_head, int32_t slot, const float* k, const float* v) noexcept;
    // Asks memory for the K and V rows of `slot` with intent to write, ahead of write(): a recycled slot's
    // rows are long out of cache, and a step's writes then wait on their lines in parallel, not one by one.
    void prefetch_for_write(int layer, int kv_head, int32_t slot) const noexcept;
    kernels::kv_rows k(int layer, int kv_head) const noexcept { return view(k_, layer, kv_head); }
    kernels::kv_rows v(int layer, int kv_head) const noexcept { return view(v_, layer, kv_head); }

    kv_type type() const { return type_; }
    int64_t capacity() const { return capacity_; }  // the largest head's
    int64_t capacity(int layer, int kv_head) const noexcept;
    int64_t bytes() const { return static_cast<int64_t>(k_.size() + v_.size()); }

private:
    using byte_rows = std::vector<std::byte, core::huge_page_allocator<std::byte>>;
    kernels::kv_rows view(const byte_rows& store, int layer, int kv_head) const noexcept;
    void put(byte_rows& store, size_t head, int32_t slot, const float* x) noexcept;

    int n_kv_head_ = 0;
    int head_dim_ = 0;
    int64_t capacity_ = 0;
    kv_type type_ = kv_type::f16;
    size_t row_bytes_ = 0;
    std::vector<size_t> first_row_;  // per (layer, KV head), and one past the last: where its rows start
    byte_rows k_, v_;                // per (layer, KV head) in order, its capacity rows of row_bytes_
};

}  // namespace h2okv::kv
