// Perplexity over several runs (what `perplexity --segments` and `calibrate` pool) on the bundled model:
// each run is exactly the single-run perplexity of its tokens, and the pooled figures are those runs'
// predictions together.
#include "h2okv/eval/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "h2okv/tokenizer/tokenizer.h"
#include "test_support.h"

namespace h2okv {
namespace {

std::vector<std::vector<int32_t>> three_runs() {
    const auto& lm = testing::bundled_stories();
    const std::string text =
        "Once upon a time, there was a little dog named Max. Max liked to run in the big green park. One "
        "day, "
        "he found a red ball under a tree. He played with it all day and then he went home to sleep. The "
        "next "
        "morning Lily came to the park with her mom. She saw Max and the red ball and they played together.";
    const std::vector<int32_t> ids = lm.tok->encode(text, false, false).value();
    // Runs of different lengths, so a pooled mean weighted by predictions differs from the runs' plain mean.
    std::vector<std::vector<int32_t>> runs;
    size_t at = 0;
    for (size_t len : {20u, 35u, 27u}) {
        std::vector<int32_t> run{lm.tok->bos()};
        run.insert(run.end(), ids.begin() + static_cast<ptrdiff_t>(at),
                   ids.begin() + static_cast<ptrdiff_t>(at + len));
        at += len;
        runs.push_back(std::move(run));
    }
    return runs;
}

TEST(Perplexity, RunsPoolTheirPredictionsAndEachRunIsItsSingleRunResult) {
    const auto& lm = testing::bundled_stories();
    const auto runs = three_runs();
    engine::session_params sp;
    sp.kv = policy::params::parse("h2o:budget=12").value();
    std::vector<int64_t> progress;
    auto pooled = eval::perplexity(*lm.model, runs, sp, 1, [&](int64_t done, int64_t total) {
        EXPECT_EQ(total, 21 + 36 + 28);
        progress.push_back(done);
    });
    ASSERT_TRUE(pooled.ok()) << pooled.error().to_string();
    ASSERT_EQ(pooled->run_nll.size(), runs.size());
    double nll = 0.0;
    int64_t predicted = 0, tokens = 0, evictions = 0;
    for (size_t k = 0; k < runs.size(); ++k) {
        auto one = eval::perplexity(*lm.model, runs[k], sp, 1, nullptr);
        ASSERT_TRUE(one.ok()) << one.error().to_string();
        EXPECT_EQ(pooled->run_nll[k], one->mean_nll) << "run " << k;
        EXPECT_EQ(one->run_nll, std::vector<double>{one->mean_nll});
        nll += one->mean_nll * static_cast<double>(one->n_predicted);
        predicted += one->n_predicted;
        tokens += one->n_tokens;
        evictions += one->evictions;
        if (k == 0) {
            EXPECT_EQ(pooled->kv_bytes, one->kv_bytes);
        }
    }
    EXPECT_GT(evictions, 0) << "the budget evicts in every run";
    EXPECT_EQ(pooled->n_tokens, tokens);
    EXPECT_EQ(pooled->n_predicted, predicted);
    EXPECT_EQ(pooled->evictions, evictions);
    EXPECT_EQ(pooled->mean_nll, nll / static_cast<double>(predicted));
    EXPECT_EQ(pooled->perplexity, std::exp(pooled->mean_nll));
    // Progress counts tokens over all runs and reaches the total.
    ASSERT_FALSE(progress.empty());
    EXPECT_EQ(progress.back(), tokens);
    EXPECT_TRUE(std::is_sorted(progress.begin(), progress.end()));

    EXPECT_FALSE(eval::perplexity(*lm.model, std::vector<std::vector<int32_t>>{}, sp, 1, nullptr).ok());
}

}  // namespace
}  // namespace h2okv
