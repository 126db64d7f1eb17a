#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>

#include "gguf/gguf_internal.h"
#include "h2okv/gguf/gguf.h"

namespace h2okv::gguf {
namespace {

bool is_integer_type(value_type t) {
    switch (t) {
        case value_type::u8:
        case value_type::i8:
        case value_type::u16:
        case value_type::i16:
        case value_type::u32:
        case value_type::i32:
        case value_type::u64:
        case value_type::i64:
        case value_type::boolean: return true;
        default: return false;
    }
}

}  // namespace

const char* value_type_name(value_type t) {
    switch (t) {
        case value_type::u8: return "u8";
        case value_type::i8: return "i8";
        case value_type::u16: return "u16";
        case value_type::i16: return "i16";
        case value_type::u32: return "u32";
        case value_type::i32: return "i32";
        case value_type::f32: return "f32";
        case value_type::boolean: return "bool";
        case value_type::string: return "string";
        case value_type::array: return "array";
        case value_type::u64: return "u64";
        case value_type::i64: return "i64";
        case value_type::f64: return "f64";
    }
    return "unknown";
}

std::string tensor_type_name(uint32_t t) {
    if (const auto* traits = core::find_tensor_type(t)) return traits->name;
    return fmt::format("type {}", t);
}

std::string tensor_type_name(tensor_type t) {
    return tensor_type_name(static_cast<uint32_t>(t));
}

bool is_known_tensor_type(uint32_t t) {
    return core::find_tensor_type(t) != nullptr;
}

value value::make_uint(value_type t, uint64_t v) {
    return value{t, v};
}
value value::make_int(value_type t, int64_t v) {
    return value{t, v};
}
value value::make_float(value_type t, double v) {
    return value{t, v};
}
value value::make_bool(bool v) {
    return value{value_type::boolean, v};
}
value value::make_string(std::string v) {
    return value{value_type::string, std::move(v)};
}
value value::make_array(value_type element_type, array elements) {
    return value{value_type::array, std::move(elements), element_type};
}

result<int64_t> value::as_int() const {
    if (!is_integer_type(type)) {
        return invalid_argument("value of type {} is not an integer", value_type_name(type));
    }
    if (const auto* u = std::get_if<uint64_t>(&data)) {
        if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            return out_of_range("value {} ({}) does not fit in int64", *u, value_type_name(type));
        }
        return static_cast<int64_t>(*u);
    }
    if (const auto* i = std::get_if<int64_t>(&data)) return *i;
    if (const auto* b = std::get_if<bool>(&data)) return int64_t{*b ? 1 : 0};
    return invalid_argument("value of type {} holds no integer", value_type_name(type));
}

result<double> value::as_float() const {
    if (type == value_type::f32 || type == value_type::f64) {
        if (const auto* d = std::get_if<double>(&data)) return *d;
        return invalid_argument("value of type {} holds no number", value_type_name(type));
    }
    if (type == value_type::boolean || !is_integer_type(type)) {
        return invalid_argument("value of type {} is not a number", value_type_name(type));
    }
    if (const auto* u = std::get_if<uint64_t>(&data)) return static_cast<double>(*u);
    if (const auto* i = std::get_if<int64_t>(&data)) return static_cast<double>(*i);
    return invalid_argument("value of type {} holds no number", value_type_name(type));
}

result<std::string> value::as_string() const {
    const auto* s = std::get_if<std::string>(&data);
    if (type != value_type::string || s == nullptr) {
        return invalid_argument("value of type {} is not a string", value_type_name(type));
    }
    return *s;
}

result<bool> value::as_bool() const {
    const auto* b = std::get_if<bool>(&data);
    if (type != value_type::boolean || b == nullptr) {
        return invalid_argument("value of type {} is not a bool", value_type_name(type));
    }
    return *b;
}

int64_t tensor_info::n_elements() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
}

int64_t tensor_info::n_bytes() const {
    const int64_t per_block = block_elements(type);
    if (per_block == 0) return 0;
    return n_elements() / per_block * block_bytes(type);
}

namespace detail {

const char* ggml_type_name(uint32_t t) {
    // ggml's numbering; the gaps are types ggml removed.
    static constexpr const char* names[] = {
        "F32",    "F16",   "Q4_0",  "Q4_1",   "",      "",      "Q5_0",    "Q5_1",   "Q8_0",    "Q8_1",
        "Q2_K",   "Q3_K",  "Q4_K",  "Q5_K",   "Q6_K",  "Q8_K",  "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
        "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8",    "I16",   "I32",     "I64",    "F64",     "IQ1_M",
        "BF16",   "",      "",      "",       "TQ1_0", "TQ2_0", "",        "",       "",        "MXFP4",
    };
    if (t >= std::size(names) || names[t][0] == '\0') return nullptr;
    return names[t];
}

std::string supported_tensor_types() {
    std::string out;
    for (const auto& traits : core::k_tensor_types) {
        if (!out.empty()) out += ", ";
        out += traits.name;
    }
    return out;
}

std::string format_dims(const std::vector<int64_t>& dims) {
    return fmt::format("[{}]", fmt::join(dims, ", "));
}

result<tensor_extent> tensor_extent_of(std::string_view name, tensor_type type,
                                       const std::vector<int64_t>& dims) {
    if (dims.empty() || dims.size() > static_cast<size_t>(k_max_dims)) {
        return invalid_file("tensor '{}' has n_dims {}, expected 1 to {}", name, dims.size(), k_max_dims);
    }
    const int64_t per_block = block_elements(type);
    if (per_block == 0) {
        return invalid_file("tensor '{}' has unknown type {} (supported: {})", name,
                            static_cast<uint32_t>(type), supported_tensor_types());
    }
    int64_t n = 1;
    for (size_t i = 0; i < dims.size(); ++i) {
        if (dims[i] < 1) {
            return invalid_file("tensor '{}' has dims[{}] = {}, expected >= 1", name, i, dims[i]);
        }
        if (n > std::numeric_limits<int64_t>::max() / dims[i]) {
            return invalid_file("tensor '{}' has dims {} whose element count overflows int64", name,
                                format_dims(dims));
        }
        n *= dims[i];
    }
    if (dims[0] % per_block != 0) {
        return invalid_file(
            "tensor '{}' has row length dims[0] = {}, expected a multiple of {}'s block size {}", name,
            dims[0], tensor_type_name(type), per_block);
    }
    const int64_t blocks = n / per_block;
    if (blocks > std::numeric_limits<int64_t>::max() / block_bytes(type)) {
        return invalid_file("tensor '{}' has dims {} whose byte size as {} overflows int64", name,
                            format_dims(dims), tensor_type_name(type));
    }
    return tensor_extent{n, blocks * block_bytes(type)};
}

}  // namespace detail
}  // namespace h2okv::gguf
