// Every subcommand that runs past the model's trained context (the bundled model's llama.context_length is
// 2048) with original positions warns once on stderr and suggests --kv-positions rolling; with rolling
// positions and a budget below the trained context it does not.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_support.h"

namespace {

namespace fs = std::filesystem;
using h2okv::testing::run_command;

const std::string kCli = H2OKV_CLI;
const std::string kModel = std::string(H2OKV_SOURCE_DIR) + "/models/stories260K.gguf";

int count(const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

class PositionsWarning : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("h2okv_positions_warning_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
        prompts_ = (dir_ / "prompts.txt").string();
        std::ofstream(prompts_) << "Once upon a time\nThe little dog\n";
        // One prompt of more than 2048 tokens (agreement's steps are slow: it reaches the length by its
        // prompt).
        long_prompt_ = (dir_ / "long.txt").string();
        std::ofstream out(long_prompt_);
        for (int i = 0; i < 220; ++i) out << "The cat sat on the mat. ";  // about 2200 tokens
        out << "\n";
    }
    void TearDown() override { fs::remove_all(dir_); }
    // The subcommand's stderr, its stdout dropped.
    std::string stderr_of(const std::string& args) {
        int rc = -1;
        const std::string err = run_command(kCli + " " + args + " -m " + kModel + " 2>&1 >/dev/null", &rc);
        EXPECT_EQ(rc, 0) << args << "\n" << err;
        return err;
    }
    fs::path dir_;
    std::string prompts_;
    std::string long_prompt_;
};

TEST_F(PositionsWarning, EverySubcommandWarnsOncePastTheTrainedContext) {
    const std::string kv = " --kv-policy h2o --kv-budget 64";
    const std::string commands[] = {
        "generate -p 'Once upon a time' -n 2100 --ignore-eos",
        "batch -f " + prompts_ + " -n 2100 --ignore-eos",
        "agreement -f " + long_prompt_ + " -n 4 -c 4096",  // its full-cache reference needs the context
        "passkey --length 2100 --trials 1",
    };
    for (const std::string& c : commands) {
        const std::string original = stderr_of(c + kv);
        EXPECT_EQ(count(original, "warning: the run is"), 1) << c << "\n" << original;
        EXPECT_NE(original.find("--kv-positions rolling"), std::string::npos) << c;
        const std::string rolling = stderr_of(c + kv + " --kv-positions rolling");
        EXPECT_EQ(count(rolling, "warning"), 0) << c << "\n" << rolling;
    }
}

}  // namespace
