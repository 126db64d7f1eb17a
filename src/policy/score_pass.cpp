// The score pass in three variants: a scalar reference, AVX2 and AVX-512, chosen once at run time.
//
// The SIMD variants keep four independent running minima, each a vector of (score, position, slot) lanes:
// one running minimum is a loop-carried chain (compare, mask, blend) slower than the arithmetic it guards.
// The minima merge at the end by the same total order (score, then position), so the order of the merge does
// not matter and every variant returns the same slot.
#include "policy/score_pass.h"

#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "h2okv/core/cpu_isa.h"

// Contraction would fuse score * decay + row into one rounding on FMA targets and break bit-identity with
// every other implementation of the contract. The build passes -ffp-contract=off too; this keeps the file
// right under any flags (an engine embedding the library may build it with its own).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

// GCC 12's AVX-512 intrinsics pass `_mm512_undefined_*()` as the ignored source of their unmasked forms,
// which -Wmaybe-uninitialized reports at every use (as in the kernels' AVX-512 files).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define H2OKV_POLICY_X86 1
#include <immintrin.h>
#else
#define H2OKV_POLICY_X86 0
#endif

namespace h2okv::policy::detail {
namespace {

constexpr double k_inf = std::numeric_limits<double>::infinity();
constexpr int64_t k_no_pos = std::numeric_limits<int64_t>::max();

// The running minimum by (score, position). A NaN score never wins.
struct lowest {
    double score = k_inf;
    int64_t pos = k_no_pos;
    int32_t slot = -1;

    void offer(double v, int64_t p, int32_t s) {
        if (v < score || (v == score && p < pos)) {
            score = v;
            pos = p;
            slot = s;
        }
    }
};

struct scalar_impl {
    template <bool kUpdate, bool kDecay, bool kFind>
    static int32_t pass(double* score, const double* row, const int64_t* pos, int32_t n, double decay,
                        int64_t lo, int64_t hi) {
        lowest best;
        for (int32_t s = 0; s < n; ++s) {
            double v = score[s];
            if constexpr (kUpdate) {
                if constexpr (kDecay) v = v * decay;
                v = v + row[s];
                score[s] = v;
            }
            if constexpr (kFind) {
                const int64_t p = pos[s];
                if (p >= lo && p < hi) best.offer(v, p, s);
            }
        }
        return best.slot;
    }
    static void count_older(const int64_t* pos, int32_t n, int64_t victim, int32_t* drop) {
        for (int32_t s = 0; s < n; ++s) drop[s] += static_cast<int32_t>(pos[s] > victim);
    }
};

#if H2OKV_POLICY_X86

#define H2OKV_AVX2 __attribute__((target("avx2")))
#define H2OKV_AVX512 __attribute__((target("avx512f")))

struct lanes4 {
    __m256d score;
    __m256i pos;
    __m256i slot;
};

H2OKV_AVX2 inline void offer_lanes(lowest& best, const lanes4& x) {
    alignas(32) double sc[4];
    alignas(32) int64_t ps[4], sl[4];
    _mm256_store_pd(sc, x.score);
    _mm256_store_si256(reinterpret_cast<__m256i*>(ps), x.pos);
    _mm256_store_si256(reinterpret_cast<__m256i*>(sl), x.slot);
    for (int l = 0; l < 4; ++l) {
        if (sl[l] >= 0) best.offer(sc[l], ps[l], static_cast<int32_t>(sl[l]));
    }
}

template <bool kUpdate, bool kDecay, bool kFind>
H2OKV_AVX2 inline void step4(lanes4& b, double* score, const double* row, const int64_t* pos, int32_t s,
                             __m256d decay, __m256i lo_minus_1, __m256i hi, __m256i slots) {
    __m256d v = _mm256_loadu_pd(score + s);
    if constexpr (kUpdate) {
        if constexpr (kDecay) v = _mm256_mul_pd(v, decay);
        v = _mm256_add_pd(v, _mm256_loadu_pd(row + s));
        _mm256_storeu_pd(score + s, v);
    }
    if constexpr (kFind) {
        const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pos + s));
        const __m256i ok = _mm256_and_si256(_mm256_cmpgt_epi64(p, lo_minus_1), _mm256_cmpgt_epi64(hi, p));
        const __m256i lt = _mm256_castpd_si256(_mm256_cmp_pd(v, b.score, _CMP_LT_OQ));
        const __m256i eq = _mm256_castpd_si256(_mm256_cmp_pd(v, b.score, _CMP_EQ_OQ));
        const __m256i older = _mm256_cmpgt_epi64(b.pos, p);
        const __m256i take = _mm256_and_si256(ok, _mm256_or_si256(lt, _mm256_and_si256(eq, older)));
        b.score = _mm256_blendv_pd(b.score, v, _mm256_castsi256_pd(take));
        b.pos = _mm256_blendv_epi8(b.pos, p, take);
        b.slot = _mm256_blendv_epi8(b.slot, slots, take);
    }
}

struct avx2_impl {
    template <bool kUpdate, bool kDecay, bool kFind>
    H2OKV_AVX2 static int32_t pass(double* score, const double* row, const int64_t* pos, int32_t n,
                                   double decay, int64_t lo, int64_t hi) {
        const __m256d d = _mm256_set1_pd(decay);
        const __m256i lo_minus_1 = _mm256_set1_epi64x(lo - 1);
        const __m256i hiv = _mm256_set1_epi64x(hi);
        const __m256i four = _mm256_set1_epi64x(4);
        // Four named accumulators (not an array) so that they stay in registers.
        const lanes4 none = {_mm256_set1_pd(k_inf), _mm256_set1_epi64x(k_no_pos), _mm256_set1_epi64x(-1)};
        lanes4 b0 = none, b1 = none, b2 = none, b3 = none;
        __m256i slots = _mm256_setr_epi64x(0, 1, 2, 3);
        int32_t s = 0;
        for (; s + 16 <= n; s += 16) {
            step4<kUpdate, kDecay, kFind>(b0, score, row, pos, s, d, lo_minus_1, hiv, slots);
            slots = _mm256_add_epi64(slots, four);
            step4<kUpdate, kDecay, kFind>(b1, score, row, pos, s + 4, d, lo_minus_1, hiv, slots);
            slots = _mm256_add_epi64(slots, four);
            step4<kUpdate, kDecay, kFind>(b2, score, row, pos, s + 8, d, lo_minus_1, hiv, slots);
            slots = _mm256_add_epi64(slots, four);
            step4<kUpdate, kDecay, kFind>(b3, score, row, pos, s + 12, d, lo_minus_1, hiv, slots);
            slots = _mm256_add_epi64(slots, four);
        }
        for (; s + 4 <= n; s += 4) {
            step4<kUpdate, kDecay, kFind>(b0, score, row, pos, s, d, lo_minus_1, hiv, slots);
            slots = _mm256_add_epi64(slots, four);
        }
        lowest best;
        if constexpr (kFind) {
            offer_lanes(best, b0);
            offer_lanes(best, b1);
            offer_lanes(best, b2);
            offer_lanes(best, b3);
        }
        for (; s < n; ++s) {
            double v = score[s];
            if constexpr (kUpdate) {
                if constexpr (kDecay) v = v * decay;
                v = v + row[s];
                score[s] = v;
            }
            if constexpr (kFind) {
                if (pos[s] >= lo && pos[s] < hi) best.offer(v, pos[s], s);
            }
        }
        return best.slot;
    }
    H2OKV_AVX2 static void count_older(const int64_t* pos, int32_t n, int64_t victim, int32_t* drop) {
        const __m256i v = _mm256_set1_epi64x(victim);
        int32_t s = 0;
        for (; s + 8 <= n; s += 8) {
            // Two vectors of 64-bit masks (-1 where older) to eight 32-bit ones, in slot order.
            const __m256i m0 =
                _mm256_cmpgt_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pos + s)), v);
            const __m256i m1 =
                _mm256_cmpgt_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pos + s + 4)), v);
            const __m256i m =
                _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(
                                             _mm256_castsi256_ps(m0), _mm256_castsi256_ps(m1), 0x88)),
                                         0xD8);
            auto* d = reinterpret_cast<__m256i*>(drop + s);
            _mm256_storeu_si256(d, _mm256_sub_epi32(_mm256_loadu_si256(d), m));
        }
        for (; s < n; ++s) drop[s] += static_cast<int32_t>(pos[s] > victim);
    }
};

struct lanes8 {
    __m512d score;
    __m512i pos;
    __m512i slot;
};

H2OKV_AVX512 inline void offer_lanes(lowest& best, const lanes8& x) {
    alignas(64) double sc[8];
    alignas(64) int64_t ps[8], sl[8];
    _mm512_store_pd(sc, x.score);
    _mm512_store_si512(ps, x.pos);
    _mm512_store_si512(sl, x.slot);
    for (int l = 0; l < 8; ++l) {
        if (sl[l] >= 0) best.offer(sc[l], ps[l], static_cast<int32_t>(sl[l]));
    }
}

// Lanes outside `live` are neither loaded nor stored (the tail of the array).
template <bool kUpdate, bool kDecay, bool kFind>
H2OKV_AVX512 inline void step8(lanes8& b, double* score, const double* row, const int64_t* pos, int32_t s,
                               __mmask8 live, __m512d decay, __m512i lo, __m512i span, __m512i slots) {
    __m512d v = _mm512_maskz_loadu_pd(live, score + s);
    if constexpr (kUpdate) {
        if constexpr (kDecay) v = _mm512_mul_pd(v, decay);
        v = _mm512_add_pd(v, _mm512_maskz_loadu_pd(live, row + s));
        _mm512_mask_storeu_pd(score + s, live, v);
    }
    if constexpr (kFind) {
        const __m512i p = _mm512_maskz_loadu_epi64(live, pos + s);
        // lo <= p < lo + span as one unsigned compare; free slots (-1) wrap around to huge values.
        const __mmask8 ok = live & _mm512_cmp_epu64_mask(_mm512_sub_epi64(p, lo), span, _MM_CMPINT_LT);
        const __mmask8 lt = _mm512_mask_cmp_pd_mask(ok, v, b.score, _CMP_LT_OQ);
        const __mmask8 eq = _mm512_mask_cmp_pd_mask(ok, v, b.score, _CMP_EQ_OQ);
        const __mmask8 older = _mm512_mask_cmp_epi64_mask(eq, p, b.pos, _MM_CMPINT_LT);
        const __mmask8 take = lt | older;
        b.score = _mm512_mask_mov_pd(b.score, take, v);
        b.pos = _mm512_mask_mov_epi64(b.pos, take, p);
        b.slot = _mm512_mask_mov_epi64(b.slot, take, slots);
    }
}

struct avx512_impl {
    template <bool kUpdate, bool kDecay, bool kFind>
    H2OKV_AVX512 static int32_t pass(double* score, const double* row, const int64_t* pos, int32_t n,
                                     double decay, int64_t lo, int64_t hi) {
        const __m512d d = _mm512_set1_pd(decay);
        const __m512i lov = _mm512_set1_epi64(lo);
        const __m512i span = _mm512_set1_epi64(hi - lo);
        const __m512i eight = _mm512_set1_epi64(8);
        // Four named accumulators (not an array) so that they stay in registers.
        const lanes8 none = {_mm512_set1_pd(k_inf), _mm512_set1_epi64(k_no_pos), _mm512_set1_epi64(-1)};
        lanes8 b0 = none, b1 = none, b2 = none, b3 = none;
        __m512i slots = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
        int32_t s = 0;
        for (; s + 32 <= n; s += 32) {
            step8<kUpdate, kDecay, kFind>(b0, score, row, pos, s, 0xff, d, lov, span, slots);
            slots = _mm512_add_epi64(slots, eight);
            step8<kUpdate, kDecay, kFind>(b1, score, row, pos, s + 8, 0xff, d, lov, span, slots);
            slots = _mm512_add_epi64(slots, eight);
            step8<kUpdate, kDecay, kFind>(b2, score, row, pos, s + 16, 0xff, d, lov, span, slots);
            slots = _mm512_add_epi64(slots, eight);
            step8<kUpdate, kDecay, kFind>(b3, score, row, pos, s + 24, 0xff, d, lov, span, slots);
            slots = _mm512_add_epi64(slots, eight);
        }
        for (; s < n; s += 8) {
            const int32_t left = n - s;
            const auto live = static_cast<__mmask8>(left >= 8 ? 0xff : (1u << left) - 1u);
            step8<kUpdate, kDecay, kFind>(b0, score, row, pos, s, live, d, lov, span, slots);
            slots = _mm512_add_epi64(slots, eight);
        }
        lowest best;
        if constexpr (kFind) {
            offer_lanes(best, b0);
            offer_lanes(best, b1);
            offer_lanes(best, b2);
            offer_lanes(best, b3);
        }
        return best.slot;
    }
    H2OKV_AVX512 static void count_older(const int64_t* pos, int32_t n, int64_t victim, int32_t* drop) {
        const __m512i v = _mm512_set1_epi64(victim);
        const __m512i one = _mm512_set1_epi32(1);
        for (int32_t s = 0; s < n; s += 16) {
            const int32_t left = n - s;
            const auto live = static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1u);
            const auto lo = static_cast<__mmask8>(live), hi = static_cast<__mmask8>(live >> 8);
            const __mmask8 k0 = _mm512_mask_cmpgt_epi64_mask(lo, _mm512_maskz_loadu_epi64(lo, pos + s), v);
            const __mmask8 k1 =
                _mm512_mask_cmpgt_epi64_mask(hi, _mm512_maskz_loadu_epi64(hi, pos + s + 8), v);
            const auto k = static_cast<__mmask16>(k0 | (static_cast<unsigned>(k1) << 8));
            const __m512i d = _mm512_maskz_loadu_epi32(live, drop + s);
            _mm512_mask_storeu_epi32(drop + s, live, _mm512_mask_add_epi32(d, k, d, one));
        }
    }
};

#endif  // H2OKV_POLICY_X86

template <class Impl>
struct entry_points {
    static void add_row(double* score, const double* row, int32_t n, double decay) {
        if (decay == 1.0) {
            Impl::template pass<true, false, false>(score, row, nullptr, n, decay, 0, 0);
        } else {
            Impl::template pass<true, true, false>(score, row, nullptr, n, decay, 0, 0);
        }
    }
    static int32_t add_row_find_lowest(double* score, const double* row, const int64_t* pos, int32_t n,
                                       double decay, int64_t lo, int64_t hi) {
        if (hi < lo) hi = lo;
        if (decay == 1.0) return Impl::template pass<true, false, true>(score, row, pos, n, decay, lo, hi);
        return Impl::template pass<true, true, true>(score, row, pos, n, decay, lo, hi);
    }
    static int32_t find_lowest(const double* score, const int64_t* pos, int32_t n, int64_t lo, int64_t hi) {
        if (hi <= lo) return -1;
        // Without kUpdate the pass only reads `score`.
        return Impl::template pass<false, false, true>(const_cast<double*>(score), nullptr, pos, n, 1.0, lo,
                                                       hi);
    }
    static constexpr score_pass_fns fns(const char* isa) {
        return {isa, &add_row, &add_row_find_lowest, &find_lowest, &Impl::count_older};
    }
};

constexpr score_pass_fns k_scalar = entry_points<scalar_impl>::fns("scalar");
#if H2OKV_POLICY_X86
constexpr score_pass_fns k_avx2 = entry_points<avx2_impl>::fns("avx2");
constexpr score_pass_fns k_avx512 = entry_points<avx512_impl>::fns("avx512");
#endif

std::vector<const score_pass_fns*> supported_variants() {
    std::vector<const score_pass_fns*> v{&k_scalar};
#if H2OKV_POLICY_X86
    if (core::cpu_supports(core::cpu_isa::avx2)) v.push_back(&k_avx2);
    if (core::cpu_supports(core::cpu_isa::avx512)) v.push_back(&k_avx512);
#endif
    return v;
}

}  // namespace

std::span<const score_pass_fns* const> score_pass_variants() {
    static const std::vector<const score_pass_fns*> variants = supported_variants();
    return variants;
}

namespace {

// add_weights over slots[j0, j1), offering the evictable slots to `best`.
template <bool kFind, int kHeads>
void add_weights_of(double* score, const int64_t* pos, const int32_t* slots, int32_t j0, int32_t j1,
                    const float* const* heads, int n_heads, int64_t lo, int64_t hi, lowest& best) {
    const int nh = kHeads > 0 ? kHeads : n_heads;
    for (int32_t j = j0; j < j1; ++j) {
        double r = 0.0;
        for (int h = 0; h < nh; ++h) r += static_cast<double>(heads[h][j]);
        const int32_t s = slots[j];
        const double v = score[s] + r;
        score[s] = v;
        if constexpr (kFind) {
            const int64_t p = pos[s];
            if (p >= lo && p < hi) best.offer(v, p, s);
        }
    }
}

#if H2OKV_POLICY_X86

// Eight attended slots at a time where they are eight consecutive slots (a unit's kept slots are ascending
// and, under a budget, mostly dense): plain loads and stores of their scores and positions, the heads' sums
// in double lanes in head order; other runs go to add_weights_of.
template <bool kFind, int kHeads>
__attribute__((target("avx512f,avx2"))) int32_t add_weights_avx512(double* score, const int64_t* pos,
                                                                   const int32_t* slots, int32_t n,
                                                                   const float* const* heads, int n_heads,
                                                                   int64_t lo, int64_t hi) {
    const int nh = kHeads > 0 ? kHeads : n_heads;
    const __m512i lov = _mm512_set1_epi64(lo);
    const __m512i span = _mm512_set1_epi64(hi - lo);
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m512i iota64 = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
    lanes8 b = {_mm512_set1_pd(k_inf), _mm512_set1_epi64(k_no_pos), _mm512_set1_epi64(-1)};
    lowest best;
    int32_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const int32_t s0 = slots[j];
        const __m256i run = _mm256_add_epi32(_mm256_set1_epi32(s0), iota);
        const __m256i got = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(slots + j));
        if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(got, run)) != -1) {
            add_weights_of<kFind, kHeads>(score, pos, slots, j, j + 8, heads, n_heads, lo, hi, best);
            continue;
        }
        __m512d r = _mm512_setzero_pd();
        for (int h = 0; h < nh; ++h) r = _mm512_add_pd(r, _mm512_cvtps_pd(_mm256_loadu_ps(heads[h] + j)));
        const __m512d v = _mm512_add_pd(_mm512_loadu_pd(score + s0), r);
        _mm512_storeu_pd(score + s0, v);
        if constexpr (kFind) {
            const __m512i p = _mm512_loadu_si512(pos + s0);
            const __mmask8 ok = _mm512_cmp_epu64_mask(_mm512_sub_epi64(p, lov), span, _MM_CMPINT_LT);
            const __mmask8 lt = _mm512_mask_cmp_pd_mask(ok, v, b.score, _CMP_LT_OQ);
            const __mmask8 eq = _mm512_mask_cmp_pd_mask(ok, v, b.score, _CMP_EQ_OQ);
            const __mmask8 take = lt | _mm512_mask_cmp_epi64_mask(eq, p, b.pos, _MM_CMPINT_LT);
            b.score = _mm512_mask_mov_pd(b.score, take, v);
            b.pos = _mm512_mask_mov_epi64(b.pos, take, p);
            b.slot = _mm512_mask_mov_epi64(b.slot, take, _mm512_add_epi64(_mm512_set1_epi64(s0), iota64));
        }
    }
    add_weights_of<kFind, kHeads>(score, pos, slots, j, n, heads, n_heads, lo, hi, best);
    if constexpr (kFind) offer_lanes(best, b);
    return best.slot;
}

#endif

template <bool kFind, int kHeads>
int32_t add_weights_heads(double* score, const int64_t* pos, const int32_t* slots, int32_t n,
                          const float* const* heads, int n_heads, int64_t lo, int64_t hi) {
#if H2OKV_POLICY_X86
    static const bool wide = std::string_view(score_pass().isa) == "avx512";
    if (wide) return add_weights_avx512<kFind, kHeads>(score, pos, slots, n, heads, n_heads, lo, hi);
#endif
    lowest best;
    add_weights_of<kFind, kHeads>(score, pos, slots, 0, n, heads, n_heads, lo, hi, best);
    return best.slot;
}

template <bool kFind>
int32_t add_weights_find(double* score, const int64_t* pos, const int32_t* slots, int32_t n,
                         std::span<const float* const> heads, int64_t lo, int64_t hi) {
    const int nh = static_cast<int>(heads.size());
    switch (nh) {
        case 1: return add_weights_heads<kFind, 1>(score, pos, slots, n, heads.data(), nh, lo, hi);
        case 2: return add_weights_heads<kFind, 2>(score, pos, slots, n, heads.data(), nh, lo, hi);
        case 3: return add_weights_heads<kFind, 3>(score, pos, slots, n, heads.data(), nh, lo, hi);
        case 4: return add_weights_heads<kFind, 4>(score, pos, slots, n, heads.data(), nh, lo, hi);
        default: return add_weights_heads<kFind, 0>(score, pos, slots, n, heads.data(), nh, lo, hi);
    }
}

}  // namespace

int32_t add_weights(double* score, const int64_t* pos, const int32_t* slots, int32_t n,
                    std::span<const float* const> heads, bool find, int64_t lo, int64_t hi) {
    if (find && hi > lo) return add_weights_find<true>(score, pos, slots, n, heads, lo, hi);
    add_weights_find<false>(score, pos, slots, n, heads, lo, hi);
    return -1;
}

const score_pass_fns& score_pass() {
    static const score_pass_fns& chosen = []() -> const score_pass_fns& {
        const std::string_view want = core::cpu_isa_name(core::selected_isa());
        for (const score_pass_fns* f : score_pass_variants()) {
            if (want == f->isa) return *f;
        }
        return *score_pass_variants().front();  // a build without SIMD variants
    }();
    return chosen;
}

}  // namespace h2okv::policy::detail
