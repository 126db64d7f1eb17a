// Scalar IEEE binary16 / bfloat16 conversions shared by the reference kernels and the public wrappers
// (kernels.h documents the rounding rules). Inline because the reference kernels call them per element.
#pragma once

#include <cstdint>
#include <cstring>

namespace h2okv::kernels::detail {

inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

inline float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

inline float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu;
    const uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN payload kept
    if (exponent == 0) {
        // Zero or subnormal: mantissa * 2^-24 is exact in float.
        return bits_float(sign | float_bits(static_cast<float>(mantissa) * 0x1p-24f));
    }
    return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t float_to_half(float f) {
    const uint32_t x = float_bits(f);
    const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // quiet NaN
    // 65520 is the midpoint between the largest half (65504) and 2^16; the tie goes to the even
    // neighbour, which is the overflow to infinity.
    if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
    if (a < 0x38800000u) {  // below 2^-14: a half subnormal (units of 2^-24) or zero
        const uint32_t e = a >> 23;
        if (e < 102) return sign;  // below 2^-25, the midpoint between 0 and 2^-24
        const uint32_t m = (a & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - e;  // m * 2^(e-150) in units of 2^-24
        uint32_t q = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1);
        const uint32_t half_unit = 1u << (shift - 1);
        if (rem > half_unit || (rem == half_unit && (q & 1u))) ++q;  // may carry into the smallest normal
        return static_cast<uint16_t>(sign | q);
    }
    uint32_t h = (a - 0x38000000u) >> 13;  // rebias the exponent by 127 - 15, keep the top 10 mantissa bits
    const uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent correctly
    return static_cast<uint16_t>(sign | h);
}

inline float bfloat_to_float(uint16_t h) {
    return bits_float(static_cast<uint32_t>(h) << 16);
}

inline uint16_t float_to_bfloat(float f) {
    const uint32_t x = float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
    return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace h2okv::kernels::detail
