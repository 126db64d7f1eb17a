// The Q6_K bit unpacking shared by the AVX2 and AVX-512 codecs (AVX2 instructions; the AVX-512 code may
// inline it since its target includes AVX2).
#pragma once

#include <immintrin.h>

#include <cstddef>

#include "kernels/blocks.h"

namespace h2okv::kernels::x86 {

// Group g (0..7) of a Q6_K block = elements 32g ..+32 as their 6-bit values q (0..63): half h = g/4,
// k = g%4; low bits from ql[64h + 32(k%2) ..+32] (nibble k/2), high bits (qh[32h ..+32] >> 2k) & 3 (layout
// in blocks.h).
__attribute__((target("avx2"))) inline __m256i q6_k_group_u8(const std::byte* block, int g) {
    const int h = g / 4;
    const int k = g % 4;
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 64 * h + 32 * (k % 2)));
    const __m256i qh =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + detail::q6_k_qh_offset + 32 * h));
    // Byte shifts done as 16-bit shifts, masked before bits can cross into the neighbouring byte.
    const __m256i low = _mm256_and_si256(_mm256_srli_epi16(ql, 4 * (k / 2)), _mm256_set1_epi8(0x0F));
    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), _mm256_set1_epi8(0x03));
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
}

// The same group as int8 values q - 32.
__attribute__((target("avx2"))) inline __m256i q6_k_group_i8(const std::byte* block, int g) {
    return _mm256_sub_epi8(q6_k_group_u8(block, g), _mm256_set1_epi8(32));
}

}  // namespace h2okv::kernels::x86
