#include "kernels/ref/ref.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/blocks.h"
#include "kernels/half.h"
#include "kernels/q8k.h"

namespace h2okv::kernels::ref {
namespace {

using core::tensor_type;

using detail::q4_0_bytes;
using detail::q4_0_elems;
using detail::q4_1_bytes;
using detail::q4_1_elems;
using detail::q4_k_bytes;
using detail::q4_k_elems;
using detail::q6_k_bytes;
using detail::q6_k_elems;
using detail::q8_0_bytes;
using detail::q8_0_elems;

// Rows are converted in pieces of this many elements so the reference needs no heap (a multiple of every
// block size).
constexpr int64_t piece = 256;

float load_half(const std::byte* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return detail::half_to_float(h);
}

void dequantize_q4_0(const std::byte* src, int64_t n, float* dst) {
    for (int64_t b = 0; b < n / q4_0_elems; ++b) {
        const std::byte* block = src + b * q4_0_bytes;
        const float d = load_half(block);
        const auto* qs = reinterpret_cast<const uint8_t*>(block + 2);
        float* y = dst + b * q4_0_elems;
        for (int i = 0; i < 16; ++i) {
            y[i] = d * static_cast<float>((qs[i] & 0xF) - 8);
            y[i + 16] = d * static_cast<float>((qs[i] >> 4) - 8);
        }
    }
}

void dequantize_q4_1(const std::byte* src, int64_t n, float* dst) {
    for (int64_t b = 0; b < n / q4_1_elems; ++b) {
        const std::byte* block = src + b * q4_1_bytes;
        const float d = load_half(block);
        const float m = load_half(block + 2);
        const auto* qs = reinterpret_cast<const uint8_t*>(block + detail::q4_1_qs_offset);
        float* y = dst + b * q4_1_elems;
        // d * q is exact in float (11 by 4 significant bits), so the sum rounds once, fused or not.
        for (int i = 0; i < 16; ++i) {
            y[i] = d * static_cast<float>(qs[i] & 0xF) + m;
            y[i + 16] = d * static_cast<float>(qs[i] >> 4) + m;
        }
    }
}

void dequantize_q4_k(const std::byte* src, int64_t n, float* dst) {
    for (int64_t b = 0; b < n / q4_k_elems; ++b) {
        const std::byte* block = src + b * q4_k_bytes;
        const float d = load_half(block);
        const float dmin = load_half(block + 2);
        const auto* scales = reinterpret_cast<const uint8_t*>(block + detail::q4_k_scales_offset);
        const auto* qs = reinterpret_cast<const uint8_t*>(block + detail::q4_k_qs_offset);
        float* y = dst + b * q4_k_elems;
        for (int j = 0; j < 8; ++j) {
            uint8_t sc;
            uint8_t m;
            detail::scale_min_k4(j, scales, &sc, &m);
            const float d1 = d * static_cast<float>(sc);
            const float m1 = dmin * static_cast<float>(m);
            const uint8_t* q = qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            for (int l = 0; l < 32; ++l) y[32 * j + l] = d1 * static_cast<float>((q[l] >> shift) & 0xF) - m1;
        }
    }
}

void dequantize_q6_k(const std::byte* src, int64_t n, float* dst) {
    for (int64_t b = 0; b < n / q6_k_elems; ++b) {
        const std::byte* block = src + b * q6_k_bytes;
        const float d = load_half(block + detail::q6_k_d_offset);
        const auto* scales = reinterpret_cast<const int8_t*>(block + detail::q6_k_scales_offset);
        for (int h = 0; h < 2; ++h) {
            const auto* ql = reinterpret_cast<const uint8_t*>(block) + 64 * h;
            const auto* qh = reinterpret_cast<const uint8_t*>(block + detail::q6_k_qh_offset) + 32 * h;
            float* y = dst + b * q6_k_elems + 128 * h;
            for (int k = 0; k < 4; ++k) {
                for (int l = 0; l < 32; ++l) {
                    const int lo = (ql[l + 32 * (k % 2)] >> (4 * (k / 2))) & 0xF;
                    const int hi = (qh[l] >> (2 * k)) & 3;
                    const int e = 32 * k + l;
                    const float ds = d * static_cast<float>(scales[8 * h + e / 16]);
                    y[e] = ds * static_cast<float>((lo | (hi << 4)) - 32);
                }
            }
        }
    }
}

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
            assert(n % q8_0_elems == 0);
            for (int64_t b = 0; b < n / q8_0_elems; ++b) {
                const std::byte* block = src + b * q8_0_bytes;
                uint16_t dh;
                std::memcpy(&dh, block, 2);
                const float d = detail::half_to_float(dh);
                const auto* q = reinterpret_cast<const int8_t*>(block + 2);
                for (int64_t i = 0; i < q8_0_elems; ++i)
                    dst[b * q8_0_elems + i] = d * static_cast<float>(q[i]);
            }
            return;
        case tensor_type::q4_0:
            assert(n % q4_0_elems == 0);
            dequantize_q4_0(src, n, dst);
            return;
        case tensor_type::q4_1:
            assert(n % q4_1_elems == 0);
            dequantize_q4_1(src, n, dst);
            return;
        case tensor_type::q4_k:
            assert(n % q4_k_elems == 0);
            dequantize_q4_k(src, n, dst);
            return;
        case tensor_type::q6_k:
            assert(n % q6_k_elems == 0);
            dequantize_q6_k(src, n, dst);
            return;
        default: assert(false && "dequantize_row: unsupported tensor type"); return;
    }
}

void matmul_rows(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0, int64_t r1) {
    if (w.type == tensor_type::q4_k || w.type == tensor_type::q6_k) {
        const detail::q8k_block* xq = detail::quantize_tokens(x, n_tok, w.cols, &detail::quantize_q8k);
        if (xq == nullptr) {
            detail::matmul_kquant_unbuffered(w, x, n_tok, y, r0, r1);
        } else {
            kquant_rows(w, xq, n_tok, y, r0, r1);
        }
        return;
    }
    if (w.type == tensor_type::q8_0) {
        const detail::q8_0_act* xq =
            detail::quantize_q8_0_tokens(x, n_tok, w.cols, &detail::quantize_q8_0_act);
        if (xq == nullptr) {
            detail::matmul_q8_0_unbuffered(w, x, n_tok, y, r0, r1);
        } else {
            q8_0_rows(w, xq, n_tok, y, r0, r1);
        }
        return;
    }
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

void kquant_rows(const matrix_view& w, const detail::q8k_block* xq, int n_tok, float* y, int64_t r0,
                 int64_t r1) {
    const int64_t nb = w.cols / detail::q8k_elems;
    auto* dot = w.type == tensor_type::q4_k ? &detail::dot_q4_k_q8k : &detail::dot_q6_k_q8k;
    std::byte buf[q4_k_bytes];
    for (int64_t r = r0; r < r1; ++r) {
        for (int t = 0; t < n_tok; ++t) {
            float acc = 0.0f;  // block by block, continuing acc: the sequence of one call over the row
            for (int64_t b = 0; b < nb; ++b)
                acc = dot(detail::plain_block(w, r, b, buf), xq + t * nb + b, 1, acc);
            y[static_cast<int64_t>(t) * w.rows + r] = acc;
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

namespace {

// cos and sin of pair i's angle at `pos`, computed in double.
void rope_angle(int64_t pos, int i, int rope_dim, float freq_base, float* c, float* s) {
    const double theta =
        static_cast<double>(pos) * std::pow(static_cast<double>(freq_base), -2.0 * i / rope_dim);
    *c = static_cast<float>(std::cos(theta));
    *s = static_cast<float>(std::sin(theta));
}

// Rotates dims (a, b) of every head by the angle with cosine c and sine s.
void rotate_pair(float* x, int n_heads, int head_dim, int i, int rope_dim, float c, float s, rope_pairing p) {
    const int a = p == rope_pairing::normal ? 2 * i : i;
    const int b = p == rope_pairing::normal ? 2 * i + 1 : i + rope_dim / 2;
    for (int h = 0; h < n_heads; ++h) {
        float* v = x + static_cast<int64_t>(h) * head_dim;
        const float x0 = v[a];
        const float x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
    }
}

}  // namespace

void rope(float* x, int n_heads, int head_dim, int rope_dim, int64_t pos, float freq_base, rope_pairing p) {
    assert(rope_dim % 2 == 0 && rope_dim <= head_dim);
    for (int i = 0; i < rope_dim / 2; ++i) {
        float c;
        float s;
        rope_angle(pos, i, rope_dim, freq_base, &c, &s);
        rotate_pair(x, n_heads, head_dim, i, rope_dim, c, s, p);
    }
}

void rope_rotation(int64_t pos, int rope_dim, float freq_base, float* cos_sin) {
    for (int i = 0; i < rope_dim / 2; ++i)
        rope_angle(pos, i, rope_dim, freq_base, &cos_sin[2 * i], &cos_sin[2 * i + 1]);
}

void rope_rotation(const rope_spec& spec, int64_t pos, float* cos_sin) {
    assert(spec.inv_freq.size() == static_cast<size_t>(spec.rope_dim / 2));
    for (int i = 0; i < spec.rope_dim / 2; ++i) {
        const double theta = static_cast<double>(pos) * spec.inv_freq[static_cast<size_t>(i)];
        cos_sin[2 * i] = static_cast<float>(spec.magnitude * std::cos(theta));
        cos_sin[2 * i + 1] = static_cast<float>(spec.magnitude * std::sin(theta));
    }
}

void rope_apply(float* x, int n_heads, int head_dim, int rope_dim, const float* cos_sin, rope_pairing p) {
    assert(rope_dim % 2 == 0 && rope_dim <= head_dim);
    for (int i = 0; i < rope_dim / 2; ++i)
        rotate_pair(x, n_heads, head_dim, i, rope_dim, cos_sin[2 * i], cos_sin[2 * i + 1], p);
}

void turn_rows(const kv_rows& k, int head_dim, const int32_t* slots, const int32_t* turns, int n,
               int rope_dim, rope_pairing p, const float* tables, float* dst) {
    assert(rope_dim % 2 == 0 && rope_dim <= head_dim);
    const auto hd = static_cast<size_t>(head_dim);
    const int half = rope_dim / 2;
    for (int j = 0; j < n; ++j) {
        const auto slot = static_cast<size_t>(slots[j]);
        float* x = dst + slot * hd;
        ref::dequantize_row(k.type, k.data + slot * k.row_bytes, head_dim, x);
        if (turns[j] == 0) continue;
        const float* t = tables + static_cast<size_t>(turns[j]) * 2 * static_cast<size_t>(rope_dim);
        const float* sn = t + rope_dim;
        for (int i = 0; i < half; ++i) {
            const bool normal = p == rope_pairing::normal;
            const int a = normal ? 2 * i : i;
            const int b = normal ? 2 * i + 1 : i + half;
            const float xa = x[a];
            const float xb = x[b];
            x[a] = xa * t[a] + xb * sn[a];
            x[b] = xb * t[b] + xa * sn[b];
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

void to_f16(const float* src, int64_t n, std::byte* dst) {
    for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = detail::float_to_half(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
    }
}

void swiglu(const float* gate, const float* up, int n, float* out) {
    for (int i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

}  // namespace h2okv::kernels::ref
