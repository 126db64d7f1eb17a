// Budgets per unit (docs/EVICTION_CONTRACT.md clause 11): the schedule and shares rules with their
// rounding, per-layer recent shares and decays, validation messages, real per-unit capacities in the
// footprint, and the spec string round trip. The conformance suite runs every policy with random
// allocations against the brute-force reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "h2okv/policy/policy.h"

namespace h2okv::testing {
namespace {

using policy::kv_policy;
using policy::layout;
using policy::params;

layout make_layout(int n_layer, int n_kv_head, int max_chunk = 1, int64_t max_positions = 4096) {
    layout l;
    l.n_layer = n_layer;
    l.n_kv_head = n_kv_head;
    l.n_head = 2 * n_kv_head;
    l.max_chunk = max_chunk;
    l.max_positions = max_positions;
    return l;
}

policy::resolved_params config_of(const std::string& spec, const layout& l, int64_t run_length = 4096) {
    auto p = params::parse(spec);
    EXPECT_TRUE(p.ok()) << spec << ": " << (p.ok() ? "" : p.error().to_string());
    auto pol = kv_policy::create(*p, l, run_length);
    EXPECT_TRUE(pol.ok()) << spec << ": " << (pol.ok() ? "" : pol.error().to_string());
    return pol.ok() ? (*pol)->config() : policy::resolved_params{};
}

std::string refusal(const std::string& spec, const layout& l) {
    auto p = params::parse(spec);
    if (!p.ok()) return p.error().message();
    auto pol = kv_policy::create(*p, l, 4096);
    return pol.ok() ? std::string("accepted") : pol.error().message();
}

// Clause 11.2's worked example: 5 layers, budget 20, ratio 0.5: weights 1.5, 1.25, 1, 0.75, 0.5 of a
// total of 100 tokens, exactly.
TEST(Allocation, PyramidFallsLinearlyWithDepthAndKeepsTheTotal) {
    const auto c = config_of("h2o:budget=20,schedule=pyramid,ratio=0.5,granularity=layer", make_layout(5, 1));
    EXPECT_EQ(c.unit_budget, (std::vector<int64_t>{30, 25, 20, 15, 10}));
    EXPECT_EQ(c.unit_recent, (std::vector<int64_t>{15, 12, 10, 7, 5})) << "h2o's default per unit";
    // Under head granularity every KV head of a layer gets the layer's budget.
    const auto h = config_of("h2o:budget=20,schedule=pyramid", make_layout(5, 2));
    ASSERT_EQ(h.unit_budget.size(), 10u);
    for (int u = 0; u < 10; ++u) EXPECT_EQ(h.unit_budget[u], c.unit_budget[u / 2]) << "unit " << u;
    // The default ratio is 0.5; ratio 0 is uniform.
    EXPECT_EQ(config_of("h2o:budget=20,schedule=pyramid,granularity=layer", make_layout(5, 1)).unit_budget,
              c.unit_budget);
    const auto flat =
        config_of("h2o:budget=20,schedule=pyramid,ratio=0,granularity=layer", make_layout(5, 1));
    EXPECT_EQ(flat.unit_budget, std::vector<int64_t>(5, 20));
    EXPECT_FALSE(flat.uneven_budgets());
}

// Clause 11.3: floors, then the largest remainders (a tie to the lower unit), then at least 1.
TEST(Allocation, SharesRoundByLargestRemainder) {
    // T = 30, W = 7: x = 4.29, 8.57, 17.14 -> 4, 8, 17 (29) + 1 to the largest remainder (unit 1).
    EXPECT_EQ(config_of("h2o:budget=10,shares=1/2/4,granularity=layer", make_layout(3, 1)).unit_budget,
              (std::vector<int64_t>{4, 9, 17}));
    // Equal remainders: T = 6, W = 4: x = 1.5, 1.5, 3 -> 1, 1, 3 + the one left to the lower unit.
    EXPECT_EQ(config_of("window:budget=2,shares=1/1/2,granularity=layer", make_layout(3, 1)).unit_budget,
              (std::vector<int64_t>{2, 1, 3}));
    // A unit whose share rounds to 0 still holds 1 (the total then exceeds T by one).
    EXPECT_EQ(config_of("window:budget=2,shares=100/0.001,granularity=layer", make_layout(2, 1)).unit_budget,
              (std::vector<int64_t>{4, 1}));
}

TEST(Allocation, RecentsAndDecaysArePerLayer) {
    const auto c = config_of("h2o:budget=20,shares=1/3/2/2,recents=0.5/0.9,decays=1/0.9", make_layout(2, 2));
    EXPECT_EQ(c.unit_budget, (std::vector<int64_t>{10, 30, 20, 20}));
    EXPECT_EQ(c.unit_recent, (std::vector<int64_t>{5, 15, 18, 18}));  // floor(f x the unit's budget)
    EXPECT_EQ(c.unit_decay, (std::vector<double>{1.0, 1.0, 0.9, 0.9}));
    auto pol = kv_policy::create(*params::parse("h2o:budget=20,shares=1/3/2/2,recents=0.5/0.9,decays=1/0.9"),
                                 make_layout(2, 2), 4096);
    ASSERT_TRUE(pol.ok());
    for (int u = 0; u < 4; ++u) {
        EXPECT_EQ((*pol)->budget(u), c.unit_budget[u]);
        EXPECT_EQ((*pol)->recent(u), c.unit_recent[u]);
        EXPECT_EQ((*pol)->decay(u), c.unit_decay[u]);
    }
}

// Each unit's slot table and each KV head's rows are its own budget + chunk: the memory differs.
TEST(Allocation, CapacitiesArePerUnit) {
    const layout l = make_layout(2, 2, /*max_chunk=*/4);
    auto p = params::parse("h2o:budget=20,shares=1/3/2/2");
    auto f = kv_policy::plan(*p, l, 4096);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->unit_capacity, (std::vector<int64_t>{14, 34, 24, 24}));
    EXPECT_EQ(f->head_capacity, f->unit_capacity);
    EXPECT_EQ(f->capacity, 34);
    EXPECT_EQ(f->total_slots(), 96);
    auto uniform = kv_policy::plan(*params::parse("h2o:budget=20"), l, 4096);
    ASSERT_TRUE(uniform.ok());
    EXPECT_EQ(uniform->total_slots(), 96) << "same total as the uniform allocation";
    // Layer granularity: both KV heads of a layer take the layer unit's capacity.
    auto lf = kv_policy::plan(*params::parse("h2o:budget=20,schedule=pyramid,granularity=layer"), l, 4096);
    ASSERT_TRUE(lf.ok());
    EXPECT_EQ(lf->unit_capacity, (std::vector<int64_t>{34, 14}));
    EXPECT_EQ(lf->head_capacity, (std::vector<int64_t>{34, 34, 14, 14}));
    auto pol = kv_policy::create(*p, l, 4096);
    ASSERT_TRUE(pol.ok());
    for (int u = 0; u < 4; ++u) {
        EXPECT_EQ((*pol)->capacity(u), f->unit_capacity[u]);
        EXPECT_EQ(static_cast<int64_t>((*pol)->slot_positions(u).size()), f->unit_capacity[u]);
    }
    // A policy that reads nothing shares one table between uniform units, but not between units with
    // budgets of their own.
    auto w = kv_policy::plan(*params::parse("window:budget=20,schedule=pyramid"), l, 4096);
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(w->n_tables, 4);
    EXPECT_EQ(kv_policy::plan(*params::parse("window:budget=20"), l, 4096)->n_tables, 1);
}

TEST(Allocation, RefusalsNameTheProblem) {
    const layout l = make_layout(2, 2);
    EXPECT_NE(
        refusal("h2o:budget=8,shares=1/2/3", l).find("3 shares given, but granularity=head has 4 units"),
        std::string::npos);
    EXPECT_NE(refusal("h2o:budget=8,schedule=pyramid,ratio=1", l).find("ratio in [0, 1)"), std::string::npos);
    EXPECT_NE(refusal("h2o:budget=8,ratio=0.3", l).find("ratio applies to schedule=pyramid only"),
              std::string::npos);
    EXPECT_NE(refusal("h2o:budget=8,schedule=pyramid,granularity=model", l).find("granularity=model"),
              std::string::npos);
    EXPECT_NE(refusal("h2o:budget=8,schedule=pyramid,shares=1/1/1/1", l).find("give one of them"),
              std::string::npos);
    EXPECT_NE(refusal("h2o:budget=8,shares=1/0/1/1", l).find("share 0 of unit 1 must be a positive number"),
              std::string::npos);
    EXPECT_NE(
        refusal("h2o:budget=8,recents=0.5", l).find("recents has 1 entries; expected one per layer (2)"),
        std::string::npos);
    EXPECT_NE(refusal("h2o:budget=8,recents=0.5/1.0", l).find("must be in [0, 1)"), std::string::npos);
    // Each unit is validated by the policy's own rule, and the error names the unit.
    // (T = 32, weights 1.9 and 0.1 per layer: 15, 15, 1, 1; the last layer's units cannot hold 2 sinks.)
    const std::string sinks = refusal("h2o:budget=8,sinks=2,schedule=pyramid,ratio=0.9", l);
    EXPECT_NE(sinks.find("unit 2 (layer 1) with budget 1"), std::string::npos) << sinks;
    EXPECT_NE(refusal("window:budget=8,decays=0.9/0.9", l).find("decay"), std::string::npos);
    // Rolling positions need equal kept counts in every unit.
    EXPECT_NE(refusal("h2o:budget=8,schedule=pyramid,positions=rolling", l).find("rolling positions need"),
              std::string::npos);
    EXPECT_EQ(refusal("h2o:budget=8,recents=0.25/0.75,positions=rolling", l), "accepted")
        << "uniform budgets with per-layer recents stream with rolling positions";
    EXPECT_NE(refusal("h2o:budget=8,shares=1/x/1/1", l).find("'x' is not a number"), std::string::npos);
    EXPECT_NE(refusal("h2o:budget=8,schedule=steep", l).find("valid: uniform, pyramid"), std::string::npos);
    // The units' total must be countable (a fuzzer found budget x units overflowing).
    EXPECT_NE(refusal("h2o:budget=8111111111111111111,shares=1/2/3/4", l).find("more tokens than a cache"),
              std::string::npos);
}

TEST(Allocation, FullIgnoresIt) {
    const auto c = config_of("full:schedule=pyramid", make_layout(2, 2));
    EXPECT_TRUE(c.unit_budget.empty());
    EXPECT_EQ(c.to_string(), "full");
}

// params::to_string and resolved_params::to_string parse back to the same configuration.
TEST(Allocation, SpecStringsRoundTrip) {
    const layout l = make_layout(2, 2);
    for (const std::string spec :
         {"h2o:budget=20,schedule=pyramid,ratio=0.25", "h2o:budget=0.2,shares=1.5/0.5/1/1,recents=0.3/0.6",
          "h2o:budget=20,recent=4,decays=0.98/0.9", "tova:budget=12,schedule=pyramid,granularity=layer"}) {
        SCOPED_TRACE(spec);
        auto p = params::parse(spec);
        ASSERT_TRUE(p.ok()) << p.error().to_string();
        EXPECT_EQ(params::parse(p->to_string()).value(), *p);
        const auto c = config_of(spec, l, 1000);
        EXPECT_EQ(config_of(c.to_string(), l, 1000), c) << c.to_string();
    }
}

}  // namespace
}  // namespace h2okv::testing
