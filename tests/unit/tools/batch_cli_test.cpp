// `h2okv batch` as a user runs it: its stdout is what `generate` prints for each prompt, in input order,
// whatever --parallel and --kv-memory; --jsonl writes one record per prompt; bad input is refused with a
// message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
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

class BatchCli : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("h2okv_batch_cli_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
        prompts_ = (dir_ / "prompts.txt").string();
        std::ofstream(prompts_)
            << "Once upon a time\n\nThe little dog\nLily and Ben went to the park\nOne day\r\n"
               "Tom had a red ball\nThe sun was\n";
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string generate_all(const std::string& flags) {
        std::string out;
        for (const char* p : {"Once upon a time", "The little dog", "Lily and Ben went to the park",
                              "One day", "Tom had a red ball", "The sun was"}) {
            int rc = -1;
            out += run_command(kCli + " generate -m " + kModel + " -p '" + p + "' " + flags + " 2>/dev/null",
                               &rc);
            EXPECT_EQ(rc, 0) << p;
        }
        return out;
    }
    fs::path dir_;
    std::string prompts_;
};

TEST_F(BatchCli, PrintsWhatGeneratePrintsInInputOrder) {
    for (const std::string kv : {"-n 40", "-n 50 --kv-policy h2o --kv-budget 24 --kv-prefill-chunk 4",
                                 "-n 30 --kv-policy window --kv-budget 0.5 --temp 0.8 --seed 3"}) {
        const std::string want = generate_all(kv);
        ASSERT_FALSE(want.empty());
        for (const std::string batching : {"--parallel 1", "--parallel 4 --step-tokens 8", "--parallel 16",
                                           "--parallel 6 --kv-memory 150KiB"}) {
            int rc = -1;
            const std::string got = run_command(
                kCli + " batch -m " + kModel + " -f " + prompts_ + " " + kv + " " + batching + " 2>/dev/null",
                &rc);
            EXPECT_EQ(rc, 0) << kv << " " << batching;
            EXPECT_EQ(got, want) << kv << " " << batching;
        }
    }
}

TEST_F(BatchCli, JsonlHasOneRecordPerPrompt) {
    const std::string jsonl = (dir_ / "out.jsonl").string();
    int rc = -1;
    run_command(kCli + " batch -m " + kModel + " -f " + prompts_ +
                    " -n 20 --parallel 3 --kv-policy h2o --kv-budget 16 --jsonl " + jsonl +
                    " >/dev/null 2>&1",
                &rc);
    ASSERT_EQ(rc, 0);
    std::istringstream in(read_file(jsonl));
    std::vector<nlohmann::json> rows;
    for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
    ASSERT_EQ(rows.size(), 6u);
    for (size_t i = 0; i < rows.size(); ++i) {
        EXPECT_EQ(rows[i]["index"].get<size_t>(), i);
        EXPECT_EQ(rows[i]["completion_tokens"].get<int>(), 20);
        EXPECT_EQ(rows[i]["finish_reason"].get<std::string>(), "length");
        EXPECT_EQ(rows[i]["kv_policy"].get<std::string>().rfind("h2o:budget=16", 0), 0u);
        EXPECT_GT(rows[i]["evictions"].get<long>(), 0);
        EXPECT_GT(rows[i]["kv_footprint"].get<long>(), rows[i]["kv_bytes"].get<long>());
        EXPECT_GE(rows[i]["decode_seconds"].get<double>(), 0.0);
    }
    EXPECT_EQ(rows[0]["prompt"].get<std::string>(), "Once upon a time");
    EXPECT_EQ(rows[3]["prompt"].get<std::string>(), "One day") << "CR LF line ends are stripped";
}

TEST_F(BatchCli, RefusesBadInput) {
    const std::string empty = (dir_ / "empty.txt").string();
    std::ofstream(empty) << "\n  \n";
    struct bad_case {
        std::string args, expect;
    };
    const std::vector<bad_case> cases = {
        {"-f " + (dir_ / "missing.txt").string(), "cannot open"},
        {"-f " + empty, "no prompt"},
        {"-f " + prompts_ + " --kv-memory 12Q", "byte size"},
        {"-f " + prompts_ + " --kv-memory 1KiB", "--kv-memory"},
        {"-f " + prompts_ + " --parallel 0", "--parallel"},
        {"-f " + prompts_ + " --parallel 8 --step-tokens 4", "--step-tokens"},
        {"-f " + prompts_ + " --kv-policy h2o", "budget"},
        {"-f " + prompts_ + " -n -3", "-n"},
    };
    for (const auto& c : cases) {
        int rc = -1;
        const std::string err =
            run_command(kCli + " batch -m " + kModel + " " + c.args + " 2>&1 >/dev/null", &rc);
        EXPECT_NE(rc, 0) << c.args;
        EXPECT_NE(err.find(c.expect), std::string::npos) << c.args << ": " << err;
        EXPECT_EQ(err.find("Aborted"), std::string::npos) << err;
    }
}

TEST_F(BatchCli, EscapesTurnIntoCharacters) {
    const std::string file = (dir_ / "escaped.txt").string();
    std::ofstream(file) << "Once upon\\na time\n";
    int rc = -1;
    const std::string got =
        run_command(kCli + " batch -m " + kModel + " -f " + file + " -n 10 --escape 2>/dev/null", &rc);
    ASSERT_EQ(rc, 0);
    const std::string want = run_command(
        kCli + " generate -m " + kModel + " -p \"$(printf 'Once upon\\na time')\" -n 10 2>/dev/null", &rc);
    EXPECT_EQ(got, want);
}

}  // namespace
