#include <algorithm>
#include <cmath>
#include <cstring>

#include "h2okv/kernels/kernels.h"
#include "kernels/blocks.h"
#include "kernels/dispatch.h"
#include "kernels/half.h"

namespace h2okv::kernels {
namespace {

// Super-block scales are stored as fp16 and their 6- or 7-bit multipliers rounded up; raising the scale by
// more than fp16's relative rounding error (2^-11) first keeps every multiplier within its bits.
constexpr float fp16_headroom = 1.0f + 0x1p-9f;

uint16_t store_half(float f, std::byte* dst) {
    const uint16_t h = detail::float_to_half(f);
    std::memcpy(dst, &h, 2);
    return h;
}

void quantize_q4_0(const float* src, int64_t n, std::byte* dst) {
    for (int64_t b = 0; b < n / detail::q4_0_elems; ++b) {
        const float* x = src + b * detail::q4_0_elems;
        std::byte* block = dst + b * detail::q4_0_bytes;
        float amax = 0.0f;
        float max = 0.0f;
        for (int i = 0; i < 32; ++i) {
            if (std::fabs(x[i]) > amax) {
                amax = std::fabs(x[i]);
                max = x[i];
            }
        }
        // The extreme value maps to q = 0 (value -8 d = max exactly up to d's rounding); the other side
        // reaches only +7 d. As ggml's quantize_row_q4_0_ref, the steps divide by d before its fp16 rounding,
        // so a q4_0 KV cache holds llama.cpp's bits.
        const float d = max / -8.0f;
        store_half(d, block);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        auto q = [&](float v) { return std::clamp(static_cast<int>(std::floor(v * id + 8.5f)), 0, 15); };
        for (int i = 0; i < 16; ++i) {
            block[2 + i] = static_cast<std::byte>(q(x[i]) | (q(x[i + 16]) << 4));
        }
    }
}

// As ggml's quantize_row_q4_1_ref: the block's range [min, max] in 15 steps, d = (max - min) / 15 and m = min
// stored as fp16, q = min(15, trunc((x - min) / d + 0.5)) with the unrounded d and min (x - min >= 0, so the
// truncation rounds half up).
void quantize_q4_1(const float* src, int64_t n, std::byte* dst) {
    for (int64_t b = 0; b < n / detail::q4_1_elems; ++b) {
        const float* x = src + b * detail::q4_1_elems;
        std::byte* block = dst + b * detail::q4_1_bytes;
        const auto [lo, hi] = std::minmax_element(x, x + detail::q4_1_elems);
        const float min = *lo;
        const float d = (*hi - min) / 15.0f;
        store_half(d, block);
        store_half(min, block + 2);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        auto q = [&](float v) { return std::min(15, static_cast<int>((v - min) * id + 0.5f)); };
        for (int i = 0; i < 16; ++i) {
            block[detail::q4_1_qs_offset + i] = static_cast<std::byte>(q(x[i]) | (q(x[i + 16]) << 4));
        }
    }
}

void quantize_q4_k(const float* src, int64_t n, std::byte* dst) {
    for (int64_t b = 0; b < n / detail::q4_k_elems; ++b) {
        const float* x = src + b * detail::q4_k_elems;
        std::byte* block = dst + b * detail::q4_k_bytes;
        float offset[8];  // -min, clamped at 0 (the format's offset only subtracts)
        float top[8];
        float max_offset = 0.0f;
        for (int j = 0; j < 8; ++j) {
            const auto [lo, hi] = std::minmax_element(x + 32 * j, x + 32 * j + 32);
            offset[j] = std::max(0.0f, -*lo);
            top[j] = *hi;
            max_offset = std::max(max_offset, offset[j]);
        }
        const float dmin = detail::half_to_float(store_half(max_offset / 63.0f * fp16_headroom, block + 2));
        uint8_t mq[8];
        uint8_t sc[8];
        float range[8];
        float max_range = 0.0f;
        for (int j = 0; j < 8; ++j) {
            mq[j] = dmin > 0.0f ? static_cast<uint8_t>(std::min(63.0f, std::ceil(offset[j] / dmin))) : 0;
            offset[j] = dmin * static_cast<float>(mq[j]);  // exactly the decoder's m1
            range[j] = std::max(0.0f, top[j] + offset[j]);
            max_range = std::max(max_range, range[j]);
        }
        const float d = detail::half_to_float(store_half(max_range / (15.0f * 63.0f) * fp16_headroom, block));
        for (int j = 0; j < 8; ++j) {
            sc[j] = d > 0.0f ? static_cast<uint8_t>(std::min(63.0f, std::ceil(range[j] / (15.0f * d)))) : 0;
        }
        uint8_t packed[12];
        detail::pack_scale_min_k4(sc, mq, packed);
        std::memcpy(block + detail::q4_k_scales_offset, packed, 12);
        auto* qs = reinterpret_cast<uint8_t*>(block + detail::q4_k_qs_offset);
        std::memset(qs, 0, 128);
        for (int j = 0; j < 8; ++j) {
            const float step = d * static_cast<float>(sc[j]);
            const float inv = step > 0.0f ? 1.0f / step : 0.0f;
            for (int l = 0; l < 32; ++l) {
                const int q =
                    std::clamp(static_cast<int>(std::nearbyint((x[32 * j + l] + offset[j]) * inv)), 0, 15);
                qs[32 * (j / 2) + l] |= static_cast<uint8_t>(q << (4 * (j % 2)));
            }
        }
    }
}

void quantize_q6_k(const float* src, int64_t n, std::byte* dst) {
    for (int64_t b = 0; b < n / detail::q6_k_elems; ++b) {
        const float* x = src + b * detail::q6_k_elems;
        std::byte* block = dst + b * detail::q6_k_bytes;
        float step_wanted[16];
        float max_step = 0.0f;
        for (int j = 0; j < 16; ++j) {
            float amax = 0.0f;
            for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * j + l]));
            step_wanted[j] = amax / 31.0f;
            max_step = std::max(max_step, step_wanted[j]);
        }
        const float d = detail::half_to_float(
            store_half(max_step / 127.0f * fp16_headroom, block + detail::q6_k_d_offset));
        auto* scales = reinterpret_cast<int8_t*>(block + detail::q6_k_scales_offset);
        auto* ql = reinterpret_cast<uint8_t*>(block);
        auto* qh = reinterpret_cast<uint8_t*>(block + detail::q6_k_qh_offset);
        std::memset(ql, 0, 128);
        std::memset(qh, 0, 64);
        for (int j = 0; j < 16; ++j) {
            scales[j] = d > 0.0f ? static_cast<int8_t>(std::min(127.0f, std::ceil(step_wanted[j] / d))) : 0;
        }
        for (int e = 0; e < 256; ++e) {
            const float step = d * static_cast<float>(scales[e / 16]);
            const float inv = step > 0.0f ? 1.0f / step : 0.0f;
            const int q = std::clamp(static_cast<int>(std::nearbyint(x[e] * inv)), -32, 31) + 32;
            const int h = e / 128;
            const int k = (e % 128) / 32;
            const int l = e % 32;
            ql[64 * h + l + 32 * (k % 2)] |= static_cast<uint8_t>((q & 0xF) << (4 * (k / 2)));
            qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
        }
    }
}

}  // namespace

bool quantize_row(core::tensor_type t, const float* src, int64_t n, std::byte* dst) {
    switch (t) {
        case core::tensor_type::f32:
            std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
            return true;
        case core::tensor_type::f16: detail::current_table().to_f16(src, n, dst); return true;
        case core::tensor_type::bf16:
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = fp32_to_bf16(src[i]);
                std::memcpy(dst + 2 * i, &h, 2);
            }
            return true;
        case core::tensor_type::q8_0: {
            if (n % 32 != 0) return false;
            for (int64_t b = 0; b < n / 32; ++b) {
                const float* x = src + b * 32;
                float amax = 0.0f;
                for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
                const float d = amax / 127.0f;
                const float inv = d > 0.0f ? 1.0f / d : 0.0f;
                std::byte* block = dst + b * 34;
                const uint16_t dh = fp32_to_fp16(d);
                std::memcpy(block, &dh, 2);
                for (int i = 0; i < 32; ++i) {
                    const auto q = static_cast<int8_t>(std::lround(x[i] * inv));
                    std::memcpy(block + 2 + i, &q, 1);
                }
            }
            return true;
        }
        case core::tensor_type::q4_0:
            if (n % detail::q4_0_elems != 0) return false;
            quantize_q4_0(src, n, dst);
            return true;
        case core::tensor_type::q4_1:
            if (n % detail::q4_1_elems != 0) return false;
            quantize_q4_1(src, n, dst);
            return true;
        case core::tensor_type::q4_k:
            if (n % detail::q4_k_elems != 0) return false;
            quantize_q4_k(src, n, dst);
            return true;
        case core::tensor_type::q6_k:
            if (n % detail::q6_k_elems != 0) return false;
            quantize_q6_k(src, n, dst);
            return true;
        default: return false;
    }
}

}  // namespace h2okv::kernels
