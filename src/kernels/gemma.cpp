// Gemma's blocks: GeGLU with the tanh GELU, logit soft-capping, and attention over soft-capped scores.
// Scalar code in double for every ISA: they are a small part of a step next to the products.
#include <algorithm>
#include <cmath>
#include <vector>

#include "h2okv/kernels/kernels.h"

namespace h2okv::kernels {

void gelu_tanh_glu(const float* gate, const float* up, int n, float* out) noexcept {
    const double c = std::sqrt(2.0 / M_PI);
    for (int i = 0; i < n; ++i) {
        const double g = gate[i];
        const double gelu = 0.5 * g * (1.0 + std::tanh(c * (g + 0.044715 * g * g * g)));
        out[i] = static_cast<float>(gelu * static_cast<double>(up[i]));
    }
}

void softcap(float* x, int n, float cap) noexcept {
    const double c = cap;
    for (int i = 0; i < n; ++i) x[i] = static_cast<float>(c * std::tanh(static_cast<double>(x[i]) / c));
}

void attend_softcap(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim,
                    const int32_t* slots, int n, float scale, float cap, float* out, float* weights,
                    size_t weights_stride, double* score_row, const key_turns* turns) noexcept {
    std::fill(out, out + static_cast<size_t>(n_q) * head_dim, 0.0f);
    if (n <= 0) return;
    const auto hd = static_cast<size_t>(head_dim);
    // The attended rows decoded once for all heads (the per-thread buffers grow to the largest call).
    thread_local std::vector<float> kf, vf;
    thread_local std::vector<double> s;
    kf.resize(static_cast<size_t>(n) * hd);
    vf.resize(static_cast<size_t>(n) * hd);
    s.resize(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) {
        const auto slot = static_cast<size_t>(slots[j]);
        if (turns != nullptr) {  // the row alone, as slot 0 of a view of it
            const kv_rows row{k.type, k.data + slot * k.row_bytes, k.row_bytes};
            const int32_t first = 0;
            turn_rows(row, head_dim, &first, turns->turns + slot, 1, turns->rope_dim, turns->pairing,
                      turns->tables, &kf[static_cast<size_t>(j) * hd]);
        } else {
            dequantize_row(k.type, k.data + slot * k.row_bytes, head_dim, &kf[static_cast<size_t>(j) * hd]);
        }
        dequantize_row(v.type, v.data + slot * v.row_bytes, head_dim, &vf[static_cast<size_t>(j) * hd]);
    }
    const double c = cap;
    for (int h = 0; h < n_q; ++h) {
        const float* qh = q + static_cast<size_t>(h) * hd;
        float* w = weights + static_cast<size_t>(h) * weights_stride;
        double top = -INFINITY;
        for (int j = 0; j < n; ++j) {
            const float* kr = &kf[static_cast<size_t>(j) * hd];
            double dot = 0.0;
            for (size_t d = 0; d < hd; ++d) dot += static_cast<double>(qh[d]) * kr[d];
            s[static_cast<size_t>(j)] = c * std::tanh(static_cast<double>(scale) * dot / c);
            top = std::max(top, s[static_cast<size_t>(j)]);
        }
        double sum = 0.0;
        for (int j = 0; j < n; ++j) {
            s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - top);
            sum += s[static_cast<size_t>(j)];
        }
        for (int j = 0; j < n; ++j) w[j] = static_cast<float>(s[static_cast<size_t>(j)] / sum);
        float* o = out + static_cast<size_t>(h) * hd;
        for (size_t d = 0; d < hd; ++d) {
            double acc = 0.0;
            for (int j = 0; j < n; ++j)
                acc += static_cast<double>(w[j]) * vf[static_cast<size_t>(j) * hd + d];
            o[d] = static_cast<float>(acc);
        }
    }
    if (score_row != nullptr) {
        for (int j = 0; j < n; ++j) {
            for (int h = 0; h < n_q; ++h)
                score_row[slots[j]] +=
                    static_cast<double>(weights[static_cast<size_t>(h) * weights_stride + j]);
        }
    }
}

}  // namespace h2okv::kernels
