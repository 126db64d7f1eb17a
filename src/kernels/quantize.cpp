#include <cmath>
#include <cstring>

#include "h2okv/kernels/kernels.h"

namespace h2okv::kernels {

bool quantize_row(gguf::tensor_type t, const float* src, int64_t n, std::byte* dst) {
    switch (t) {
        case gguf::tensor_type::f32:
            std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
            return true;
        case gguf::tensor_type::f16:
        case gguf::tensor_type::bf16:
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = t == gguf::tensor_type::f16 ? fp32_to_fp16(src[i]) : fp32_to_bf16(src[i]);
                std::memcpy(dst + 2 * i, &h, 2);
            }
            return true;
        case gguf::tensor_type::q8_0: {
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
        default: return false;
    }
}

}  // namespace h2okv::kernels
