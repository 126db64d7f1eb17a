// attend: variants against the reference (and the reference against a long-double formula) over K/V types
// (f32, f16, q8_0, q4_0, q4_1), head sizes with tails, group sizes and slot counts; a head's bits independent
// of the group it is computed in; the fused score_row bookkeeping; edge cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "h2okv/core/cpu_isa.h"
#include "h2okv/kernels/kernels.h"
#include "kernel_test_util.h"
#include "kernels/dispatch.h"
#include "kernels/ref/ref.h"
#ifdef H2OKV_KERNELS_X86
#include "kernels/x86/avx2.h"
#include "kernels/x86/avx512.h"
#endif

namespace h2okv::kernels {
namespace {

using core::tensor_type;
using test_support::encode_matrix;
using test_support::encoded_matrix;
using test_support::gamma_k;
using test_support::random_floats;
constexpr double u = test_support::unit_roundoff;

using attend_fn = void (*)(const float*, int, const kv_rows&, const kv_rows&, int, const int32_t*, int, float,
                           float*, float*, size_t, double*);

struct variant {
    const char* name;
    attend_fn fn;
};

std::vector<variant> all_variants() {
    std::vector<variant> v = {{"reference", &ref::attend}, {"dispatched", &attend}};
#ifdef H2OKV_KERNELS_X86
    if (core::cpu_supports(core::cpu_isa::avx2)) v.push_back({"avx2", &avx2::attend});
    if (core::cpu_supports(core::cpu_isa::avx512)) v.push_back({"avx512", &avx512::attend});
#endif
    return v;
}

// n_q queries, K/V stores of n_slots rows of one type (rows padded with garbage bytes, so the row stride is
// honoured) and a random subset of n slots in random order.
struct store {
    int head_dim = 0;
    int n_q = 0;
    std::vector<float> q;  // [n_q][head_dim]
    encoded_matrix k, v;   // .values: the decoded elements
    std::vector<int32_t> slots;

    kv_rows k_rows() const { return {k.type, k.bytes.data(), k.row_bytes}; }
    kv_rows v_rows() const { return {v.type, v.bytes.data(), v.row_bytes}; }
    float kd(int j, int i) const { return k.values[static_cast<size_t>(slots[j]) * head_dim + i]; }
    float vd(int j, int i) const { return v.values[static_cast<size_t>(slots[j]) * head_dim + i]; }
};

store make_store(tensor_type type, int head_dim, int n_q, int n_slots, int n, uint32_t seed,
                 float q_scale = 1.0f) {
    store s;
    s.head_dim = head_dim;
    s.n_q = n_q;
    s.q = random_floats(static_cast<size_t>(n_q) * head_dim, seed, q_scale);
    s.k = encode_matrix(type, n_slots, head_dim, seed + 1, 6);
    s.v = encode_matrix(type, n_slots, head_dim, seed + 2, 6);
    std::vector<int32_t> all(static_cast<size_t>(n_slots));
    std::iota(all.begin(), all.end(), 0);
    std::mt19937 rng(seed + 3);
    std::shuffle(all.begin(), all.end(), rng);
    s.slots.assign(all.begin(), all.begin() + n);
    return s;
}

// The head sizes a type supports among `dims`.
std::vector<int> dims_for(tensor_type t, std::initializer_list<int> dims) {
    std::vector<int> out;
    for (int d : dims) {
        if (attend_supports(t, d)) out.push_back(d);
    }
    return out;
}

constexpr tensor_type kTypes[] = {tensor_type::f32, tensor_type::f16, tensor_type::q8_0, tensor_type::q4_0,
                                  tensor_type::q4_1};

TEST(Attend, SupportsTheKvTypes) {
    EXPECT_TRUE(attend_supports(tensor_type::f32, 13));
    EXPECT_TRUE(attend_supports(tensor_type::f16, 13));
    EXPECT_TRUE(attend_supports(tensor_type::q8_0, 64));
    EXPECT_FALSE(attend_supports(tensor_type::q8_0, 48));
    EXPECT_TRUE(attend_supports(tensor_type::q4_0, 64));
    EXPECT_FALSE(attend_supports(tensor_type::q4_0, 48));
    EXPECT_TRUE(attend_supports(tensor_type::q4_1, 64));
    EXPECT_FALSE(attend_supports(tensor_type::q4_1, 48));
    EXPECT_FALSE(attend_supports(tensor_type::q4_k, 256));
    EXPECT_FALSE(attend_supports(tensor_type::f16, 0));
}

TEST(Attend, ReferenceMatchesFormula) {
    for (tensor_type type : kTypes) {
        for (int head_dim : dims_for(type, {1, 8, 13, 32, 64})) {
            for (int n : {1, 2, 9, 300}) {
                const store s =
                    make_store(type, head_dim, 2, n + 5, n, static_cast<uint32_t>(head_dim * 1000 + n), 2.0f);
                const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
                std::vector<float> out(static_cast<size_t>(2 * head_dim));
                std::vector<float> w(static_cast<size_t>(2 * n));
                ref::attend(s.q.data(), 2, s.k_rows(), s.v_rows(), head_dim, s.slots.data(), n, scale,
                            out.data(), w.data(), static_cast<size_t>(n), nullptr);
                for (int h = 0; h < 2; ++h) {
                    std::vector<long double> sc(static_cast<size_t>(n));
                    long double mx = -INFINITY;
                    for (int j = 0; j < n; ++j) {
                        long double d = 0;
                        for (int i = 0; i < head_dim; ++i)
                            d += static_cast<long double>(s.q[h * head_dim + i]) * s.kd(j, i);
                        sc[j] = d * scale;
                        mx = std::max(mx, sc[j]);
                    }
                    long double sum = 0;
                    double arg_error = 0;
                    for (int j = 0; j < n; ++j) {
                        sum += std::exp(sc[j] - mx);
                        // The score rounds to float (u|s_j|), so do the max (u|m|) and s_j - m (u|s_j - m|):
                        // each shifts exp's argument.
                        arg_error = std::max(arg_error,
                                             static_cast<double>(2 * u * (std::fabs(sc[j]) + std::fabs(mx))));
                    }
                    for (int j = 0; j < n; ++j) {
                        const long double wj = std::exp(sc[j] - mx) / sum;
                        // Argument errors of numerator and sum, then expf (1u each), the product and its
                        // rounding.
                        ASSERT_LE(std::fabs(w[h * n + j] - wj), (2 * arg_error + gamma_k(4)) * wj + 1e-40)
                            << "hd " << head_dim << " n " << n << " head " << h << " weight " << j;
                    }
                    for (int i = 0; i < head_dim; ++i) {
                        long double o = 0, m = 0;
                        for (int j = 0; j < n; ++j) {
                            o += static_cast<long double>(w[h * n + j]) * s.vd(j, i);
                            m += std::fabs(static_cast<long double>(w[h * n + j]) * s.vd(j, i));
                        }
                        // The double sum of the returned weights times the decoded values, rounded to float.
                        ASSERT_LE(std::fabs(out[h * head_dim + i] - o), u * std::fabs(o) + 1e-12 * m + 1e-40)
                            << "hd " << head_dim << " n " << n << " head " << h << " out " << i;
                    }
                }
            }
        }
    }
}

// Bound on |fast - ref| for one head's weights and output, from the operations of the fast path (see the
// derivation in each step below). Everything is in terms of the decoded K/V values, which both compute with
// exactly.
struct attend_bounds {
    std::vector<double> weight;  // per j
    std::vector<double> out;     // per d
};

attend_bounds bounds_for(const store& s, int h, int n, float scale, const float* w_ref) {
    const int hd = s.head_dim;
    const float* q = s.q.data() + static_cast<size_t>(h) * hd;
    // Scores: the fast dot keeps one accumulator per (head, slot), so each product passes through up to
    // ceil(hd/8) FMAs and a 3-level add tree, then the scale product; the reference rounds once. So
    // |ds_j| <= gamma(hd/8 + 5) * scale * sum_i |q_i k_ji| + 2u |s_j|.
    double ds = 0;
    double s_max = 0;
    for (int j = 0; j < n; ++j) {
        double a = 0;
        double dot = 0;
        for (int i = 0; i < hd; ++i) {
            a += std::fabs(static_cast<double>(q[i]) * s.kd(j, i));
            dot += static_cast<double>(q[i]) * s.kd(j, i);
        }
        s_max = std::max(s_max, std::fabs(dot * scale));
        ds = std::max(ds, gamma_k(hd / 8.0 + 5) * scale * a + 2 * u * std::fabs(dot * scale));
    }
    // s_j - max shifts by at most 2 * ds, and its float rounding (u * |s_j - max| <= 2u * s_max in each path)
    // differs; exp turns an absolute argument error into the same relative error, plus the vector exp's own
    // 3u (bounded in ops_test.cpp) and the reference's 1u. Normalising doubles the worst relative error
    // (numerator and sum), the float lane sum adds gamma(n/16 + 5), the reciprocal and product 2u, the
    // reference's rounding u.
    const double arg = 2 * ds + 4 * u * s_max;
    const double rel_w = 2 * (arg + 4 * u) + gamma_k(n / 16.0 + 5) + 3 * u;
    attend_bounds b;
    b.weight.resize(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) b.weight[j] = rel_w * w_ref[j] + 2e-38;  // the vector exp flushes below e^-87
    // Output: sum_j w_j v_jd with the weights' error, plus the fast path's float accumulation over n slots
    // (one fma per slot: gamma(n + 1)), plus the reference's final rounding.
    b.out.resize(static_cast<size_t>(hd));
    for (int d = 0; d < hd; ++d) {
        double m = 0;
        for (int j = 0; j < n; ++j) m += w_ref[j] * std::fabs(s.vd(j, d));
        b.out[d] = (rel_w + gamma_k(n + 2)) * m + 1e-37;
    }
    return b;
}

TEST(Attend, VariantsMatchReference) {
    int compared = 0;
    for (tensor_type type : kTypes) {
        for (int head_dim : dims_for(type, {1, 3, 8, 12, 16, 24, 32, 64, 80, 128})) {
            for (int n : {1, 2, 7, 8, 9, 17, 64, 129, 1000, 4096}) {
                for (int n_q : {1, 3, 4}) {
                    const float q_scale = n % 2 == 0 ? 0.5f : 4.0f;
                    const store s =
                        make_store(type, head_dim, n_q, n + 3, n,
                                   static_cast<uint32_t>(head_dim * 7919 + n * 13 + n_q), q_scale);
                    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
                    const auto stride = static_cast<size_t>(n) + 2;
                    std::vector<float> out_ref(static_cast<size_t>(n_q * head_dim));
                    std::vector<float> w_ref(stride * n_q);
                    ref::attend(s.q.data(), n_q, s.k_rows(), s.v_rows(), head_dim, s.slots.data(), n, scale,
                                out_ref.data(), w_ref.data(), stride, nullptr);
                    for (const variant& v : all_variants()) {
                        std::vector<float> out(static_cast<size_t>(n_q * head_dim) + 1, 9.0f);
                        std::vector<float> w(stride * n_q, 9.0f);
                        v.fn(s.q.data(), n_q, s.k_rows(), s.v_rows(), head_dim, s.slots.data(), n, scale,
                             out.data(), w.data(), stride, nullptr);
                        ASSERT_EQ(out[n_q * head_dim], 9.0f) << v.name << " wrote past out";
                        for (int h = 0; h < n_q; ++h) {
                            const float* wr = w_ref.data() + h * stride;
                            const float* wv = w.data() + h * stride;
                            ASSERT_EQ(wv[n], 9.0f) << v.name << " wrote past head " << h << "'s weights";
                            const attend_bounds b = bounds_for(s, h, n, scale, wr);
                            for (int j = 0; j < n; ++j) {
                                ASSERT_LE(std::fabs(wv[j] - wr[j]), b.weight[j])
                                    << v.name << " " << core::tensor_type_label(type) << " hd " << head_dim
                                    << " n " << n << " head " << h << " weight " << j;
                            }
                            for (int d = 0; d < head_dim; ++d) {
                                ASSERT_LE(std::fabs(out[h * head_dim + d] - out_ref[h * head_dim + d]),
                                          b.out[d])
                                    << v.name << " " << core::tensor_type_label(type) << " hd " << head_dim
                                    << " n " << n << " head " << h << " out " << d;
                            }
                        }
                        ++compared;
                    }
                }
            }
        }
    }
    EXPECT_GE(compared, 3 * 10 * 2 * 2);
}

using attend_turned_fn = void (*)(const float*, int, const kv_rows&, const kv_rows&, int, const int32_t*, int,
                                  const key_turns&, float, float*, float*, size_t, double*);

// attend_turned against its definition, bit for bit, on every ISA: turn_rows into an f32 copy of the keys,
// then attend over that copy and the decoded values (the loaders give the decoded floats, so the sums are
// the same). The ISA a shape lands on is the first, from the one called downward, whose vectors the rotated
// dims fill (the reference takes all). Every KV type, both pairings, rotated dims that fill 16 or 8 lanes or
// neither, turns of 0 (the chunk's own keys; their table the identity, their keys with -0 elements) and
// not, 1 to 3 heads, score rows summed.
TEST(AttendTurned, EqualsTurnRowsThenAttendBitForBit) {
    struct isa_fns {
        const char* name;
        attend_turned_fn turned;
        attend_fn plain;
        int lanes;  // 0: any shape
    };
    std::vector<isa_fns> isas = {{"reference", &ref::attend_turned, &ref::attend, 0}};
#ifdef H2OKV_KERNELS_X86
    if (core::cpu_supports(core::cpu_isa::avx2))
        isas.push_back({"avx2", &avx2::attend_turned, &avx2::attend, 8});
    if (core::cpu_supports(core::cpu_isa::avx512))
        isas.push_back({"avx512", &avx512::attend_turned, &avx512::attend, 16});
#endif
    const int n_tables = 11;
    int compared = 0;
    int fused = 0;
    for (tensor_type type : kTypes) {
        for (int head_dim : dims_for(type, {8, 16, 24, 32, 64, 128})) {
            for (int rope_dim : {head_dim, head_dim / 2, 16, 8, 6}) {
                if (rope_dim > head_dim || rope_dim % 2 != 0 || rope_dim == 0) continue;
                for (rope_pairing pairing : {rope_pairing::normal, rope_pairing::neox}) {
                    const auto fills = [&](int lanes) {
                        return lanes == 0 ||
                               (head_dim % lanes == 0 && rope_dim % lanes == 0 &&
                                (pairing == rope_pairing::normal || (rope_dim / 2) % lanes == 0));
                    };
                    for (int n : {1, 9, 70}) {
                        const int n_q = 1 + (n + head_dim / 8) % 3;
                        const auto seed = static_cast<uint32_t>(head_dim * 977 + rope_dim * 31 + n);
                        store s = make_store(type, head_dim, n_q, n + 5, n, seed);
                        // Random turns, but turn 0's table is the identity, as key_turns requires.
                        std::vector<float> tables =
                            random_floats(static_cast<size_t>(n_tables) * 2 * rope_dim, seed + 7);
                        for (int i = 0; i < 2 * rope_dim; ++i) tables[static_cast<size_t>(i)] = i < rope_dim;
                        // turn_rows takes the turns in attended order, key_turns by slot (the slots are
                        // a random subset in random order, so reading one for the other is caught); the
                        // slots nobody attends hold a turn no attended key has.
                        std::vector<int32_t> turns(static_cast<size_t>(n));
                        std::vector<int32_t> by_slot(static_cast<size_t>(n + 5), n_tables - 1);
                        for (int j = 0; j < n; ++j) {
                            turns[j] = j % 5 == 0 ? 0 : 1 + (j * 7 + n) % (n_tables - 2);
                            by_slot[static_cast<size_t>(s.slots[static_cast<size_t>(j)])] = turns[j];
                        }
                        // Keys of turn 0 with -0 elements (a pair and its neox partner), which the vector
                        // kernels turn to +0 and turn_rows keeps: the scores must not differ.
                        for (int j = 0; j < n; j += 5) {
                            if (type != tensor_type::f32 && type != tensor_type::f16) break;
                            const auto slot = static_cast<size_t>(s.slots[static_cast<size_t>(j)]);
                            for (int i : {0, 1, rope_dim / 2}) {
                                std::byte* e = s.k.bytes.data() + slot * s.k.row_bytes;
                                if (type == tensor_type::f32) {
                                    const float z = -0.0f;
                                    std::memcpy(e + 4 * i, &z, 4);
                                } else {
                                    const uint16_t z = 0x8000;
                                    std::memcpy(e + 2 * i, &z, 2);
                                }
                                s.k.values[slot * static_cast<size_t>(head_dim) + static_cast<size_t>(i)] =
                                    -0.0f;
                            }
                        }
                        const key_turns t{by_slot.data(), tables.data(), rope_dim, pairing};
                        // The definition: the turned keys as f32 rows, the decoded values as f32 rows.
                        std::vector<float> kf(static_cast<size_t>(n + 5) * head_dim, 0.0f);
                        ref::turn_rows(s.k_rows(), head_dim, s.slots.data(), turns.data(), n, rope_dim,
                                       pairing, tables.data(), kf.data());
                        const kv_rows k32{tensor_type::f32, reinterpret_cast<const std::byte*>(kf.data()),
                                          head_dim * sizeof(float)};
                        const kv_rows v32{tensor_type::f32,
                                          reinterpret_cast<const std::byte*>(s.v.values.data()),
                                          head_dim * sizeof(float)};
                        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
                        const auto stride = static_cast<size_t>(n);
                        for (size_t vi = 0; vi < isas.size(); ++vi) {
                            size_t lands = vi;
                            while (!fills(isas[lands].lanes)) --lands;
                            fused += lands == vi && vi > 0;
                            std::vector<float> out_want(static_cast<size_t>(n_q * head_dim)),
                                w_want(stride * n_q);
                            std::vector<double> row_want(static_cast<size_t>(n + 5), 0.25);
                            isas[lands].plain(s.q.data(), n_q, k32, v32, head_dim, s.slots.data(), n, scale,
                                              out_want.data(), w_want.data(), stride, row_want.data());
                            std::vector<float> out(out_want.size(), -1.0f), w(w_want.size(), -1.0f);
                            std::vector<double> row(row_want.size(), 0.25);
                            isas[vi].turned(s.q.data(), n_q, s.k_rows(), s.v_rows(), head_dim, s.slots.data(),
                                            n, t, scale, out.data(), w.data(), stride, row.data());
                            const std::string what = std::string(isas[vi].name) + " (lands on " +
                                                     isas[lands].name + ") " + core::tensor_type_label(type) +
                                                     " head_dim " + std::to_string(head_dim) + " rope_dim " +
                                                     std::to_string(rope_dim) +
                                                     (pairing == rope_pairing::normal ? " normal" : " neox") +
                                                     " n " + std::to_string(n);
                            ASSERT_EQ(0, std::memcmp(out.data(), out_want.data(), out.size() * sizeof(float)))
                                << what;
                            ASSERT_EQ(0, std::memcmp(w.data(), w_want.data(), w.size() * sizeof(float)))
                                << what;
                            ASSERT_EQ(0,
                                      std::memcmp(row.data(), row_want.data(), row.size() * sizeof(double)))
                                << what;
                            ++compared;
                        }
                    }
                }
            }
        }
    }
    EXPECT_GE(compared, 5 * 2 * 2 * 3);
    if (isas.size() > 1) {
        EXPECT_GT(fused, 0) << "no shape took a SIMD kernel's own turned path";
    }
}

// kernels::attend runs the variant set_isa selects (what H2OKV_ISA picks at start-up): the same bits as that
// variant called directly. The variants sum in different orders, so their bits differ on this input, and
// equal bits name the variant that ran.
TEST(Attend, DispatchUsesTheSelectedVariant) {
    const isa saved = active_isa();
    const int hd = 64, n_q = 2, n = 1000;
    const store s = make_store(tensor_type::q4_1, hd, n_q, n + 4, n, 99);
    auto run = [&](attend_fn fn) {
        std::vector<float> out(static_cast<size_t>(n_q * hd));
        std::vector<float> w(static_cast<size_t>(n_q * n));
        fn(s.q.data(), n_q, s.k_rows(), s.v_rows(), hd, s.slots.data(), n, 0.125f, out.data(), w.data(), n,
           nullptr);
        out.insert(out.end(), w.begin(), w.end());
        return out;
    };
    std::vector<std::pair<isa, attend_fn>> variants = {{isa::reference, &ref::attend}};
#ifdef H2OKV_KERNELS_X86
    if (core::cpu_supports(core::cpu_isa::avx2)) variants.push_back({isa::avx2, &avx2::attend});
    if (core::cpu_supports(core::cpu_isa::avx512)) variants.push_back({isa::avx512, &avx512::attend});
#endif
    std::vector<std::vector<float>> results;
    for (const auto& [id, fn] : variants) {
        SCOPED_TRACE(isa_name(id));
        ASSERT_TRUE(set_isa(id));
        const std::vector<float> want = run(fn);
        EXPECT_EQ(run(&attend), want);
        for (const auto& other : results) EXPECT_NE(other, want);
        results.push_back(want);
    }
    ASSERT_TRUE(set_isa(saved));
}

// A head's out and weights are the same bits alone (n_q = 1) as inside any group: callers split groups
// across threads freely and rely on it for thread-count independence.
TEST(Attend, HeadResultDoesNotDependOnTheGroup) {
    for (const variant& v : all_variants()) {
        for (tensor_type type : kTypes) {
            for (int head_dim : dims_for(type, {8, 24, 64, 128})) {
                const int n_q = 7, n = 301;
                const store s =
                    make_store(type, head_dim, n_q, n + 20, n, static_cast<uint32_t>(head_dim + 11));
                const float scale = 0.125f;
                std::vector<float> out(static_cast<size_t>(n_q * head_dim)), w(static_cast<size_t>(n_q * n));
                v.fn(s.q.data(), n_q, s.k_rows(), s.v_rows(), head_dim, s.slots.data(), n, scale, out.data(),
                     w.data(), n, nullptr);
                for (int h = 0; h < n_q; ++h) {
                    std::vector<float> o1(static_cast<size_t>(head_dim)), w1(static_cast<size_t>(n));
                    v.fn(s.q.data() + h * head_dim, 1, s.k_rows(), s.v_rows(), head_dim, s.slots.data(), n,
                         scale, o1.data(), w1.data(), n, nullptr);
                    EXPECT_EQ(std::memcmp(o1.data(), out.data() + h * head_dim, head_dim * sizeof(float)), 0)
                        << v.name << " " << core::tensor_type_label(type) << " hd " << head_dim << " head "
                        << h;
                    EXPECT_EQ(std::memcmp(w1.data(), w.data() + h * n, n * sizeof(float)), 0)
                        << v.name << " " << core::tensor_type_label(type) << " hd " << head_dim << " head "
                        << h;
                }
            }
        }
    }
}

TEST(Attend, ScoreRowReceivesExactlyTheReturnedWeightsInHeadOrder) {
    // Group sizes below, at and past the kernels' runs of four heads.
    for (const variant& v : all_variants()) {
        for (tensor_type type : kTypes) {
            for (int n_q : {1, 2, 3, 4, 5, 8}) {
                const int n_slots = 50, n = 31, hd = 32;
                const store s = make_store(type, hd, n_q, n_slots, n, 77);
                std::vector<double> row(static_cast<size_t>(n_slots));
                // Prior scores above 2^25, whose last bit lies above a weight's lowest bits, so each +=
                // rounds and the order the heads are added in shows in the bits.
                for (int i = 0; i < n_slots; ++i) row[i] = 3.4e7 + i / 3.0;
                const std::vector<double> before = row;
                std::vector<float> out(n_q * hd), w(n_q * n), out_null(n_q * hd), w_null(n_q * n);
                v.fn(s.q.data(), n_q, s.k_rows(), s.v_rows(), hd, s.slots.data(), n, 0.25f, out.data(),
                     w.data(), n, row.data());
                v.fn(s.q.data(), n_q, s.k_rows(), s.v_rows(), hd, s.slots.data(), n, 0.25f, out_null.data(),
                     w_null.data(), n, nullptr);
                // The bookkeeping must not change the attention itself.
                EXPECT_EQ(std::memcmp(out.data(), out_null.data(), out.size() * 4), 0) << v.name;
                EXPECT_EQ(std::memcmp(w.data(), w_null.data(), w.size() * 4), 0) << v.name;
                std::vector<bool> attended(static_cast<size_t>(n_slots), false);
                for (int j = 0; j < n; ++j) {
                    attended[s.slots[j]] = true;
                    double expect = before[s.slots[j]];
                    for (int h = 0; h < n_q; ++h) expect += static_cast<double>(w[h * n + j]);
                    EXPECT_EQ(row[s.slots[j]], expect) << v.name << " n_q " << n_q << " slot " << j;
                }
                for (int i = 0; i < n_slots; ++i) {
                    if (!attended[i]) {
                        EXPECT_EQ(row[i], before[i]) << v.name << " slot " << i << " was not attended";
                    }
                }
            }
        }
    }
}

TEST(Attend, EdgeCases) {
    for (const variant& v : all_variants()) {
        for (tensor_type type : kTypes) {
            const std::string name = core::tensor_type_label(type);
            // No slots: zero output, weights and score_row untouched.
            const store none = make_store(type, 32, 2, 4, 0, 4);
            std::vector<float> out(64, 5.0f);
            double row = 3.0;
            v.fn(none.q.data(), 2, none.k_rows(), none.v_rows(), 32, nullptr, 0, 1.0f, out.data(), nullptr, 0,
                 &row);
            for (float o : out) EXPECT_EQ(o, 0.0f) << v.name << " " << name;
            EXPECT_EQ(row, 3.0) << v.name << " " << name;
            // One slot: weight exactly 1, output exactly v's decoded row.
            const int hd = attend_supports(type, 13) ? 13 : 32;
            const store s = make_store(type, hd, 1, 4, 1, 5);
            std::vector<float> o(static_cast<size_t>(hd)), w1(1);
            std::vector<double> r(4, 0.0);
            v.fn(s.q.data(), 1, s.k_rows(), s.v_rows(), hd, s.slots.data(), 1, 0.3f, o.data(), w1.data(), 1,
                 r.data());
            EXPECT_EQ(w1[0], 1.0f) << v.name << " " << name;
            EXPECT_EQ(r[s.slots[0]], 1.0) << v.name << " " << name;
            for (int d = 0; d < hd; ++d) EXPECT_EQ(o[d], s.vd(0, d)) << v.name << " " << name;
            // Scores far apart: the losers underflow to 0 and the winner takes everything, without NaN.
            const store big = make_store(type, 32, 1, 16, 16, 6, 400.0f);
            std::vector<float> ob(32), wb(16);
            v.fn(big.q.data(), 1, big.k_rows(), big.v_rows(), 32, big.slots.data(), 16, 1.0f, ob.data(),
                 wb.data(), 16, nullptr);
            float sum = 0;
            for (float x : wb) {
                ASSERT_FALSE(std::isnan(x)) << v.name << " " << name;
                sum += x;
            }
            EXPECT_NEAR(sum, 1.0f, 1e-5f) << v.name << " " << name;
        }
    }
}

}  // namespace
}  // namespace h2okv::kernels
