// `h2okv tokenize` run as a user would (the binary at H2OKV_CLI).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct run_result {
    int exit_code = -1;
    std::string out;
    std::string err;
};

std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (const char c : s) {
        if (c == '\'') {
            q += "'\\''";
        } else {
            q += c;
        }
    }
    return q + "'";
}

run_result run_cli(const std::vector<std::string>& args) {
    const auto err_path = std::filesystem::temp_directory_path() /
                          ("h2okv_tokenize_test_" + std::to_string(::getpid()) + ".err");
    std::string cmd = shell_quote(H2OKV_CLI);
    for (const auto& a : args) cmd += " " + shell_quote(a);
    cmd += " 2>" + shell_quote(err_path.string());
    run_result r;
    FILE* pipe = ::popen(cmd.c_str(), "r");
    if (pipe == nullptr) return r;
    std::array<char, 4096> buf;
    for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;) r.out.append(buf.data(), n);
    const int status = ::pclose(pipe);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream err(err_path);
    std::stringstream ss;
    ss << err.rdbuf();
    r.err = ss.str();
    std::filesystem::remove(err_path);
    return r;
}

TEST(tokenize_cli, prints_the_ids_of_the_default_model) {
    const auto r = run_cli({"tokenize", "-p", "Once upon a time", "--ids"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "1 403 407 261 378\n");
    EXPECT_EQ(r.err, "");
}

TEST(tokenize_cli, lists_each_token_with_its_piece) {
    const auto r = run_cli({"tokenize", "-p", "Once upon\na"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out,
              "1 403 407 13 412\n"
              "     1 -> '<s>'\n"
              "   403 -> ' Once'\n"
              "   407 -> ' upon'\n"
              "    13 -> '\\n'\n"
              "   412 -> 'a'\n");
}

TEST(tokenize_cli, no_bos_and_special_change_what_is_added_and_matched) {
    const auto plain = run_cli(
        {"tokenize", "-m", H2OKV_SOURCE_DIR "/models/stories260K.gguf", "-p", "a</s>", "--no-bos", "--ids"});
    EXPECT_EQ(plain.exit_code, 0) << plain.err;
    EXPECT_EQ(plain.out.rfind("261 ", 0), 0u) << plain.out;  // no BOS; "</s>" spelled out in pieces
    EXPECT_EQ(plain.out.find(" 2\n"), std::string::npos) << plain.out;
    const auto special = run_cli({"tokenize", "-p", "a</s>", "--no-bos", "--special", "--ids"});
    EXPECT_EQ(special.exit_code, 0) << special.err;
    EXPECT_EQ(special.out, "261 2\n");
}

TEST(tokenize_cli, a_bpe_vocabulary_from_the_shared_assets) {
    const std::string model = std::string(H2OKV_SHARED_DIR) + "/vocab/ggml-vocab-gpt-2.gguf";
    if (!std::filesystem::exists(model))
        GTEST_SKIP() << model << " is absent (the shared assets are not here)";
    const auto r = run_cli({"tokenize", "-m", model, "-p", "Hello world<|endoftext|>", "--special", "--ids"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "15496 995 50256\n");
}

TEST(tokenize_cli, errors_go_to_stderr_with_exit_code_1) {
    const auto missing = run_cli({"tokenize", "-m", "/nonexistent/model.gguf", "-p", "x"});
    EXPECT_EQ(missing.exit_code, 1);
    EXPECT_EQ(missing.out, "");
    EXPECT_NE(missing.err.find("/nonexistent/model.gguf"), std::string::npos) << missing.err;
    const auto no_prompt = run_cli({"tokenize"});
    EXPECT_NE(no_prompt.exit_code, 0);
    EXPECT_NE(no_prompt.err.find("--prompt"), std::string::npos) << no_prompt.err;
}

}  // namespace
