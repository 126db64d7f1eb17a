// Helpers shared by the reader and the writer: one place decides what a valid tensor shape is.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "h2okv/core/status.h"
#include "h2okv/gguf/gguf.h"

namespace h2okv::gguf::detail {

inline constexpr int k_max_dims = 4;

struct tensor_extent {
    int64_t n_elements = 0;
    int64_t n_bytes = 0;
};

// Element count and exact byte size of a tensor named `name`, or an error naming the tensor, the field and
// the value when n_dims is outside 1..4, a dim is < 1, the row length dims[0] is not a whole number of
// blocks, or the element count or byte size overflows int64. `type` must be a known type.
result<tensor_extent> tensor_extent_of(std::string_view name, tensor_type type,
                                       const std::vector<int64_t>& dims);

// ggml's name for a tensor type number h2okv may not support ("Q4_1" for 3), nullptr when ggml has none.
const char* ggml_type_name(uint32_t t);
// "F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K"
std::string supported_tensor_types();

// "[64, 512]"
std::string format_dims(const std::vector<int64_t>& dims);

}  // namespace h2okv::gguf::detail
