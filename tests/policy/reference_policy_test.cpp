// The reference itself on cases small enough to check by eye, and its misuse errors.
#include "policy/reference_policy.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

namespace h2okv::testing {
namespace {

using positions = std::vector<int64_t>;

TEST(policy_reference, KnowsTheRuleOfEveryContractPolicy) {
    EXPECT_EQ(reference_policy::rule_of("full"), reference_policy::rule::none);
    EXPECT_EQ(reference_policy::rule_of("window"), reference_policy::rule::oldest);
    EXPECT_EQ(reference_policy::rule_of("streaming"), reference_policy::rule::oldest);
    EXPECT_EQ(reference_policy::rule_of("h2o"), reference_policy::rule::lowest_score);
    EXPECT_EQ(reference_policy::rule_of("tova"), reference_policy::rule::lowest_score);
    EXPECT_FALSE(reference_policy::rule_of("lru").has_value());
}

TEST(policy_reference, LowestScoreWithSinksAndRecent) {
    // budget 3, recent 1, sinks 1: position 0 is a sink, the newest is recent, the rest compete.
    reference_policy ref(reference_policy::rule::lowest_score, 3, 1, 1, 1.0, 1);
    ref.begin_chunk(0, 4);
    ref.add_row(0, 3, {{0, 0.0}, {1, 0.9}, {2, 0.1}, {3, 0.0}});
    ref.end_chunk();
    EXPECT_EQ(ref.kept(0), (positions{0, 1, 3}));
    EXPECT_EQ(ref.victims(0), positions{2});
    ref.begin_chunk(4, 2);
    ref.end_chunk();
    // Held 0 (sink), 1 (0.9), 3, 4, 5 (0): recent {5}; lowest among 1, 3, 4 are the ties 3 and 4 at 0.
    EXPECT_EQ(ref.victims(0), (positions{3, 4}));
    EXPECT_EQ(ref.kept(0), (positions{0, 1, 5}));
}

TEST(policy_reference, DecayAppliesToScoresPresentAtEachQuery) {
    reference_policy ref(reference_policy::rule::lowest_score, 10, 0, 0, 0.5, 1);
    ref.begin_chunk(0, 2);
    ref.add_row(0, 0, {{0, 1.0}});
    ref.add_row(0, 1, {{0, 1.0}, {1, 1.0}});
    EXPECT_EQ(ref.scores(0).at(0), 1.5);
    EXPECT_EQ(ref.scores(0).at(1), 1.0);
    ref.end_chunk();
    ref.begin_chunk(2, 1);
    ref.end_chunk();  // a null row
    EXPECT_EQ(ref.scores(0).at(0), 1.5);
    EXPECT_EQ(ref.scores(0).at(2), 0.0);
}

TEST(policy_reference, OldestAndNone) {
    reference_policy window(reference_policy::rule::oldest, 2, 2, 0, 1.0, 2);
    reference_policy full(reference_policy::rule::none, 0, 0, 0, 1.0, 1);
    for (int64_t p = 0; p < 5; ++p) {
        window.begin_chunk(p, 1);
        window.end_chunk();
        full.begin_chunk(p, 1);
        full.end_chunk();
    }
    EXPECT_EQ(window.kept(0), (positions{3, 4}));
    EXPECT_EQ(window.kept(1), (positions{3, 4}));
    EXPECT_EQ(full.kept(0), (positions{0, 1, 2, 3, 4}));
}

TEST(policy_reference, MisuseThrows) {
    reference_policy ref(reference_policy::rule::lowest_score, 4, 1, 0, 1.0, 1);
    EXPECT_THROW(ref.begin_chunk(1, 1), std::logic_error) << "must start at 0";
    EXPECT_THROW(ref.end_chunk(), std::logic_error);
    ref.begin_chunk(0, 3);
    EXPECT_THROW(ref.add_row(0, 0, {{1, 0.5}}), std::logic_error) << "query 0 cannot see position 1";
    ref.add_row(0, 1, {{1, 0.5}});
    EXPECT_THROW(ref.add_row(0, 1, {{1, 0.5}}), std::logic_error) << "rows in increasing i";
    EXPECT_THROW(ref.add_row(0, 3, {}), std::logic_error) << "past the chunk";
    ref.end_chunk();
    ref.begin_chunk(3, 1);
    EXPECT_THROW(ref.add_row(0, 0, {{7, 0.5}}), std::logic_error) << "not held";
}

}  // namespace
}  // namespace h2okv::testing
