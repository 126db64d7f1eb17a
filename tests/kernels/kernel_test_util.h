// Helpers shared by the kernel tests: deterministic random data, weight rows encoded in each GGUF type, and
// the floating-point error bounds the comparisons use.
//
// Error bounds follow the standard model of floating-point arithmetic: with unit roundoff u = 2^-24 (float),
// a value that passes through k roundings carries a relative error of at most gamma_k(k) = k*u / (1 - k*u),
// so a sum of products computed in float with k roundings per term differs from the exact sum by at most
// gamma_k(k) * sum |w_i x_i| (Higham, "Accuracy and Stability of Numerical Algorithms", ch. 3). Each test
// states its k from the operations of the kernel it checks.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "h2okv/kernels/kernels.h"
#include "kernels/ref/ref.h"

namespace h2okv::kernels::test_support {

inline constexpr double unit_roundoff = 0x1p-24;

inline double gamma_k(double k) {
    return k * unit_roundoff / (1.0 - k * unit_roundoff);
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

// A weight matrix of `rows` x `cols` encoded as `type`, rows `row_bytes` apart (row_bytes >= the packed row
// size, so tests can check strided rows), plus the exact float value of every element.
struct encoded_matrix {
    core::tensor_type type;
    int64_t rows = 0;
    int64_t cols = 0;
    size_t row_bytes = 0;
    std::vector<std::byte> bytes;
    std::vector<float> values;  // [rows][cols], what the encoded elements decode to

    matrix_view view() const { return {type, bytes.data(), rows, cols, row_bytes}; }
};

inline encoded_matrix encode_matrix(core::tensor_type type, int64_t rows, int64_t cols, uint32_t seed,
                                    size_t row_padding = 0) {
    encoded_matrix m;
    m.type = type;
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = row_size(type, cols) + row_padding;
    m.bytes.assign(m.row_bytes * static_cast<size_t>(rows), std::byte{0xAB});  // padding holds garbage
    m.values.resize(static_cast<size_t>(rows * cols));
    const std::vector<float> src = random_floats(static_cast<size_t>(rows * cols), seed);
    for (int64_t r = 0; r < rows; ++r) {
        std::byte* row = m.bytes.data() + static_cast<size_t>(r) * m.row_bytes;
        const float* s = src.data() + r * cols;
        float* val = m.values.data() + r * cols;
        switch (type) {
            case core::tensor_type::f32:
                std::memcpy(row, s, static_cast<size_t>(cols) * 4);
                std::memcpy(val, s, static_cast<size_t>(cols) * 4);
                break;
            case core::tensor_type::f16:
            case core::tensor_type::bf16:
                for (int64_t i = 0; i < cols; ++i) {
                    const bool half = type == core::tensor_type::f16;
                    const uint16_t h = half ? fp32_to_fp16(s[i]) : fp32_to_bf16(s[i]);
                    std::memcpy(row + 2 * i, &h, 2);
                    val[i] = half ? fp16_to_fp32(h) : bf16_to_fp32(h);
                }
                break;
            case core::tensor_type::q8_0:
                for (int64_t b = 0; b < cols / 32; ++b) {
                    float amax = 0.0f;
                    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(s[b * 32 + i]));
                    const uint16_t dh = fp32_to_fp16(amax / 127.0f);
                    const float d = fp16_to_fp32(dh);
                    std::byte* block = row + b * 34;
                    std::memcpy(block, &dh, 2);
                    for (int i = 0; i < 32; ++i) {
                        const float qf = d == 0.0f ? 0.0f : std::nearbyint(s[b * 32 + i] / d);
                        const auto q = static_cast<int8_t>(std::max(-127.0f, std::min(127.0f, qf)));
                        std::memcpy(block + 2 + i, &q, 1);
                        val[b * 32 + i] = d * static_cast<float>(q);
                    }
                }
                break;
            default:
                // Block types: this library's quantiser, decoded by the reference (the spec of the values,
                // itself checked against hand-built blocks in quant_test.cpp).
                quantize_row(type, s, cols, row);
                ref::dequantize_row(type, row, cols, val);
                break;
        }
    }
    return m;
}

}  // namespace h2okv::kernels::test_support
