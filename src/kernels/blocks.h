// Block layouts of the quantised weight types, byte-compatible with ggml's (ggml-common.h). The reference
// dequantisers in ref/ref.cpp are the normative definition of each block's values; this header holds the
// sizes and the bit unpacking that the reference, the SIMD variants and the quantisers share.
//
//   Q8_0 (32 elements, 34 bytes): fp16 d, int8 q[32]; x[i] = d * q[i].
//   Q4_0 (32 elements, 18 bytes): fp16 d, uint8 qs[16]; element i < 16 is the low nibble of qs[i], element
//     16 + i the high nibble; x = d * (nibble - 8).
//   Q4_1 (32 elements, 20 bytes): fp16 d, fp16 m, uint8 qs[16], nibbles placed as Q4_0's; x = d * nibble + m.
//   Q4_K (256 elements, 144 bytes): fp16 d, fp16 dmin, uint8 scales[12] (8 six-bit scales and 8 six-bit
//     mins, packed as `scale_min_k4` unpacks them), uint8 qs[128]. Sub-block j (32 elements) takes the low
//     nibbles of qs[32*(j/2) ..+32] for even j, the high nibbles for odd j; x = (d*sc_j) * q - (dmin*m_j).
//   Q6_K (256 elements, 210 bytes): uint8 ql[128] (low 4 bits), uint8 qh[64] (high 2 bits), int8
//     scales[16], fp16 d. In each half h (128 elements; ql + 64h, qh + 32h) element 32k + l (k < 4, l < 32)
//     has low bits from ql[l + 32*(k%2)] (low nibble for k < 2, high for k >= 2) and high bits
//     (qh[l] >> 2k) & 3; q = bits - 32; x = (d * scales[element / 16]) * q.
//
//   uint8_t sc, m;
//   detail::scale_min_k4(j, block + 4, &sc, &m);   // sub-block j's 6-bit scale and min of a Q4_K block
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "h2okv/core/tensor_type.h"

namespace h2okv::kernels::detail {

// The sizes from the one table (h2okv/core/tensor_type.h); the offsets below are this header's layouts.
inline constexpr int64_t q8_0_elems = core::block_elements(core::tensor_type::q8_0);
inline constexpr auto q8_0_bytes = static_cast<size_t>(core::block_bytes(core::tensor_type::q8_0));
inline constexpr int64_t q4_0_elems = core::block_elements(core::tensor_type::q4_0);
inline constexpr auto q4_0_bytes = static_cast<size_t>(core::block_bytes(core::tensor_type::q4_0));
inline constexpr int64_t q4_1_elems = core::block_elements(core::tensor_type::q4_1);
inline constexpr auto q4_1_bytes = static_cast<size_t>(core::block_bytes(core::tensor_type::q4_1));
inline constexpr size_t q4_1_qs_offset = 4;  // after d and m
inline constexpr int64_t q4_k_elems = core::block_elements(core::tensor_type::q4_k);
inline constexpr auto q4_k_bytes = static_cast<size_t>(core::block_bytes(core::tensor_type::q4_k));
inline constexpr size_t q4_k_scales_offset = 4;  // after d and dmin
inline constexpr size_t q4_k_qs_offset = 16;
inline constexpr int64_t q6_k_elems = core::block_elements(core::tensor_type::q6_k);
inline constexpr auto q6_k_bytes = static_cast<size_t>(core::block_bytes(core::tensor_type::q6_k));
inline constexpr size_t q6_k_qh_offset = 128;
inline constexpr size_t q6_k_scales_offset = 192;
inline constexpr size_t q6_k_d_offset = 208;

// Scale and min of sub-block j (0..7) from a Q4_K block's 12 scale bytes: j < 4 keep theirs in the low 6
// bits of bytes j and j + 4; j >= 4 in the nibbles of byte j + 4, with their top 2 bits in the top bits of
// bytes j - 4 (scale) and j (min).
inline void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// scale_min_k4 for all 8 sub-blocks at once, four per 32-bit word: out[0..1] hold the scales as bytes 0..7,
// out[2..3] the mins (little-endian), from the 12 scale bytes q.
inline void unpack_scale_min_k4(const uint8_t* q, uint32_t* out) {
    uint32_t a[3];
    std::memcpy(a, q, 12);
    out[0] = a[0] & 0x3f3f3f3fu;
    out[1] = (a[2] & 0x0f0f0f0fu) | (((a[0] >> 6) & 0x03030303u) << 4);
    out[2] = a[1] & 0x3f3f3f3fu;
    out[3] = ((a[2] >> 4) & 0x0f0f0f0fu) | (((a[1] >> 6) & 0x03030303u) << 4);
}

// The inverse of scale_min_k4 for all 8 sub-blocks: sc, m: [8] values < 64; out: [12] bytes.
inline void pack_scale_min_k4(const uint8_t* sc, const uint8_t* m, uint8_t* out) {
    for (int j = 0; j < 4; ++j) {
        out[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        out[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

}  // namespace h2okv::kernels::detail
