// The reference attention over f32, f16, q8_0, q4_0 and q4_1 K/V rows: every element decoded on its own (the
// values dequantize_row defines), dot products and weighted sums in double, one head after the other.
#include <algorithm>
#include <cstring>

#include "kernels/blocks.h"
#include "kernels/half.h"
#include "kernels/ref/ref.h"

namespace h2okv::kernels::ref {
namespace {

// Element d of row `slot`.
double element(const kv_rows& r, int32_t slot, int d) {
    const std::byte* row = r.data + static_cast<size_t>(slot) * r.row_bytes;
    switch (r.type) {
        case core::tensor_type::f16: {
            uint16_t h;
            std::memcpy(&h, row + 2 * static_cast<size_t>(d), 2);
            return detail::half_to_float(h);
        }
        case core::tensor_type::q8_0: {
            const std::byte* block = row + static_cast<size_t>(d / detail::q8_0_elems) * detail::q8_0_bytes;
            uint16_t h;
            std::memcpy(&h, block, 2);
            const auto q = static_cast<int8_t>(block[2 + d % detail::q8_0_elems]);
            // d * q is exact in float (11 by 8 significant bits), as dequantize_row computes it.
            return detail::half_to_float(h) * static_cast<float>(q);
        }
        case core::tensor_type::q4_0: {
            // ggml's layout: a block's first 16 elements in the low nibbles, the next 16 in the high ones.
            const std::byte* block = row + static_cast<size_t>(d / detail::q4_0_elems) * detail::q4_0_bytes;
            uint16_t h;
            std::memcpy(&h, block, 2);
            const int i = d % detail::q4_0_elems;
            const auto byte = static_cast<uint8_t>(block[2 + i % 16]);
            const int q = (i < 16 ? byte & 0xF : byte >> 4) - 8;
            return detail::half_to_float(h) * static_cast<float>(q);  // exact, as dequantize_row
        }
        case core::tensor_type::q4_1: {
            const std::byte* block = row + static_cast<size_t>(d / detail::q4_1_elems) * detail::q4_1_bytes;
            uint16_t h[2];
            std::memcpy(h, block, 4);
            const int i = d % detail::q4_1_elems;
            const auto byte = static_cast<uint8_t>(block[detail::q4_1_qs_offset + i % 16]);
            const int q = i < 16 ? byte & 0xF : byte >> 4;
            // d * q is exact, the sum rounds once to float: dequantize_row's value.
            return detail::half_to_float(h[0]) * static_cast<float>(q) + detail::half_to_float(h[1]);
        }
        default: {
            float f;
            std::memcpy(&f, row + 4 * static_cast<size_t>(d), 4);
            return f;
        }
    }
}

// Element d of row `slot` turned by table t (none: null), as turn_rows turns it: in float, each product
// rounded, then the sum.
double turned_element(const kv_rows& r, int32_t slot, int d, const float* t, int rope_dim, rope_pairing p) {
    if (t == nullptr || d >= rope_dim) return element(r, slot, d);
    const int half = rope_dim / 2;
    const int partner = p == rope_pairing::normal ? d ^ 1 : (d < half ? d + half : d - half);
    const auto x = static_cast<float>(element(r, slot, d));
    const auto xp = static_cast<float>(element(r, slot, partner));
    return x * t[d] + xp * t[rope_dim + d];
}

// attend, with key element d of slot j given by key(j, d).
template <typename Key>
void attend_keys(const float* q, int n_q, const kv_rows& v, int head_dim, const int32_t* slots, int n,
                 float scale, float* out, float* weights, size_t weights_stride, double* score_row, Key key) {
    std::fill(out, out + static_cast<size_t>(n_q) * head_dim, 0.0f);
    if (n <= 0) return;
    for (int h = 0; h < n_q; ++h) {
        const float* qh = q + static_cast<size_t>(h) * head_dim;
        float* w = weights + static_cast<size_t>(h) * weights_stride;
        for (int j = 0; j < n; ++j) {
            double dot = 0.0;
            for (int d = 0; d < head_dim; ++d) dot += static_cast<double>(qh[d]) * key(j, d);
            w[j] = static_cast<float>(static_cast<double>(scale) * dot);
        }
        softmax(w, n);
        float* o = out + static_cast<size_t>(h) * head_dim;
        for (int d = 0; d < head_dim; ++d) {
            double acc = 0.0;
            for (int j = 0; j < n; ++j) acc += static_cast<double>(w[j]) * element(v, slots[j], d);
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

}  // namespace

void attend(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim, const int32_t* slots,
            int n, float scale, float* out, float* weights, size_t weights_stride, double* score_row) {
    attend_keys(q, n_q, v, head_dim, slots, n, scale, out, weights, weights_stride, score_row,
                [&](int j, int d) { return element(k, slots[j], d); });
}

void attend_turned(const float* q, int n_q, const kv_rows& k, const kv_rows& v, int head_dim,
                   const int32_t* slots, int n, const key_turns& t, float scale, float* out, float* weights,
                   size_t weights_stride, double* score_row) {
    attend_keys(
        q, n_q, v, head_dim, slots, n, scale, out, weights, weights_stride, score_row, [&](int j, int d) {
            const int32_t turn = t.turns[slots[j]];
            const float* table =
                turn == 0 ? nullptr
                          : t.tables + static_cast<size_t>(turn) * 2 * static_cast<size_t>(t.rope_dim);
            return turned_element(k, slots[j], d, table, t.rope_dim, t.pairing);
        });
}

}  // namespace h2okv::kernels::ref
