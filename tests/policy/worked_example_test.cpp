// Small cases computed by hand: the H2O paper's worked example, decay and tie arithmetic, TOVA's
// last-row scores and null rows, window and streaming, and a case float32 accumulation would get wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "h2okv/policy/policy.h"
#include "policy/policy_test_support.h"

namespace h2okv::testing {
namespace {

using policy::kv_policy;
using policy::layout;
using policy::params;
using positions = std::vector<int64_t>;

layout one_head(int max_chunk, int64_t max_positions = 64) {
    layout l;
    l.max_chunk = max_chunk;
    l.max_positions = max_positions;
    return l;
}

std::unique_ptr<kv_policy> create(const std::string& spec, const layout& l) {
    auto p = params::parse(spec);
    EXPECT_TRUE(p.ok()) << p.error().to_string();
    return must_create(*p, l, l.max_positions);
}

// Adds chunk query i's row given by position (position -> increment) to unit 0.
void add_row(kv_policy& pol, int i, const std::map<int64_t, double>& by_position) {
    std::vector<double> row(pol.capacity(), 0.0);
    const auto slot_pos = pol.slot_positions(0);
    for (const auto& [pos, w] : by_position) {
        bool found = false;
        for (size_t s = 0; s < slot_pos.size(); ++s) {
            if (slot_pos[s] == pos) {
                row[s] = w;
                found = true;
            }
        }
        ASSERT_TRUE(found) << "position " << pos << " is not held";
    }
    pol.add_row(0, i, row.data());
}

// One decode step: the token at `pos` with its query's row.
void decode(kv_policy& pol, int64_t pos, const std::map<int64_t, double>& by_position) {
    ASSERT_TRUE(pol.begin_chunk(pos, 1).ok());
    add_row(pol, 0, by_position);
    ASSERT_TRUE(pol.end_chunk().ok());
}

// One decode step with a null row (add_row is not called).
void decode_null(kv_policy& pol, int64_t pos) {
    ASSERT_TRUE(pol.begin_chunk(pos, 1).ok());
    ASSERT_TRUE(pol.end_chunk().ok());
}

double score_of(const kv_policy& pol, int64_t pos) {
    const auto slot_pos = pol.slot_positions(0);
    for (size_t s = 0; s < slot_pos.size(); ++s) {
        if (slot_pos[s] == pos) return pol.slot_scores(0)[s];
    }
    ADD_FAILURE() << "position " << pos << " is not held";
    return std::nan("");
}

positions victims(const kv_policy& pol) {
    return {pol.victims(0).begin(), pol.victims(0).end()};
}

// The paper's example: budget 4 = 2 recent + 2 heavy hitters, five tokens whose accumulated attention is
// 3.8, 0.4, 2.1, 0.3 and 0.0. Positions 3 and 4 are the recent window; among 0, 1 and 2 the heavy hitters
// 0 (3.8) and 2 (2.1) stay, and 1 (0.4) is evicted.
TEST(policy_worked_example, PaperExampleEvictsPositionOne) {
    auto pol = create("h2o:budget=4,recent=2", one_head(5));
    ASSERT_TRUE(pol->begin_chunk(0, 5).ok());
    // The paper gives accumulated scores, not the attention behind them. The policy only adds up the rows it
    // is given, so the last query's row carries the scores and the four earlier queries are null rows.
    add_row(*pol, 4, {{0, 3.8}, {1, 0.4}, {2, 2.1}, {3, 0.3}, {4, 0.0}});
    ASSERT_TRUE(pol->end_chunk().ok());
    EXPECT_EQ(victims(*pol), positions{1});
    EXPECT_EQ(pol->kept_positions(0), (positions{0, 2, 3, 4}));
    EXPECT_EQ(score_of(*pol, 0), 3.8);
    EXPECT_EQ(score_of(*pol, 2), 2.1);

    // A sixth token with a null row: the window slides to {4, 5}, so 3 (0.3) is now the lightest evictable
    // token, and the heavy hitters 0 and 2 still stay.
    decode_null(*pol, 5);
    EXPECT_EQ(victims(*pol), positions{3});
    EXPECT_EQ(pol->kept_positions(0), (positions{0, 2, 4, 5}));
}

// Decay, step by step, with numbers exact in binary: decay 0.5, one chunk of three queries.
TEST(policy_worked_example, DecayThenAddOncePerQueryAndTiesEvictTheLowerPosition) {
    auto pol = create("h2o:budget=2,recent=0,decay=0.5", one_head(3));
    ASSERT_TRUE(pol->begin_chunk(0, 3).ok());
    add_row(*pol, 0, {{0, 1.0}});                        // s0 = 0 * 0.5 + 1 = 1
    add_row(*pol, 1, {{0, 0.5}, {1, 0.5}});              // s0 = 1 * 0.5 + 0.5 = 1, s1 = 0.5
    add_row(*pol, 2, {{0, 0.25}, {1, 0.25}, {2, 0.5}});  // s0 = 0.75, s1 = 0.5, s2 = 0.5
    EXPECT_EQ(score_of(*pol, 0), 0.75);
    EXPECT_EQ(score_of(*pol, 1), 0.5);
    EXPECT_EQ(score_of(*pol, 2), 0.5);
    ASSERT_TRUE(pol->end_chunk().ok());
    EXPECT_EQ(victims(*pol), positions{1}) << "1 and 2 tie at 0.5: the lower position leaves";
    EXPECT_EQ(pol->kept_positions(0), (positions{0, 2}));

    // A null row changes nothing, not even by decay.
    decode_null(*pol, 3);
    EXPECT_EQ(score_of(*pol, 0), 0.75);
    EXPECT_EQ(victims(*pol), positions{3}) << "the newcomer never attended scores 0";
}

// TOVA keeps the last row's increments as the scores; h2o with the same rows keeps the running sum.
TEST(policy_worked_example, TovaScoresAreTheLastRow) {
    auto tova = create("tova:budget=2", one_head(1));
    auto h2o = create("h2o:budget=2,recent=0", one_head(1));
    for (kv_policy* pol : {tova.get(), h2o.get()}) {
        decode(*pol, 0, {{0, 1.0}});
        decode(*pol, 1, {{0, 0.25}, {1, 0.75}});
        decode(*pol, 2, {{0, 0.5}, {1, 0.125}, {2, 0.375}});
    }
    // tova: 0.5, 0.125, 0.375 -> 1 leaves. h2o: 1.75, 0.875, 0.375 -> 2 leaves.
    EXPECT_EQ(victims(*tova), positions{1});
    EXPECT_EQ(score_of(*tova, 0), 0.5);
    EXPECT_EQ(score_of(*tova, 2), 0.375);
    EXPECT_EQ(victims(*h2o), positions{2});
    EXPECT_EQ(score_of(*h2o, 0), 1.75);

    // A null row keeps tova's previous scores; the newcomer (never attended) scores 0 and leaves at once.
    decode_null(*tova, 3);
    EXPECT_EQ(victims(*tova), positions{3});
    EXPECT_EQ(tova->kept_positions(0), (positions{0, 2}));
    // A row of zeros is not a null row: it sets every tova score to 0, and the tie evicts the lowest
    // position.
    decode(*tova, 4, {});
    EXPECT_EQ(victims(*tova), positions{0});
    EXPECT_EQ(tova->kept_positions(0), (positions{2, 4}));
}

TEST(policy_worked_example, WindowKeepsTheNewest) {
    auto pol = create("window:budget=3", one_head(5));
    ASSERT_TRUE(pol->begin_chunk(0, 5).ok());
    ASSERT_TRUE(pol->end_chunk().ok());
    EXPECT_EQ(victims(*pol), (positions{0, 1}));
    EXPECT_EQ(pol->kept_positions(0), (positions{2, 3, 4}));
    for (int64_t p = 5; p < 8; ++p) {
        decode_null(*pol, p);
        EXPECT_EQ(victims(*pol), positions{p - 3});
    }
    EXPECT_EQ(pol->kept_positions(0), (positions{5, 6, 7}));
}

TEST(policy_worked_example, StreamingKeepsSinksAndTheNewest) {
    auto pol = create("streaming:budget=4,sinks=1", one_head(1));
    for (int64_t p = 0; p < 8; ++p) decode(*pol, p, {{p, 1.0}});
    EXPECT_EQ(pol->kept_positions(0), (positions{0, 5, 6, 7}));
    EXPECT_EQ(victims(*pol), positions{4});
    auto defaults = create("streaming:budget=6", one_head(8));  // sinks 4
    ASSERT_TRUE(defaults->begin_chunk(0, 8).ok());
    ASSERT_TRUE(defaults->end_chunk().ok());
    EXPECT_EQ(defaults->kept_positions(0), (positions{0, 1, 2, 3, 6, 7}));
}

// Scores are float64 because eviction compares low bits that float32 accumulation loses. Position 0 gets
// 1 and then eight increments of 2^-25; position 1 gets 1 and one increment of 2^-23. In double, 0 ends at
// 1 + 2^-22 and outranks 1 (1 + 2^-23); in float32 every 2^-25 rounds away (a quarter of an ulp at 1.0), so
// 0 would stay at 1.0 and be evicted instead.
TEST(policy_worked_example, Float64KeepsTheBitsFloat32Loses) {
    const double tiny = std::ldexp(1.0, -25);
    const double small = std::ldexp(1.0, -23);
    float s0 = 1.0f, s1 = 1.0f + static_cast<float>(small);
    for (int k = 0; k < 8; ++k) s0 += static_cast<float>(tiny);
    ASSERT_LT(s0, s1) << "float32 accumulation ranks position 0 below position 1";

    auto pol = create("h2o:budget=3,recent=1", one_head(1));
    decode(*pol, 0, {{0, 1.0}});
    decode(*pol, 1, {{1, 1.0}});
    decode(*pol, 2, {{1, small}, {2, 0.25}});
    // Each newcomer draws 0.25 and leaves at the next step; position 0 collects 2^-25 each time.
    for (int64_t t = 3; t <= 10; ++t) {
        decode(*pol, t, {{0, tiny}, {t, t == 10 ? 2.0 : 0.25}});
        EXPECT_EQ(victims(*pol), positions{t - 1});
    }
    EXPECT_EQ(score_of(*pol, 0), 1.0 + std::ldexp(1.0, -22));
    EXPECT_EQ(score_of(*pol, 1), 1.0 + small);
    decode(*pol, 11, {{11, 1.0}});
    EXPECT_EQ(victims(*pol), positions{1}) << "float64 ranks position 0 above position 1";
    EXPECT_EQ(pol->kept_positions(0), (positions{0, 10, 11}));
}

}  // namespace
}  // namespace h2okv::testing
