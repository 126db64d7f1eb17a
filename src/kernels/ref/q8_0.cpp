// The Q8_0 products with quantised activations (kernels/q8_0_act.h): the plain definition every SIMD variant
// reproduces bit for bit.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/blocks.h"
#include "kernels/half.h"
#include "kernels/q8_0_act.h"
#include "kernels/q8_0_x16.h"
#include "kernels/ref/ref.h"
#include "kernels/scratch.h"

namespace h2okv::kernels::detail {

void quantize_q8_0_act(const float* x, int64_t cols, q8_0_act* out) {
    for (int64_t b = 0; b < cols / q8_0_act_elems; ++b) {
        const float* xb = x + b * q8_0_act_elems;
        q8_0_act& o = out[b];
        float amax = 0.0f;
        bool nan = false;
        for (int i = 0; i < q8_0_act_elems; ++i) {
            const float a = std::fabs(xb[i]);
            amax = a > amax ? a : amax;  // a NaN is skipped here and reported through d below
            nan = nan || std::isnan(a);
        }
        const float iscale = amax > 0.0f ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int i = 0; i < q8_0_act_elems; ++i) {
            float v = xb[i] * iscale;
            v = v > -127.0f ? v : -127.0f;
            v = v < 127.0f ? v : 127.0f;
            o.qs[i] = static_cast<int8_t>(std::nearbyint(v));
            sum += o.qs[i];
        }
        o.d = nan ? std::numeric_limits<float>::quiet_NaN() : half_to_float(float_to_half(amax / 127.0f));
        o.bias = -128 * sum;
    }
}

float dot_q8_0_q8_0(const std::byte* row, const q8_0_act* x, int64_t n_blocks, float acc) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        const std::byte* block = row + b * q8_0_bytes;
        uint16_t dh;
        std::memcpy(&dh, block, 2);
        const auto* q = reinterpret_cast<const int8_t*>(block + 2);
        int32_t isum = 0;
        for (int i = 0; i < q8_0_act_elems; ++i) isum += q[i] * x[b].qs[i];
        acc = std::fma(static_cast<float>(isum), half_to_float(dh) * x[b].d, acc);
    }
    return acc;
}

q8_0_act* q8_0_tokens_buffer(int n_tok, int64_t cols) {
    return thread_scratch<q8_0_act>(static_cast<size_t>(cols / q8_0_act_elems) * static_cast<size_t>(n_tok));
}

void quantize_q8_0_range(const float* x, int t0, int t1, int64_t cols, quantize_q8_0_fn quantize,
                         q8_0_act* buf) {
    for (int t = t0; t < t1; ++t) quantize(x + t * cols, cols, buf + t * (cols / q8_0_act_elems));
}

const q8_0_act* quantize_q8_0_tokens(const float* x, int n_tok, int64_t cols, quantize_q8_0_fn quantize) {
    q8_0_act* buf = q8_0_tokens_buffer(n_tok, cols);
    if (buf != nullptr) quantize_q8_0_range(x, 0, n_tok, cols, quantize, buf);
    return buf;
}

const std::byte* plain_q8_0_block(const matrix_view& w, int64_t r, int64_t b, std::byte* buf) {
    if (w.layout == weight_layout::rows)
        return w.data + static_cast<size_t>(r) * w.row_bytes + b * q8_0_bytes;
    unpack_q8_0_x16_block(w, r, b, buf);
    return buf;
}

void matmul_q8_0_unbuffered(const matrix_view& w, const float* x, int n_tok, float* y, int64_t r0,
                            int64_t r1) {
    for (int t = 0; t < n_tok; ++t) {
        for (int64_t r = r0; r < r1; ++r) {
            float acc = 0.0f;
            for (int64_t b = 0; b < w.cols / q8_0_act_elems; ++b) {
                q8_0_act xb;
                quantize_q8_0_act(x + t * w.cols + b * q8_0_act_elems, q8_0_act_elems, &xb);
                std::byte buf[q8_0_bytes];
                acc = dot_q8_0_q8_0(plain_q8_0_block(w, r, b, buf), &xb, 1, acc);
            }
            y[static_cast<int64_t>(t) * w.rows + r] = acc;
        }
    }
}

}  // namespace h2okv::kernels::detail

namespace h2okv::kernels::ref {

void q8_0_rows(const matrix_view& w, const detail::q8_0_act* xq, int n_tok, float* y, int64_t r0,
               int64_t r1) {
    const int64_t nb = w.cols / detail::q8_0_act_elems;
    std::byte buf[detail::q8_0_bytes];
    for (int64_t r = r0; r < r1; ++r) {
        for (int t = 0; t < n_tok; ++t) {
            float acc = 0.0f;  // block by block, continuing acc: the sequence of one call over the row
            for (int64_t b = 0; b < nb; ++b)
                acc = detail::dot_q8_0_q8_0(detail::plain_q8_0_block(w, r, b, buf), xq + t * nb + b, 1, acc);
            y[static_cast<int64_t>(t) * w.rows + r] = acc;
        }
    }
}

}  // namespace h2okv::kernels::ref
