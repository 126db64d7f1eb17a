#include <fmt/format.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>

#include "gguf/gguf_internal.h"
#include "h2okv/gguf/gguf.h"

namespace h2okv::gguf {
namespace {

constexpr uint32_t k_default_alignment = 32;
constexpr size_t k_max_tensor_name_bytes = 63;  // GGML_MAX_NAME - 1

class byte_sink {
public:
    explicit byte_sink(std::vector<std::byte>& out) : out_(out) {}

    template <typename T>
    void put(T v) {
        const size_t at = out_.size();
        out_.resize(at + sizeof(T));
        std::memcpy(out_.data() + at, &v, sizeof(T));
    }
    void put_bytes(const void* p, size_t n) {
        const auto* b = static_cast<const std::byte*>(p);
        out_.insert(out_.end(), b, b + n);
    }
    void put_string(const std::string& s) {
        put<uint64_t>(s.size());
        put_bytes(s.data(), s.size());
    }
    void pad_to(uint64_t alignment) {
        out_.resize(out_.size() + (alignment - out_.size() % alignment) % alignment, std::byte{0});
    }

private:
    std::vector<std::byte>& out_;
};

// The number in `data` as T, whichever numeric alternative holds it (0 for strings and arrays).
template <typename T>
T number_as(const value& v) {
    if (const auto* u = std::get_if<uint64_t>(&v.data)) return static_cast<T>(*u);
    if (const auto* i = std::get_if<int64_t>(&v.data)) return static_cast<T>(*i);
    if (const auto* d = std::get_if<double>(&v.data)) {
        if constexpr (std::is_integral_v<T>) {
            // Out of range (or NaN) would be undefined behaviour in the cast.
            const bool fits = *d >= static_cast<double>(std::numeric_limits<T>::min()) &&
                              *d < static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
            if (!fits) return T{};
        }
        return static_cast<T>(*d);
    }
    if (const auto* b = std::get_if<bool>(&v.data)) return static_cast<T>(*b ? 1 : 0);
    return T{};
}

// The payload of `v` encoded as type `t` (no type tag: arrays' elements carry none).
void put_payload(byte_sink& out, value_type t, const value& v) {
    switch (t) {
        case value_type::u8: out.put(number_as<uint8_t>(v)); return;
        case value_type::i8: out.put(number_as<int8_t>(v)); return;
        case value_type::u16: out.put(number_as<uint16_t>(v)); return;
        case value_type::i16: out.put(number_as<int16_t>(v)); return;
        case value_type::u32: out.put(number_as<uint32_t>(v)); return;
        case value_type::i32: out.put(number_as<int32_t>(v)); return;
        case value_type::u64: out.put(number_as<uint64_t>(v)); return;
        case value_type::i64: out.put(number_as<int64_t>(v)); return;
        case value_type::f32: out.put(number_as<float>(v)); return;
        case value_type::f64: out.put(number_as<double>(v)); return;
        case value_type::boolean: out.put(static_cast<uint8_t>(number_as<uint8_t>(v) != 0 ? 1 : 0)); return;
        case value_type::string: {
            const auto* s = std::get_if<std::string>(&v.data);
            out.put_string(s != nullptr ? *s : std::string());
            return;
        }
        case value_type::array: {
            const array* elements = v.as_array();
            out.put(static_cast<uint32_t>(v.element_type));
            out.put<uint64_t>(elements != nullptr ? elements->size() : 0);
            if (elements == nullptr) return;
            for (const value& e : *elements) put_payload(out, v.element_type, e);
            return;
        }
    }
}

}  // namespace

void writer::set(std::string key, value v) {
    for (auto& [k, existing] : metadata_) {
        if (k == key) {
            existing = std::move(v);
            return;
        }
    }
    metadata_.emplace_back(std::move(key), std::move(v));
}

void writer::set_u32(std::string key, uint32_t v) {
    set(std::move(key), value::make_uint(value_type::u32, v));
}
void writer::set_i32(std::string key, int32_t v) {
    set(std::move(key), value::make_int(value_type::i32, v));
}
void writer::set_u64(std::string key, uint64_t v) {
    set(std::move(key), value::make_uint(value_type::u64, v));
}
void writer::set_f32(std::string key, float v) {
    set(std::move(key), value::make_float(value_type::f32, v));
}
void writer::set_bool(std::string key, bool v) {
    set(std::move(key), value::make_bool(v));
}
void writer::set_string(std::string key, std::string v) {
    set(std::move(key), value::make_string(std::move(v)));
}

void writer::set_string_array(std::string key, const std::vector<std::string>& v) {
    array elements;
    elements.reserve(v.size());
    for (const auto& s : v) elements.push_back(value::make_string(s));
    set(std::move(key), value::make_array(value_type::string, std::move(elements)));
}

void writer::set_f32_array(std::string key, const std::vector<float>& v) {
    array elements;
    elements.reserve(v.size());
    for (float x : v) elements.push_back(value::make_float(value_type::f32, x));
    set(std::move(key), value::make_array(value_type::f32, std::move(elements)));
}

void writer::set_i32_array(std::string key, const std::vector<int32_t>& v) {
    array elements;
    elements.reserve(v.size());
    for (int32_t x : v) elements.push_back(value::make_int(value_type::i32, x));
    set(std::move(key), value::make_array(value_type::i32, std::move(elements)));
}

void writer::set_alignment(uint32_t alignment) {
    set_u32("general.alignment", alignment);
}

uint64_t writer::layout_alignment() const {
    for (const auto& [k, v] : metadata_) {
        if (k != "general.alignment") continue;
        const auto* a = std::get_if<uint64_t>(&v.data);
        if (v.type == value_type::u32 && a != nullptr && *a <= std::numeric_limits<uint32_t>::max() &&
            std::has_single_bit(*a)) {
            return *a;
        }
    }
    return k_default_alignment;
}

status writer::add_tensor(std::string name, tensor_type type, std::vector<int64_t> dims,
                          std::vector<std::byte> data) {
    if (!is_known_tensor_type(static_cast<uint32_t>(type))) {
        return invalid_argument("gguf writer: tensor '{}' has unknown type {} (supported: {})", name,
                                static_cast<uint32_t>(type), detail::supported_tensor_types());
    }
    if (name.size() > k_max_tensor_name_bytes) {
        return invalid_argument(
            "gguf writer: tensor name '{}' has {} bytes, expected at most {} (ggml's limit)", name,
            name.size(), k_max_tensor_name_bytes);
    }
    for (const auto& t : tensors_) {
        if (t.name == name) return invalid_argument("gguf writer: duplicate tensor name '{}'", name);
    }
    auto extent = detail::tensor_extent_of(name, type, dims);
    if (!extent.ok())
        return status(status_code::invalid_argument, "gguf writer: " + extent.error().message());
    if (static_cast<uint64_t>(extent->n_bytes) != data.size()) {
        return invalid_argument("gguf writer: tensor '{}' has {} bytes of data, expected {} for {} {}", name,
                                data.size(), extent->n_bytes, tensor_type_name(type),
                                detail::format_dims(dims));
    }
    tensors_.push_back({std::move(name), type, std::move(dims), std::move(data)});
    return ok_status();
}

std::vector<std::byte> writer::to_bytes() const {
    const uint64_t alignment = layout_alignment();
    std::vector<std::byte> bytes;
    byte_sink out(bytes);
    out.put_bytes("GGUF", 4);
    out.put<uint32_t>(3);
    out.put<uint64_t>(tensors_.size());
    out.put<uint64_t>(metadata_.size());
    for (const auto& [key, v] : metadata_) {
        out.put_string(key);
        out.put(static_cast<uint32_t>(v.type));
        put_payload(out, v.type, v);
    }
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
        out.put_string(t.name);
        out.put(static_cast<uint32_t>(t.dims.size()));
        for (int64_t d : t.dims) out.put(static_cast<uint64_t>(d));
        out.put(static_cast<uint32_t>(t.type));
        out.put(offset);
        offset += t.data.size() + (alignment - t.data.size() % alignment) % alignment;
    }
    // Every tensor, the last one included, is padded to the alignment, as llama.cpp's writers do.
    out.pad_to(alignment);
    for (const auto& t : tensors_) {
        out.put_bytes(t.data.data(), t.data.size());
        out.pad_to(alignment);
    }
    return bytes;
}

status writer::write_file(const std::string& path) const {
    const std::vector<std::byte> bytes = to_bytes();
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return io_error("gguf writer: cannot create '{}': {}", path, std::strerror(errno));
    const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
    const int write_errno = errno;
    if (std::fclose(f) != 0 || written != bytes.size()) {
        return io_error("gguf writer: wrote {} of {} bytes to '{}': {}", written, bytes.size(), path,
                        std::strerror(write_errno));
    }
    return ok_status();
}

}  // namespace h2okv::gguf
