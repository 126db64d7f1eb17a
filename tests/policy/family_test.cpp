// The policy family beyond SPEC.md's table: keyformer's tau = 0 identity with h2o, its seeded noise, the
// key-scored policies' facts, the registry's facts, and a policy defined and registered outside the tree (in
// this file) on the public scorer base.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "h2okv/policy/policy.h"
#include "h2okv/policy/scorer.h"
#include "policy/policy_test_support.h"

namespace h2okv::testing {
namespace {

using policy::kv_policy;
using policy::layout;
using policy::params;

layout gqa(int64_t length, int max_chunk) {
    layout l;
    l.n_layer = 2;
    l.n_kv_head = 2;
    l.n_head = 4;
    l.max_chunk = max_chunk;
    l.max_positions = length;
    return l;
}

// Every unit's kept positions, victims and score bits after every chunk.
struct trace {
    std::vector<std::vector<int64_t>> kept, victims;
    std::vector<std::vector<uint64_t>> scores;
    bool operator==(const trace&) const = default;
};

trace run(kv_policy& pol, uint64_t seed, const std::vector<int>& plan) {
    attention_source src(seed);
    trace t;
    int64_t first = 0;
    for (int n : plan) {
        feed_chunk(pol, nullptr, first, n, src, 0.05);
        for (int u = 0; u < pol.n_units(); ++u) {
            t.kept.push_back(pol.kept_positions(u));
            const auto v = pol.victims(u);
            t.victims.emplace_back(v.begin(), v.end());
            std::vector<uint64_t> bits;
            for (double s : pol.slot_scores(u)) {
                uint64_t b = 0;
                std::memcpy(&b, &s, sizeof b);
                bits.push_back(b);
            }
            t.scores.push_back(std::move(bits));
        }
        first += n;
    }
    return t;
}

trace run_spec(const std::string& spec, uint64_t seed, int64_t length, const std::vector<int>& plan) {
    auto p = params::parse(spec);
    EXPECT_TRUE(p.ok()) << spec;
    auto pol = must_create(*p, gqa(length, 16), length);
    if (!pol) return {};
    return run(*pol, seed, plan);
}

TEST(keyformer, TauZeroIsH2oBitForBit) {
    std::mt19937_64 rng(11);
    for (const std::string extra : {"", ",decay=0.9", ",sinks=2,recent=3", ",granularity=layer"}) {
        for (int trial = 0; trial < 8; ++trial) {
            const int64_t budget = 8 + static_cast<int64_t>(rng() % 30);
            const int64_t length = budget * 3 + 5;
            const auto plan = trial % 2 ? chunk_plan(length, 16, length / 3) : chunk_plan(length, 1);
            const uint64_t seed = rng();
            const std::string b = "budget=" + std::to_string(budget) + extra;
            const trace h2o = run_spec("h2o:" + b, seed, length, plan);
            const trace kf =
                run_spec("keyformer:" + b + ",tau=0,seed=" + std::to_string(trial), seed, length, plan);
            ASSERT_FALSE(h2o.kept.empty());
            EXPECT_TRUE(h2o == kf) << b;
        }
    }
}

TEST(keyformer, NoiseIsSeededAndChangesDecisions) {
    const int64_t length = 200;
    const auto plan = chunk_plan(length, 8, 64);
    const trace a = run_spec("keyformer:budget=20,tau=0.5,seed=1", 3, length, plan);
    EXPECT_TRUE(a == run_spec("keyformer:budget=20,tau=0.5,seed=1", 3, length, plan)) << "same seed";
    EXPECT_FALSE(a.kept == run_spec("keyformer:budget=20,tau=0.5,seed=2", 3, length, plan).kept)
        << "another seed, the same kept sets";
    const trace h2o = run_spec("h2o:budget=20", 3, length, plan);
    EXPECT_FALSE(a.kept == h2o.kept) << "noise never changed a decision";
}

// Random runs of a spec against the brute-force reference: kept sets, victims and every score bit.
void expect_matches_reference(const std::string& spec, uint64_t seed) {
    SCOPED_TRACE(spec);
    std::mt19937_64 rng(seed);
    for (const policy::granularity g :
         {policy::granularity::head, policy::granularity::layer, policy::granularity::model}) {
        for (int trial = 0; trial < 4; ++trial) {
            auto p = params::parse(spec);
            ASSERT_TRUE(p.ok()) << p.error().to_string();
            p->gran = g;
            const int64_t length = 60 + static_cast<int64_t>(rng() % 60);
            const auto plan = trial % 2 ? chunk_plan(length, 7, length / 2) : chunk_plan(length, 1);
            auto pol = must_create(*p, gqa(length, 7), length);
            ASSERT_TRUE(pol);
            auto ref = reference_for(*pol);
            ASSERT_TRUE(ref.has_value());
            attention_source src(rng());
            int64_t first = 0;
            for (int n : plan) {
                feed_chunk(*pol, &*ref, first, n, src, 0.0);
                for (int u = 0; u < pol->n_units(); ++u) {
                    ASSERT_EQ(pol->kept_positions(u), ref->kept(u)) << "unit " << u << " after " << first;
                    const auto v = pol->victims(u);
                    ASSERT_EQ(std::vector<int64_t>(v.begin(), v.end()), ref->victims(u));
                    for (int32_t s : pol->kept_slots(u)) {
                        const int64_t pos = pol->slot_positions(u)[s];
                        const double a = pol->slot_scores(u)[s], b = ref->scores(u).at(pos);
                        ASSERT_EQ(std::memcmp(&a, &b, sizeof a), 0)
                            << "position " << pos << ": " << a << " vs " << b;
                    }
                }
                first += n;
            }
            EXPECT_GT(pol->total_evictions(), 0);
        }
    }
}

// The key-as-query proxy (docs/EVICTION_CONTRACT.md 9.5) under every attention policy: no attention rows
// are read (the rows the driver offers are ignored), the scores follow from the keys.
TEST(proxy, EveryAttentionPolicyMatchesTheReference) {
    for (const std::string spec :
         {"h2o:budget=12,proxy=1", "h2o:budget=12,decay=0.9,sinks=1,proxy=1", "tova:budget=10,proxy=1",
          "scissorhands:budget=12,history=8,proxy=1", "keyformer:budget=12,tau=0.5,proxy=1"}) {
        auto pol = must_create(*params::parse(spec), gqa(64, 4), 64);
        ASSERT_TRUE(pol);
        EXPECT_FALSE(pol->needs_attention()) << spec;
        EXPECT_TRUE(pol->needs_keys()) << spec;
        expect_matches_reference(spec, 5);
    }
    EXPECT_FALSE(kv_policy::create(*params::parse("h2o:budget=12,proxy=2"), gqa(64, 4), 64).ok());
    EXPECT_FALSE(params::parse("window:budget=12,proxy=1").ok()) << "window reads no attention";
}

// Prefill chunks rank by pooled votes, decode chunks by position or h2o's sum; parameters the conformance
// suite's random runs leave at their defaults.
TEST(snapkv, MatchesTheReferenceForEveryParameter) {
    expect_matches_reference("snapkv:budget=16,window=3,kernel=3", 8);
    expect_matches_reference("snapkv:budget=16,window=4,kernel=1,decode=1", 9);
    expect_matches_reference("snapkv:budget=14,window=2,kernel=7,sinks=1,recent=3", 10);
    expect_matches_reference("snapkv:budget=16,window=3,proxy=1", 11);
}

TEST(keydiff, MatchesTheReferenceWithKeysOnly) {
    expect_matches_reference("keydiff:budget=12", 6);
    expect_matches_reference("keydiff:budget=10,recent=2,sinks=1", 7);
}

TEST(policy_facts, FromTheRegistry) {
    const auto full = policy::facts_of("full");
    ASSERT_TRUE(full.ok());
    EXPECT_FALSE(full->evicts);
    EXPECT_FALSE(policy::policy_evicts("full"));
    EXPECT_TRUE(policy::policy_evicts("h2o"));
    EXPECT_EQ(policy::facts_of("h2o")->source, policy::score_source::attention);
    EXPECT_EQ(policy::facts_of("window")->source, policy::score_source::none);
    EXPECT_EQ(policy::facts_of("l2norm")->source, policy::score_source::keys);
    const auto kf = policy::facts_of("keyformer");
    ASSERT_TRUE(kf.ok());
    ASSERT_EQ(kf->extra.size(), 3u);
    EXPECT_EQ(kf->extra[0].name, "tau");
    EXPECT_EQ(kf->extra[1].name, "seed");
    EXPECT_EQ(kf->extra[2].name, "proxy");
    EXPECT_FALSE(policy::facts_of("nope").ok());
    EXPECT_NE(policy::facts_of("nope").error().message().find("valid: full, window"), std::string::npos);
    const auto sweep = policy::default_sweep();
    for (const std::string s : {"full", "window", "streaming:sinks=4", "h2o", "h2o:decay=0.98", "tova",
                                "scissorhands", "keyformer", "l2norm"}) {
        EXPECT_NE(std::find(sweep.begin(), sweep.end(), s), sweep.end()) << s;
    }
    for (const auto& s : sweep) EXPECT_TRUE(params::parse(s).ok()) << s;
}

// A source that needs no attention rows is what policies report, so engines compute none.
TEST(policy_facts, KeyScoredPoliciesReadNoAttention) {
    auto pol = must_create(*params::parse("l2norm:budget=8"), gqa(64, 4), 64);
    ASSERT_TRUE(pol);
    EXPECT_FALSE(pol->needs_attention());
    EXPECT_TRUE(pol->needs_keys());
    EXPECT_FALSE(pol->token_by_token());
    auto fp = kv_policy::plan(*params::parse("l2norm:budget=8"), gqa(64, 4), 64);
    ASSERT_TRUE(fp.ok());
    EXPECT_FALSE(fp->needs_attention);
    EXPECT_EQ(fp->n_tables, pol->n_units()) << "key scores differ per unit: one table each";
    EXPECT_EQ(fp->stored_keys_per_slot, 0) << "l2norm scores a key once and keeps no copy";
    auto kd = kv_policy::plan(*params::parse("keydiff:budget=8"), gqa(64, 4), 64);
    ASSERT_TRUE(kd.ok());
    EXPECT_EQ(kd->stored_keys_per_slot, 1);
    auto proxy = kv_policy::plan(*params::parse("h2o:budget=8,proxy=1,granularity=layer"), gqa(64, 4), 64);
    ASSERT_TRUE(proxy.ok());
    EXPECT_FALSE(proxy->needs_attention);
    EXPECT_EQ(proxy->stored_keys_per_slot, 2) << "a layer unit keeps both KV heads' keys";
}

// An out-of-tree policy: keeps the tokens whose key's first element is the largest, defined and
// registered here on the public scorer base.
class first_element final : public policy::scorer {
public:
    first_element(const policy::resolved_params& c, const layout& l)
        : scorer(c, l, {.source = policy::score_source::keys}) {}

protected:
    double key_score(const key_view& k) const override { return static_cast<double>(k.key[0]); }
};

result<policy::resolved_params> resolve_first_element(const params& p, int64_t run_length) {
    policy::resolved_params r;
    H2OKV_ASSIGN_OR_RETURN(r.budget, policy::required_budget("first_element", p, run_length));
    r.recent = p.recent.value_or(1);
    r.sinks = p.sinks.value_or(0);
    H2OKV_RETURN_IF_ERROR(policy::check_protected_fit("first_element", r.sinks, r.recent, r.budget, true));
    return r;
}

const policy::policy_entry first_element_entry{.name = "first_element",
                                               .summary = "keeps the largest first key element",
                                               .resolve = &resolve_first_element,
                                               .make = &policy::make_policy<first_element>,
                                               .source = policy::score_source::keys};

TEST(out_of_tree, RegistersAndRunsOnTheScorerBase) {
    if (policy::facts_of("first_element").ok() == false) {
        ASSERT_TRUE(policy::register_policy(first_element_entry).ok());
    }
    EXPECT_FALSE(policy::register_policy(first_element_entry).ok()) << "a second registration";
    policy::policy_entry bad = first_element_entry;
    bad.name = "Bad Name";
    EXPECT_FALSE(policy::register_policy(bad).ok());
    auto p = params::parse("first_element:budget=3");
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    layout l;
    l.max_chunk = 1;
    l.max_positions = 10;
    auto pol = must_create(*p, l, 10);
    ASSERT_TRUE(pol);
    // Keys' first elements by position: 5, 1, 7, 2, 9, 0; recent 1 protects the newest.
    const float firsts[] = {5, 1, 7, 2, 9, 0};
    for (int64_t t = 0; t < 6; ++t) {
        ASSERT_TRUE(pol->begin_chunk(t, 1).ok());
        const std::vector<float> key{firsts[t], 0.0f};
        pol->add_key(0, 0, 0, 0, key);
        ASSERT_TRUE(pol->end_chunk().ok());
    }
    EXPECT_EQ(pol->kept_positions(0), (std::vector<int64_t>{2, 4, 5}));
}

}  // namespace
}  // namespace h2okv::testing
