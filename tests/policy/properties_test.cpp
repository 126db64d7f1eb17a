// Contract properties every registered policy must have, checked without the reference: budget and
// protection invariants over long runs at larger budgets, no eviction when the budget covers the run,
// determinism, reset(), the chunk protocol's errors, and rows having no effect where no attention is read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "h2okv/policy/policy.h"
#include "policy/policy_test_support.h"

namespace h2okv::testing {
namespace {

using policy::kv_policy;
using policy::layout;
using policy::params;

// Chunks of 1 to 6 tokens (random) over [0, length): in each, in_chunk(first, n) runs after begin_chunk, then
// every unit takes a row of random weights per query; after_chunk(next first) runs after end_chunk.
template <typename InChunk, typename AfterChunk>
void random_chunks(kv_policy& pol, int64_t length, uint32_t seed, InChunk in_chunk, AfterChunk after_chunk) {
    std::mt19937 rng(seed);
    std::vector<double> row(static_cast<size_t>(pol.capacity()));
    int64_t first = 0;
    while (first < length) {
        const int n = static_cast<int>(std::min<int64_t>(1 + rng() % 6, length - first));
        ASSERT_TRUE(pol.begin_chunk(first, n).ok());
        in_chunk(first, n);
        for (int u = 0; u < pol.n_units(); ++u) {
            for (int i = 0; i < n; ++i) {
                for (double& x : row) x = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
                pol.add_row(u, i, row.data());
            }
        }
        ASSERT_TRUE(pol.end_chunk().ok());
        first += n;
        after_chunk(first);
        if (::testing::Test::HasFatalFailure()) return;
    }
}

class properties : public ::testing::TestWithParam<std::string> {
protected:
    // budget, plus sinks/recent when the policy accepts them; the first configuration the policy accepts.
    std::unique_ptr<kv_policy> create_evicting(int64_t budget, int64_t sinks, int64_t recent, const layout& l,
                                               int64_t run_length) {
        const std::string name = GetParam();
        std::vector<params> tries;
        params p;
        p.name = name;
        p.budget = policy::budget_spec::count(budget);
        p.sinks = sinks;
        p.recent = recent;
        tries.push_back(p);
        p.recent.reset();
        tries.push_back(p);
        p.sinks.reset();
        tries.push_back(p);
        for (const params& t : tries) {
            auto r = kv_policy::create(t, l, run_length);
            if (r.ok()) return std::move(r).value();
        }
        ADD_FAILURE() << name << " refuses even a plain budget of " << budget;
        return nullptr;
    }

    static layout gqa_layout(int max_chunk, int64_t max_positions) {
        layout l;
        l.n_layer = 2;
        l.n_kv_head = 2;
        l.n_head = 4;
        l.max_chunk = max_chunk;
        l.max_positions = max_positions;
        return l;
    }
};

// Long runs at budgets the differential test does not reach (the vectorised passes' full blocks, a large
// prefill chunk scattering the slots): budget never exceeded, exactly the overflow evicted, sinks and the
// recent window kept, slots consistent.
TEST_P(properties, BudgetAndProtectionHoldOnLongRuns) {
    std::mt19937_64 rng(11);
    const std::pair<int64_t, int> cases[] = {
        {70, 33}, {70, 256}, {260, 1}, {260, 64}};  // budget, prefill chunk
    for (const auto& [budget, prefill_chunk] : cases) {
        {
            const int64_t length = budget * 5 / 2;
            const layout l = gqa_layout(prefill_chunk, length);
            auto pol = create_evicting(budget, 3, budget / 3, l, length);
            ASSERT_NE(pol, nullptr);
            SCOPED_TRACE(pol->config().to_string() + " prefill chunk " + std::to_string(prefill_chunk));
            attention_source src(rng());
            const auto& c = pol->config();
            int64_t first = 0;
            for (int n : chunk_plan(length, prefill_chunk, length / 2)) {
                std::vector<int64_t> held(pol->n_units());
                for (int u = 0; u < pol->n_units(); ++u) held[u] = pol->n_kept(u);
                feed_chunk(*pol, nullptr, first, n, src, 0.05);
                const int64_t next = first + n;
                for (int u = 0; u < pol->n_units(); ++u) {
                    const auto kept = pol->kept_positions(u);
                    const std::set<int64_t> kept_set(kept.begin(), kept.end());
                    if (c.budget == 0) {
                        ASSERT_EQ(pol->n_kept(u), next);
                        continue;
                    }
                    ASSERT_LE(pol->n_kept(u), c.budget);
                    ASSERT_EQ(static_cast<int64_t>(pol->victims(u).size()),
                              std::max<int64_t>(0, held[u] + n - c.budget));
                    for (int64_t p = 0; p < std::min(c.sinks, next); ++p) ASSERT_TRUE(kept_set.count(p)) << p;
                    for (int64_t p = std::max<int64_t>(0, next - c.recent); p < next; ++p) {
                        ASSERT_TRUE(kept_set.count(p)) << p;
                    }
                    std::set<int32_t> slots(pol->kept_slots(u).begin(), pol->kept_slots(u).end());
                    ASSERT_EQ(static_cast<int64_t>(slots.size()), pol->n_kept(u));
                    for (int32_t s : pol->victim_slots(u)) ASSERT_EQ(pol->slot_positions(u)[s], -1);
                }
                first = next;
            }
        }
    }
}

// Rolling positions (docs/EVICTION_CONTRACT.md, clause 8): after every chunk each kept slot holds its
// position's rank among the unit's kept positions; during a chunk, chunk token i holds n_kept + i.
TEST_P(properties, RollingPositionsAreRanksInTheCache) {
    if (GetParam() == "full") GTEST_SKIP() << "full ignores positions";
    const layout l = gqa_layout(6, 400);
    params p;
    p.name = GetParam();
    p.budget = policy::budget_spec::count(24);
    p.positions = policy::position_mode::rolling;
    auto created = kv_policy::create(p, l, 400);
    ASSERT_TRUE(created.ok()) << created.error().to_string();
    kv_policy& pol = **created;
    random_chunks(
        pol, 400, 3,
        [&](int64_t, int n) {
            for (int u = 0; u < pol.n_units(); ++u) {
                const auto ranks = pol.slot_rolling_positions(u);
                const auto chunk = pol.chunk_slots(u);
                for (int i = 0; i < n; ++i)
                    EXPECT_EQ(ranks[static_cast<size_t>(chunk[static_cast<size_t>(i)])], pol.n_kept(u) + i);
            }
        },
        [&](int64_t first) {
            for (int u = 0; u < pol.n_units(); ++u) {
                const auto kept = pol.kept_positions(u);
                const auto pos = pol.slot_positions(u);
                const auto ranks = pol.slot_rolling_positions(u);
                for (int32_t slot : pol.kept_slots(u)) {
                    const auto rank =
                        std::lower_bound(kept.begin(), kept.end(), pos[static_cast<size_t>(slot)]) -
                        kept.begin();
                    ASSERT_EQ(ranks[static_cast<size_t>(slot)], rank)
                        << "unit " << u << " after position " << first;
                }
            }
        });
    EXPECT_GT(pol.total_evictions(), 0);
}

// kv_policy::attended_slots: during every chunk, each unit's kept slots (ascending) then the chunk's slots in
// one array, the list the engine's attention reads without copying it.
TEST_P(properties, AttendedSlotsAreTheKeptThenTheChunk) {
    const layout l = gqa_layout(6, 300);
    params p;
    p.name = GetParam();
    if (policy::policy_evicts(p.name)) p.budget = policy::budget_spec::count(24);
    auto created = kv_policy::create(p, l, 300);
    ASSERT_TRUE(created.ok()) << created.error().to_string();
    kv_policy& pol = **created;
    random_chunks(
        pol, 300, 5,
        [&](int64_t first, int) {
            for (int u = 0; u < pol.n_units(); ++u) {
                const auto kept = pol.kept_slots(u);
                const auto chunk = pol.chunk_slots(u);
                std::vector<int32_t> want(kept.begin(), kept.end());
                EXPECT_TRUE(std::is_sorted(want.begin(), want.end())) << "unit " << u << " at " << first;
                want.insert(want.end(), chunk.begin(), chunk.end());
                const auto attended = pol.attended_slots(u);
                ASSERT_EQ(std::vector<int32_t>(attended.begin(), attended.end()), want)
                    << "unit " << u << ", chunk at " << first;
            }
        },
        [](int64_t) {});
    if (policy::policy_evicts(p.name)) {
        EXPECT_GT(pol.total_evictions(), 0);
    }
}

// kv_policy::add_weights (the engine's decode items hand the softmax weights themselves) against add_row with
// the row those weights make, wherever a unit takes_weights (never under decay): the same scores and the same
// victims, bit for bit, for 1 to 5 heads per unit, chunks of one token (a victim found in the weights' own
// pass) and longer ones, small and larger budgets (the vectorised runs of eight consecutive slots). The
// weights are mostly 0 and otherwise small multiples of 1/16, so that many scores tie.
TEST_P(properties, AddWeightsEqualsAddRow) {
    const layout l = gqa_layout(6, 240);
    for (const int64_t budget : {20, 100}) {
        for (const bool decay : {false, true}) {
            for (const int max_n : {1, 6}) {
                params p;
                p.name = GetParam();
                if (policy::policy_evicts(p.name)) p.budget = policy::budget_spec::count(budget);
                if (decay) p.decay = 0.875;
                auto by_row = kv_policy::create(p, l, 240);
                if (!by_row.ok()) continue;  // a policy without decay
                auto by_weights = kv_policy::create(p, l, 240);
                ASSERT_TRUE(by_weights.ok());
                kv_policy& a = **by_row;
                kv_policy& b = **by_weights;
                SCOPED_TRACE(p.to_string() + " chunks of up to " + std::to_string(max_n));
                std::mt19937 rng(static_cast<uint32_t>(17 + max_n + 2 * decay + budget));
                const auto cap = static_cast<size_t>(a.capacity());
                std::vector<double> row(cap, 0.0);
                int64_t by_weights_rows = 0;
                int64_t first = 0;
                while (first < 240) {
                    const int n = static_cast<int>(std::min<int64_t>(1 + rng() % max_n, 240 - first));
                    ASSERT_TRUE(a.begin_chunk(first, n).ok());
                    ASSERT_TRUE(b.begin_chunk(first, n).ok());
                    for (int u = 0; u < a.n_units(); ++u) {
                        ASSERT_EQ(a.n_kept(u), b.n_kept(u));
                        const int n_heads = 1 + static_cast<int>(rng() % 5);
                        for (int i = 0; i < n; ++i) {
                            const auto slots = a.attended_slots(u);
                            const auto m = static_cast<size_t>(a.n_kept(u) + i + 1);
                            std::vector<std::vector<float>> w(static_cast<size_t>(n_heads),
                                                              std::vector<float>(m));
                            std::vector<const float*> heads;
                            for (auto& h : w) {
                                for (float& x : h)
                                    x = rng() % 16 == 0 ? static_cast<float>(1 + rng() % 3) / 16.0f : 0.0f;
                                heads.push_back(h.data());
                            }
                            std::fill(row.begin(), row.end(), 0.0);
                            for (size_t j = 0; j < m; ++j) {
                                for (const auto& h : w)
                                    row[static_cast<size_t>(slots[j])] += static_cast<double>(h[j]);
                            }
                            a.add_row(u, i, row.data());
                            if (b.takes_weights(u)) {
                                b.add_weights(u, i, heads);
                                ++by_weights_rows;
                            } else {
                                b.add_row(u, i, row.data());
                            }
                        }
                    }
                    ASSERT_TRUE(a.end_chunk().ok());
                    ASSERT_TRUE(b.end_chunk().ok());
                    for (int u = 0; u < a.n_units(); ++u) {
                        const auto sa = a.slot_scores(u), sb = b.slot_scores(u);
                        ASSERT_EQ(0, std::memcmp(sa.data(), sb.data(), sa.size() * sizeof(double)))
                            << "unit " << u << " after position " << first + n;
                        const auto va = a.victims(u), vb = b.victims(u);
                        ASSERT_EQ(std::vector<int64_t>(va.begin(), va.end()),
                                  std::vector<int64_t>(vb.begin(), vb.end()))
                            << "unit " << u << " after position " << first + n;
                    }
                    first += n;
                }
                if (policy::policy_evicts(p.name)) {
                    EXPECT_GT(b.total_evictions(), 0);
                }
                if (decay) {
                    EXPECT_EQ(by_weights_rows, 0) << "a decaying unit needs its whole row";
                } else if (p.name == "h2o") {
                    EXPECT_GT(by_weights_rows, 0) << "h2o takes the weights";
                }
            }
        }
    }
}

TEST_P(properties, BudgetCoveringTheRunEvictsNothing) {
    for (int chunk : {1, 5, 64}) {
        const int64_t length = 150;
        const layout l = gqa_layout(chunk, length);
        for (const std::string budget : {"150", "1.0", "1000"}) {
            auto p = params::parse(GetParam() + ":budget=" + budget);
            ASSERT_TRUE(p.ok()) << p.error().to_string();
            auto pol = must_create(*p, l, length);
            ASSERT_NE(pol, nullptr);
            attention_source src(5);
            int64_t first = 0;
            for (int n : chunk_plan(length, chunk)) {
                feed_chunk(*pol, nullptr, first, n, src, 0.1);
                first += n;
            }
            EXPECT_EQ(pol->total_evictions(), 0) << budget;
            std::vector<int64_t> all(length);
            for (int64_t i = 0; i < length; ++i) all[i] = i;
            for (int u = 0; u < pol->n_units(); ++u) EXPECT_EQ(pol->kept_positions(u), all);
        }
    }
}

// Everything observable, for comparing two runs.
struct snapshot {
    std::vector<std::vector<int64_t>> positions;
    std::vector<std::vector<uint64_t>> score_bits;
    std::vector<std::vector<int32_t>> kept_slots;
    std::vector<std::vector<int64_t>> victims;
    std::vector<std::vector<int32_t>> victim_slots;
    bool operator==(const snapshot&) const = default;
};

snapshot take_snapshot(const kv_policy& pol) {
    snapshot s;
    for (int u = 0; u < pol.n_units(); ++u) {
        s.positions.emplace_back(pol.slot_positions(u).begin(), pol.slot_positions(u).end());
        std::vector<uint64_t> bits;
        for (double v : pol.slot_scores(u)) {
            uint64_t b;
            std::memcpy(&b, &v, sizeof b);
            bits.push_back(b);
        }
        s.score_bits.push_back(bits);
        s.kept_slots.emplace_back(pol.kept_slots(u).begin(), pol.kept_slots(u).end());
        s.victims.emplace_back(pol.victims(u).begin(), pol.victims(u).end());
        s.victim_slots.emplace_back(pol.victim_slots(u).begin(), pol.victim_slots(u).end());
    }
    return s;
}

std::vector<snapshot> run_and_record(kv_policy& pol, uint64_t seed, const std::vector<int>& plan,
                                     uint64_t key_seed = 7) {
    attention_source src(seed, key_seed);
    std::vector<snapshot> out;
    int64_t first = 0;
    for (int n : plan) {
        feed_chunk(pol, nullptr, first, n, src, 0.1);
        out.push_back(take_snapshot(pol));
        first += n;
    }
    return out;
}

TEST_P(properties, DeterministicAcrossInstancesAndReset) {
    const int64_t length = 300;
    const layout l = gqa_layout(16, length);
    const auto plan = chunk_plan(length, 16, 100);
    auto a = create_evicting(40, 2, 10, l, length);
    auto b = create_evicting(40, 2, 10, l, length);
    ASSERT_TRUE(a && b);
    const auto first_run = run_and_record(*a, 99, plan);
    EXPECT_TRUE(first_run == run_and_record(*b, 99, plan)) << "two instances, same rows";
    a->reset();
    EXPECT_TRUE(first_run == run_and_record(*a, 99, plan)) << "the same instance after reset()";
}

TEST_P(properties, ResetRestoresTheInitialState) {
    const int64_t length = 200;
    const layout l = gqa_layout(8, length);
    auto pol = create_evicting(30, 1, 5, l, length);
    auto fresh = create_evicting(30, 1, 5, l, length);
    ASSERT_TRUE(pol && fresh);
    run_and_record(*pol, 3, chunk_plan(length, 8, 50));
    EXPECT_EQ(pol->next_position(), length);
    pol->reset();
    EXPECT_TRUE(take_snapshot(*pol) == take_snapshot(*fresh));
    EXPECT_EQ(pol->next_position(), 0);
    EXPECT_EQ(pol->total_evictions(), 0);
    for (int u = 0; u < pol->n_units(); ++u) {
        EXPECT_EQ(pol->n_kept(u), 0);
        EXPECT_EQ(pol->evictions(u), 0);
        EXPECT_TRUE(pol->kept_positions(u).empty());
    }
    EXPECT_FALSE(pol->begin_chunk(length, 1).ok()) << "positions start over at 0";
    EXPECT_TRUE(pol->begin_chunk(0, 1).ok());
}

TEST_P(properties, ChunkProtocolErrorsAreReported) {
    const layout l = gqa_layout(4, 10);
    auto pol = create_evicting(6, 1, 2, l, 10);
    ASSERT_NE(pol, nullptr);
    auto expect_error = [](const status& s, const std::string& fragment) {
        ASSERT_FALSE(s.ok()) << fragment;
        EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
    };
    expect_error(pol->end_chunk(), "no chunk in progress");
    expect_error(pol->begin_chunk(1, 1), "first position 1 does not follow the previous chunk; expected 0");
    expect_error(pol->begin_chunk(0, 0), "a chunk of 0 tokens; expected 1 to max_chunk 4");
    expect_error(pol->begin_chunk(0, 5), "a chunk of 5 tokens; expected 1 to max_chunk 4");
    ASSERT_TRUE(pol->begin_chunk(0, 4).ok());
    expect_error(pol->begin_chunk(4, 1), "has not ended");
    ASSERT_TRUE(pol->end_chunk().ok());
    ASSERT_TRUE(pol->begin_chunk(4, 4).ok());
    ASSERT_TRUE(pol->end_chunk().ok());
    expect_error(pol->begin_chunk(8, 3), "chunk [8, 11) goes past max_positions 10");
    EXPECT_TRUE(pol->begin_chunk(8, 2).ok());
}

// Rows change the scores exactly when the policy reads attention; otherwise decisions ignore them, and every
// score stays 0 unless the policy scores keys (then keys, not rows, change them).
TEST_P(properties, RowsMatterExactlyWhenAttentionIsRead) {
    const int64_t length = 120;
    const layout l = gqa_layout(4, length);
    auto a = create_evicting(20, 2, 6, l, length);
    auto b = create_evicting(20, 2, 6, l, length);
    ASSERT_TRUE(a && b);
    const auto plan = chunk_plan(length, 4, 40);
    const auto run_a = run_and_record(*a, 1, plan);
    const auto run_b = run_and_record(*b, 2, plan);
    if (a->needs_attention()) {
        EXPECT_FALSE(run_a.back().score_bits == run_b.back().score_bits)
            << "different attention, same scores";
        return;
    }
    EXPECT_TRUE(run_a == run_b) << "different attention, different decisions";
    if (a->needs_keys()) {
        auto c = create_evicting(20, 2, 6, l, length);
        ASSERT_TRUE(c);
        EXPECT_FALSE(run_and_record(*c, 1, plan, 8) == run_a) << "different keys, same decisions and scores";
        return;
    }
    for (int u = 0; u < a->n_units(); ++u) {
        for (double v : a->slot_scores(u)) ASSERT_EQ(v, 0.0);
    }
}

INSTANTIATE_TEST_SUITE_P(every_policy, properties, ::testing::ValuesIn(policy::policy_names()),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace h2okv::testing
