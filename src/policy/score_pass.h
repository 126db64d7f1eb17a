// The per-slot score pass: the one loop on the decode path that touches every slot of a unit (and, in
// rolling mode, the renumber after an eviction).
//
// Arrays are slot-indexed with n entries: score (double, updated in place), row (double, the row increment,
// zero where the query did not attend) and pos (int64, -1 for a free slot). A slot is evictable when
// lo <= pos < hi. "Lowest" orders slots by (score, position): the contract's victim, ties to the lower
// position.
//
// Every variant computes score = score * decay + row with two roundings (never a fused multiply-add; the
// multiply is skipped when decay == 1), so all variants, the reference and any other implementation of the
// contract agree to the last bit.
//
//   const auto& pass = detail::score_pass();
//   int32_t victim = pass.add_row_find_lowest(score, row, pos, n, decay, lo, hi);
#pragma once

#include <cstdint>
#include <span>

namespace h2okv::policy::detail {

struct score_pass_fns {
    const char* isa;  // "scalar", "avx2", "avx512"
    // score[s] = score[s] * decay + row[s] for s in [0, n).
    void (*add_row)(double* score, const double* row, int32_t n, double decay);
    // add_row, then returns the lowest evictable slot (-1 when none), in the same pass.
    int32_t (*add_row_find_lowest)(double* score, const double* row, const int64_t* pos, int32_t n,
                                   double decay, int64_t lo, int64_t hi);
    // The lowest evictable slot (-1 when none).
    int32_t (*find_lowest)(const double* score, const int64_t* pos, int32_t n, int64_t lo, int64_t hi);
    // drop[s] += 1 for each s in [0, n) with pos[s] > victim (a rolling-mode renumber after one eviction;
    // integers, so every variant gives the same counts).
    void (*count_older)(const int64_t* pos, int32_t n, int64_t victim, int32_t* drop);
};

// The variant of core::selected_isa(): the fastest this CPU runs, or H2OKV_ISA's.
const score_pass_fns& score_pass();
// Every variant this CPU runs, the scalar reference first (the tests compare them).
std::span<const score_pass_fns* const> score_pass_variants();

// One query's increment given as its attention weights over the slots it attended (slots[0, n), each once):
// score[slots[j]] += r_j with r_j = ((0 + heads[0][j]) + heads[1][j]) + ... in double, the row add_row would
// be given, for decay 1 only (where add_row leaves a slot the query did not attend as it was). When `find`,
// returns the lowest evictable slot among the attended ones (-1 when none; the lowest of the unit when the
// query attended every occupied slot); -1 otherwise. One variant: its reads follow `slots`.
int32_t add_weights(double* score, const int64_t* pos, const int32_t* slots, int32_t n,
                    std::span<const float* const> heads, bool find, int64_t lo, int64_t hi);

}  // namespace h2okv::policy::detail
