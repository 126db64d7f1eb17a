// fp16 / bf16 conversions: named edge cases (subnormals, overflow, ties, NaN, signed zero), exhaustive
// widening and round trips, and narrowing compared with an independent oracle over every rounding case; the
// row conversion of the kernel tables (the KV cache's f16 rows) against the scalar one.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "h2okv/core/cpu_isa.h"
#include "h2okv/kernels/kernels.h"
#include "kernels/dispatch.h"
#include "kernels/ref/ref.h"
#ifdef H2OKV_KERNELS_X86
#include "kernels/x86/avx2.h"
#endif

namespace h2okv::kernels {
namespace {

float from_bits(uint32_t u) {
    return std::bit_cast<float>(u);
}
uint32_t to_bits(float f) {
    return std::bit_cast<uint32_t>(f);
}

bool half_is_nan(uint16_t h) {
    return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}

TEST(Fp16, NamedValues) {
    EXPECT_EQ(fp32_to_fp16(0.0f), 0x0000);
    EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
    EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
    EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
    EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);                        // largest finite half
    EXPECT_EQ(fp32_to_fp16(std::nextafter(65520.0f, 0.0f)), 0x7bff);  // just below the midpoint
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);                        // midpoint: ties to even = inf
    EXPECT_EQ(fp32_to_fp16(1e10f), 0x7c00);                           // overflow
    EXPECT_EQ(fp32_to_fp16(-1e10f), 0xfc00);                          // negative overflow
    EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::infinity()), 0x7c00);
    EXPECT_EQ(fp32_to_fp16(-std::numeric_limits<float>::infinity()), 0xfc00);
    EXPECT_EQ(fp32_to_fp16(0x1p-14f), 0x0400);                               // smallest normal
    EXPECT_EQ(fp32_to_fp16(0x1p-24f), 0x0001);                               // smallest subnormal
    EXPECT_EQ(fp32_to_fp16(0x1p-25f), 0x0000);                               // tie between 0 and 2^-24: even
    EXPECT_EQ(fp32_to_fp16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);         // just above the tie
    EXPECT_EQ(fp32_to_fp16(-0x1p-26f), 0x8000);                              // underflow keeps the sign
    EXPECT_EQ(fp32_to_fp16(1.5f * 0x1p-24f), 0x0002);                        // tie 1|2 -> 2
    EXPECT_EQ(fp32_to_fp16(2.5f * 0x1p-24f), 0x0002);                        // tie 2|3 -> 2
    EXPECT_EQ(fp32_to_fp16(1023.5f * 0x1p-24f), 0x0400);                     // tie carries into the normals
    EXPECT_EQ(fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);                        // tie 1|1+2^-10 -> 1
    EXPECT_EQ(fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);                    // tie -> even mantissa 2
    EXPECT_EQ(fp32_to_fp16(std::nextafter(1.0f + 0x1p-11f, 2.0f)), 0x3c01);  // above the tie
    EXPECT_EQ(fp32_to_fp16(2047.5f), 0x6800);                                // 2048 (mantissa carries)

    EXPECT_EQ(fp16_to_fp32(0x0001), 0x1p-24f);
    EXPECT_EQ(fp16_to_fp32(0x03ff), 1023.0f * 0x1p-24f);
    EXPECT_EQ(fp16_to_fp32(0x7bff), 65504.0f);
    EXPECT_EQ(fp16_to_fp32(0x7c00), std::numeric_limits<float>::infinity());
    EXPECT_EQ(fp16_to_fp32(0xfc00), -std::numeric_limits<float>::infinity());
    EXPECT_EQ(to_bits(fp16_to_fp32(0x8000)), 0x80000000u);
    EXPECT_EQ(to_bits(fp16_to_fp32(0x8001)), to_bits(-0x1p-24f));
}

TEST(Fp16, NanStaysNanAndQuiet) {
    for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7fbfffffu, 0xff800001u, 0x7fffe000u}) {
        const uint16_t h = fp32_to_fp16(from_bits(bits));
        EXPECT_TRUE(half_is_nan(h)) << std::hex << bits << " -> " << h;
        EXPECT_EQ(h & 0x8000u, (bits >> 16) & 0x8000u) << "sign of " << std::hex << bits;
        EXPECT_NE(h & 0x0200u, 0u) << "quiet bit of " << std::hex << bits;
    }
    EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7e00)));
    EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7c01)));  // a signalling half NaN widens to a NaN
    EXPECT_TRUE(std::signbit(fp16_to_fp32(0xfe00)));
}

TEST(Fp16, EveryHalfWidensExactlyAndRoundTrips) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const float f = fp16_to_fp32(static_cast<uint16_t>(h));
        if (half_is_nan(static_cast<uint16_t>(h))) {
            ASSERT_TRUE(std::isnan(f)) << h;
            continue;
        }
        ASSERT_EQ(fp32_to_fp16(f), h) << "half " << std::hex << h << " -> " << f;
        // Independent widening: sign * mantissa * 2^exponent.
        const int e = static_cast<int>((h >> 10) & 0x1f);
        const int m = static_cast<int>(h & 0x3ff);
        const double mag = e == 0x1f ? std::numeric_limits<double>::infinity()
                           : e == 0  ? std::ldexp(m, -24)
                                     : std::ldexp(1024 + m, e - 25);
        ASSERT_EQ(static_cast<double>(f), (h & 0x8000) ? -mag : mag) << std::hex << h;
    }
}

// The oracle for narrowing: the two halves nearest the value (found by widening exhaustively-checked halves),
// the nearer one, ties to the even mantissa.
uint16_t oracle_fp16(float f) {
    const double v = std::fabs(static_cast<double>(f));
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    if (std::isnan(f)) return 0;  // not used for NaN
    // Largest finite half magnitude h_lo with value <= v (binary search over the ordered encodings).
    uint32_t lo = 0;
    uint32_t hi = 0x7c00;  // inf
    while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        if (static_cast<double>(fp16_to_fp32(static_cast<uint16_t>(mid))) <= v) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    const double vlo = fp16_to_fp32(static_cast<uint16_t>(lo));
    // Past 65504 the next value of the half grid is 65536 (it rounds to inf).
    const double vhi = hi == 0x7c00 ? 65536.0 : static_cast<double>(fp16_to_fp32(static_cast<uint16_t>(hi)));
    if (v == vlo) return static_cast<uint16_t>(sign | lo);
    const double dlo = v - vlo;
    const double dhi = vhi - v;
    if (v >= 65536.0) return static_cast<uint16_t>(sign | 0x7c00);
    const uint32_t pick = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
    return static_cast<uint16_t>(sign | pick);
}

TEST(Fp16, NarrowingMatchesOracleAtEveryRoundingBoundary) {
    // For every half-grid interval of the normal range, floats at and around its midpoint and ends (low bits
    // of the float mantissa that the conversion drops: 0, 1, the midpoint -1/0/+1, all ones).
    int checked = 0;
    for (uint32_t top = 0; top < (1u << 19); ++top) {
        for (uint32_t low : {0x0u, 0x1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu}) {
            const uint32_t bits = (top << 13) | low;
            const float f = from_bits(bits);
            if (std::isnan(f)) continue;
            const float a = std::fabs(f);
            if (a < 0x1p-26f || a > 70000.0f) {
                if (a > 70000.0f) {
                    ASSERT_EQ(fp32_to_fp16(f) & 0x7fffu, 0x7c00u) << std::hex << bits;
                }
                continue;
            }
            ASSERT_EQ(fp32_to_fp16(f), oracle_fp16(f)) << std::hex << bits << " = " << f;
            ++checked;
        }
    }
    // Random floats over the whole subnormal and normal half range.
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> expo(-27.0f, 16.5f);
    for (int i = 0; i < 200000; ++i) {
        const float f = std::exp2(expo(rng)) * ((i & 1) ? -1.0f : 1.0f);
        ASSERT_EQ(fp32_to_fp16(f), oracle_fp16(f)) << f;
        ++checked;
    }
    EXPECT_GT(checked, 700000);
}

#ifdef __FLT16_MAX__
// The compiler's own _Float16 (libgcc's soft-float, round-to-nearest-even) as a second, independent oracle.
TEST(Fp16, MatchesCompilerFloat16) {
    std::mt19937 rng(11);
    for (int i = 0; i < 1000000; ++i) {
        const float f = from_bits(rng());
        if (std::isnan(f)) continue;
        const auto expected = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
        ASSERT_EQ(fp32_to_fp16(f), expected) << std::hex << to_bits(f);
    }
    for (uint32_t h = 0; h < 0x10000; ++h) {
        if (half_is_nan(static_cast<uint16_t>(h))) continue;
        ASSERT_EQ(fp16_to_fp32(static_cast<uint16_t>(h)),
                  static_cast<float>(std::bit_cast<_Float16>(static_cast<uint16_t>(h))));
    }
}
#endif

uint16_t oracle_bf16(float f) {
    const uint32_t bits = to_bits(f);
    const uint32_t lo = bits & 0xffff0000u;  // truncated towards zero
    const uint32_t hi = lo + 0x10000u;       // next bf16 away from zero (may be inf)
    const double v = std::fabs(static_cast<double>(f));
    const double vlo = std::fabs(static_cast<double>(from_bits(lo)));
    const double vhi =
        (hi & 0x7fffffffu) == 0x7f800000u ? 0x1p128 : std::fabs(static_cast<double>(from_bits(hi)));
    const double dlo = v - vlo;
    const double dhi = vhi - v;
    const uint32_t pick = dlo < dhi ? lo : dhi < dlo ? hi : (((lo >> 16) & 1u) ? hi : lo);
    return static_cast<uint16_t>(pick >> 16);
}

TEST(Bf16, NamedValues) {
    EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(fp32_to_bf16(-0.0f), 0x8000);
    EXPECT_EQ(fp32_to_bf16(from_bits(0x3f808000u)), 0x3f80);  // tie -> even
    EXPECT_EQ(fp32_to_bf16(from_bits(0x3f818000u)), 0x3f82);  // tie -> even (up)
    EXPECT_EQ(fp32_to_bf16(from_bits(0x3f808001u)), 0x3f81);
    EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past the largest bf16
    EXPECT_EQ(fp32_to_bf16(from_bits(0x7f7f7fffu)), 0x7f7f);
    EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
    EXPECT_EQ(fp32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
    EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);  // 1 ulp: below the midpoint
    EXPECT_EQ(fp32_to_bf16(from_bits(0x00008000u)), 0x0000);                    // subnormal tie -> even
    EXPECT_EQ(fp32_to_bf16(from_bits(0x00018000u)), 0x0002);
    EXPECT_EQ(fp32_to_bf16(from_bits(0x007fffffu)),
              0x0080);  // largest subnormal rounds to the smallest normal
    for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7f80ffffu}) {
        const uint16_t b = fp32_to_bf16(from_bits(bits));
        EXPECT_TRUE(std::isnan(bf16_to_fp32(b))) << std::hex << bits << " -> " << b;
        EXPECT_EQ(b & 0x8000u, (bits >> 16) & 0x8000u);
        EXPECT_NE(b & 0x0040u, 0u) << "quiet bit";
    }
    EXPECT_EQ(to_bits(bf16_to_fp32(0x3f80)), 0x3f800000u);
    EXPECT_EQ(to_bits(bf16_to_fp32(0x0001)), 0x00010000u);  // a bf16 subnormal widens exactly
}

TEST(Bf16, EveryBf16RoundTripsAndNarrowingMatchesOracle) {
    for (uint32_t b = 0; b < 0x10000; ++b) {
        const float f = bf16_to_fp32(static_cast<uint16_t>(b));
        if (std::isnan(f)) continue;
        ASSERT_EQ(fp32_to_bf16(f), b);
        for (uint32_t low : {0x1u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
            const float g = from_bits((b << 16) | low);
            if (std::isnan(g) || std::isinf(g)) continue;
            ASSERT_EQ(fp32_to_bf16(g), oracle_bf16(g)) << std::hex << ((b << 16) | low);
        }
    }
}

// Every half, its neighbours one float ulp away, the ties between consecutive halves, the range edges, NaNs
// with payloads, float subnormals and random bit patterns: each row variant gives fp32_to_fp16's bits, at
// every row length (tails included), and so does quantize_row(F16) on this CPU's table.
TEST(Fp16, RowConversionOfEveryIsaGivesTheScalarBits) {
    std::vector<float> x;
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const float f = fp16_to_fp32(static_cast<uint16_t>(h));
        x.push_back(f);
        if (std::isnan(f) || std::isinf(f)) continue;
        x.push_back(std::nextafter(f, std::numeric_limits<float>::infinity()));
        x.push_back(std::nextafter(f, -std::numeric_limits<float>::infinity()));
        if ((h & 0x7fffu) < 0x7bffu) {  // the tie with the next half of the same sign
            x.push_back(static_cast<float>(
                (static_cast<double>(f) + fp16_to_fp32(static_cast<uint16_t>(h + 1))) / 2));
        }
    }
    for (uint32_t bits : {0x7f800001u, 0xffc00000u, 0x7fffffffu, 0x00000001u, 0x807fffffu, 0x477ff000u,
                          0x477fefffu, 0x33000000u, 0x33000001u})
        x.push_back(from_bits(bits));
    std::mt19937 rng(7);
    for (int i = 0; i < 1 << 20; ++i) x.push_back(from_bits(static_cast<uint32_t>(rng())));
    std::vector<uint16_t> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = fp32_to_fp16(x[i]);

    using row_fn = void (*)(const float*, int64_t, std::byte*);
    std::vector<std::pair<const char*, row_fn>> fns{{"reference", &ref::to_f16}};
#ifdef H2OKV_KERNELS_X86
    if (core::cpu_supports(core::cpu_isa::avx2)) fns.emplace_back("avx2", &avx2::to_f16);
#endif
    fns.emplace_back("quantize_row", [](const float* src, int64_t n, std::byte* dst) {
        ASSERT_TRUE(quantize_row(core::tensor_type::f16, src, n, dst));
    });
    for (const auto& [name, fn] : fns) {
        std::vector<uint16_t> got(x.size());
        // Rows of 1..17 values one after another, so every tail length and offset is met.
        for (size_t i = 0, n = 1; i < x.size(); i += n, n = n % 17 + 1) {
            n = std::min(n, x.size() - i);
            fn(x.data() + i, static_cast<int64_t>(n), reinterpret_cast<std::byte*>(got.data() + i));
        }
        for (size_t i = 0; i < x.size(); ++i)
            ASSERT_EQ(got[i], want[i]) << name << ": " << std::hex << to_bits(x[i]);
    }
}

}  // namespace
}  // namespace h2okv::kernels
