// rmsnorm, rope, turn_rows, softmax, swiglu (reference and SIMD variants) against direct formulas evaluated
// in long double, and the SIMD softmax against the reference.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "h2okv/core/cpu_isa.h"
#include "h2okv/kernels/kernels.h"
#include "kernel_test_util.h"
#include "kernels/dispatch.h"
#include "kernels/ref/ref.h"
#ifdef H2OKV_KERNELS_X86
#include "kernels/x86/avx2.h"
#endif

namespace h2okv::kernels {
namespace {

using test_support::gamma_k;
using test_support::random_floats;
constexpr double u = test_support::unit_roundoff;

using rmsnorm_fn = void (*)(const float*, const float*, int, float, float*);
using swiglu_fn = void (*)(const float*, const float*, int, float*);

// The reference and every SIMD variant this CPU runs, by name.
template <typename Fn>
std::vector<std::pair<const char*, Fn>> variants(Fn reference, [[maybe_unused]] Fn simd) {
    std::vector<std::pair<const char*, Fn>> v{{"reference", reference}};
#ifdef H2OKV_KERNELS_X86
    if (core::cpu_supports(core::cpu_isa::avx2)) v.emplace_back("avx2", simd);
#endif
    return v;
}

#ifdef H2OKV_KERNELS_X86
const auto rmsnorm_variants = variants<rmsnorm_fn>(&ref::rmsnorm, &avx2::rmsnorm);
const auto swiglu_variants = variants<swiglu_fn>(&ref::swiglu, &avx2::swiglu);
#else
const auto rmsnorm_variants = variants<rmsnorm_fn>(&ref::rmsnorm, nullptr);
const auto swiglu_variants = variants<swiglu_fn>(&ref::swiglu, nullptr);
#endif

TEST(Rmsnorm, MatchesFormula) {
    for (const auto& [name, fn] : rmsnorm_variants) {
        for (int n : {1, 2, 7, 64, 100, 257, 2048}) {
            const std::vector<float> x =
                random_floats(static_cast<size_t>(n), static_cast<uint32_t>(n), 3.0f);
            const std::vector<float> w = random_floats(static_cast<size_t>(n), static_cast<uint32_t>(n + 1));
            const float eps = 1e-5f;
            std::vector<float> out(static_cast<size_t>(n));
            fn(x.data(), w.data(), n, eps, out.data());
            long double ss = 0;
            for (float v : x) ss += static_cast<long double>(v) * v;
            const long double s = 1.0L / std::sqrt(ss / n + static_cast<long double>(eps));
            for (int i = 0; i < n; ++i) {
                const long double exact = x[i] * s * w[i];
                // The scale rounds once to float, then two float multiplications: 3 roundings (+1 of slack
                // for the double sum, in any order, and square root, far below u).
                ASSERT_LE(std::fabs(out[i] - exact), gamma_k(4) * std::fabs(exact) + 1e-37)
                    << name << " n " << n << " i " << i;
            }
            std::vector<float> in_place = x;
            fn(in_place.data(), w.data(), n, eps, in_place.data());
            EXPECT_EQ(std::memcmp(in_place.data(), out.data(), out.size() * 4), 0)
                << name << " aliasing out = x";
        }
    }
}

void rope_exact(std::vector<long double>& x, int n_heads, int head_dim, int rope_dim, int64_t pos,
                double base, rope_pairing p) {
    for (int h = 0; h < n_heads; ++h) {
        for (int i = 0; i < rope_dim / 2; ++i) {
            const long double theta = static_cast<long double>(pos) *
                                      std::pow(static_cast<long double>(base), -2.0L * i / rope_dim);
            const int a = h * head_dim + (p == rope_pairing::normal ? 2 * i : i);
            const int b = h * head_dim + (p == rope_pairing::normal ? 2 * i + 1 : i + rope_dim / 2);
            const long double re = x[a];
            const long double im = x[b];
            x[a] = re * std::cos(theta) - im * std::sin(theta);  // (re + i im) * e^(i theta)
            x[b] = re * std::sin(theta) + im * std::cos(theta);
        }
    }
}

TEST(Rope, MatchesComplexRotation) {
    struct shape {
        int n_heads, head_dim, rope_dim;
    };
    for (const shape s :
         {shape{8, 8, 8}, shape{4, 64, 64}, shape{3, 64, 32}, shape{2, 128, 128}, shape{1, 2, 2}}) {
        for (rope_pairing p : {rope_pairing::normal, rope_pairing::neox}) {
            for (int64_t pos : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{511}, int64_t{4095},
                                int64_t{100000}, int64_t{1} << 24}) {
                for (float base : {10000.0f, 500000.0f}) {
                    const int n = s.n_heads * s.head_dim;
                    std::vector<float> x =
                        random_floats(static_cast<size_t>(n), static_cast<uint32_t>(pos + n));
                    const std::vector<float> before = x;
                    std::vector<long double> exact(x.begin(), x.end());
                    rope(x.data(), s.n_heads, s.head_dim, s.rope_dim, pos, base, p);
                    rope_exact(exact, s.n_heads, s.head_dim, s.rope_dim, pos, base, p);
                    for (int h = 0; h < s.n_heads; ++h) {
                        for (int d = 0; d < s.head_dim; ++d) {
                            const int i = h * s.head_dim + d;
                            // Partner of d in its pair, to bound the error by the pair's magnitude.
                            const int pair_dim = p == rope_pairing::normal ? (d ^ 1)
                                                 : d < s.rope_dim / 2      ? d + s.rope_dim / 2
                                                                           : d - s.rope_dim / 2;
                            if (d >= s.rope_dim || pos == 0) {
                                ASSERT_EQ(x[i], before[i]) << "dim " << d << " must stay untouched";
                                continue;
                            }
                            // cos and sin round once each to float, then two products and a sum: an error of
                            // at most 4u * (|x0| + |x1|) (+1u of slack for the angle computed in double).
                            const double mag =
                                std::fabs(before[i]) + std::fabs(before[h * s.head_dim + pair_dim]);
                            ASSERT_LE(std::fabs(x[i] - exact[i]), 5 * u * mag)
                                << "pos " << pos << " head " << h << " dim " << d << " base " << base;
                        }
                    }
                }
            }
        }
    }
}

TEST(Rope, RotationTableGivesRopeBitForBit) {
    for (rope_pairing p : {rope_pairing::normal, rope_pairing::neox}) {
        for (int64_t pos : {int64_t{0}, int64_t{3}, int64_t{8191}, int64_t{1} << 20}) {
            const int n_heads = 3;
            const int head_dim = 64;
            const int rope_dim = 48;
            std::vector<float> a = random_floats(n_heads * head_dim, static_cast<uint32_t>(pos + 11));
            std::vector<float> b = a;
            std::vector<float> cos_sin(rope_dim);
            rope(a.data(), n_heads, head_dim, rope_dim, pos, 10000.0f, p);
            rope_rotation(pos, rope_dim, 10000.0f, cos_sin.data());
            rope_apply(b.data(), n_heads, head_dim, rope_dim, cos_sin.data(), p);
            ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "pos " << pos;
        }
    }
}

// Every variant of rope_apply gives the reference's bits: rotated dims that fill vectors and ones that leave
// a tail, a rope_dim below head_dim, both pairings.
TEST(Rope, ApplyVariantsAreTheReferenceBitForBit) {
    using rope_apply_fn = void (*)(float*, int, int, int, const float*, rope_pairing);
#ifdef H2OKV_KERNELS_X86
    const auto fns = variants<rope_apply_fn>(&ref::rope_apply, &avx2::rope_apply);
#else
    const auto fns = variants<rope_apply_fn>(&ref::rope_apply, nullptr);
#endif
    struct shape {
        int n_heads, head_dim, rope_dim;
    };
    for (const shape s : {shape{1, 2, 2}, shape{2, 8, 8}, shape{3, 16, 6}, shape{9, 64, 64}, shape{4, 64, 48},
                          shape{2, 128, 128}, shape{2, 80, 34}, shape{1, 256, 64}}) {
        for (rope_pairing p : {rope_pairing::normal, rope_pairing::neox}) {
            const auto seed = static_cast<uint32_t>(s.head_dim * 7 + s.rope_dim);
            const std::vector<float> x =
                random_floats(static_cast<size_t>(s.n_heads * s.head_dim), seed, 4.0f);
            std::vector<float> cos_sin(static_cast<size_t>(s.rope_dim));
            rope_rotation(int64_t{12345}, s.rope_dim, 10000.0f, cos_sin.data());
            std::vector<float> want = x;
            ref::rope_apply(want.data(), s.n_heads, s.head_dim, s.rope_dim, cos_sin.data(), p);
            for (const auto& [name, fn] : fns) {
                std::vector<float> got = x;
                fn(got.data(), s.n_heads, s.head_dim, s.rope_dim, cos_sin.data(), p);
                ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                    << name << " heads " << s.n_heads << " head_dim " << s.head_dim << " rope_dim "
                    << s.rope_dim << (p == rope_pairing::normal ? " normal" : " neox");
            }
        }
    }
}

// A spec's table: rope_spec::plain is the base's table bit for bit; any inverse frequencies and magnitude
// give magnitude * cos / sin of pos * inv_freq[i].
TEST(Rope, SpecTableIsItsFrequenciesAndMagnitude) {
    const int rope_dim = 48;
    for (int64_t pos : {int64_t{0}, int64_t{5}, int64_t{1} << 20}) {
        std::vector<float> want(rope_dim), got(rope_dim);
        rope_rotation(pos, rope_dim, 10000.0f, want.data());
        rope_rotation(rope_spec::plain(rope_dim, 10000.0f, rope_pairing::neox), pos, got.data());
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << "pos " << pos;
        rope_spec s{rope_dim, rope_pairing::normal, std::vector<double>(rope_dim / 2), 1.25};
        for (int i = 0; i < rope_dim / 2; ++i) s.inv_freq[static_cast<size_t>(i)] = 0.5 / (1 + i);
        rope_rotation(s, pos, got.data());
        for (int i = 0; i < rope_dim / 2; ++i) {
            const long double theta = static_cast<long double>(pos) * (0.5L / (1 + i));
            EXPECT_NEAR(got[static_cast<size_t>(2 * i)], 1.25L * std::cos(theta), 1e-6) << i;
            EXPECT_NEAR(got[static_cast<size_t>(2 * i + 1)], 1.25L * std::sin(theta), 1e-6) << i;
        }
    }
}

// turn_rows with a table of the rotation by -d (as model::rope_turn_table writes it) takes a key rotated at
// position p to the key rotated at p - d: every rotated dim within a few float roundings.
TEST(TurnRows, TurnsRotatedKeysBack) {
    const int head_dim = 64;
    const int rope_dim = 48;
    const int64_t p = 1000;
    const int d = 37;
    for (rope_pairing pairing : {rope_pairing::normal, rope_pairing::neox}) {
        const std::vector<float> x = random_floats(head_dim, 5);
        std::vector<float> at_p = x;
        std::vector<float> want = x;
        rope(at_p.data(), 1, head_dim, rope_dim, p, 10000.0f, pairing);
        rope(want.data(), 1, head_dim, rope_dim, p - d, 10000.0f, pairing);
        // Tables for turns 0 .. d (2 * rope_dim floats each); only d's is filled: each dim's pair's cosine,
        // then its sine, negated for the pair's first dim (pairs (2i, 2i + 1) normal, (i, i + half) neox).
        std::vector<float> tables(static_cast<size_t>(d + 1) * 2 * rope_dim, 0.0f);
        std::vector<float> cs(rope_dim);
        rope_rotation(-d, rope_dim, 10000.0f, cs.data());
        float* t = &tables[static_cast<size_t>(d) * 2 * rope_dim];
        for (int i = 0; i < rope_dim / 2; ++i) {
            const bool normal = pairing == rope_pairing::normal;
            const int a = normal ? 2 * i : i;
            const int b = normal ? 2 * i + 1 : rope_dim / 2 + i;
            t[a] = t[b] = cs[static_cast<size_t>(2 * i)];
            t[rope_dim + a] = -cs[static_cast<size_t>(2 * i + 1)];
            t[rope_dim + b] = cs[static_cast<size_t>(2 * i + 1)];
        }
        const kv_rows k{core::tensor_type::f32, reinterpret_cast<const std::byte*>(at_p.data()),
                        head_dim * sizeof(float)};
        const int32_t slot = 0;
        const int32_t turn = d;
        std::vector<float> got(head_dim);
        turn_rows(k, head_dim, &slot, &turn, 1, rope_dim, pairing, tables.data(), got.data());
        for (int e = 0; e < head_dim; ++e)
            EXPECT_NEAR(got[static_cast<size_t>(e)], want[static_cast<size_t>(e)], 1e-5) << "dim " << e;
    }
}

#ifdef H2OKV_KERNELS_X86
// The AVX2 turn_rows against the reference, bit for bit: every KV type, both pairings, rotated dims that fill
// 8-lane chunks and ones that leave a tail, turns of 0 (decode only) and not, slots in any order; rows not
// named stay untouched.
TEST(TurnRows, Avx2EqualsReferenceBitForBit) {
    if (!core::cpu_supports(core::cpu_isa::avx2)) GTEST_SKIP() << "CPU has no AVX2";
    const int cap = 40;
    const int n_tables = 9;
    for (core::tensor_type type : {core::tensor_type::f32, core::tensor_type::f16, core::tensor_type::q8_0}) {
        for (int head_dim : {8, 32, 64, 96, 128}) {
            if (type == core::tensor_type::q8_0 && head_dim % 32 != 0) continue;
            for (int rope_dim : {2, 6, 8, 16, 24, head_dim / 2, head_dim}) {
                if (rope_dim > head_dim || rope_dim % 2 != 0) continue;
                for (rope_pairing pairing : {rope_pairing::normal, rope_pairing::neox}) {
                    const auto seed = static_cast<uint32_t>(head_dim * 131 + rope_dim);
                    const test_support::encoded_matrix m =
                        test_support::encode_matrix(type, cap, head_dim, seed, 4);
                    const kv_rows k{type, m.bytes.data(), m.row_bytes};
                    const std::vector<float> tables =
                        random_floats(static_cast<size_t>(n_tables) * 2 * rope_dim, seed + 1);
                    std::vector<int32_t> slots, turns;
                    for (int s = cap - 1; s >= 0; s -= 3) {
                        slots.push_back(s);
                        turns.push_back(static_cast<int32_t>(slots.size() % n_tables));
                    }
                    const auto n = static_cast<int>(slots.size());
                    std::vector<float> want(static_cast<size_t>(cap * head_dim), -7.0f);
                    std::vector<float> got = want;
                    ref::turn_rows(k, head_dim, slots.data(), turns.data(), n, rope_dim, pairing,
                                   tables.data(), want.data());
                    avx2::turn_rows(k, head_dim, slots.data(), turns.data(), n, rope_dim, pairing,
                                    tables.data(), got.data());
                    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                        << core::tensor_type_label(type) << " head_dim " << head_dim << " rope_dim "
                        << rope_dim << (pairing == rope_pairing::normal ? " normal" : " neox");
                }
            }
        }
    }
}
#endif

// exp(x_i - m) / sum, exact in long double for the same float differences x_i - m the kernels form.
std::vector<long double> softmax_exact(const std::vector<float>& x) {
    float m = x[0];
    for (float v : x) m = std::max(m, v);
    std::vector<long double> e(x.size());
    long double sum = 0;
    for (size_t i = 0; i < x.size(); ++i) sum += e[i] = std::exp(static_cast<long double>(x[i] - m));
    for (auto& v : e) v /= sum;
    return e;
}

TEST(Softmax, ReferenceMatchesFormula) {
    for (int n : {1, 2, 5, 8, 9, 100, 1000, 4097}) {
        const std::vector<float> x =
            random_floats(static_cast<size_t>(n), static_cast<uint32_t>(3 * n), 4.0f);
        const std::vector<long double> exact = softmax_exact(x);
        std::vector<float> got = x;
        ref::softmax(got.data(), n);
        for (int i = 0; i < n; ++i) {
            // expf (< 1 ulp in glibc) + the final product and its rounding; the double sum adds n * 2^-53.
            ASSERT_LE(std::fabs(got[i] - exact[i]), gamma_k(3) * exact[i] + 1e-40) << "n " << n << " i " << i;
        }
    }
}

// The vector exp's relative error: Cephes documents a peak of 1.3u for this polynomial evaluated in float;
// the two-step Cody-Waite reduction (|r| <= ln2/2, the rounding of r relayed as a relative error of at most
// u * |r| < 0.35u) and the polynomial's float evaluation bring it under 3u (the largest seen over every 7th
// float of [-87, 0] is 1.99u).
constexpr double exp_rel_error = 3 * u;

#ifdef H2OKV_KERNELS_X86

TEST(VectorExp, RelativeErrorBelowBound) {
    if (!core::cpu_supports(core::cpu_isa::avx2)) GTEST_SKIP() << "CPU has no AVX2";
    std::vector<float> x;
    for (uint32_t bits = 0x80000000u;; bits += 4093) {  // every 4093rd float from -0 down to -87
        const float v = std::bit_cast<float>(bits);
        if (v < -87.0f) break;
        x.push_back(v);
    }
    for (int k = 1; k < 250; ++k) {  // around the reduction's interval ends, -(k + 1/2) ln 2
        const float edge = static_cast<float>(-(k + 0.5) * 0.6931471805599453);
        x.push_back(std::nextafter(edge, 0.0f));
        x.push_back(edge);
        x.push_back(std::nextafter(edge, -1.0f));
    }
    std::vector<float> y(x.size());
    avx2::exp_nonpositive(x.data(), static_cast<int>(x.size()), y.data());
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        if (x[i] < -87.0f) {
            EXPECT_EQ(y[i], 0.0f) << x[i];
            continue;
        }
        const long double e = std::exp(static_cast<long double>(x[i]));
        const double rel = static_cast<double>(std::fabs(y[i] - e) / e);
        worst = std::max(worst, rel);
        ASSERT_LE(rel, exp_rel_error)
            << "exp(" << x[i] << ") = " << y[i] << ", exact " << static_cast<double>(e);
    }
    EXPECT_GT(x.size(), 200000u);
    EXPECT_GT(worst, 0.0);  // the test would not notice a broken comparison otherwise
}

TEST(Softmax, Avx2MatchesReference) {
    if (!core::cpu_supports(core::cpu_isa::avx2)) GTEST_SKIP() << "CPU has no AVX2";
    for (int n : {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 100, 1000, 4096, 4099}) {
        for (float spread : {0.1f, 4.0f, 40.0f}) {
            const std::vector<float> x =
                random_floats(static_cast<size_t>(n), static_cast<uint32_t>(n), spread);
            std::vector<float> a = x;
            std::vector<float> r = x;
            avx2::softmax(a.data(), n);
            ref::softmax(r.data(), n);
            // Each weight: its exp (exp_rel_error vs the reference's < 1u), the float lane sum (gamma(n/16 +
            // 5) relative, two lane sets of 8 then the horizontal sum), the reciprocal and the product (2u),
            // and the reference's own 3u.
            const double rel = 2 * exp_rel_error + gamma_k(n / 16.0 + 5) + 6 * u;
            for (int i = 0; i < n; ++i) {
                // Terms under e^-87 are flushed to 0 by the vector exp (absolute error < 2e-38).
                ASSERT_LE(std::fabs(a[i] - r[i]), rel * r[i] + 2e-38)
                    << "n " << n << " spread " << spread << " i " << i << ": " << a[i] << " vs " << r[i];
            }
        }
    }
}
#endif

TEST(Softmax, DispatchedSumsToOne) {
    std::vector<float> x = random_floats(1001, 5, 3.0f);
    softmax(x.data(), 1001);
    double s = 0;
    for (float v : x) {
        ASSERT_GE(v, 0.0f);
        s += v;
    }
    EXPECT_NEAR(s, 1.0, 1e-5);
}

TEST(Swiglu, MatchesFormula) {
    std::vector<float> gate = random_floats(1000, 1, 5.0f);
    const std::vector<float> up = random_floats(1000, 2, 2.0f);
    gate[0] = -100.0f;  // exp(100) overflows float: silu must still go to -0, not NaN
    gate[1] = 100.0f;
    gate[2] = 0.0f;
    gate[3] = -0.0f;
    gate[4] = -87.5f;  // around the polynomial exp's underflow cut
    gate[5] = 88.0f;
    for (const auto& [name, fn] : swiglu_variants) {
        // The reference: expf (1u), 1 + e (1u), the division (1u), the product (1u), +1u slack for expf's
        // error amplified by e / (1 + e) <= 1. The SIMD variant: its polynomial exp (exp_rel_error, passed on
        // at most once by e / (1 + e) or 1 / (1 + e)), 1 + e, the division and two products (4u).
        const double bound = std::string(name) == "reference" ? gamma_k(5) : gamma_k(4) + exp_rel_error;
        for (int n : {1000, 7, 13}) {
            std::vector<float> out(static_cast<size_t>(n));
            fn(gate.data(), up.data(), n, out.data());
            for (int i = 0; i < n; ++i) {
                const long double g = gate[i];
                const long double exact = g / (1.0L + std::exp(-g)) * up[i];
                // The polynomial exp gives 0 below -87, so the SIMD variant flushes silu(g) * up to 0 for
                // g < -87, an absolute error under |g * up| * exp(-87).
                const double flush = std::string(name) == "reference" || gate[i] >= -87.0f
                                         ? 0.0
                                         : std::fabs(static_cast<double>(gate[i]) * up[i]) * std::exp(-87.0);
                ASSERT_LE(std::fabs(out[i] - exact), bound * std::fabs(exact) + 1e-37 + flush)
                    << name << " " << i << " gate " << gate[i];
            }
            std::vector<float> aliased(gate.begin(), gate.begin() + n);
            fn(aliased.data(), up.data(), n, aliased.data());
            EXPECT_EQ(std::memcmp(aliased.data(), out.data(), static_cast<size_t>(n) * 4), 0)
                << name << " aliasing out = gate";
        }
    }
}

}  // namespace
}  // namespace h2okv::kernels
