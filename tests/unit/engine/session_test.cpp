// Engine properties on the bundled model: a budget that holds the whole run gives logits bit-identical to the
// full cache for every policy, granularity and prefill chunk (the slot cache and scoring path in use);
// evicting runs respect the budget; sessions refuse what they cannot do with a clear error.
#include "h2okv/engine/session.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "h2okv/engine/generate.h"
#include "h2okv/gguf/gguf.h"
#include "h2okv/model/model.h"
#include "h2okv/model/synth.h"
#include "test_support.h"
#include "unit/engine/synthetic_models.h"

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
std::vector<float> run_all(const policy::params& p, int chunk, const std::vector<int32_t>& tokens,
                           kv::kv_type type = kv::kv_type::f16, const model::model* m = nullptr) {
    engine::session_params sp;
    sp.kv = p;
    sp.prefill_chunk = chunk;
    sp.kv_type = type;
    auto s = engine::session::create(const_cast<model::model&>(m != nullptr ? *m : *stories().model), sp,
                                     static_cast<int64_t>(tokens.size()));
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
    for (auto type : {kv::kv_type::f16, kv::kv_type::f32}) {
        for (int chunk : {1, 7, 64, 70}) {
            const auto full = run_all(make("full", 0, policy::granularity::head), chunk, tokens, type);
            ASSERT_EQ(full.size(), tokens.size() * 512);
            for (const std::string name : {"window", "streaming", "h2o", "tova"}) {
                for (auto g :
                     {policy::granularity::head, policy::granularity::layer, policy::granularity::model}) {
                    for (int64_t budget : {70, 100}) {
                        const auto got = run_all(make(name, budget, g), chunk, tokens, type);
                        ASSERT_EQ(got.size(), full.size());
                        size_t mismatches = 0;
                        for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != full[i];
                        EXPECT_EQ(mismatches, 0u)
                            << name << " budget " << budget << " granularity " << policy::granularity_name(g)
                            << " chunk " << chunk << " kv " << kv::kv_type_name(type);
                    }
                }
            }
        }
    }
}

// KV types on a synthetic model with head_dim 64 and GQA 4 (q8_0 needs head_dim a multiple of 32): the
// cache's bytes are the type's, a budget holding the run is bit-identical to full, the rounding changes the
// logits (f16 and q8_0 differ from f32, little; q4_0 and q4_1 more), and two threads give the same bits as
// one.
TEST(Session, KvTypesOnASyntheticModel) {
    const testing::synthetic_model sm = testing::load_synthetic({256, 2, 4, 1, 192, 300, 2048, true}, 9);
    ASSERT_NE(sm.model, nullptr);
    model::model* m = sm.model.get();
    const std::vector<int32_t> tokens = testing::random_ids(48, 300, 3);
    const auto full_f32 = run_all(make("full", 0, policy::granularity::head), 8, tokens, kv::kv_type::f32, m);
    std::map<std::string, double> worst_of;  // per type: the largest logit difference from f32
    for (auto type :
         {kv::kv_type::f32, kv::kv_type::f16, kv::kv_type::q8_0, kv::kv_type::q4_0, kv::kv_type::q4_1}) {
        SCOPED_TRACE(kv::kv_type_name(type));
        engine::session_params sp;
        sp.kv_type = type;
        auto s = engine::session::create(*m, sp, 48);
        ASSERT_TRUE(s.ok()) << s.error().to_string();
        // 2 layers x 1 KV head x 48 slots x K and V.
        EXPECT_EQ((*s)->cache().bytes(), static_cast<int64_t>(2 * 48 * 2 * kv::kv_row_bytes(type, 64)));
        EXPECT_EQ(kv::kv_row_bytes(type, 64), type == kv::kv_type::f32    ? 256u
                                              : type == kv::kv_type::f16  ? 128u
                                              : type == kv::kv_type::q8_0 ? 68u
                                              : type == kv::kv_type::q4_0 ? 36u
                                                                          : 40u);

        const auto full = run_all(make("full", 0, policy::granularity::head), 8, tokens, type, m);
        for (const std::string name : {"h2o", "tova", "window"}) {
            EXPECT_EQ(run_all(make(name, 48, policy::granularity::head), 8, tokens, type, m), full) << name;
        }
        double worst = 0.0, largest = 0.0;
        for (size_t i = 0; i < full.size(); ++i) {
            worst = std::max(worst, static_cast<double>(std::fabs(full[i] - full_f32[i])));
            largest = std::max(largest, static_cast<double>(std::fabs(full_f32[i])));
        }
        worst_of[kv::kv_type_name(type)] = worst;
        if (type == kv::kv_type::f32) {
            EXPECT_EQ(worst, 0.0);
        } else {
            EXPECT_GT(worst, 0.0) << "the stored K/V are rounded";
            // 4 bits on random weights move the logits by more than their own size: only the 8- and 16-bit
            // types are held to "a little" (the 4-bit roundings are checked against the numpy reference).
            if (type != kv::kv_type::q4_0 && type != kv::kv_type::q4_1) {
                EXPECT_LT(worst, 0.05 * largest) << "and only a little";
            }
        }

        omp_set_num_threads(2);
        for (const std::string name : {"full", "h2o"}) {
            const auto p = make(name, 20, policy::granularity::head);
            const auto two = run_all(p, 16, tokens, type, m);
            omp_set_num_threads(1);
            const auto one = run_all(p, 16, tokens, type, m);
            omp_set_num_threads(2);
            EXPECT_EQ(one, two) << name << ": thread count changed the logits";
        }
        omp_set_num_threads(1);
    }
    // Coarser storage moves the logits further.
    EXPECT_LT(worst_of["f16"], worst_of["q8_0"]);
    EXPECT_LT(worst_of["q8_0"], worst_of["q4_0"]);
    EXPECT_LT(worst_of["q8_0"], worst_of["q4_1"]);
}

// Eight KV heads and contexts long enough that the cache commits a layer's score rows unit by unit in
// parallel (and, with 16-token chunks, sums the per-head weights there): the bits do not depend on the
// thread count.
TEST(Session, ParallelScoreCommitMatchesOneThread) {
    const testing::synthetic_model sm = testing::load_synthetic({256, 2, 32, 8, 64, 300, 2048, true}, 5);
    ASSERT_NE(sm.model, nullptr);
    model::model* m = sm.model.get();
    const std::vector<int32_t> tokens = testing::random_ids(640, 300, 4);
    for (int chunk : {1, 16}) {
        const auto p = make("h2o", 560, policy::granularity::head);
        omp_set_num_threads(2);
        const auto two = run_all(p, chunk, tokens, kv::kv_type::f16, m);
        omp_set_num_threads(1);
        const auto one = run_all(p, chunk, tokens, kv::kv_type::f16, m);
        ASSERT_FALSE(one.empty());
        EXPECT_EQ(one, two) << "chunk " << chunk << ": thread count changed the logits";
    }
}

TEST(Session, Q8_0KvNeedsHeadDimAMultipleOf32) {
    engine::session_params sp;
    sp.kv_type = kv::kv_type::q8_0;
    auto s = engine::session::create(*stories().model, sp, 16);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().code(), status_code::invalid_argument);
    EXPECT_NE(s.error().message().find("q8_0"), std::string::npos) << s.error().message();
    EXPECT_NE(s.error().message().find("head_dim is 8"), std::string::npos) << s.error().message();
}

TEST(Session, KvTypeNames) {
    for (auto type :
         {kv::kv_type::f32, kv::kv_type::f16, kv::kv_type::q8_0, kv::kv_type::q4_0, kv::kv_type::q4_1}) {
        auto parsed = kv::parse_kv_type(kv::kv_type_name(type));
        ASSERT_TRUE(parsed.ok());
        EXPECT_EQ(*parsed, type);
    }
    auto bad = kv::parse_kv_type("q5_0");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message().find("f32, f16, q8_0, q4_0, q4_1"), std::string::npos)
        << bad.error().message();
    EXPECT_EQ(engine::session_params{}.kv_type, kv::kv_type::f16) << "f16 is the default";
}

// A budget in bytes: the largest token budget whose K/V rows (budget + chunk slots) fit, at the type's row
// size; the session then holds that count. 2 layers x 1 KV head x K and V of 40 bytes (q4_1, head_dim 64):
// 160 bytes per slot.
TEST(Session, KvBudgetBytesIsTheLargestTokenBudgetThatFits) {
    const testing::synthetic_model sm = testing::load_synthetic({256, 2, 4, 1, 192, 300, 2048, true}, 9);
    ASSERT_NE(sm.model, nullptr);
    engine::session_params sp;
    sp.kv.name = "h2o";
    sp.kv_type = kv::kv_type::q4_1;
    sp.prefill_chunk = 8;
    const int64_t per_slot = 160;
    for (int64_t extra : {int64_t{0}, int64_t{1}, per_slot - 1}) {
        sp.kv_budget_bytes = per_slot * (32 + 8) + extra;
        auto s = engine::session::create(*sm.model, sp, 200);
        ASSERT_TRUE(s.ok()) << s.error().to_string();
        ASSERT_TRUE((*s)->params().kv.budget.has_value());
        EXPECT_EQ(*(*s)->params().kv.budget, policy::budget_spec::count(32)) << extra;
        EXPECT_EQ((*s)->params().kv_budget_bytes, 0);
        EXPECT_EQ((*s)->cache().bytes(), per_slot * 40);
        auto fp = engine::session::plan(*sm.model, sp, 200);
        ASSERT_TRUE(fp.ok());
        EXPECT_EQ(fp->kv_bytes, (*s)->cache().bytes());
    }
    // The same bytes hold more tokens of a smaller type: q4_0 rows are 36 bytes (144 per slot).
    sp.kv_type = kv::kv_type::q4_0;
    sp.kv_budget_bytes = per_slot * 40;
    auto q4_0 = engine::session::create(*sm.model, sp, 200);
    ASSERT_TRUE(q4_0.ok()) << q4_0.error().to_string();
    EXPECT_EQ(*(*q4_0)->params().kv.budget, policy::budget_spec::count(per_slot * 40 / 144 - 8));
    // More bytes than the whole run takes: the budget holds the run.
    sp.kv_budget_bytes = int64_t{1} << 30;
    auto all = engine::session::create(*sm.model, sp, 200);
    ASSERT_TRUE(all.ok()) << all.error().to_string();
    EXPECT_EQ(*(*all)->params().kv.budget, policy::budget_spec::count(200));
}

TEST(Session, KvBudgetBytesRefusals) {
    const testing::synthetic_model sm = testing::load_synthetic({256, 2, 4, 1, 192, 300, 2048, true}, 9);
    ASSERT_NE(sm.model, nullptr);
    engine::session_params sp;
    sp.kv.name = "h2o";
    sp.kv_type = kv::kv_type::q4_1;
    sp.prefill_chunk = 8;
    auto message = [&] {
        auto s = engine::session::create(*sm.model, sp, 200);
        EXPECT_FALSE(s.ok());
        return s.ok() ? std::string() : s.error().message();
    };
    // The chunk's 8 slots alone: no token of budget fits.
    sp.kv_budget_bytes = 160 * 8;
    std::string m = message();
    EXPECT_NE(m.find("one token takes 160 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("smallest budget needs 1440 bytes"), std::string::npos) << m;
    // 32 tokens fit, but not with 40 of them protected as the recent window.
    sp.kv_budget_bytes = 160 * 40;
    sp.kv.recent = 40;
    m = message();
    EXPECT_NE(m.find("at most 32 tokens"), std::string::npos) << m;
    EXPECT_NE(m.find("recent"), std::string::npos) << m;
    sp.kv.recent.reset();
    // Tokens and bytes at once; a policy that keeps everything; a negative size.
    sp.kv.budget = policy::budget_spec::count(16);
    m = message();
    EXPECT_NE(m.find("give one of them"), std::string::npos) << m;
    sp.kv.budget.reset();
    sp.kv.name = "full";
    m = message();
    EXPECT_NE(m.find("keeps every token"), std::string::npos) << m;
    sp.kv.name = "h2o";
    sp.kv_budget_bytes = -1;
    m = message();
    EXPECT_NE(m.find("must be >= 0"), std::string::npos) << m;
    // Budgets per unit: the bytes would give every unit the same budget.
    sp.kv_budget_bytes = 160 * 40;
    sp.kv.schedule = policy::budget_schedule::pyramid;
    m = message();
    EXPECT_NE(m.find("budgets per unit (schedule=pyramid)"), std::string::npos) << m;
    sp.kv.schedule = policy::budget_schedule::uniform;
    // What no budget changes is refused as it is: the bundled model's head_dim 8 holds no q4_1 block.
    sp.kv_budget_bytes = 1 << 20;
    auto s = engine::session::create(*stories().model, sp, 16);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message().find("head_dim is 8"), std::string::npos) << s.error().message();
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

// Under `window` the rolling positions are the original ones minus the window's first position: RoPE sees
// the same distances, so the logits agree to float rounding while the positions stay below the budget.
TEST(Session, RollingWindowSeesTheDistancesOfOriginalPositions) {
    const auto tokens = random_tokens(80, 9);
    policy::params p = make("window", 12, policy::granularity::head);
    const auto original = run_all(p, 5, tokens, kv::kv_type::f32);
    p.positions = policy::position_mode::rolling;
    const auto rolling = run_all(p, 5, tokens, kv::kv_type::f32);
    ASSERT_EQ(original.size(), rolling.size());
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < original.size(); ++i) {
        worst = std::max(worst, static_cast<double>(std::fabs(original[i] - rolling[i])));
        scale = std::max(scale, static_cast<double>(std::fabs(original[i])));
    }
    EXPECT_LE(worst, 1e-4 * scale);
    EXPECT_GT(worst, 0.0) << "the rolling run should have rotated at other positions";
    // h2o keeps older tokens: there rolling positions change what the model sees.
    policy::params h = make("h2o", 12, policy::granularity::head);
    const auto h_original = run_all(h, 5, tokens, kv::kv_type::f32);
    h.positions = policy::position_mode::rolling;
    const auto h_rolling = run_all(h, 5, tokens, kv::kv_type::f32);
    double h_worst = 0.0;
    for (size_t i = 0; i < h_original.size(); ++i)
        h_worst = std::max(h_worst, static_cast<double>(std::fabs(h_original[i] - h_rolling[i])));
    EXPECT_GT(h_worst, 1e-2 * scale);
}

TEST(Session, PositionWarningPastTheTrainedContext) {
    const model::model& m = *stories().model;
    const int64_t trained = m.params().n_ctx_train;
    engine::session_params sp;
    sp.prefill_chunk = 1;
    sp.kv = make("h2o", 64, policy::granularity::head);
    auto within = engine::session::position_warning(m, sp, trained);
    ASSERT_TRUE(within.ok()) << within.error().to_string();
    EXPECT_EQ(*within, "");
    auto past = engine::session::position_warning(m, sp, trained + 1);
    ASSERT_TRUE(past.ok()) << past.error().to_string();
    EXPECT_NE(past->find(fmt::format("past the model's trained context of {}", trained)), std::string::npos)
        << *past;
    EXPECT_NE(past->find("--kv-positions rolling"), std::string::npos) << *past;
    sp.kv.positions = policy::position_mode::rolling;
    auto rolled = engine::session::position_warning(m, sp, 4 * trained);
    ASSERT_TRUE(rolled.ok()) << rolled.error().to_string();
    EXPECT_EQ(*rolled, "") << "rolling positions stay below budget + chunk";
    sp.kv.budget = policy::budget_spec::count(trained);
    auto big = engine::session::position_warning(m, sp, 4 * trained);
    ASSERT_TRUE(big.ok()) << big.error().to_string();
    EXPECT_NE(big->find("rolling positions reach"), std::string::npos) << *big;
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

// keep_tokens = false: the same tokens reach on_token, none are kept, all are counted.
TEST(Generate, UnkeptTokensAreStreamedAndCounted) {
    std::vector<int32_t> prompt{1, 403, 407, 261, 378};
    engine::generation_params gp;
    gp.n_predict = 20;
    auto kept_run = engine::session::create(*stories().model, engine::session_params{}, 25);
    ASSERT_TRUE(kept_run.ok());
    auto kept = engine::generate(**kept_run, prompt, gp, nullptr, nullptr);
    ASSERT_TRUE(kept.ok());
    gp.keep_tokens = false;
    auto s = engine::session::create(*stories().model, engine::session_params{}, 25);
    ASSERT_TRUE(s.ok());
    std::vector<int32_t> seen;
    auto g = engine::generate(**s, prompt, gp, nullptr, [&seen](int32_t id) { seen.push_back(id); });
    ASSERT_TRUE(g.ok());
    EXPECT_TRUE(g->tokens.empty());
    EXPECT_EQ(g->n_generated, 20);
    EXPECT_EQ(kept->n_generated, 20);
    EXPECT_EQ(seen, kept->tokens);
}

}  // namespace
}  // namespace h2okv
