// Victim selections shared by the built-in policies (see unit_table.h).
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>

#include "policy/score_pass.h"
#include "policy/unit_table.h"

namespace h2okv::policy::detail {
namespace {

// Records victim_slot[0..count) (already chosen) with their positions, ascending by position.
void finish(unit_table& t, int count) {
    std::sort(t.victim_slot.begin(), t.victim_slot.begin() + count,
              [&](int32_t a, int32_t b) { return t.pos[a] < t.pos[b]; });
    for (int k = 0; k < count; ++k) t.victim_pos[k] = t.pos[t.victim_slot[k]];
    t.n_victims = count;
}

// The evictable slots into t.scratch; returns how many.
int32_t collect_candidates(unit_table& t) {
    int32_t m = 0;
    for (int32_t s = 0; s < t.high_water; ++s) {
        if (t.evictable(s)) t.scratch[m++] = s;
    }
    return m;
}

// Moves the `count` smallest candidates under `less` (a strict total order) to victim_slot: a selection in
// linear expected time, the candidates themselves stay unsorted.
template <class Less>
void select_smallest(unit_table& t, int count, Less less) {
    const int32_t m = collect_candidates(t);
    assert(m >= count && "validation guarantees enough evictable positions");
    count = std::min(count, static_cast<int>(m));
    std::nth_element(t.scratch, t.scratch + (count - 1), t.scratch + m, less);
    std::copy(t.scratch, t.scratch + count, t.victim_slot.begin());
    finish(t, count);
}

}  // namespace

void pick_oldest(unit_table& t, int count) {
    if (count == 1) {
        int32_t best = -1;
        if (t.scores_all_zero) {  // the vectorised pass finds the lowest position among equal scores
            best = score_pass().find_lowest(t.score.data(), t.pos.data(), t.high_water, t.evictable_lo,
                                            t.evictable_hi);
        } else {
            for (int32_t s = 0; s < t.high_water; ++s) {
                if (t.evictable(s) && (best < 0 || t.pos[s] < t.pos[best])) best = s;
            }
        }
        assert(best >= 0 && "validation guarantees an evictable position");
        if (best < 0) return;
        t.victim_slot[0] = best;
        finish(t, 1);
        return;
    }
    select_smallest(t, count, [&](int32_t a, int32_t b) { return t.pos[a] < t.pos[b]; });
}

void pick_lowest_scores(unit_table& t, int count) {
    if (count == 1) {
        int32_t best = t.lowest_hint;
        if (best < 0) {
            best = score_pass().find_lowest(t.score.data(), t.pos.data(), t.high_water, t.evictable_lo,
                                            t.evictable_hi);
        }
        // Only NaN scores (a broken model) leave no lowest score; fall back to the order NaN = +inf gives.
        if (best < 0) return pick_oldest(t, 1);
        t.victim_slot[0] = best;
        finish(t, 1);
        return;
    }
    // NaN compares as +inf so that the order stays total whatever the scores hold.
    auto key = [&](int32_t s) {
        const double v = t.score[s];
        return std::isnan(v) ? std::numeric_limits<double>::infinity() : v;
    };
    select_smallest(t, count, [&](int32_t a, int32_t b) {
        const double ka = key(a), kb = key(b);
        return ka < kb || (ka == kb && t.pos[a] < t.pos[b]);
    });
}

}  // namespace h2okv::policy::detail
