// Tensor element types and their block layouts' sizes: the one table every layer reads (the GGUF reader
// sizes tensors with it, the kernels size rows and blocks with it), below everything and depending on
// nothing.
//
//   static_assert(core::block_bytes(core::tensor_type::q8_0) == 34);   // 32 elements in 34 bytes
//   const int64_t row = cols / core::block_elements(t) * core::block_bytes(t);
#pragma once

#include <cstdint>
#include <iterator>

namespace h2okv::core {

// Tensor element types, numbered as ggml's `ggml_type`. Only the ones h2okv knows are listed; others are
// refused by name and number (gguf::tensor_type_name).
enum class tensor_type : uint32_t {
    f32 = 0,
    f16 = 1,
    q4_0 = 2,
    q4_1 = 3,
    q8_0 = 8,
    q4_k = 12,
    q6_k = 14,
    bf16 = 30,
};

struct tensor_type_traits {
    tensor_type type;
    const char* name;        // "F32", "Q8_0", ...
    int64_t block_elements;  // elements per block (1 for the float types)
    int64_t block_bytes;     // bytes per block
};

// Q4_0: f16 scale + 32 4-bit values; Q4_1: f16 scale and f16 minimum + 32 4-bit values (a KV-cache type
// here: no matmul reads it); Q8_0: f16 scale + 32 int8; Q4_K: 2 f16 + 12 bytes of 6-bit scales +
// 128 bytes of nibbles per 256; Q6_K: 128 low nibbles + 64 high bit pairs + 16 int8 scales + f16 per 256
// (the bit layouts: src/kernels/blocks.h).
inline constexpr tensor_type_traits k_tensor_types[] = {
    {tensor_type::f32, "F32", 1, 4},       {tensor_type::f16, "F16", 1, 2},
    {tensor_type::bf16, "BF16", 1, 2},     {tensor_type::q4_0, "Q4_0", 32, 18},
    {tensor_type::q4_1, "Q4_1", 32, 20},   {tensor_type::q8_0, "Q8_0", 32, 34},
    {tensor_type::q4_k, "Q4_K", 256, 144}, {tensor_type::q6_k, "Q6_K", 256, 210},
};

// The index in k_tensor_types of type number t, or -1 when h2okv does not know it. (Indices, not pointers:
// GCC 12 cannot compare a pointer into the table with null in a constant expression under the sanitizers.)
constexpr int tensor_type_index(uint32_t t) noexcept {
    for (int i = 0; i < static_cast<int>(std::size(k_tensor_types)); ++i) {
        if (static_cast<uint32_t>(k_tensor_types[i].type) == t) return i;
    }
    return -1;
}

// The traits of type number t, or nullptr when h2okv does not know it.
constexpr const tensor_type_traits* find_tensor_type(uint32_t t) noexcept {
    const int i = tensor_type_index(t);
    return i < 0 ? nullptr : &k_tensor_types[i];
}

// "F32", "Q8_0", ...; "?" for a value outside the enumeration (gguf::tensor_type_name also numbers those).
constexpr const char* tensor_type_label(tensor_type t) noexcept {
    const int i = tensor_type_index(static_cast<uint32_t>(t));
    return i < 0 ? "?" : k_tensor_types[i].name;
}

// Elements and bytes per block (F32: 1 and 4; Q8_0: 32 and 34; Q4_K: 256 and 144 ...); 0 for a value
// outside the enumeration.
constexpr int64_t block_elements(tensor_type t) noexcept {
    const int i = tensor_type_index(static_cast<uint32_t>(t));
    return i < 0 ? 0 : k_tensor_types[i].block_elements;
}
constexpr int64_t block_bytes(tensor_type t) noexcept {
    const int i = tensor_type_index(static_cast<uint32_t>(t));
    return i < 0 ? 0 : k_tensor_types[i].block_bytes;
}

}  // namespace h2okv::core
