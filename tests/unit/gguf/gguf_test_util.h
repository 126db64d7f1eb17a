// Helpers for the GGUF tests: byte surgery on files built by gguf::writer.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "h2okv/gguf/gguf.h"

namespace h2okv::gguf::testing {

using bytes = std::vector<std::byte>;

// Offset of the first occurrence of `needle` in `b`; fails the test when absent.
inline size_t find_bytes(const bytes& b, std::string_view needle) {
    for (size_t i = 0; i + needle.size() <= b.size(); ++i) {
        if (std::memcmp(b.data() + i, needle.data(), needle.size()) == 0) return i;
    }
    ADD_FAILURE() << "'" << needle << "' not found";
    return 0;
}

template <typename T>
void patch(bytes& b, size_t at, T v) {
    ASSERT_LE(at + sizeof(T), b.size());
    std::memcpy(b.data() + at, &v, sizeof(T));
}

template <typename T>
T peek(const bytes& b, size_t at) {
    T v{};
    if (at + sizeof(T) <= b.size()) std::memcpy(&v, b.data() + at, sizeof(T));
    return v;
}

// Metadata entry `key`: where its u64 key length, its u32 type tag and its payload start.
inline size_t key_length_at(const bytes& b, std::string_view key) {
    return find_bytes(b, key) - 8;
}
inline size_t value_type_at(const bytes& b, std::string_view key) {
    return find_bytes(b, key) + key.size();
}
inline size_t payload_at(const bytes& b, std::string_view key) {
    return value_type_at(b, key) + 4;
}

// Tensor info `name`: where its fields start (name length, n_dims, dims[i], type, offset). The name is looked
// up with its u64 length in front, so the match is the info record, not a metadata string that ends alike.
struct tensor_fields {
    size_t name_length, n_dims, dims, type, offset;
};
inline tensor_fields tensor_at(const bytes& b, std::string_view name) {
    std::string needle(8, '\0');
    const uint64_t len = name.size();
    std::memcpy(needle.data(), &len, 8);
    needle += name;
    tensor_fields f{};
    f.name_length = find_bytes(b, needle);
    f.n_dims = f.name_length + needle.size();
    f.dims = f.n_dims + 4;
    f.type = f.dims + 8 * peek<uint32_t>(b, f.n_dims);
    f.offset = f.type + 4;
    return f;
}

inline bytes pattern_bytes(size_t n, uint32_t seed) {
    bytes b(n);
    uint32_t x = seed * 2654435761u + 1;
    for (auto& v : b) {
        x = x * 1664525u + 1013904223u;
        v = static_cast<std::byte>(x >> 24);
    }
    return b;
}

}  // namespace h2okv::gguf::testing
