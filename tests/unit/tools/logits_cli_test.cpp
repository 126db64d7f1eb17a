// `h2okv logits` as a user runs it: the .npy it writes holds exactly the logits a session computes for the
// same tokens and KV flags (full cache and an evicting policy), text input is BOS + the text's tokens (its
// mean NLL is the perplexity evaluator's), and bad input exits 1 with a message naming the problem and
// leaves no output file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "h2okv/engine/session.h"
#include "h2okv/eval/perplexity.h"
#include "test_support.h"

namespace h2okv {
namespace {

namespace fs = std::filesystem;
using testing::bundled_stories;
using testing::read_file;
using testing::run_command;

const std::string kCli = H2OKV_CLI;
const std::string kModel = std::string(H2OKV_SOURCE_DIR) + "/models/stories260K.gguf";

struct npy_array {
    int64_t rows = 0, cols = 0;
    std::vector<float> data;
};

// Parses a float32 2-D C-order .npy file (format 1.0), failing the test on anything else.
npy_array read_npy(const std::string& path) {
    npy_array a;
    const std::string b = read_file(path);
    EXPECT_GE(b.size(), 10u) << path;
    if (b.size() < 10) return a;
    EXPECT_EQ(b.substr(0, 6), "\x93NUMPY");
    EXPECT_EQ(b[6], 1);
    EXPECT_EQ(b[7], 0);
    const size_t header_len = static_cast<unsigned char>(b[8]) | (static_cast<unsigned char>(b[9]) << 8);
    const size_t data_at = 10 + header_len;
    EXPECT_EQ(data_at % 64, 0u) << "the data must start 64-byte aligned";
    const std::string header = b.substr(10, header_len);
    EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << header;
    EXPECT_NE(header.find("'fortran_order': False"), std::string::npos) << header;
    EXPECT_EQ(header.back(), '\n');
    const size_t shape = header.find("'shape': (");
    EXPECT_NE(shape, std::string::npos) << header;
    if (shape == std::string::npos) return a;
    long long r = 0, c = 0;
    EXPECT_EQ(std::sscanf(header.c_str() + shape, "'shape': (%lld, %lld)", &r, &c), 2) << header;
    a.rows = r;
    a.cols = c;
    EXPECT_EQ(b.size() - data_at, static_cast<size_t>(r * c) * sizeof(float)) << path;
    a.data.resize(static_cast<size_t>(r * c));
    if (b.size() - data_at == a.data.size() * sizeof(float)) {
        std::memcpy(a.data.data(), b.data() + data_at, a.data.size() * sizeof(float));
    }
    return a;
}

struct cli_run {
    int exit_code = -1;
    std::string err;
};

class LogitsCli : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("h2okv_logits_cli_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    std::string path(const std::string& name) const { return (dir_ / name).string(); }

    std::string write(const std::string& name, const std::string& text) const {
        std::ofstream(path(name), std::ios::binary) << text;
        return path(name);
    }

    // `h2okv logits -m <bundled model> -t 1 <args>`, stderr captured.
    cli_run logits(const std::string& args) const {
        cli_run r;
        int status = -1;
        run_command(kCli + " logits -m " + kModel + " -t 1 " + args + " 2>" + path("stderr"), &status);
        r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        r.err = read_file(path("stderr"));
        return r;
    }

    fs::path dir_;
};

// What the engine computes for `tokens` with these session parameters, every position's logits.
std::vector<float> session_logits(const std::vector<int32_t>& tokens, const engine::session_params& sp) {
    auto s = engine::session::create(*bundled_stories().model, sp, static_cast<int64_t>(tokens.size()));
    EXPECT_TRUE(s.ok()) << s.error().to_string();
    std::vector<float> logits;
    if (!s.ok()) return logits;
    auto st = (*s)->process(tokens, model::logits_mode::all, &logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return logits;
}

// Deterministic ids spread over the vocabulary (from 3 up: no control tokens), BOS first.
std::vector<int32_t> spread_tokens(size_t n) {
    const int32_t n_vocab = bundled_stories().tok->n_vocab();
    std::vector<int32_t> t{bundled_stories().tok->bos()};
    for (size_t i = 1; i < n; ++i) t.push_back(3 + static_cast<int32_t>((i * 7919) % (n_vocab - 3)));
    return t;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float m = 0.0f;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(a[i] - b[i]));
    return m;
}

TEST_F(LogitsCli, TokensFileDumpIsTheSessionsLogits) {
    const std::vector<int32_t> tokens = spread_tokens(40);
    std::string text;  // mixed whitespace: spaces, tabs, newlines, CRLF
    for (size_t i = 0; i < tokens.size(); ++i)
        text += std::to_string(tokens[i]) + (i % 7 == 6 ? "\r\n" : i % 3 ? " " : "\t");
    const cli_run r = logits("--tokens-file " + write("ids.txt", text) + " -o " + path("out.npy"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const npy_array a = read_npy(path("out.npy"));
    EXPECT_EQ(a.rows, static_cast<int64_t>(tokens.size()));
    EXPECT_EQ(a.cols, bundled_stories().model->params().n_vocab);
    engine::session_params sp;  // full cache, prefill chunk 512: the CLI's defaults
    EXPECT_EQ(max_abs_diff(a.data, session_logits(tokens, sp)), 0.0f);
}

// A Q8_0 model with a tied output (qwen2-tiny: no output.weight, so the products read the embedding): every
// matrix packed, the tied output's packed copy included, gives the bits of the plain rows
// (H2OKV_PACK_WEIGHTS=0 packs nothing; the setting is read once per process, hence two CLI runs).
TEST_F(LogitsCli, PackedWeightsWithATiedOutputGiveThePlainRowsBits) {
    const std::string model = path("tied-q8_0.gguf");
    int status = -1;
    run_command(kCli + " gguf synth --shape qwen2-tiny --type q8_0 -o " + model + " 2>&1", &status);
    ASSERT_EQ(status, 0);
    const std::string tensors = run_command(kCli + " info --tensors -m " + model + " 2>&1", &status);
    ASSERT_NE(tensors.find("token_embd.weight         Q8_0"), std::string::npos) << tensors;
    ASSERT_EQ(tensors.find("\n  output.weight "), std::string::npos) << "the output must be tied:\n"
                                                                     << tensors;
    std::string ids;
    for (int32_t t : spread_tokens(40)) ids += std::to_string(t) + " ";
    const std::string args = " logits -m " + model + " -t 1 --tokens-file " + write("ids.txt", ids) + " -o ";
    run_command(kCli + args + path("packed.npy") + " 2>&1", &status);
    ASSERT_EQ(status, 0);
    run_command("H2OKV_PACK_WEIGHTS=0 " + kCli + args + path("plain.npy") + " 2>&1", &status);
    ASSERT_EQ(status, 0);
    const npy_array packed = read_npy(path("packed.npy"));
    const npy_array plain = read_npy(path("plain.npy"));
    ASSERT_EQ(packed.rows, 40);
    ASSERT_EQ(packed.data.size(), plain.data.size());
    EXPECT_EQ(std::memcmp(packed.data.data(), plain.data.data(), packed.data.size() * sizeof(float)), 0);
}

TEST_F(LogitsCli, EvictingRunIsTheSessionsWithTheSameFlags) {
    const std::vector<int32_t> tokens = spread_tokens(96);
    std::string text;
    for (int32_t id : tokens) text += std::to_string(id) + "\n";
    const std::string ids = write("ids.txt", text);
    const cli_run r =
        logits("--tokens-file " + ids +
               " --kv-policy h2o --kv-budget 16 --kv-recent 4 --kv-prefill-chunk 8 -o " + path("h2o.npy"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("h2o"), std::string::npos) << r.err;
    engine::session_params sp;
    sp.kv = *policy::params::parse("h2o:budget=16,recent=4");
    sp.prefill_chunk = 8;
    const npy_array h2o = read_npy(path("h2o.npy"));
    EXPECT_EQ(max_abs_diff(h2o.data, session_logits(tokens, sp)), 0.0f);

    // The flags took effect: past the budget the evicting run's logits leave the full cache's.
    ASSERT_EQ(logits("--tokens-file " + ids + " -o " + path("full.npy")).exit_code, 0);
    EXPECT_GT(max_abs_diff(h2o.data, read_npy(path("full.npy")).data), 1e-3f);
}

TEST_F(LogitsCli, TextIsBosPlusItsTokensAndGivesThePerplexityEvaluatorsNll) {
    const std::string text =
        "Once upon a time, there was a little girl named Lily. She liked to play outside.";
    const auto& m = bundled_stories();
    auto ids = m.tok->encode(text, /*add_special=*/false, /*parse_special=*/false);
    ASSERT_TRUE(ids.ok());
    std::vector<int32_t> tokens{m.tok->bos()};
    tokens.insert(tokens.end(), ids->begin(), ids->end());

    const cli_run r = logits("-f " + write("story.txt", text) + " -o " + path("f.npy"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const npy_array a = read_npy(path("f.npy"));
    ASSERT_EQ(a.rows, static_cast<int64_t>(tokens.size()));
    const auto n_vocab = static_cast<size_t>(a.cols);
    double nll = 0.0;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
        nll += eval::token_nll(std::span<const float>(a.data).subspan(i * n_vocab, n_vocab), tokens[i + 1]);
    }
    auto ppl = eval::perplexity(*m.model, tokens, engine::session_params{}, /*chunk=*/512, nullptr);
    ASSERT_TRUE(ppl.ok()) << ppl.error().to_string();
    EXPECT_NEAR(nll / static_cast<double>(tokens.size() - 1), ppl->mean_nll, 1e-9 * ppl->mean_nll);

    // -p with the same text writes the same file; -n keeps the first N positions.
    ASSERT_EQ(logits("-p \"" + text + "\" -o " + path("p.npy")).exit_code, 0);
    EXPECT_EQ(read_file(path("p.npy")), read_file(path("f.npy")));
    ASSERT_EQ(logits("-f " + path("story.txt") + " --max-tokens 5 -o " + path("n5.npy")).exit_code, 0);
    const npy_array n5 = read_npy(path("n5.npy"));
    ASSERT_EQ(n5.rows, 5);
    EXPECT_EQ(max_abs_diff(n5.data, session_logits(std::vector<int32_t>(tokens.begin(), tokens.begin() + 5),
                                                   engine::session_params{})),
              0.0f);
}

TEST_F(LogitsCli, BadInputExitsOneWithAMessageAndNoOutput) {
    const int32_t n_vocab = bundled_stories().tok->n_vocab();
    const std::string out = path("bad.npy");
    struct bad_case {
        std::string args, expected;
    };
    const std::vector<bad_case> cases = {
        {"--tokens-file " + write("oov.txt", "1 5 " + std::to_string(n_vocab) + " 7"),
         "line 1, entry 3: token id " + std::to_string(n_vocab) + " is outside the model's vocabulary [0, " +
             std::to_string(n_vocab) + ")"},
        {"--tokens-file " + write("neg.txt", "1\n-4\n"), "line 2, entry 2: token id -4"},
        {"--tokens-file " + write("huge.txt", "1 99999999999999999999"), "outside the model's vocabulary"},
        {"--tokens-file " + write("word.txt", "1 2 12x 4"), "entry 3: '12x' is not a token id"},
        {"--tokens-file " + write("comma.txt", "1,2,3"), "entry 1: '1,2,3' is not a token id"},
        {"--tokens-file " + write("empty.txt", " \n\t\n"), "holds no token ids"},
        {"--tokens-file " + path("absent.txt"), "cannot open"},
        {"", "give exactly one of --tokens-file, -p/--prompt and -f/--file (got 0)"},
        {"-p hello --tokens-file " + write("ok.txt", "1 2 3"), "(got 2)"},
        {"--tokens-file " + path("ok.txt") + " --max-tokens 4",
         "--max-tokens 4 but the input has only 3 tokens"},
        {"--tokens-file " + path("ok.txt") + " --kv-policy nope", "nope"},
    };
    for (const auto& c : cases) {
        const cli_run r = logits(c.args + " -o " + out);
        EXPECT_EQ(r.exit_code, 1) << c.args << "\n" << r.err;
        EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.args << "\nstderr: " << r.err;
        EXPECT_FALSE(fs::exists(out)) << c.args;
    }
    const cli_run r = logits("--tokens-file " + path("ok.txt") + " -o " + path("no/such/dir/x.npy"));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("cannot create"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace h2okv
