// The k-quant products with quantised activations (kernels/q8k.h): the plain definition every SIMD variant
// reproduces bit for bit.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/blocks.h"
#include "kernels/half.h"
#include "kernels/q4_k_x16.h"
#include "kernels/q8k.h"
#include "kernels/scratch.h"

namespace h2okv::kernels::detail {
namespace {

float load_half(const std::byte* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return half_to_float(h);
}

}  // namespace

void q8k_block_sums(q8k_block* b) {
    for (int j = 0; j < 16; ++j) {
        int s = 0;
        for (int i = 0; i < 16; ++i) s += b->qs[16 * j + i];
        b->bsum16[j] = static_cast<int16_t>(s);
        b->q6_bias[j] = -32 * s;
    }
    for (int j = 0; j < 8; ++j) b->bsum32[j] = static_cast<int16_t>(b->bsum16[2 * j] + b->bsum16[2 * j + 1]);
}

void quantize_q8k(const float* x, int64_t cols, q8k_block* out) {
    for (int64_t b = 0; b < cols / q8k_elems; ++b) {
        const float* xb = x + b * q8k_elems;
        q8k_block& o = out[b];
        float amax = 0.0f;
        bool nan = false;
        for (int i = 0; i < q8k_elems; ++i) {
            const float a = std::fabs(xb[i]);
            amax = a > amax ? a : amax;  // a NaN is skipped here and reported through d below
            nan = nan || std::isnan(a);
        }
        const float iscale = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int i = 0; i < q8k_elems; ++i) {
            float v = xb[i] * iscale;
            v = v > -127.0f ? v : -127.0f;
            v = v < 127.0f ? v : 127.0f;
            o.qs[i] = static_cast<int8_t>(std::nearbyint(v));
        }
        o.d = nan ? std::numeric_limits<float>::quiet_NaN() : amax / 127.0f;
        q8k_block_sums(&o);
    }
}

float dot_q4_k_q8k(const std::byte* row, const q8k_block* x, int64_t n_blocks, float acc) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const std::byte* block = row + b * q4_k_bytes;
        const auto* scales = reinterpret_cast<const uint8_t*>(block + q4_k_scales_offset);
        const auto* qs = reinterpret_cast<const uint8_t*>(block + q4_k_qs_offset);
        const int8_t* qx = x[b].qs;
        int32_t isum = 0;
        int32_t msum = 0;
        for (int j = 0; j < 8; ++j) {
            uint8_t sc;
            uint8_t m;
            scale_min_k4(j, scales, &sc, &m);
            const uint8_t* q = qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            int32_t s = 0;
            for (int l = 0; l < 32; ++l) s += ((q[l] >> shift) & 0xF) * qx[32 * j + l];
            isum += sc * s;
            msum += m * x[b].bsum32[j];
        }
        acc = std::fma(static_cast<float>(isum), load_half(block) * x[b].d, acc);
        acc = std::fma(static_cast<float>(msum), -(load_half(block + 2) * x[b].d), acc);
    }
    return acc;
}

float dot_q6_k_q8k(const std::byte* row, const q8k_block* x, int64_t n_blocks, float acc) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const std::byte* block = row + b * q6_k_bytes;
        const auto* scales = reinterpret_cast<const int8_t*>(block + q6_k_scales_offset);
        const int8_t* qx = x[b].qs;
        int32_t sub[16] = {};
        for (int h = 0; h < 2; ++h) {
            const auto* ql = reinterpret_cast<const uint8_t*>(block) + 64 * h;
            const auto* qh = reinterpret_cast<const uint8_t*>(block + q6_k_qh_offset) + 32 * h;
            for (int k = 0; k < 4; ++k) {
                for (int l = 0; l < 32; ++l) {
                    const int lo = (ql[l + 32 * (k % 2)] >> (4 * (k / 2))) & 0xF;
                    const int hi = (qh[l] >> (2 * k)) & 3;
                    const int e = 128 * h + 32 * k + l;
                    sub[e / 16] += ((lo | (hi << 4)) - 32) * qx[e];
                }
            }
        }
        int32_t isum = 0;
        for (int j = 0; j < 16; ++j) isum += scales[j] * sub[j];
        acc = std::fma(static_cast<float>(isum), load_half(block + q6_k_d_offset) * x[b].d, acc);
    }
    return acc;
}

const std::byte* plain_block(const matrix_view& w, int64_t r, int64_t b, std::byte* buf) {
    const size_t block_bytes = w.type == core::tensor_type::q4_k ? q4_k_bytes : q6_k_bytes;
    if (w.layout == weight_layout::rows)
        return w.data + static_cast<size_t>(r) * w.row_bytes + b * block_bytes;
    unpack_q4_k_x16_block(w, r, b, buf);
    return buf;
}

q8k_block* q8k_tokens_buffer(int n_tok, int64_t cols) {
    return thread_scratch<q8k_block>(static_cast<size_t>(cols / q8k_elems) * static_cast<size_t>(n_tok));
}

void quantize_q8k_range(const float* x, int t0, int t1, int64_t cols, quantize_q8k_fn quantize,
                        q8k_block* buf) {
    for (int t = t0; t < t1; ++t) quantize(x + t * cols, cols, buf + t * (cols / q8k_elems));
}

const q8k_block* quantize_tokens(const float* x, int n_tok, int64_t cols, quantize_q8k_fn quantize) {
    q8k_block* buf = q8k_tokens_buffer(n_tok, cols);
    if (buf != nullptr) quantize_q8k_range(x, 0, n_tok, cols, quantize, buf);
    return buf;
}

void matmul_kquant_unbuffered(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0,
                              int64_t r1) {
    const bool q4 = w.type == core::tensor_type::q4_k;
    for (int t = 0; t < n_tok; ++t) {
        for (int64_t r = r0; r < r1; ++r) {
            float acc = 0.0f;
            for (int64_t b = 0; b < w.cols / q8k_elems; ++b) {
                q8k_block xb;
                quantize_q8k(x + t * w.cols + b * q8k_elems, q8k_elems, &xb);
                std::byte buf[q4_k_bytes];
                const std::byte* block = plain_block(w, r, b, buf);
                acc = q4 ? dot_q4_k_q8k(block, &xb, 1, acc) : dot_q6_k_q8k(block, &xb, 1, acc);
            }
            y[static_cast<int64_t>(t) * w.rows + r] = acc;
        }
    }
}

}  // namespace h2okv::kernels::detail
