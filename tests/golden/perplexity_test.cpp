// `h2okv perplexity` reproduces the reference figures of ../shared/models/h2o-eval-5M/MODEL.md (computed by
// an independent float64 numpy implementation), tokenizer included.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "test_support.h"

using h2okv::testing::read_file;
using h2okv::testing::run_command;

namespace {

const std::string kCli = H2OKV_CLI;
const std::string kShared = H2OKV_SHARED_DIR;

// The perplexity column of the table's only data row.
double perplexity_of(const std::string& args) {
    int rc = -1;
    const std::string out = run_command(kCli + " perplexity " + args + " 2>/dev/null", &rc);
    EXPECT_EQ(rc, 0) << out;
    const size_t nl = out.find('\n');
    if (nl == std::string::npos) return -1.0;
    char policy[128];
    char budget[32];
    long tokens = 0;
    double ppl = -1.0;
    if (std::sscanf(out.c_str() + nl + 1, "%127s %31s %ld %lf", policy, budget, &tokens, &ppl) != 4)
        return -1.0;
    return ppl;
}

TEST(Perplexity, Stories260KOnTinyStoriesMatchesTheReference) {
    const std::string text = kShared + "/data/tinystories/tinystories_val_head.txt";
    if (!std::filesystem::exists(text)) GTEST_SKIP() << "../shared is absent: " << text;
    const std::string model = std::string(H2OKV_SOURCE_DIR) + "/models/stories260K.gguf";
    const double ppl = perplexity_of("-m " + model + " -f " + text + " --max-tokens 512");
    EXPECT_NEAR(ppl, 3.7107, 3.7107 * 1e-4);
}

TEST(Perplexity, EvalModelOnMobyDickMatchesTheReference) {
    const std::string text = kShared + "/data/moby-dick/moby_dick.txt";
    const std::string model = kShared + "/models/h2o-eval-5M/h2o-eval-llama-5M.gguf";
    if (!std::filesystem::exists(text) || !std::filesystem::exists(model)) {
        GTEST_SKIP() << "../shared's h2o-eval-5M model or Moby Dick is absent";
    }
    const double ppl = perplexity_of("-m " + model + " -f " + text + " --max-tokens 1024");
    EXPECT_NEAR(ppl, 308.383, 308.383 * 1e-4);
}

TEST(Perplexity, FullRefusesATextLongerThanTheContext) {
    const std::string text = kShared + "/data/tinystories/tinystories_val_head.txt";
    if (!std::filesystem::exists(text)) GTEST_SKIP() << "../shared is absent: " << text;
    int rc = -1;
    const std::string err =
        run_command(kCli + " perplexity -f " + text + " -c 100 --max-tokens 200 2>&1 >/dev/null", &rc);
    EXPECT_NE(rc, 0);
    EXPECT_NE(err.find("200"), std::string::npos) << err;
    EXPECT_NE(err.find("100"), std::string::npos) << err;
}

}  // namespace
