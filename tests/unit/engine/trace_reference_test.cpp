// The engine's kept sets, chunk after chunk, equal those of the test tree's brute-force reference of the
// eviction contract (tests/policy/reference_policy.h) fed with the engine's own attention rows — for every
// policy, granularity and prefill chunk, with budgets that force evictions.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "h2okv/engine/session.h"
#include "h2okv/gguf/gguf.h"
#include "h2okv/model/model.h"
#include "policy/reference_policy.h"

namespace h2okv {
namespace {

struct recorded_row {
    int unit;
    int64_t pos;
    testing::reference_policy::row increments;
};

struct case_config {
    std::string spec;
    int chunk;
};

class TraceVsReference : public ::testing::TestWithParam<case_config> {
protected:
    static void SetUpTestSuite() {
        auto f = gguf::file::open(std::string(H2OKV_SOURCE_DIR) + "/models/stories260K.gguf");
        ASSERT_TRUE(f.ok()) << f.error().to_string();
        file_ = std::move(f).value().release();
        auto m = model::model::load(*file_);
        ASSERT_TRUE(m.ok()) << m.error().to_string();
        model_ = std::move(m).value().release();
    }
    static void TearDownTestSuite() {
        delete model_;
        delete file_;
        model_ = nullptr;
        file_ = nullptr;
    }
    static gguf::file* file_;
    static model::model* model_;
};
gguf::file* TraceVsReference::file_ = nullptr;
model::model* TraceVsReference::model_ = nullptr;

TEST_P(TraceVsReference, KeptSetsEqualTheReferenceAtEveryChunk) {
    const case_config& c = GetParam();
    const int n_tokens = 96;
    std::mt19937 rng(42);
    std::vector<int32_t> tokens{1};
    while (static_cast<int>(tokens.size()) < n_tokens)
        tokens.push_back(static_cast<int32_t>(3 + rng() % 509));

    auto pp = policy::params::parse(c.spec);
    ASSERT_TRUE(pp.ok()) << pp.error().to_string();
    engine::session_params sp;
    sp.kv = *pp;
    sp.prefill_chunk = c.chunk;
    auto s = engine::session::create(*model_, sp, n_tokens);
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    engine::session& sess = **s;
    const auto& pol = sess.cache().policy();
    const auto& cfg = pol.config();
    auto rule = testing::reference_policy::rule_of(cfg.name);
    ASSERT_TRUE(rule.has_value());
    testing::reference_policy ref(*rule, cfg.budget, cfg.recent, cfg.sinks, cfg.decay, pol.n_units());
    ref.set_policy(cfg.name, cfg.extra, static_cast<int>(pol.heads_of(0).size()));

    std::vector<recorded_row> rows;
    sess.cache().set_row_observer(
        [&](int unit, int64_t pos, std::span<const int64_t> positions, std::span<const double> inc) {
            recorded_row r{unit, pos, {}};
            for (size_t j = 0; j < positions.size(); ++j) r.increments.emplace_back(positions[j], inc[j]);
            rows.push_back(std::move(r));
        });
    int64_t next_first = 0;
    int chunks = 0;
    int64_t evictions_seen = 0;
    sess.set_chunk_observer([&](int64_t last) {
        ++chunks;
        const int n = static_cast<int>(last - next_first + 1);
        ref.begin_chunk(next_first, n);
        for (const auto& r : rows) ref.add_row(r.unit, static_cast<int>(r.pos - next_first), r.increments);
        ref.end_chunk();
        rows.clear();
        next_first = last + 1;
        const auto engine_kept = sess.cache().kept_per_head();
        const int n_kv = model_->params().n_kv_head;
        for (size_t h = 0; h < engine_kept.size(); ++h) {
            const int unit = pol.unit_of(static_cast<int>(h) / n_kv, static_cast<int>(h) % n_kv);
            ASSERT_EQ(engine_kept[h], ref.kept(unit))
                << c.spec << " chunk " << c.chunk << " after position " << last << " (layer " << h / n_kv
                << ", KV head " << h % n_kv << ")";
            evictions_seen += static_cast<int64_t>(ref.victims(unit).size());
        }
    });
    // The prompt in chunks, then token-by-token decoding of the rest.
    const int prompt = 64;
    std::vector<float> logits;
    ASSERT_TRUE(sess.process(std::span(tokens).first(prompt), model::logits_mode::last, &logits).ok());
    for (int t = prompt; t < n_tokens; ++t) {
        ASSERT_TRUE(sess.process(std::span(tokens).subspan(static_cast<size_t>(t), 1),
                                 model::logits_mode::last, &logits)
                        .ok());
    }
    EXPECT_EQ(chunks, (prompt + c.chunk - 1) / c.chunk + (n_tokens - prompt));
    EXPECT_GT(evictions_seen, 0) << "the budget must force evictions";
    EXPECT_EQ(sess.cache().policy().total_evictions() > 0, true);
}

// A policy that scores keys gets no attention rows: the engine hands none to it (nor computes the sums), and
// it still evicts down to its budget.
TEST_F(TraceVsReference, KeyScoredPoliciesGetNoAttentionRows) {
    for (const std::string spec : {"l2norm:budget=16", "l2norm:budget=16,granularity=model"}) {
        engine::session_params sp;
        sp.kv = *policy::params::parse(spec);
        sp.prefill_chunk = 8;
        auto s = engine::session::create(*model_, sp, 64);
        ASSERT_TRUE(s.ok()) << s.error().to_string();
        EXPECT_FALSE((*s)->cache().policy().needs_attention());
        int rows = 0;
        (*s)->cache().set_row_observer(
            [&](int, int64_t, std::span<const int64_t>, std::span<const double>) { ++rows; });
        std::vector<int32_t> tokens{1};
        for (int i = 1; i < 64; ++i) tokens.push_back(3 + (i * 37) % 500);
        std::vector<float> logits;
        ASSERT_TRUE((*s)->process(tokens, model::logits_mode::last, &logits).ok());
        EXPECT_EQ(rows, 0) << spec;
        EXPECT_GT((*s)->cache().policy().total_evictions(), 0) << spec;
        EXPECT_EQ((*s)->cache().footprint().table_bytes, engine::session::plan(*model_, sp, 64)->table_bytes);
    }
}

std::vector<case_config> cases() {
    std::vector<case_config> out;
    for (int chunk : {1, 7, 64}) {
        for (std::string spec : {"h2o:budget=24", "h2o:budget=20,recent=6,sinks=2,decay=0.9",
                                 "tova:budget=16", "window:budget=24", "streaming:budget=24,sinks=4",
                                 "scissorhands:budget=20,history=16", "keyformer:budget=20,tau=0.3,seed=5"}) {
            for (std::string g : {"head", "layer", "model"})
                out.push_back({spec + ",granularity=" + g, chunk});
        }
    }
    return out;
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, TraceVsReference, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<case_config>& param_info) {
                             std::string name =
                                 param_info.param.spec + "_chunk" + std::to_string(param_info.param.chunk);
                             for (char& ch : name) {
                                 if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             }
                             return name;
                         });

}  // namespace
}  // namespace h2okv
