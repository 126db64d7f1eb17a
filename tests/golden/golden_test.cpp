// The bundled model's greedy output, compared byte for byte with the reference produced by two independent
// implementations (a pure-Python forward pass and llama.cpp), through the CLI as a user runs it.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "test_support.h"

using h2okv::testing::read_file;
using h2okv::testing::run_command;

namespace {

const std::string kCli = H2OKV_CLI;
const std::string kModel = std::string(H2OKV_SOURCE_DIR) + "/models/stories260K.gguf";

TEST(Golden, Stories260KGreedy196MatchesReferenceByteForByte) {
    const std::string expected =
        read_file(std::string(H2OKV_SOURCE_DIR) + "/tests/golden/stories260K_greedy_200.txt");
    ASSERT_FALSE(expected.empty());
    int rc = -1;
    const std::string out =
        run_command(kCli + " generate -m " + kModel + " -p 'Once upon a time' -n 196 -t 1 2>/dev/null", &rc);
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(out, expected);
}

// Two threads with every parallel region forced (H2OKV_FORCE_PARALLEL=1: the bundled model's products and
// attention are below the thresholds at which they would fork on their own) give the bytes one thread gives;
// the statistics line proves that the two-thread run forked at every site.
TEST(Golden, ThreadCountDoesNotChangeTheOutput) {
    int rc1 = -1, rc2 = -1;
    const std::string args =
        " generate -m " + kModel + " -p 'Once upon a time' -n 120 --kv-policy h2o --kv-budget 40";
    const std::string err = ::testing::TempDir() + "golden_threads_stderr.txt";
    const std::string one = run_command(kCli + args + " -t 1 2>/dev/null", &rc1);
    const std::string two = run_command("H2OKV_FORCE_PARALLEL=1 " + kCli + args + " -t 2 2>" + err, &rc2);
    EXPECT_EQ(rc1, 0);
    EXPECT_EQ(rc2, 0);
    EXPECT_EQ(one, two);
    const std::string stats = read_file(err);
    const auto at = stats.find("threads: 2 (parallel regions: matmul ");
    ASSERT_NE(at, std::string::npos) << stats;
    long matmul = 0, attention = 0, commit = 0;
    ASSERT_EQ(
        std::sscanf(stats.c_str() + at, "threads: 2 (parallel regions: matmul %ld, attention %ld, commit %ld",
                    &matmul, &attention, &commit),
        3)
        << stats;
    EXPECT_GT(matmul, 0);
    EXPECT_GT(attention, 0);
    EXPECT_GT(commit, 0);
}

TEST(Golden, DefaultModelIsTheBundledOne) {
    int rc = -1;
    const std::string out = run_command(kCli + " generate -p 'Once upon a time' -n 196 2>/dev/null", &rc);
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(out, read_file(std::string(H2OKV_SOURCE_DIR) + "/tests/golden/stories260K_greedy_200.txt"));
}

}  // namespace
