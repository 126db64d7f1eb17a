// Engine properties on the bundled model: a budget that holds the whole run gives logits bit-identical to the
// full cache for every policy, granularity and prefill chunk (the slot cache and scoring path in use);
// evicting runs respect the budget; sessions refuse what they cannot do with a clear error.
#include "h2okv/engine/session.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "h2okv/engine/generate.h"
#include "h2okv/gguf/gguf.h"
#include "h2okv/model/model.h"
#include "test_support.h"

namespace h2okv {
namespace {

const testing::loaded_model& stories() {
    return testing::bundled_stories();
}

std::vector<int32_t> random_tokens(int n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t{1};  // BOS
    while (static_cast<int>(t.size()) < n) t.push_back(static_cast<int32_t>(3 + rng() % 509));
    return t;
}

// Logits of every position, the prompt processed in chunks of `chunk`.
std::vector<float> run_all(const policy::params& p, int chunk, const std::vector<int32_t>& tokens) {
    engine::session_params sp;
    sp.kv = p;
    sp.prefill_chunk = chunk;
    auto s = engine::session::create(*stories().model, sp, static_cast<int64_t>(tokens.size()));
    EXPECT_TRUE(s.ok()) << s.error().to_string();
    if (!s.ok()) return {};
    std::vector<float> logits;
    const status st = (*s)->process(tokens, model::logits_mode::all, &logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return logits;
}

policy::params make(const std::string& name, int64_t budget, policy::granularity g) {
    policy::params p;
    p.name = name;
    if (name != "full") p.budget = policy::budget_spec::count(budget);
    p.gran = g;
    return p;
}

TEST(Session, BudgetHoldingTheRunIsBitIdenticalToFull) {
    const auto tokens = random_tokens(70, 7);
    for (int chunk : {1, 7, 64, 70}) {
        const auto full = run_all(make("full", 0, policy::granularity::head), chunk, tokens);
        ASSERT_EQ(full.size(), tokens.size() * 512);
        for (const std::string name : {"window", "streaming", "h2o", "tova"}) {
            for (auto g :
                 {policy::granularity::head, policy::granularity::layer, policy::granularity::model}) {
                for (int64_t budget : {70, 100}) {
                    const auto got = run_all(make(name, budget, g), chunk, tokens);
                    ASSERT_EQ(got.size(), full.size());
                    size_t mismatches = 0;
                    for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != full[i];
                    EXPECT_EQ(mismatches, 0u) << name << " budget " << budget << " granularity "
                                              << policy::granularity_name(g) << " chunk " << chunk;
                }
            }
        }
    }
}

TEST(Session, ChunkingDoesNotChangeFullCacheLogits) {
    const auto tokens = random_tokens(50, 3);
    const auto one = run_all(make("full", 0, policy::granularity::head), 1, tokens);
    const auto many = run_all(make("full", 0, policy::granularity::head), 50, tokens);
    ASSERT_EQ(one.size(), many.size());
    EXPECT_EQ(one, many);
}

TEST(Session, EvictingRunKeepsTheBudgetAndEvicts) {
    const auto tokens = random_tokens(90, 11);
    for (const std::string name : {"window", "streaming", "h2o", "tova"}) {
        engine::session_params sp;
        sp.kv = make(name, 24, policy::granularity::head);
        sp.prefill_chunk = 16;
        auto s = engine::session::create(*stories().model, sp, 90);
        ASSERT_TRUE(s.ok()) << s.error().to_string();
        (*s)->set_chunk_observer([&](int64_t) {
            for (const auto& kept : (*s)->cache().kept_per_head()) EXPECT_LE(kept.size(), 24u) << name;
        });
        std::vector<float> logits;
        ASSERT_TRUE((*s)->process(tokens, model::logits_mode::last, &logits).ok());
        EXPECT_EQ((*s)->cache().policy().total_evictions(), (90 - 24) * 5 * 4) << name;
        EXPECT_EQ((*s)->cache().capacity(), 24 + 16) << name;
    }
}

TEST(Session, FullRefusesARunLongerThanTheContext) {
    engine::session_params sp;
    sp.n_ctx = 32;
    auto s = engine::session::create(*stories().model, sp, 33);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message().find("33"), std::string::npos) << s.error().message();
    EXPECT_NE(s.error().message().find("32"), std::string::npos) << s.error().message();
}

TEST(Session, EvictingPolicyStreamsPastTheContext) {
    engine::session_params sp;
    sp.n_ctx = 32;
    sp.kv = make("h2o", 16, policy::granularity::head);
    auto s = engine::session::create(*stories().model, sp, 60);
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    std::vector<float> logits;
    EXPECT_TRUE((*s)->process(random_tokens(60, 5), model::logits_mode::last, &logits).ok());
}

TEST(Session, RefusesTokensOutsideTheVocabulary) {
    auto s = engine::session::create(*stories().model, engine::session_params{}, 4);
    ASSERT_TRUE(s.ok());
    std::vector<int32_t> bad{1, 600};
    std::vector<float> logits;
    const status st = (*s)->process(bad, model::logits_mode::last, &logits);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("600"), std::string::npos) << st.message();
}

TEST(Generate, GreedyIsDeterministicAndStopsAtN) {
    engine::generation_params gp;
    gp.n_predict = 20;
    auto run = [&] {
        auto s = engine::session::create(*stories().model, engine::session_params{}, 25);
        EXPECT_TRUE(s.ok());
        std::vector<int32_t> prompt{1, 403, 407, 261, 378};
        auto g = engine::generate(**s, prompt, gp, nullptr, nullptr);
        EXPECT_TRUE(g.ok());
        return g->tokens;
    };
    const auto a = run();
    EXPECT_EQ(a.size(), 20u);
    EXPECT_EQ(a, run());
}

}  // namespace
}  // namespace h2okv
