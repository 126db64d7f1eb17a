// `h2okv ruler` as a user runs it on the bundled model (far too small to answer: this checks mechanics, not
// accuracy): the table, one JSONL record per (policy, task, length, depth, trial, protocol) with the full
// configuration, the same prompts under every policy and protocol, and refusals with a message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.h"

namespace {

namespace fs = std::filesystem;
using h2okv::testing::read_file;
using h2okv::testing::run_command;

const std::string kCli = H2OKV_CLI;
const std::string kModel = std::string(H2OKV_SOURCE_DIR) + "/models/stories260K.gguf";

class RulerCli : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("h2okv_ruler_cli_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
        haystack_ = (dir_ / "hay.txt").string();
        std::ofstream out(haystack_);
        for (int i = 0; i < 40; ++i) {
            out << "Once upon a time, there was a little girl named Lily. She liked to play in the garden "
                   "with "
                   "her cat. One day the sun was warm and the birds were singing in the tall trees.\n";
        }
    }
    void TearDown() override { fs::remove_all(dir_); }
    fs::path dir_;
    std::string haystack_;
};

TEST_F(RulerCli, SweepWritesOneRecordPerTrialWithTheConfiguration) {
    const std::string jsonl = (dir_ / "r.jsonl").string();
    int rc = -1;
    const std::string out = run_command(kCli + " ruler -m " + kModel + " --haystack " + haystack_ +
                                            " --task passkey,vt --lengths 340,360 --depths 0,1 --trials 2"
                                            " --protocol both --kv-prefill-chunk 64 -t 1 --jsonl " +
                                            jsonl + " --sweep-policies full h2o --sweep-budgets 0.5 2>&1",
                                        &rc);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("score by depth"), std::string::npos) << out;
    EXPECT_NE(out.find("passkey"), std::string::npos) << out;
    std::istringstream in(read_file(jsonl));
    std::vector<nlohmann::json> recs;
    for (std::string line; std::getline(in, line);) recs.push_back(nlohmann::json::parse(line));
    // per policy: passkey 2 lengths x 2 depths x 2 trials x 2 protocols + vt 2 x 2 x 2 (no depth)
    ASSERT_EQ(recs.size(), 2u * (16 + 8));
    std::map<std::string, std::string> expected_of;  // (task, length, depth, trial) -> expected answers
    int full = 0, h2o = 0;
    for (const auto& r : recs) {
        for (const char* f : {"command",       "model",
                              "model_sha256",  "haystack",
                              "task",          "protocol",
                              "policy",        "policy_name",
                              "budget_spec",   "budget",
                              "granularity",   "kv_type",
                              "prefill_chunk", "threads",
                              "length",        "prompt_tokens",
                              "answer_tokens", "run_length",
                              "seed",          "depth",
                              "trial",         "expected",
                              "generated",     "score",
                              "answer_nll",    "answer_nll_tokens",
                              "evictions",     "seconds"}) {
            EXPECT_TRUE(r.contains(f)) << f << " in " << r.dump();
        }
        EXPECT_EQ(r["command"], "ruler");
        EXPECT_EQ(r["prefill_chunk"], 64);
        EXPECT_TRUE(r["protocol"] == "agnostic" || r["protocol"] == "aware");
        EXPECT_GE(r["score"].get<double>(), 0.0);
        EXPECT_LE(r["score"].get<double>(), 1.0);
        EXPECT_GT(r["answer_nll"].get<double>(), 0.0);
        EXPECT_GE(r["answer_nll_tokens"].get<int>(), 1);
        EXPECT_EQ(r["run_length"], r["length"]);
        EXPECT_EQ(r["prompt_tokens"].get<int64_t>(),
                  r["length"].get<int64_t>() - r["answer_tokens"].get<int64_t>());
        if (r["task"] == "passkey") {
            EXPECT_EQ(r["expected"].size(), 1u);
            EXPECT_EQ(r["answer_tokens"], 8);
            EXPECT_TRUE(r["depth"] == 0.0 || r["depth"] == 1.0);
        } else {
            EXPECT_TRUE(r["depth"].is_null());
            EXPECT_EQ(r["expected"].size(), 5u);
            EXPECT_EQ(r["answer_tokens"], 30);
        }
        if (r["policy_name"] == "full") {
            ++full;
            EXPECT_EQ(r["evictions"], 0);
        } else {
            ++h2o;
            EXPECT_EQ(r["budget_spec"], "0.5");
            EXPECT_EQ(r["budget"].get<int64_t>(), r["run_length"].get<int64_t>() / 2);
            EXPECT_GT(r["evictions"].get<int64_t>(), 0);
        }
        // Every policy and protocol sees the same prompt of a trial.
        const std::string k = r["task"].dump() + r["length"].dump() + r["depth"].dump() + r["trial"].dump();
        if (expected_of.count(k)) {
            EXPECT_EQ(expected_of[k], r["expected"].dump()) << k;
        } else {
            expected_of[k] = r["expected"].dump();
        }
    }
    EXPECT_EQ(full, 24);
    EXPECT_EQ(h2o, 24);
}

TEST_F(RulerCli, RefusesBadArguments) {
    int rc = -1;
    std::string out = run_command(
        kCli + " ruler -m " + kModel + " --haystack " + haystack_ + " --task nope --lengths 128 2>&1", &rc);
    EXPECT_NE(rc, 0);
    EXPECT_NE(out.find("unknown task 'nope'"), std::string::npos) << out;
    out = run_command(kCli + " ruler -m " + kModel + " --haystack " + haystack_ + " --lengths 30 2>&1", &rc);
    EXPECT_NE(rc, 0);
    EXPECT_NE(out.find("too short"), std::string::npos) << out;
    out = run_command(kCli + " ruler -m " + kModel + " --haystack " + haystack_ + " --depths 2 2>&1", &rc);
    EXPECT_NE(rc, 0);
    EXPECT_NE(out.find("depth"), std::string::npos) << out;
}

}  // namespace
