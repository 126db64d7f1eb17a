// Agreement with the full cache on the bundled model: exact identities (full vs full, budgets that hold the
// run), ranges for evicting runs, and the retained mass recomputed independently from the row observer of a
// non-evicting h2o run and the kept sets of the evicting run.
#include "h2okv/eval/agreement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "h2okv/engine/generate.h"
#include "h2okv/gguf/gguf.h"
#include "h2okv/model/model.h"
#include "h2okv/tokenizer/tokenizer.h"
#include "test_support.h"

namespace h2okv {
namespace {

struct bundled {
    const gguf::file* file;
    model::model* model;
    std::vector<int32_t> prompt;  // BOS + a story opening
};

bundled& stories() {
    static bundled b = [] {
        const testing::loaded_model& m = testing::bundled_stories();
        bundled r{m.file.get(), m.model.get(), {}};
        auto ids = m.tok->encode(
            "Once upon a time, there was a little girl named Lily. She loved to play outside in the park "
            "with her friends. One day, she saw a big red ball",
            false, false);
        EXPECT_TRUE(ids.ok());
        r.prompt.push_back(m.tok->bos());
        r.prompt.insert(r.prompt.end(), ids->begin(), ids->end());
        return r;
    }();
    return b;
}

constexpr int64_t kSteps = 24;

engine::session_params with_policy(const std::string& spec) {
    engine::session_params sp;
    auto p = policy::params::parse(spec);
    EXPECT_TRUE(p.ok()) << p.error().to_string();
    sp.kv = *p;
    return sp;
}

eval::agreement_result run(const std::string& spec, int64_t steps = kSteps) {
    auto r = eval::agreement(*stories().model, stories().prompt, steps, with_policy(spec), nullptr);
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    return r.ok() ? std::move(r).value() : eval::agreement_result{};
}

void expect_identity(const eval::agreement_result& r) {
    EXPECT_EQ(r.n_steps, kSteps);
    EXPECT_EQ(r.matches, kSteps);
    EXPECT_EQ(r.match_rate, 1.0);
    EXPECT_EQ(r.first_divergence, -1);
    EXPECT_EQ(r.retained_mass, 1.0);
    ASSERT_EQ(r.mass_per_step.size(), static_cast<size_t>(kSteps));
    for (double m : r.mass_per_step) EXPECT_EQ(m, 1.0);
    EXPECT_EQ(r.predicted, r.reference);
    EXPECT_EQ(r.evictions, 0);
}

TEST(Agreement, FullAgainstFullIsExact) {
    const auto r = run("full");
    expect_identity(r);
    EXPECT_EQ(r.prompt_tokens, static_cast<int64_t>(stories().prompt.size()));
    EXPECT_EQ(r.run_length, r.prompt_tokens + kSteps);
}

TEST(Agreement, ReferenceIsTheFullCacheGreedyContinuation) {
    const auto r = run("full");
    engine::session_params sp;
    auto s = engine::session::create(*stories().model, sp, r.run_length);
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    engine::generation_params gp;
    gp.n_predict = static_cast<int>(kSteps);
    gp.ignore_eos = true;
    auto g = engine::generate(**s, stories().prompt, gp, nullptr, nullptr);
    ASSERT_TRUE(g.ok()) << g.error().to_string();
    EXPECT_EQ(r.reference, g->tokens);
}

TEST(Agreement, BudgetHoldingTheRunIsExact) {
    const int64_t run_length = static_cast<int64_t>(stories().prompt.size()) + kSteps;
    std::vector<std::string> specs;
    for (const std::string name : {"window", "streaming", "h2o", "tova"}) {
        specs.push_back(name + ":budget=" + std::to_string(run_length));
        specs.push_back(name + ":budget=1.0");
    }
    for (const std::string name : {"window", "h2o"}) {
        for (const std::string gran : {"layer", "model"})
            specs.push_back(name + ":budget=1.0,granularity=" + gran);
    }
    for (const auto& spec : specs) {
        SCOPED_TRACE(spec);
        const auto r = run(spec);
        expect_identity(r);
        EXPECT_EQ(r.config.budget, run_length);
    }
}

TEST(Agreement, EvictingRunsStayInRange) {
    const auto full = run("full");
    for (const std::string spec :
         {"window:budget=16", "streaming:budget=16", "h2o:budget=16", "tova:budget=16", "h2o:budget=0.2",
          "h2o:budget=16,granularity=layer", "h2o:budget=16,granularity=model", "h2o:budget=16,decay=0.9"}) {
        SCOPED_TRACE(spec);
        const auto r = run(spec);
        EXPECT_EQ(r.reference, full.reference) << "the reference does not depend on the policy";
        EXPECT_GT(r.evictions, 0);
        ASSERT_EQ(r.predicted.size(), static_cast<size_t>(kSteps));
        int64_t matches = 0, first = -1;
        for (int64_t i = 0; i < kSteps; ++i) {
            const bool same = r.predicted[static_cast<size_t>(i)] == r.reference[static_cast<size_t>(i)];
            matches += same ? 1 : 0;
            if (!same && first < 0) first = i;
        }
        EXPECT_EQ(r.matches, matches);
        EXPECT_EQ(r.first_divergence, first);
        EXPECT_DOUBLE_EQ(r.match_rate, static_cast<double>(matches) / kSteps);
        double sum = 0.0;
        for (double m : r.mass_per_step) {
            EXPECT_GT(m, 0.0);
            EXPECT_LE(m, 1.0);
            sum += m;
        }
        EXPECT_DOUBLE_EQ(r.retained_mass, sum / kSteps);
        // Every step attends fewer positions than the full cache, and softmax weights are positive.
        EXPECT_LT(r.retained_mass, 1.0);
    }
}

// The mass of step `step` recomputed from the rows a non-evicting h2o run hands its policy (per (layer, KV
// head): the sum over the GQA group's query heads of their weights, i.e. group x the mean head's weights)
// and the kept sets of the evicting run just before that step.
double recomputed_mass(const std::string& spec, const std::vector<int32_t>& reference, int64_t step) {
    const auto& prompt = stories().prompt;
    const auto p = static_cast<int64_t>(prompt.size());
    const int64_t run_length = p + kSteps;
    std::vector<int32_t> fed(prompt.begin(), prompt.end());
    fed.insert(fed.end(), reference.begin(), reference.begin() + step);
    const int64_t query = p - 1 + step;

    auto whole = engine::session::create(*stories().model,
                                         with_policy("h2o:budget=" + std::to_string(run_length)), run_length);
    auto evicting = engine::session::create(*stories().model, with_policy(spec), run_length);
    EXPECT_TRUE(whole.ok() && evicting.ok());
    if (!whole.ok() || !evicting.ok()) return -1.0;
    std::map<int, std::pair<std::vector<int64_t>, std::vector<double>>> rows;  // unit -> row at `query`
    (*whole)->cache().set_row_observer(
        [&](int unit, int64_t pos, std::span<const int64_t> positions, std::span<const double> inc) {
            if (pos == query) rows[unit] = {{positions.begin(), positions.end()}, {inc.begin(), inc.end()}};
        });
    std::vector<std::vector<int64_t>> kept;
    // The same feeding as eval::agreement: the prompt but its last token in one call, then one at a time.
    auto head = std::span<const int32_t>(fed).first(static_cast<size_t>(p - 1));
    EXPECT_TRUE((*whole)->process(head, model::logits_mode::none, nullptr).ok());
    EXPECT_TRUE((*evicting)->process(head, model::logits_mode::none, nullptr).ok());
    for (int64_t pos = p - 1; pos <= query; ++pos) {
        const int32_t t[1] = {fed[static_cast<size_t>(pos)]};
        if (pos == query) kept = (*evicting)->cache().kept_per_head();
        EXPECT_TRUE((*whole)->process(t, model::logits_mode::none, nullptr).ok());
        EXPECT_TRUE((*evicting)->process(t, model::logits_mode::none, nullptr).ok());
    }
    const auto& hp = stories().model->params();
    EXPECT_EQ(rows.size(), static_cast<size_t>(hp.n_layer * hp.n_kv_head));
    EXPECT_EQ(kept.size(), rows.size());
    double sum = 0.0;
    for (const auto& [unit, row] : rows) {
        // Head granularity: unit u is (layer, KV head) u, layer-major, as kept_per_head() lists them.
        const auto& set = kept[static_cast<size_t>(unit)];
        double total = 0.0, in = 0.0;
        for (size_t j = 0; j < row.first.size(); ++j) {
            total += row.second[j];
            const int64_t pos = row.first[j];
            if (pos == query || std::binary_search(set.begin(), set.end(), pos)) in += row.second[j];
        }
        sum += in / total;
    }
    return sum / static_cast<double>(rows.size());
}

TEST(Agreement, RetainedMassMatchesRowObserverRecomputation) {
    for (const std::string spec : {"h2o:budget=16", "window:budget=12", "h2o:budget=16,granularity=layer"}) {
        SCOPED_TRACE(spec);
        const auto r = run(spec);
        for (int64_t step : {int64_t{0}, int64_t{9}, kSteps - 1}) {
            SCOPED_TRACE(step);
            EXPECT_NEAR(recomputed_mass(spec, r.reference, step), r.mass_per_step[static_cast<size_t>(step)],
                        1e-6);
        }
    }
}

TEST(Agreement, SummaryAveragesPrompts) {
    eval::agreement_result a, b;
    a.match_rate = 1.0;
    a.retained_mass = 0.5;
    a.first_divergence = -1;
    a.seconds = 1.0;
    b.match_rate = 0.5;
    b.retained_mass = 0.25;
    b.first_divergence = 3;
    b.seconds = 2.0;
    const std::vector<eval::agreement_result> runs{a, b};
    const auto s = eval::summarize(runs);
    EXPECT_EQ(s.n_prompts, 2);
    EXPECT_EQ(s.match_rate, 0.75);
    EXPECT_EQ(s.retained_mass, 0.375);
    EXPECT_EQ(s.n_diverged, 1);
    EXPECT_EQ(s.mean_first_divergence, 3.0);
    EXPECT_EQ(s.seconds, 3.0);
    EXPECT_EQ(eval::summarize({}).n_prompts, 0);
}

TEST(Agreement, RefusesEmptyPromptsAndZeroSteps) {
    auto none =
        eval::agreement(*stories().model, std::span<const int32_t>(), 4, with_policy("full"), nullptr);
    ASSERT_FALSE(none.ok());
    EXPECT_NE(none.error().to_string().find("no tokens"), std::string::npos) << none.error().to_string();
    auto zero = eval::agreement(*stories().model, stories().prompt, 0, with_policy("full"), nullptr);
    ASSERT_FALSE(zero.ok());
    EXPECT_NE(zero.error().to_string().find("0 steps"), std::string::npos) << zero.error().to_string();
}

}  // namespace
}  // namespace h2okv
