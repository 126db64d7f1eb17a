// `h2okv perplexity` reproduces the reference figures of ../shared/models/h2o-eval-5M/MODEL.md (computed by
// an independent float64 numpy implementation), tokenizer included.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

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

// The numpy reference's perplexity line: "perplexity P mean_nll M tokens N".
double numpy_perplexity(const std::string& args) {
    int rc = -1;
    const std::string out =
        run_command("/usr/bin/python3 " + std::string(H2OKV_SOURCE_DIR) +
                        "/tests/reference/llama_ref.py --perplexity " + args + " 2>/dev/null",
                    &rc);
    EXPECT_EQ(rc, 0) << out;
    double ppl = -1.0;
    const size_t at = out.find("perplexity ");
    if (at == std::string::npos || std::sscanf(out.c_str() + at, "perplexity %lf", &ppl) != 1) return -1.0;
    return ppl;
}

struct numpy_run {
    std::string ours, theirs;
};

void expect_numpy_perplexities(const std::vector<numpy_run>& runs) {
    const std::string text = kShared + "/data/tinystories/tinystories_val_head.txt";
    if (!std::filesystem::exists(text)) GTEST_SKIP() << "../shared is absent: " << text;
    const std::string model = std::string(H2OKV_SOURCE_DIR) + "/models/stories260K.gguf";
    for (const auto& r : runs) {
        const double ours = perplexity_of("-m " + model + " -f " + text + " --max-tokens 256 " + r.ours);
        const double theirs =
            numpy_perplexity("--model " + model + " --text-file " + text + " --max-tokens 256 " + r.theirs);
        ASSERT_GT(theirs, 0.0) << r.theirs;
        EXPECT_NEAR(ours, theirs, theirs * 1e-4) << r.ours;
    }
}

// f32 KV against the float64 reference.
TEST(Perplexity, EvictingRunsEqualTheNumpyReference) {
    expect_numpy_perplexities({
        {"--kv-type f32 --kv-policy h2o --kv-budget 0.2", "--policy h2o --budget 0.2"},
        {"--kv-type f32 --kv-policy h2o --kv-budget 40 --kv-decay 0.95 --kv-sinks 2",
         "--policy h2o --budget 40 --decay 0.95 --sinks 2"},
        {"--kv-type f32 --kv-policy tova --kv-budget 0.1 --kv-granularity layer",
         "--policy tova --budget 0.1 --granularity layer"},
        {"--kv-type f32 --kv-policy streaming --kv-budget 32", "--policy streaming --budget 32"},
        {"--kv-type f32 --kv-policy h2o --kv-budget 48 --kv-prefill-chunk 16",
         "--policy h2o --budget 48 --chunk 16"},
    });
}

// The default f16 KV against the reference rounding its K/V the same way (under eviction the rounding moves
// scores enough to change some evictions: TOVA at 0.1 per head gives 4.7516 with f16 KV). The engine rounds
// its f32 K/V and the reference its float64 ones, so an element between the two sides of a rounding midpoint
// can flip an eviction where two scores nearly tie. Every case here holds on the SIMD and the scalar kernels
// (H2OKV_ISA=scalar in .ci/run); TOVA at 0.1 per layer is not one of them: it has such a near-tie, which the
// scalar kernels' last bits flip (4.8388 against the reference's 4.8308, the SIMD kernels' 4.8309).
TEST(Perplexity, EvictingF16RunsEqualTheNumpyReference) {
    expect_numpy_perplexities({
        {"--kv-policy h2o --kv-budget 0.2", "--kv-type f16 --policy h2o --budget 0.2"},
        {"--kv-policy tova --kv-budget 0.1 --kv-granularity head",
         "--kv-type f16 --policy tova --budget 0.1 --granularity head"},
        {"--kv-policy h2o --kv-budget 48 --kv-prefill-chunk 16",
         "--kv-type f16 --policy h2o --budget 48 --chunk 16"},
    });
}

TEST(Perplexity, JsonlRecordsTheKvType) {
    const std::string text = kShared + "/data/tinystories/tinystories_val_head.txt";
    if (!std::filesystem::exists(text)) GTEST_SKIP() << "../shared is absent: " << text;
    const std::string jsonl =
        (std::filesystem::temp_directory_path() / ("h2okv_ppl_kv_" + std::to_string(::getpid()) + ".jsonl"))
            .string();
    for (const std::string flag : {"", "--kv-type f32"}) {
        int rc = -1;
        run_command(kCli + " perplexity -f " + text + " --max-tokens 32 " + flag + " --jsonl " + jsonl +
                        " >/dev/null 2>&1",
                    &rc);
        EXPECT_EQ(rc, 0) << flag;
    }
    const std::string lines = read_file(jsonl);
    EXPECT_NE(lines.find("\"kv_type\":\"f16\""), std::string::npos) << "the default: " << lines;
    EXPECT_NE(lines.find("\"kv_type\":\"f32\""), std::string::npos) << lines;
    std::filesystem::remove(jsonl);
    int rc = -1;
    const std::string err =
        run_command(kCli + " perplexity -f " + text + " --max-tokens 32 --kv-type bf16 2>&1 >/dev/null", &rc);
    EXPECT_NE(rc, 0);
    EXPECT_NE(err.find("unknown KV type 'bf16' (valid: f32, f16, q8_0, q4_0, q4_1)"), std::string::npos)
        << err;
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
