#include "kernels/ref/ref.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/half.h"

namespace h2okv::kernels::ref {
namespace {

using gguf::tensor_type;

constexpr int64_t q8_0_block = 32;
constexpr size_t q8_0_block_bytes = 34;  // fp16 scale + 32 int8

// Rows are converted in pieces of this many elements so the reference needs no heap (a multiple of the
// Q8_0 block).
constexpr int64_t piece = 256;

double dot_f32(const float* a, const float* b, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
    return s;
}

}  // namespace

void dequantize_row(tensor_type t, const std::byte* src, int64_t n, float* dst) {
    switch (t) {
        case tensor_type::f32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
        case tensor_type::f16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, src + 2 * i, 2);
                dst[i] = detail::half_to_float(h);
            }
            return;
        case tensor_type::bf16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, src + 2 * i, 2);
                dst[i] = detail::bfloat_to_float(h);
            }
            return;
        case tensor_type::q8_0:
            assert(n % q8_0_block == 0);
            for (int64_t b = 0; b < n / q8_0_block; ++b) {
                const std::byte* block = src + b * q8_0_block_bytes;
                uint16_t dh;
                std::memcpy(&dh, block, 2);
                const float d = detail::half_to_float(dh);
                const auto* q = reinterpret_cast<const int8_t*>(block + 2);
                for (int64_t i = 0; i < q8_0_block; ++i)
                    dst[b * q8_0_block + i] = d * static_cast<float>(q[i]);
            }
            return;
        default: assert(false && "dequantize_row: unsupported tensor type"); return;
    }
}

void matmul_rows(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0, int64_t r1) {
    float buf[piece];
    double acc[16];  // per-token partial sums for a token group, so each row piece is converted once
    const size_t piece_bytes = row_size(w.type, piece);
    for (int64_t r = r0; r < r1; ++r) {
        const std::byte* row = w.data + static_cast<size_t>(r) * w.row_bytes;
        for (int t0 = 0; t0 < n_tok; t0 += 16) {
            const int nt = std::min(16, n_tok - t0);
            std::fill(acc, acc + nt, 0.0);
            for (int64_t c = 0; c < w.cols; c += piece) {
                const int64_t len = std::min(piece, w.cols - c);
                dequantize_row(w.type, row + static_cast<size_t>(c / piece) * piece_bytes, len, buf);
                for (int t = 0; t < nt; ++t) {
                    acc[t] += dot_f32(buf, x + static_cast<int64_t>(t0 + t) * w.cols + c, len);
                }
            }
            for (int t = 0; t < nt; ++t)
                y[static_cast<int64_t>(t0 + t) * w.rows + r] = static_cast<float>(acc[t]);
        }
    }
}

void matmul(const matrix_view& w, const float* x, int n_tok, float* y) {
    matmul_rows(w, x, n_tok, y, 0, w.rows);
}

void rmsnorm(const float* x, const float* w, int n, float eps, float* out) {
    const double ss = dot_f32(x, x, n);
    const auto s = static_cast<float>(1.0 / std::sqrt(ss / n + static_cast<double>(eps)));
    for (int i = 0; i < n; ++i) out[i] = x[i] * s * w[i];
}

void rope(float* x, int n_heads, int head_dim, int rope_dim, int64_t pos, float freq_base, rope_pairing p) {
    assert(rope_dim % 2 == 0 && rope_dim <= head_dim);
    const int half = rope_dim / 2;
    for (int i = 0; i < half; ++i) {
        const double theta =
            static_cast<double>(pos) * std::pow(static_cast<double>(freq_base), -2.0 * i / rope_dim);
        const auto c = static_cast<float>(std::cos(theta));
        const auto s = static_cast<float>(std::sin(theta));
        const int a = p == rope_pairing::normal ? 2 * i : i;
        const int b = p == rope_pairing::normal ? 2 * i + 1 : i + half;
        for (int h = 0; h < n_heads; ++h) {
            float* v = x + static_cast<int64_t>(h) * head_dim;
            const float x0 = v[a];
            const float x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

void softmax(float* x, int n) {
    if (n <= 0) return;
    const float m = *std::max_element(x, x + n);
    double sum = 0.0;
    for (int i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - m);
        sum += x[i];
    }
    const double inv = 1.0 / sum;
    for (int i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] * inv);
}

void swiglu(const float* gate, const float* up, int n, float* out) {
    for (int i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

void attend(const float* q, const float* k, const float* v, int head_dim, const int32_t* slots, int n,
            float scale, float* out, float* scratch, double* score_row) {
    std::fill(out, out + head_dim, 0.0f);
    if (n <= 0) return;
    for (int j = 0; j < n; ++j) {
        const float* kj = k + static_cast<int64_t>(slots[j]) * head_dim;
        scratch[j] = static_cast<float>(static_cast<double>(scale) * dot_f32(q, kj, head_dim));
    }
    softmax(scratch, n);
    for (int d = 0; d < head_dim; ++d) {
        double acc = 0.0;
        for (int j = 0; j < n; ++j) {
            acc += static_cast<double>(scratch[j]) *
                   static_cast<double>(v[static_cast<int64_t>(slots[j]) * head_dim + d]);
        }
        out[d] = static_cast<float>(acc);
    }
    if (score_row != nullptr) {
        for (int j = 0; j < n; ++j) score_row[slots[j]] += static_cast<double>(scratch[j]);
    }
}

}  // namespace h2okv::kernels::ref
