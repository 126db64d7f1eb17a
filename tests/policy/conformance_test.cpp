// The conformance suite: every registered policy (policy_names()) against the brute-force reference and
// the contract's invariants, over random attention, parameters, chunk sizes, GQA layouts and granularities.
// A new policy is picked up by these tests as soon as its policies.def line exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "h2okv/policy/policy.h"
#include "policy/policy_test_support.h"
#include "policy/reference_policy.h"

namespace h2okv::testing {
namespace {

using policy::granularity;
using policy::kv_policy;
using policy::layout;
using policy::params;

constexpr granularity k_granularities[] = {granularity::head, granularity::layer, granularity::model};

// (n_layer, n_kv_head, n_head): one head; GQA 2:1 over two layers; MQA (one KV head, three query heads);
// two KV heads of three query heads each.
constexpr int k_layouts[][3] = {{1, 1, 1}, {2, 2, 4}, {2, 1, 3}, {1, 2, 6}};

bool same_bits(double a, double b) {
    return std::memcmp(&a, &b, sizeof a) == 0;
}

// A random run: parameters (some of which a policy may refuse), a length and a chunk plan.
struct random_run {
    params p;
    int64_t length = 0;
    std::vector<int> chunks;
    double null_row_chance = 0.0;
    bool ties_only = false;  // attention that produces exact score ties
};

random_run make_random_run(const std::string& name, granularity g, std::mt19937_64& rng) {
    auto uniform = [&](int64_t lo, int64_t hi) {
        return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };
    random_run run;
    run.p.name = name;
    run.p.gran = g;
    const int64_t budget = coin(0.85) ? uniform(1, 40) : uniform(60, 200);
    run.length = budget * uniform(2, 4) + uniform(0, 20);
    if (coin(0.15)) {
        run.p.budget =
            policy::budget_spec::of_length(static_cast<double>(budget) / static_cast<double>(run.length));
    } else {
        run.p.budget = policy::budget_spec::count(budget);
    }
    if (coin(0.5)) run.p.recent = coin(0.2) ? budget : uniform(0, budget);
    if (coin(0.5)) run.p.sinks = uniform(0, std::min<int64_t>(budget, 6));
    if (coin(0.5)) {
        constexpr double decays[] = {1.0, 0.98, 0.9, 0.5, 0.0};
        run.p.decay = decays[uniform(0, 4)];
    }
    switch (uniform(0, 5)) {
        case 0: run.chunks = chunk_plan(run.length, 1); break;
        case 1: run.chunks = chunk_plan(run.length, 3); break;
        case 2: run.chunks = chunk_plan(run.length, 7); break;
        case 3: run.chunks = chunk_plan(run.length, 64); break;
        case 4: run.chunks = chunk_plan(run.length, 64, run.length / 2); break;  // prefill, then decode
        default: {
            for (int64_t left = run.length; left > 0;) {
                const int n = static_cast<int>(std::min<int64_t>(left, uniform(1, 20)));
                run.chunks.push_back(n);
                left -= n;
            }
        }
    }
    constexpr double null_chances[] = {0.0, 0.1, 0.5};
    run.null_row_chance = null_chances[uniform(0, 2)];
    run.ties_only = coin(0.25);
    return run;
}

// Clause 11: with some chance, budgets per unit (a pyramid schedule or random shares), per-layer recent
// shares and per-layer decays, which the policy may refuse like any other parameter.
void add_random_allocation(random_run& run, const int (&shape)[3], std::mt19937_64& rng) {
    auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };
    auto real = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
    if (!coin(0.4)) return;
    const int n_layer = shape[0];
    const int n_units = run.p.gran == granularity::head    ? shape[0] * shape[1]
                        : run.p.gran == granularity::layer ? shape[0]
                                                           : 1;
    if (coin(0.5)) {
        run.p.schedule = policy::budget_schedule::pyramid;
        if (coin(0.7)) run.p.ratio = real(0.0, 0.95);
    } else {
        for (int u = 0; u < n_units; ++u) run.p.shares.push_back(real(0.1, 3.0));
    }
    if (coin(0.4)) {
        for (int l = 0; l < n_layer; ++l) run.p.recents.push_back(real(0.0, 0.99));
    }
    if (coin(0.3)) {
        constexpr double decays[] = {1.0, 0.98, 0.9, 0.5};
        for (int l = 0; l < n_layer; ++l)
            run.p.decays.push_back(decays[std::uniform_int_distribution<int>(0, 3)(rng)]);
    }
}

layout make_layout(const int (&shape)[3], const std::vector<int>& chunks, int64_t length) {
    layout l;
    l.n_layer = shape[0];
    l.n_kv_head = shape[1];
    l.n_head = shape[2];
    l.max_chunk = *std::max_element(chunks.begin(), chunks.end());
    l.max_positions = length;
    return l;
}

// The contract's invariants after a chunk [first, first + n) that began with held_before[u] positions.
void check_invariants(const kv_policy& pol, int64_t first, int n, const std::vector<int64_t>& held_before) {
    const auto& c = pol.config();
    const int64_t next = first + n;
    for (int u = 0; u < pol.n_units(); ++u) {
        SCOPED_TRACE(::testing::Message() << "unit " << u << ", chunk [" << first << ", " << next << ")");
        const std::vector<int64_t> kept = pol.kept_positions(u);
        const std::set<int64_t> kept_set(kept.begin(), kept.end());
        ASSERT_EQ(static_cast<int64_t>(kept.size()), pol.n_kept(u));
        if (c.budget == 0) {
            EXPECT_EQ(pol.n_kept(u), next) << "a policy without budget keeps everything";
            continue;
        }
        const int64_t budget = pol.budget(u);
        EXPECT_LE(pol.n_kept(u), budget) << "budget exceeded";
        // Nothing is evicted below the budget, and exactly enough is evicted above it.
        const int64_t want_victims = std::max<int64_t>(0, held_before[u] + n - budget);
        EXPECT_EQ(static_cast<int64_t>(pol.victims(u).size()), want_victims);
        for (int64_t p = 0; p < std::min(c.sinks, next); ++p) EXPECT_TRUE(kept_set.count(p)) << "sink " << p;
        for (int64_t p = std::max<int64_t>(0, next - pol.recent(u)); p < next; ++p) {
            EXPECT_TRUE(kept_set.count(p)) << "recent position " << p << " was evicted";
        }
    }
}

// The slot bookkeeping: kept slots hold exactly the kept positions, in ascending slot order; victims' slots
// are free, free slots hold no position.
void check_slots(const kv_policy& pol) {
    for (int u = 0; u < pol.n_units(); ++u) {
        SCOPED_TRACE(::testing::Message() << "unit " << u);
        const auto positions = pol.slot_positions(u);
        ASSERT_EQ(static_cast<int64_t>(positions.size()), pol.capacity(u));
        EXPECT_LE(pol.capacity(u), pol.capacity());
        std::vector<int64_t> from_slots;
        std::set<int32_t> kept_slots;
        EXPECT_TRUE(std::is_sorted(pol.kept_slots(u).begin(), pol.kept_slots(u).end()))
            << "kept slots not in ascending order";
        for (int32_t s : pol.kept_slots(u)) {
            ASSERT_TRUE(kept_slots.insert(s).second) << "slot " << s << " listed twice";
            from_slots.push_back(positions[s]);
        }
        std::sort(from_slots.begin(), from_slots.end());
        EXPECT_EQ(from_slots, pol.kept_positions(u));
        int64_t occupied = 0;
        for (int64_t s = 0; s < pol.capacity(u); ++s) {
            if (positions[s] >= 0) ++occupied;
            if (positions[s] < 0) {
                EXPECT_EQ(kept_slots.count(static_cast<int32_t>(s)), 0u);
            }
        }
        EXPECT_EQ(occupied, pol.n_kept(u));
        for (int32_t s : pol.victim_slots(u))
            EXPECT_EQ(positions[s], -1) << "victim slot " << s << " not freed";
    }
}

class conformance : public ::testing::TestWithParam<std::string> {};

// Random runs against the reference: kept sets, victims (positions and slots) and, for policies that read
// attention, every score bit for bit, after every chunk.
TEST_P(conformance, MatchesReferenceOnRandomRuns) {
    const std::string name = GetParam();
    std::mt19937_64 rng(std::hash<std::string>{}(name));
    int64_t steps = 0, runs = 0, refused = 0, allocated = 0;
    for (granularity g : k_granularities) {
        for (const auto& shape : k_layouts) {
            int accepted = 0;
            for (int attempt = 0; attempt < 60 && accepted < 6; ++attempt) {
                random_run run = make_random_run(name, g, rng);
                add_random_allocation(run, shape, rng);
                const layout l = make_layout(shape, run.chunks, run.length);
                auto created = kv_policy::create(run.p, l, run.length);
                if (!created.ok()) {
                    ++refused;
                    continue;
                }
                ++accepted;
                ++runs;
                kv_policy& pol = **created;
                if (pol.config().uneven_budgets()) ++allocated;
                SCOPED_TRACE(::testing::Message() << pol.config().to_string() << " layout " << shape[0] << "x"
                                                  << shape[1] << "x" << shape[2] << " length " << run.length);
                auto ref = reference_for(pol);
                ASSERT_TRUE(ref.has_value())
                    << "policy '" << name << "' has no victim rule in tests/policy/reference_policy.h";
                attention_source src(rng());
                src.set_ties_only(run.ties_only);
                int64_t first = 0;
                for (int n : run.chunks) {
                    const int n_units = pol.n_units();
                    std::vector<int64_t> held_before(n_units);
                    std::vector<std::vector<int64_t>> slot_pos(n_units);
                    for (int u = 0; u < n_units; ++u) {
                        held_before[u] = pol.n_kept(u);
                        slot_pos[u].assign(pol.slot_positions(u).begin(), pol.slot_positions(u).end());
                    }
                    feed_chunk(pol, &*ref, first, n, src, run.null_row_chance);
                    for (int u = 0; u < n_units; ++u) {
                        SCOPED_TRACE(::testing::Message()
                                     << "unit " << u << ", chunk [" << first << ", " << first + n << ")");
                        // Newcomers took the lowest free slots, in order.
                        std::vector<int32_t> free_before;
                        for (size_t s = 0; s < slot_pos[u].size(); ++s) {
                            if (slot_pos[u][s] < 0) free_before.push_back(static_cast<int32_t>(s));
                        }
                        const auto chunk = pol.chunk_slots(u);
                        ASSERT_EQ(chunk.size(), static_cast<size_t>(n));
                        for (int i = 0; i < n; ++i) {
                            EXPECT_EQ(chunk[i], free_before[i]) << "chunk token " << i;
                            slot_pos[u][chunk[i]] = first + i;
                        }
                        EXPECT_EQ(pol.kept_positions(u), ref->kept(u));
                        const auto victims = pol.victims(u);
                        EXPECT_EQ(std::vector<int64_t>(victims.begin(), victims.end()), ref->victims(u));
                        const auto victim_slots = pol.victim_slots(u);
                        ASSERT_EQ(victim_slots.size(), victims.size());
                        for (size_t k = 0; k < victims.size(); ++k) {
                            EXPECT_EQ(slot_pos[u][victim_slots[k]], victims[k]) << "victim " << k;
                        }
                        if (pol.needs_attention()) {
                            for (int32_t s : pol.kept_slots(u)) {
                                const int64_t p = pol.slot_positions(u)[s];
                                const double want = ref->scores(u).at(p);
                                EXPECT_TRUE(same_bits(pol.slot_scores(u)[s], want))
                                    << "position " << p << ": score " << pol.slot_scores(u)[s]
                                    << ", reference " << want;
                            }
                        }
                    }
                    check_invariants(pol, first, n, held_before);
                    check_slots(pol);
                    if (HasFailure()) return;
                    first += n;
                    ++steps;
                }
            }
            EXPECT_GE(accepted, 1) << name << " refused every random configuration";
        }
    }
    // Per-unit budgets reached the policy (every evicting policy accepts some allocation).
    if (policy::policy_evicts(name)) {
        EXPECT_GE(allocated, 1) << name << " never ran with per-unit budgets";
    }
    RecordProperty("runs", static_cast<int>(runs));
    RecordProperty("steps", static_cast<int>(steps));
    RecordProperty("refused", static_cast<int>(refused));
    RecordProperty("per_unit_budgets", static_cast<int>(allocated));
}

INSTANTIATE_TEST_SUITE_P(every_policy, conformance, ::testing::ValuesIn(policy::policy_names()),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace h2okv::testing
