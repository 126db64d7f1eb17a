// Parameters: SPEC.md's table (defaults and every validation rule, with messages that name the values),
// budgets, the spec string, the layout and granularity.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "h2okv/policy/policy.h"
#include "policy/policy_test_support.h"

namespace h2okv::testing {
namespace {

using policy::budget_spec;
using policy::granularity;
using policy::kv_policy;
using policy::layout;
using policy::params;
using policy::resolved_params;

layout small_layout() {
    layout l;
    l.n_layer = 2;
    l.n_kv_head = 2;
    l.n_head = 4;
    l.max_chunk = 8;
    l.max_positions = 4096;
    return l;
}

result<resolved_params> resolve(const std::string& spec, int64_t run_length = 1000) {
    auto p = params::parse(spec);
    if (!p.ok()) return p.error();
    auto pol = kv_policy::create(*p, small_layout(), run_length);
    if (!pol.ok()) return pol.error();
    return (*pol)->config();
}

resolved_params must_resolve(const std::string& spec, int64_t run_length = 1000) {
    auto r = resolve(spec, run_length);
    EXPECT_TRUE(r.ok()) << spec << ": " << r.error().to_string();
    return r.ok() ? *r : resolved_params{};
}

// The spec is refused and the message contains every fragment.
void expect_refused(const std::string& spec, const std::vector<std::string>& fragments) {
    auto r = resolve(spec);
    ASSERT_FALSE(r.ok()) << spec << " was accepted: " << r->to_string();
    EXPECT_EQ(r.error().code(), status_code::invalid_argument);
    for (const auto& f : fragments) {
        EXPECT_NE(r.error().message().find(f), std::string::npos)
            << spec << ": '" << r.error().message() << "' lacks '" << f << "'";
    }
}

TEST(policy_registry, NamesInRegistryOrder) {
    // The built-ins (a test elsewhere in this binary may register one more after them).
    const std::vector<std::string> builtin{"full",         "window",    "streaming", "h2o",     "tova",
                                           "scissorhands", "keyformer", "l2norm",    "keydiff", "snapkv"};
    const auto names = policy::policy_names();
    ASSERT_GE(names.size(), builtin.size());
    EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + builtin.size()), builtin);
}

TEST(policy_registry, UnknownPolicyListsTheValidOnes) {
    for (const std::string spec : {"h2", "H2O:budget=4", ":budget=4"}) {
        auto p = params::parse(spec);
        ASSERT_FALSE(p.ok()) << spec;
        EXPECT_NE(p.error().message().find("valid: full, window, streaming, h2o, tova"), std::string::npos)
            << p.error().message();
    }
    params p;
    p.name = "lru";
    auto pol = kv_policy::create(p, small_layout(), 100);
    ASSERT_FALSE(pol.ok());
    EXPECT_NE(pol.error().message().find("unknown policy 'lru'; valid: full, window, streaming, h2o, tova"),
              std::string::npos)
        << pol.error().message();
}

TEST(policy_params, FullIgnoresEverything) {
    const resolved_params r = must_resolve("full:budget=4,recent=-3,sinks=99,decay=7");
    EXPECT_EQ(r.budget, 0);
    EXPECT_EQ(r.recent, 0);
    EXPECT_EQ(r.sinks, 0);
    EXPECT_EQ(r.decay, 1.0);
    EXPECT_EQ(must_resolve("full").budget, 0);
}

TEST(policy_params, PositionModes) {
    EXPECT_EQ(must_resolve("h2o:budget=8,positions=rolling").positions, policy::position_mode::rolling);
    EXPECT_EQ(must_resolve("window:budget=8").positions, policy::position_mode::original);
    EXPECT_EQ(must_resolve("h2o:budget=8,positions=rolling").to_string(),
              "h2o:budget=8,recent=4,sinks=0,positions=rolling");
    // Nothing moves in a cache that never evicts.
    EXPECT_EQ(must_resolve("full:positions=rolling").positions, policy::position_mode::original);
    auto bad = params::parse("h2o:budget=8,positions=cache");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message().find("unknown position mode 'cache'; valid: original, rolling"),
              std::string::npos)
        << bad.error().message();
}

TEST(policy_params, WindowDefaultsAndRules) {
    const resolved_params r = must_resolve("window:budget=64");
    EXPECT_EQ(r.budget, 64);
    EXPECT_EQ(r.recent, 64);
    EXPECT_EQ(r.sinks, 0);
    EXPECT_EQ(must_resolve("window:budget=64,recent=64,sinks=0").recent, 64);
    expect_refused("window", {"window needs a budget"});
    expect_refused("window:budget=64,recent=32", {"recent 32", "budget 64"});
    expect_refused("window:budget=64,sinks=1", {"sinks 1", "must be 0"});
    expect_refused("window:budget=64,decay=0.9", {"decay"});
}

TEST(policy_params, StreamingDefaultsAndRules) {
    const resolved_params r = must_resolve("streaming:budget=64");
    EXPECT_EQ(r.sinks, 4);
    EXPECT_EQ(r.recent, 60);
    const resolved_params given = must_resolve("streaming:budget=64,sinks=2,recent=10");
    EXPECT_EQ(given.sinks, 2);
    EXPECT_EQ(given.recent, 10);
    EXPECT_EQ(must_resolve("streaming:budget=64,sinks=4,recent=60").recent, 60);
    expect_refused("streaming", {"streaming needs a budget"});
    expect_refused("streaming:budget=4", {"sinks 4", "budget 4"});
    expect_refused("streaming:budget=64,sinks=64", {"sinks 64", "budget 64"});
    expect_refused("streaming:budget=64,recent=61", {"sinks 4", "recent 61", "budget 64"});
    expect_refused("streaming:budget=64,sinks=-1", {"sinks -1"});
    expect_refused("streaming:budget=64,recent=-2", {"recent -2"});
    expect_refused("streaming:budget=64,decay=0.5", {"decay"});
}

TEST(policy_params, H2oDefaultsAndRules) {
    const resolved_params r = must_resolve("h2o:budget=7");
    EXPECT_EQ(r.recent, 3) << "floor(budget / 2)";
    EXPECT_EQ(r.sinks, 0);
    EXPECT_EQ(r.decay, 1.0);
    EXPECT_EQ(must_resolve("h2o:budget=1").recent, 0);
    const resolved_params given = must_resolve("h2o:budget=256,recent=192,decay=0.98,sinks=2");
    EXPECT_EQ(given.recent, 192);
    EXPECT_EQ(given.sinks, 2);
    EXPECT_EQ(given.decay, 0.98);
    EXPECT_EQ(must_resolve("h2o:budget=64,sinks=3,recent=60").recent, 60)
        << "one heavy-hitter slot is enough";
    expect_refused("h2o", {"h2o needs a budget"});
    expect_refused("h2o:budget=64,sinks=2,recent=62", {"sinks 2", "recent 62", "budget 64", "heavy"});
    expect_refused("h2o:budget=64,recent=64", {"recent 64", "budget 64"});
    expect_refused("h2o:budget=2,sinks=1",
                   {"sinks 1", "recent 1", "budget 2", "recent defaults to floor(budget / 2)"});
    expect_refused("h2o:budget=64,recent=-1", {"recent -1"});
    expect_refused("h2o:budget=64,sinks=-1", {"sinks -1"});
    expect_refused("h2o:budget=64,decay=0", {"decay 0", "(0, 1]"});
    expect_refused("h2o:budget=64,decay=1.5", {"decay 1.5", "(0, 1]"});
    expect_refused("h2o:budget=64,decay=-0.5", {"decay -0.5"});
    expect_refused("h2o:budget=64,decay=nan", {"decay nan"});
}

TEST(policy_params, TovaDefaultsAndRules) {
    const resolved_params r = must_resolve("tova:budget=64");
    EXPECT_EQ(r.recent, 0);
    EXPECT_EQ(r.sinks, 0);
    EXPECT_EQ(r.decay, 0.0) << "forced";
    EXPECT_EQ(must_resolve("tova:budget=64,sinks=4,recent=60").recent, 60) << "sinks + recent <= budget";
    EXPECT_EQ(must_resolve("tova:budget=64,decay=0").decay, 0.0);
    expect_refused("tova", {"tova needs a budget"});
    expect_refused("tova:budget=64,sinks=5,recent=60", {"sinks 5", "recent 60", "budget 64"});
    expect_refused("tova:budget=64,decay=0.5", {"decay 0.5"});
    expect_refused("tova:budget=64,recent=-1", {"recent -1"});
}

TEST(policy_params, ScissorhandsDefaultsAndRules) {
    const resolved_params r = must_resolve("scissorhands:budget=9");
    EXPECT_EQ(r.recent, 4) << "floor(budget / 2)";
    EXPECT_EQ(r.sinks, 0);
    EXPECT_EQ(r.extra.at("history"), 32.0);
    EXPECT_EQ(must_resolve("scissorhands:budget=9,history=64").extra.at("history"), 64.0);
    expect_refused("scissorhands", {"scissorhands needs a budget"});
    expect_refused("scissorhands:budget=8,history=0", {"history 0", "[1, 64]"});
    expect_refused("scissorhands:budget=8,history=65", {"history 65"});
    expect_refused("scissorhands:budget=8,history=2.5", {"history 2.5"});
    expect_refused("scissorhands:budget=8,decay=0.9", {"decay does not apply"});
    expect_refused("scissorhands:budget=8,recent=8", {"recent 8", "budget 8"});
    expect_refused("scissorhands:budget=8,tau=1", {"unknown parameter 'tau'", "history"});
}

TEST(policy_params, KeyformerDefaultsAndRules) {
    const resolved_params r = must_resolve("keyformer:budget=10");
    EXPECT_EQ(r.recent, 5);
    EXPECT_EQ(r.decay, 1.0);
    EXPECT_EQ(r.extra.at("tau"), 1.0);
    EXPECT_EQ(r.extra.at("seed"), 0.0);
    const resolved_params given = must_resolve("keyformer:budget=10,tau=0.25,seed=42,decay=0.9");
    EXPECT_EQ(given.extra.at("tau"), 0.25);
    EXPECT_EQ(given.extra.at("seed"), 42.0);
    EXPECT_EQ(given.decay, 0.9);
    expect_refused("keyformer:budget=10,tau=-1", {"tau -1", ">= 0"});
    expect_refused("keyformer:budget=10,tau=inf", {"tau inf"});
    expect_refused("keyformer:budget=10,seed=-3", {"seed -3"});
    expect_refused("keyformer:budget=10,seed=1.5", {"seed 1.5"});
    expect_refused("keyformer:budget=10,decay=0", {"decay 0", "(0, 1]"});
    expect_refused("keyformer:budget=10,tau=x", {"tau 'x' is not a number"});
    EXPECT_EQ(must_resolve(given.to_string()), given) << given.to_string();
}

TEST(policy_params, L2normDefaultsAndRules) {
    const resolved_params r = must_resolve("l2norm:budget=10");
    EXPECT_EQ(r.recent, 5);
    EXPECT_EQ(r.sinks, 0);
    expect_refused("l2norm", {"l2norm needs a budget"});
    expect_refused("l2norm:budget=10,decay=0.5", {"decay does not apply"});
    expect_refused("l2norm:budget=10,sinks=5,recent=5", {"sinks 5", "recent 5", "budget 10"});
}

TEST(policy_params, KeydiffDefaultsAndRules) {
    const resolved_params r = must_resolve("keydiff:budget=10");
    EXPECT_EQ(r.recent, 5);
    EXPECT_EQ(r.sinks, 0);
    expect_refused("keydiff", {"keydiff needs a budget"});
    expect_refused("keydiff:budget=10,decay=0.5", {"decay does not apply"});
    expect_refused("keydiff:budget=10,proxy=1", {"unknown parameter 'proxy'"});
}

TEST(policy_params, SnapkvDefaultsAndRules) {
    const resolved_params r = must_resolve("snapkv:budget=20");
    EXPECT_EQ(r.recent, 8) << "the observation window";
    EXPECT_EQ(r.extra.at("window"), 8.0);
    EXPECT_EQ(r.extra.at("kernel"), 5.0);
    EXPECT_EQ(r.extra.at("decode"), 0.0);
    EXPECT_EQ(must_resolve("snapkv:budget=20,window=4").recent, 4);
    expect_refused("snapkv:budget=20,kernel=4", {"kernel 4", "odd"});
    expect_refused("snapkv:budget=20,window=0", {"window 0"});
    expect_refused("snapkv:budget=20,decode=2", {"decode 2"});
    expect_refused("snapkv:budget=8", {"sinks 0", "recent 8", "budget 8", "recent defaults to the window"});
    expect_refused("snapkv:budget=20,decay=0.9", {"decay does not apply"});
}

TEST(policy_params, ProxyIsAnAttentionPolicysParameter) {
    for (const std::string name : {"h2o", "tova", "scissorhands", "keyformer", "snapkv"}) {
        EXPECT_EQ(must_resolve(name + ":budget=10,proxy=1").extra.at("proxy"), 1.0) << name;
        expect_refused(name + ":budget=10,proxy=0.5", {"proxy 0.5", "must be 0"});
    }
    for (const std::string name : {"window", "streaming", "l2norm", "keydiff"}) {
        expect_refused(name + ":budget=10,proxy=1", {"unknown parameter 'proxy'"});
    }
    EXPECT_EQ(must_resolve("h2o:budget=10,proxy=1").to_string(), "h2o:budget=10,recent=5,sinks=0,proxy=1");
    EXPECT_EQ(must_resolve("h2o:budget=10,proxy=0").to_string(), "h2o:budget=10,recent=5,sinks=0");
}

TEST(policy_params, ProtectedSumDoesNotOverflow) {
    const int64_t big = std::numeric_limits<int64_t>::max();
    expect_refused("h2o:budget=64,recent=" + std::to_string(big) + ",sinks=" + std::to_string(big),
                   {"budget 64"});
    expect_refused("tova:budget=64,recent=60,sinks=" + std::to_string(big), {"budget 64"});
}

TEST(policy_params, UnknownParameterListsTheValidOnes) {
    auto p = params::parse("h2o:budget=4,heavy=2");
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.error().message().find(
                  "unknown parameter 'heavy'; valid: budget, recent, sinks, decay, granularity"),
              std::string::npos)
        << p.error().message();
}

TEST(policy_params, MalformedSpecsAreRefused) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"h2o:budget", "expected name=value"},
        {"h2o:budget=4,budget=5", "'budget' is given twice"},
        {"h2o:budget=4,", "expected name=value"},
        {"h2o:recent=abc", "recent 'abc' is not an integer"},
        {"h2o:recent=1.5", "not an integer"},
        {"h2o:decay=x", "decay 'x' is not a number"},
        {"h2o:granularity=row", "unknown granularity 'row'; valid: head, layer, model"},
        {"h2o:budget=", "budget ''"},
    };
    for (const auto& [spec, fragment] : cases) {
        auto p = params::parse(spec);
        ASSERT_FALSE(p.ok()) << spec;
        EXPECT_NE(p.error().message().find(fragment), std::string::npos)
            << spec << ": " << p.error().message();
        EXPECT_NE(p.error().message().find(spec), std::string::npos) << "the message quotes the spec";
    }
}

TEST(policy_params, ParsesTheDocumentedExample) {
    auto p = params::parse("h2o:budget=256,recent=192,decay=0.98,sinks=0,granularity=layer");
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    EXPECT_EQ(p->name, "h2o");
    EXPECT_EQ(p->budget, budget_spec::count(256));
    EXPECT_EQ(p->recent, 192);
    EXPECT_EQ(p->sinks, 0);
    EXPECT_EQ(p->decay, 0.98);
    EXPECT_EQ(p->gran, granularity::layer);
    auto bare = params::parse("tova");
    ASSERT_TRUE(bare.ok());
    EXPECT_EQ(bare->name, "tova");
    EXPECT_FALSE(bare->budget.has_value());
    EXPECT_FALSE(bare->gran.has_value()) << "left out: the policy's default";
    auto spaced = params::parse(" h2o : budget = 0.2 , recent = 3 ");
    ASSERT_TRUE(spaced.ok()) << spaced.error().to_string();
    EXPECT_EQ(spaced->budget, budget_spec::of_length(0.2));
    EXPECT_TRUE(params::parse("h2o:").ok());
}

TEST(policy_params, SpecStringRoundTrips) {
    std::mt19937_64 rng(7);
    const auto names = policy::policy_names();
    for (int trial = 0; trial < 500; ++trial) {
        params p;
        p.name = names[rng() % names.size()];
        if (rng() % 2) {
            p.budget = rng() % 2
                           ? budget_spec::count(1 + static_cast<int64_t>(rng() % 100000))
                           : budget_spec::of_length(std::ldexp(static_cast<double>(rng() % 1000 + 1), -10));
        }
        if (rng() % 2) p.recent = static_cast<int64_t>(rng() % 1000) - 10;
        if (rng() % 2) p.sinks = static_cast<int64_t>(rng() % 10);
        if (rng() % 2) p.decay = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
        if (rng() % 4) p.gran = static_cast<granularity>(rng() % 3);
        if (rng() % 2) p.positions = policy::position_mode::rolling;
        const std::string text = p.to_string();
        auto back = params::parse(text);
        ASSERT_TRUE(back.ok()) << text << ": " << back.error().to_string();
        EXPECT_EQ(*back, p) << text;
    }
    EXPECT_EQ(params::parse("h2o:budget=1.0")->to_string(), "h2o:budget=1.0");
    EXPECT_EQ(params::parse("h2o")->to_string(), "h2o");
}

TEST(policy_params, ResolvedSpecCreatesTheSameConfiguration) {
    for (const std::string spec :
         {"full", "full:granularity=model", "window:budget=16", "streaming:budget=16",
          "streaming:budget=16,sinks=2,recent=5", "h2o:budget=16,decay=0.5,sinks=1",
          "h2o:budget=0.1,granularity=layer", "tova:budget=16,recent=3", "tova:budget=16,granularity=head",
          "tova:budget=16,granularity=model"}) {
        const resolved_params r = must_resolve(spec);
        EXPECT_EQ(must_resolve(r.to_string()), r) << spec << " -> " << r.to_string();
    }
    EXPECT_EQ(must_resolve("h2o:budget=256,recent=192,decay=0.98,sinks=0,granularity=layer").to_string(),
              "h2o:budget=256,recent=192,sinks=0,decay=0.98,granularity=layer");
}

// tova's paper averages a layer's heads, so tova defaults to granularity layer; every other built-in to head.
// A granularity given explicitly wins, and the resolved spec names it only where it is not the default.
TEST(policy_params, GranularityDefaultsToThePolicys) {
    for (const policy::policy_facts& f : policy::policy_catalog()) {
        EXPECT_EQ(f.gran, f.name == "tova" ? granularity::layer : granularity::head) << f.name;
        params p;
        p.name = f.name;
        EXPECT_EQ(policy::granularity_of(p), f.gran) << f.name;
        p.gran = granularity::model;
        EXPECT_EQ(policy::granularity_of(p), granularity::model) << f.name;
    }
    EXPECT_EQ(must_resolve("tova:budget=16").gran, granularity::layer);
    EXPECT_EQ(must_resolve("tova:budget=16").to_string(), "tova:budget=16,recent=0,sinks=0,decay=0");
    EXPECT_EQ(must_resolve("tova:budget=16,granularity=head").gran, granularity::head);
    EXPECT_EQ(must_resolve("tova:budget=16,granularity=head").to_string(),
              "tova:budget=16,recent=0,sinks=0,decay=0,granularity=head");
    EXPECT_EQ(must_resolve("h2o:budget=16").gran, granularity::head);
    params unknown;
    unknown.name = "no_such_policy";
    EXPECT_EQ(policy::granularity_of(unknown), granularity::head);
}

TEST(policy_budget, ParseCountsAndFractions) {
    EXPECT_EQ(*budget_spec::parse("256"), budget_spec::count(256));
    EXPECT_EQ(*budget_spec::parse("1"), budget_spec::count(1));
    EXPECT_EQ(*budget_spec::parse("0.2"), budget_spec::of_length(0.2));
    EXPECT_EQ(*budget_spec::parse("1.0"), budget_spec::of_length(1.0)) << "a decimal point makes a fraction";
    EXPECT_EQ(*budget_spec::parse("1."), budget_spec::of_length(1.0));
    EXPECT_EQ(*budget_spec::parse(".5"), budget_spec::of_length(0.5));
    const std::vector<std::pair<std::string, std::string>> refused = {
        {"0", "budget 0 must be >= 1"},
        {"-3", "budget -3 must be >= 1"},
        {"1.5", "fraction 1.5 must be in (0, 1]"},
        {"0.0", "fraction 0.0 must be in (0, 1]"},
        {"-0.5", "must be in (0, 1]"},
        {"abc", "budget 'abc' is neither"},
        {"2e3", "budget '2e3' is neither"},
        {"", "budget ''"},
        {"0.2x", "budget '0.2x' is not a number"},
        {"99999999999999999999", "neither"},
    };
    for (const auto& [text, fragment] : refused) {
        auto b = budget_spec::parse(text);
        ASSERT_FALSE(b.ok()) << "'" << text << "' accepted";
        EXPECT_NE(b.error().message().find(fragment), std::string::npos)
            << text << ": " << b.error().message();
    }
}

TEST(policy_budget, FractionResolvesToFloorOfTheRunLength) {
    EXPECT_EQ(*budget_spec::of_length(0.2).resolve(1000), 200);
    EXPECT_EQ(*budget_spec::of_length(0.2).resolve(1004), 200);
    EXPECT_EQ(*budget_spec::of_length(1.0).resolve(7), 7);
    EXPECT_EQ(*budget_spec::of_length(0.5).resolve(3), 1);
    EXPECT_EQ(*budget_spec::of_length(0.001).resolve(10), 1) << "max(1, floor(f * N))";
    // floor(f * N) in double, as the contract writes it: 0.29 * 100 is 28.999999999999996 in binary.
    EXPECT_EQ(*budget_spec::of_length(0.29).resolve(100), 28);
    EXPECT_EQ(*budget_spec::count(300).resolve(100), 300) << "a count does not depend on the run";
    EXPECT_EQ(*budget_spec::count(300).resolve(0), 300);
    auto no_run = budget_spec::of_length(0.2).resolve(0);
    ASSERT_FALSE(no_run.ok());
    EXPECT_NE(no_run.error().message().find("got 0"), std::string::npos) << no_run.error().message();
    EXPECT_FALSE(budget_spec::count(0).resolve(10).ok());
    EXPECT_FALSE(budget_spec::of_length(1.5).resolve(10).ok());
    EXPECT_FALSE(budget_spec::of_length(std::nan("")).resolve(10).ok());
}

TEST(policy_budget, FractionResolvesThroughCreate) {
    EXPECT_EQ(must_resolve("h2o:budget=0.2", 1000).budget, 200);
    EXPECT_EQ(must_resolve("h2o:budget=0.2", 1000).recent, 100);
    EXPECT_EQ(must_resolve("window:budget=0.5", 9).budget, 4);
    auto r = resolve("h2o:budget=0.2", 0);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message().find("h2o"), std::string::npos) << r.error().message();
}

TEST(policy_budget, ToStringRoundTrips) {
    for (double f : {0.2, 1.0, 0.5, 1e-5, 0.123456789, 3e-12}) {
        const std::string text = budget_spec::of_length(f).to_string();
        EXPECT_NE(text.find('.'), std::string::npos) << text;
        auto back = budget_spec::parse(text);
        ASSERT_TRUE(back.ok()) << text << ": " << back.error().to_string();
        EXPECT_EQ(back->fraction, f) << text;
    }
    EXPECT_EQ(budget_spec::count(256).to_string(), "256");
}

TEST(policy_layout, ValidateNamesTheBadValue) {
    const std::vector<std::pair<std::function<void(layout&)>, std::string>> cases = {
        {[](layout& l) { l.n_layer = 0; }, "n_layer 0 must be >= 1"},
        {[](layout& l) { l.n_kv_head = -1; }, "n_kv_head -1 must be >= 1"},
        {[](layout& l) { l.n_head = 6; }, "n_head 6 must be a multiple of n_kv_head 4"},
        {[](layout& l) { l.max_chunk = 0; }, "max_chunk 0 must be >= 1"},
        {[](layout& l) { l.max_positions = 0; }, "max_positions 0 must be >= 1"},
        {[](layout& l) {
             l.n_layer = 1 << 20;
             l.n_head = 1 << 12;
         },
         "exceed"},
    };
    for (const auto& [mutate, fragment] : cases) {
        layout l;
        l.n_layer = 2;
        l.n_kv_head = 4;
        l.n_head = 8;
        l.max_chunk = 4;
        l.max_positions = 100;
        EXPECT_TRUE(l.validate().ok());
        mutate(l);
        const status s = l.validate();
        ASSERT_FALSE(s.ok()) << fragment;
        EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
        params p;
        EXPECT_FALSE(kv_policy::create(p, l, 10).ok()) << "create validates the layout";
    }
}

TEST(policy_layout, Capacity) {
    layout l = small_layout();  // max_chunk 8, max_positions 4096
    EXPECT_EQ(must_create(*params::parse("h2o:budget=100"), l, 100)->capacity(), 108);
    EXPECT_EQ(must_create(*params::parse("window:budget=100"), l, 100)->capacity(), 108);
    EXPECT_EQ(must_create(*params::parse("full"), l, 100)->capacity(), 4096);
    EXPECT_EQ(must_create(*params::parse("h2o:budget=4090"), l, 100)->capacity(), 4096)
        << "a unit never holds more than max_positions";
    EXPECT_EQ(must_create(*params::parse("h2o:budget=9000000000000000000"), l, 100)->capacity(), 4096);
    l.max_positions = int64_t{1} << 40;
    EXPECT_EQ(must_create(*params::parse("h2o:budget=100"), l, 100)->capacity(), 108)
        << "positions beyond 2^31 are fine for an evicting policy";
    auto full = kv_policy::create(*params::parse("full"), l, 100);
    ASSERT_FALSE(full.ok());
    EXPECT_NE(full.error().message().find("1099511627776"), std::string::npos) << full.error().message();
}

TEST(policy_granularity, UnitsAndHeads) {
    const layout l = small_layout();  // 2 layers, 2 KV heads, 4 query heads (GQA 2:1)
    using heads = std::vector<std::pair<int, int>>;
    auto head = must_create(*params::parse("h2o:budget=8"), l, 100);
    EXPECT_EQ(head->n_units(), 4);
    EXPECT_EQ(head->unit_of(1, 1), 3);
    EXPECT_EQ(head->unit_of(1, 0), 2);
    EXPECT_EQ(head->heads_of(3), (heads{{1, 2}, {1, 3}}));
    EXPECT_EQ(head->heads_of(0), (heads{{0, 0}, {0, 1}}));
    auto layer = must_create(*params::parse("h2o:budget=8,granularity=layer"), l, 100);
    EXPECT_EQ(layer->n_units(), 2);
    EXPECT_EQ(layer->unit_of(1, 1), 1);
    EXPECT_EQ(layer->heads_of(1), (heads{{1, 0}, {1, 1}, {1, 2}, {1, 3}}));
    auto model = must_create(*params::parse("h2o:budget=8,granularity=model"), l, 100);
    EXPECT_EQ(model->n_units(), 1);
    EXPECT_EQ(model->unit_of(1, 1), 0);
    EXPECT_EQ(model->heads_of(0).size(), 8u);
    EXPECT_EQ(model->heads_of(0).front(), std::make_pair(0, 0));
    EXPECT_EQ(model->heads_of(0).back(), std::make_pair(1, 3));
    for (granularity g : {granularity::head, granularity::layer, granularity::model}) {
        EXPECT_EQ(*policy::parse_granularity(policy::granularity_name(g)), g);
    }
}

}  // namespace
}  // namespace h2okv::testing
