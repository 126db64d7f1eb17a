// One eviction unit's slot table, and the victim selections the built-in policies share.
//
// A policy's choose_victims hook reads the table and fills victim_slot/victim_pos; kv_policy does the rest
// (freeing slots, admitting the chunk). Policies that never read attention share one table for all units,
// since their decisions cannot differ between units.
//
//   void choose_victims(detail::unit_table& t, int count) const override {
//       detail::pick_lowest_scores(t, count);
//   }
#pragma once

#include <cstdint>
#include <vector>

namespace h2okv::policy::detail {

struct unit_table {
    // Per slot, `capacity` entries each.
    std::vector<int64_t> pos;   // the position held, -1 for a free slot
    std::vector<double> score;  // accumulated attention (0 for a free slot)
    // kept[0..n_kept): slots held before the chunk, in ascending order; during a chunk the chunk's slots
    // follow them (kv_policy::attended_slots).
    std::vector<int32_t> kept;
    // Rolling mode only (empty in original mode): the rolling position each slot's token was admitted at,
    // and how far it has dropped since (kv_policy::slot_turns); its rolling position is the difference.
    std::vector<int32_t> admitted;
    std::vector<int32_t> drop;
    // Candidates of a multi-victim selection: `capacity` entries that every table of a policy shares (victims
    // are chosen one table at a time).
    int32_t* scratch = nullptr;

    std::vector<int32_t> free_heap;  // free slots as a min-heap (std::greater), so newcomers take the lowest

    // Per chunk token, `max_chunk` entries each.
    std::vector<int32_t> chunk;        // chunk[0..n): the slot of chunk token i
    std::vector<int32_t> victim_slot;  // victim_slot[0..n_victims): the last end_chunk's victims' slots
    std::vector<int64_t> victim_pos;   // and their positions, ascending

    int unit = 0;  // the unit this table serves (0 for a table every unit shares)
    // The unit's own budget, recent and decay (clause 11; the policy's when the units are uniform), and its
    // slots (pos.size()).
    int64_t budget = 0;
    int64_t recent = 0;
    double decay = 1.0;
    int32_t n_kept = 0;
    int32_t n_chunk = 0;
    int32_t n_victims = 0;
    // 1 + the highest occupied slot: the dense score pass covers [0, high_water). Newcomers take the lowest
    // free slots, so with chunks of one token this stays at budget + 1; after a prefill chunk it can stay up
    // to budget + max_chunk for as long as heavy hitters hold high slots.
    int32_t high_water = 0;
    int64_t evictions = 0;

    // The current chunk: positions in [evictable_lo, evictable_hi) may be evicted (not a sink, not among the
    // `recent` largest positions held once the chunk is admitted).
    int64_t evictable_lo = 0;
    int64_t evictable_hi = 0;
    int32_t victims_due = 0;  // how many must leave at end_chunk
    // The evictable slot with the lowest (score, position), computed by the chunk's last row in the same
    // pass that added it, when exactly one victim is due; -1 when not known.
    int32_t lowest_hint = -1;
    // Set for the shared table of a policy that reads no attention: no score is ever written, so every score
    // is 0 and the lowest (score, position) is the lowest position.
    bool scores_all_zero = false;

    bool evictable(int32_t slot) const {
        const int64_t p = pos[slot];
        return p >= evictable_lo && p < evictable_hi;
    }
};

// The `count` evictable slots with the lowest (score, position): the lowest score leaves first, a tie
// evicts the lower position. One pass for a single victim; a partial selection (no sort of the candidates)
// for several.
void pick_lowest_scores(unit_table& t, int count);
// The `count` evictable slots with the lowest positions.
void pick_oldest(unit_table& t, int count);

}  // namespace h2okv::policy::detail
