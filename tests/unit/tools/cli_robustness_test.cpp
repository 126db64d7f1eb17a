// The h2okv CLI (the binary at H2OKV_CLI) against malformed model files and bad flags, run as a user would:
// every case must exit with status 1 and a message on stderr naming what was wrong, never die of a signal.
//
// The malformed files are made here from a tiny valid synthetic model, by byte surgery (bad magic,
// truncations, lengths and counts past the end, bad tensor infos) or by rebuilding it without a key or a
// tensor. With H2OKV_ROBUSTNESS_TABLE=<path> set, the test also writes a Markdown table of every case and
// the message generate printed (scripts/robustness_table.sh makes docs/ROBUSTNESS.md's table from it).
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "h2okv/gguf/gguf.h"
#include "h2okv/model/synth.h"
#include "h2okv/policy/policy.h"
#include "unit/gguf/gguf_test_util.h"

extern char** environ;

namespace h2okv {
namespace {

namespace fs = std::filesystem;
using gguf::testing::bytes;
using gguf::testing::find_bytes;
using gguf::testing::patch;
using gguf::testing::peek;
using gguf::testing::tensor_at;

struct run_result {
    bool exited = false;  // false: killed by a signal (or could not run)
    int exit_code = -1;
    int signal = 0;
    std::string out, err;
};

std::string read_all(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The scratch folder of this test process (model files and captured output), removed at exit.
struct scratch_dir {
    fs::path path = fs::temp_directory_path() / ("h2okv_cli_robustness_" + std::to_string(::getpid()));
    scratch_dir() { fs::create_directories(path); }
    ~scratch_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};
const fs::path& scratch() {
    static const scratch_dir dir;
    return dir.path;
}

// Runs the CLI with `args` (no shell), stdout and stderr to files, stdin from /dev/null.
run_result run_cli(const std::vector<std::string>& args) {
    const fs::path out_path = scratch() / "stdout";
    const fs::path err_path = scratch() / "stderr";
    std::vector<std::string> argv_s = {H2OKV_CLI};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    run_result r;
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
        r.err = std::string("posix_spawn failed: ") + std::strerror(rc);
        return r;
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) {
        r.exited = true;
        r.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        r.signal = WTERMSIG(status);
    }
    r.out = read_all(out_path);
    r.err = read_all(err_path);
    return r;
}

fs::path write_model(const std::string& name, const bytes& b) {
    const fs::path p = scratch() / (name + ".gguf");
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    return p;
}

// One layer, head_dim 8, 260 tokens, F32: a few tens of kilobytes that generate runs in milliseconds.
const bytes& valid_model() {
    static const bytes b = [] {
        model::synth_shape s;
        s.n_embd = 16;
        s.n_layer = 1;
        s.n_head = 2;
        s.n_kv_head = 1;
        s.n_ff = 32;
        s.n_vocab = 260;
        s.n_ctx = 64;
        auto r = model::synthesize_model(s, gguf::tensor_type::f32, 7);
        EXPECT_TRUE(r.ok()) << r.error().message();
        return r.ok() ? *r : bytes{};
    }();
    return b;
}

// The valid model rebuilt by the writer, minus `drop_keys` and `drop_tensors`, with `edit` applied last.
bytes rebuilt(const std::vector<std::string>& drop_keys, const std::vector<std::string>& drop_tensors,
              const std::function<void(gguf::writer&)>& edit = {}) {
    const bytes& src = valid_model();
    auto f = gguf::file::parse(src.data(), src.size());
    EXPECT_TRUE(f.ok());
    if (!f.ok()) return {};
    gguf::writer w;
    for (const auto& key : (*f)->keys()) {
        if (std::find(drop_keys.begin(), drop_keys.end(), key) == drop_keys.end())
            w.set(key, *(*f)->find(key));
    }
    for (const auto& t : (*f)->tensors()) {
        if (std::find(drop_tensors.begin(), drop_tensors.end(), t.name) != drop_tensors.end()) continue;
        bytes data(t.data, t.data + t.n_bytes());
        EXPECT_TRUE(w.add_tensor(t.name, t.type, t.dims, std::move(data)).ok());
    }
    if (edit) edit(w);
    return w.to_bytes();
}

bytes edited(const std::function<void(bytes&)>& surgery) {
    bytes b = valid_model();
    surgery(b);
    return b;
}

struct malformed_case {
    std::string name;
    std::string what;  // the defect, for the table
    std::function<bytes()> make;
    std::vector<std::string> expected;  // substrings of generate's message
    bool file_level = true;             // the GGUF itself is invalid: `info` refuses it too
};

void PrintTo(const malformed_case& c, std::ostream* os) {
    *os << c.name;
}

constexpr uint64_t k_huge = uint64_t{1} << 40;

std::vector<malformed_case> malformed_cases() {
    const std::string q = "blk.0.attn_q.weight";
    return {
        {"bad_magic",
         "magic 'GGUX'",
         [] { return edited([](bytes& b) { std::memcpy(b.data(), "GGUX", 4); }); },
         {"invalid magic 'GGUX', expected 'GGUF'"}},
        {"unknown_version",
         "version 7",
         [] { return edited([](bytes& b) { patch<uint32_t>(b, 4, 7); }); },
         {"unsupported version 7, expected 2 or 3"}},
        {"big_endian_version",
         "version 3 byte-swapped",
         [] { return edited([](bytes& b) { patch<uint32_t>(b, 4, 0x03000000u); }); },
         {"big-endian", "expected version 2 or 3"}},
        {"empty_file", "0 bytes", [] { return bytes{}; }, {"truncated file: the magic needs 4 bytes"}},
        {"truncated_header",
         "the first 12 bytes",
         [] { return bytes(valid_model().begin(), valid_model().begin() + 12); },
         {"truncated file: the tensor count needs 8 bytes at byte 8 but only 4 remain"}},
        {"truncated_metadata",
         "cut inside the last token's text",
         [] {
             const size_t at = find_bytes(valid_model(), "tokenizer.ggml.scores") - 12;
             return bytes(valid_model().begin(), valid_model().begin() + static_cast<std::ptrdiff_t>(at));
         },
         {"metadata 'tokenizer.ggml.tokens'[259]"}},
        {"string_length_past_eof",
         "general.architecture's length 2^40",
         [] {
             return edited([](bytes& b) {
                 patch<uint64_t>(b, find_bytes(b, "general.architecture") + 20 + 4, k_huge);
             });
         },
         {"metadata 'general.architecture' has string length 1099511627776", "past the end of the file"}},
        {"key_length_past_eof",
         "the first key's length 2^40",
         [] { return edited([](bytes& b) { patch<uint64_t>(b, 24, k_huge); }); },
         {"metadata key #0 has string length 1099511627776", "past the end of the file"}},
        {"array_count_overflow",
         "tokenizer.ggml.tokens count 2^62",
         [] {
             return edited([](bytes& b) {
                 patch<uint64_t>(b, find_bytes(b, "tokenizer.ggml.tokens") + 21 + 4 + 4, uint64_t{1} << 62);
             });
         },
         {"metadata 'tokenizer.ggml.tokens' has element count 4611686018427387904", "hold at most"}},
        {"metadata_count_overflow",
         "metadata count 2^62",
         [] { return edited([](bytes& b) { patch<uint64_t>(b, 16, uint64_t{1} << 62); }); },
         {"metadata count 4611686018427387904 cannot fit"}},
        {"tensor_count_overflow",
         "tensor count 2^62",
         [] { return edited([](bytes& b) { patch<uint64_t>(b, 8, uint64_t{1} << 62); }); },
         {"tensor count 4611686018427387904 cannot fit"}},
        {"unknown_value_type",
         "general.architecture's type tag 13",
         [] {
             return edited(
                 [](bytes& b) { patch<uint32_t>(b, find_bytes(b, "general.architecture") + 20, 13); });
         },
         {"metadata 'general.architecture' has unknown value type 13, expected 0 to 12"}},
        {"bad_alignment",
         "general.alignment 3",
         [] { return rebuilt({}, {}, [](gguf::writer& w) { w.set_u32("general.alignment", 3); }); },
         {"general.alignment = 3, expected a non-zero power of two"}},
        {"tensor_offset_past_eof",
         q + " offset 2^40",
         [q] { return edited([q](bytes& b) { patch<uint64_t>(b, tensor_at(b, q).offset, k_huge); }); },
         {"tensor '" + q + "' starts at byte", "offset 1099511627776", "but the file has"}},
        {"tensor_size_past_eof",
         "the last 64 bytes cut off",
         [] { return bytes(valid_model().begin(), valid_model().end() - 64); },
         {"ends at byte", "but the file has"}},
        {"misaligned_tensor",
         q + " offset + 4",
         [q] {
             return edited([q](bytes& b) {
                 const size_t at = tensor_at(b, q).offset;
                 patch<uint64_t>(b, at, peek<uint64_t>(b, at) + 4);
             });
         },
         {"tensor '" + q + "' has offset", "expected a multiple of the alignment 32"}},
        {"unknown_tensor_type",
         q + " type 99",
         [q] { return edited([q](bytes& b) { patch<uint32_t>(b, tensor_at(b, q).type, 99); }); },
         {"tensor '" + q + "' has unknown type 99 (supported:"}},
        {"unsupported_tensor_type",
         q + " type 6 (ggml Q5_0)",
         [q] { return edited([q](bytes& b) { patch<uint32_t>(b, tensor_at(b, q).type, 6); }); },
         {"tensor '" + q + "' has type 6", "which h2okv does not support"}},
        {"bad_n_dims",
         q + " n_dims 5",
         [q] { return edited([q](bytes& b) { patch<uint32_t>(b, tensor_at(b, q).n_dims, 5); }); },
         {"tensor '" + q + "' has n_dims 5, expected 1 to 4"}},
        {"zero_dim",
         q + " dims[0] = 0",
         [q] { return edited([q](bytes& b) { patch<uint64_t>(b, tensor_at(b, q).dims, 0); }); },
         {"tensor '" + q + "' has dims[0] = 0, expected 1 to"}},
        {"dims_product_overflow",
         q + " dims 2^40 x 2^40",
         [q] {
             return edited([q](bytes& b) {
                 const size_t at = tensor_at(b, q).dims;
                 patch<uint64_t>(b, at, k_huge);
                 patch<uint64_t>(b, at + 8, k_huge);
             });
         },
         {"tensor '" + q + "' has dims [1099511627776, 1099511627776] whose element count overflows int64"}},
        {"duplicate_tensor_name",
         "blk.0.attn_k.weight renamed to " + q,
         [q] {
             return edited([q](bytes& b) {
                 const size_t at = find_bytes(b, "blk.0.attn_k.weight");
                 std::memcpy(b.data() + at, q.data(), q.size());
             });
         },
         {"duplicate tensor name '" + q + "'"}},
        {"unknown_architecture",
         "general.architecture 'gpt9'",
         [] {
             return rebuilt({}, {}, [](gguf::writer& w) { w.set_string("general.architecture", "gpt9"); });
         },
         {"general.architecture is 'gpt9', expected one of: llama"},
         false},
        {"missing_architecture",
         "no general.architecture",
         [] { return rebuilt({"general.architecture"}, {}); },
         {"metadata key 'general.architecture' is missing"},
         false},
        {"missing_block_count",
         "no llama.block_count",
         [] { return rebuilt({"llama.block_count"}, {}); },
         {"metadata key 'llama.block_count' is missing"},
         false},
        {"block_count_wrong_type",
         "llama.block_count as a string",
         [] { return rebuilt({}, {}, [](gguf::writer& w) { w.set_string("llama.block_count", "one"); }); },
         {"metadata 'llama.block_count'", "string"},
         false},
        {"zero_heads",
         "llama.attention.head_count 0",
         [] { return rebuilt({}, {}, [](gguf::writer& w) { w.set_u32("llama.attention.head_count", 0); }); },
         {"llama.attention.head_count is 0, expected a value in [1,"},
         false},
        {"missing_tensor",
         "no " + q,
         [q] { return rebuilt({}, {q}); },
         {"required tensor '" + q + "' is missing"},
         false},
        {"missing_embedding",
         "no token_embd.weight",
         [] { return rebuilt({}, {"token_embd.weight"}); },
         {"required tensor 'token_embd.weight' is missing"},
         false},
        {"wrong_tensor_shape",
         q + " stored as [16, 8] (expected [16, 16])",
         [q] {
             return rebuilt({}, {q}, [q](gguf::writer& w) {
                 (void)w.add_tensor(q, gguf::tensor_type::f32, {16, 8}, bytes(16 * 8 * 4));
             });
         },
         {"tensor '" + q + "' has shape [16, 8], expected [16, 16]"},
         false},
        {"missing_vocab",
         "no tokenizer.ggml.tokens",
         [] { return rebuilt({"tokenizer.ggml.tokens"}, {}); },
         {"tokenizer.ggml.tokens"},
         false},
        {"empty_vocab",
         "tokenizer.ggml.tokens = [] (scores, types too)",
         [] {
             return rebuilt({}, {}, [](gguf::writer& w) {
                 w.set_string_array("tokenizer.ggml.tokens", {});
                 w.set_f32_array("tokenizer.ggml.scores", {});
                 w.set_i32_array("tokenizer.ggml.token_type", {});
             });
         },
         {"vocabulary"},
         false},
        {"vocab_length_mismatch",
         "260 tokens but 3 scores",
         [] {
             return rebuilt({}, {}, [](gguf::writer& w) {
                 w.set_f32_array("tokenizer.ggml.scores", {0, 0, 0});
             });
         },
         {"tokenizer.ggml.scores", "3", "260"},
         false},
        {"unknown_tokenizer_model",
         "tokenizer.ggml.model 'wordpiece9'",
         [] {
             return rebuilt({}, {},
                            [](gguf::writer& w) { w.set_string("tokenizer.ggml.model", "wordpiece9"); });
         },
         {"wordpiece9", "llama", "gpt2"},
         false},
    };
}

bool has_substring(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

// The message without the "h2okv: error: " prefix and the scratch path, for the table.
std::string table_message(std::string err) {
    const std::string prefix = "h2okv: error: ";
    if (err.rfind(prefix, 0) == 0) err.erase(0, prefix.size());
    while (!err.empty() && err.back() == '\n') err.pop_back();
    const std::string dir = scratch().string() + "/";
    for (size_t at; (at = err.find(dir)) != std::string::npos;) err.erase(at, dir.size());
    for (size_t at = 0; (at = err.find('|', at)) != std::string::npos; at += 2) err.replace(at, 1, "\\|");
    return err;
}

class malformed_model : public ::testing::TestWithParam<malformed_case> {};

TEST_P(malformed_model, generate_and_info_refuse_it_with_a_message) {
    const malformed_case& c = GetParam();
    const fs::path model = write_model(c.name, c.make());

    const run_result gen = run_cli({"generate", "-m", model.string(), "-p", "Once upon a time", "-n", "4"});
    ASSERT_TRUE(gen.exited) << c.name << ": generate died of signal " << gen.signal << "\n" << gen.err;
    EXPECT_EQ(gen.exit_code, 1) << gen.err;
    EXPECT_TRUE(has_substring(gen.err, "h2okv: error: ")) << gen.err;
    for (const auto& e : c.expected)
        EXPECT_TRUE(has_substring(gen.err, e)) << "missing '" << e << "' in\n" << gen.err;
    EXPECT_EQ(std::count(gen.err.begin(), gen.err.end(), '\n'), 1) << "one line expected:\n" << gen.err;

    const run_result info = run_cli({"info", "-m", model.string()});
    ASSERT_TRUE(info.exited) << c.name << ": info died of signal " << info.signal << "\n" << info.err;
    if (c.file_level) {
        EXPECT_EQ(info.exit_code, 1) << info.err;
        for (const auto& e : c.expected) EXPECT_TRUE(has_substring(info.err, e)) << info.err;
    } else {
        // A valid GGUF that is not a usable model: info shows it (that is what it is for).
        EXPECT_EQ(info.exit_code, 0) << info.err;
    }
    const run_result tok = run_cli({"tokenize", "-m", model.string(), "-p", "Once"});
    ASSERT_TRUE(tok.exited) << c.name << ": tokenize died of signal " << tok.signal << "\n" << tok.err;

    if (const char* table = std::getenv("H2OKV_ROBUSTNESS_TABLE")) {
        std::ofstream out(table, std::ios::app);
        out << "| `" << c.name << "` | " << c.what << " | " << gen.exit_code << " | " << info.exit_code
            << " | " << table_message(gen.err) << " |\n";
    }
}

INSTANTIATE_TEST_SUITE_P(cli, malformed_model, ::testing::ValuesIn(malformed_cases()),
                         [](const ::testing::TestParamInfo<malformed_case>& i) { return i.param.name; });

TEST(malformed_model_fixture, the_unmodified_model_generates) {
    const fs::path model = write_model("valid", valid_model());
    const run_result r = run_cli({"generate", "-m", model.string(), "-p", "Once upon a time", "-n", "4"});
    ASSERT_TRUE(r.exited) << r.err;
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(run_cli({"info", "-m", model.string()}).exit_code, 0);
}

// Bad flags and inputs on the bundled model.
struct flag_case {
    std::string name;
    std::vector<std::string> args;  // after "generate"
    std::vector<std::string> expected;
};

void PrintTo(const flag_case& c, std::ostream* os) {
    *os << c.name;
}

std::vector<flag_case> flag_cases() {
    return {
        {"unknown_policy",
         {"--kv-policy", "lru", "--kv-budget", "8"},
         {"unknown policy 'lru'", "full", "window", "streaming", "h2o", "tova"}},
        {"budget_zero", {"--kv-policy", "h2o", "--kv-budget", "0"}, {"--kv-budget", "budget 0 must be >= 1"}},
        {"budget_fraction_above_one",
         {"--kv-policy", "h2o", "--kv-budget", "1.5"},
         {"--kv-budget", "budget fraction 1.5 must be in (0, 1]"}},
        {"budget_not_a_number",
         {"--kv-policy", "h2o", "--kv-budget", "abc"},
         {"--kv-budget", "budget 'abc' is neither a token count like 256 nor a fraction like 0.2"}},
        {"budget_missing", {"--kv-policy", "h2o"}, {"h2o needs a budget"}},
        {"budget_without_an_evicting_policy",
         {"--kv-budget", "8", "--kv-decay", "0.9"},
         {"--kv-budget, --kv-decay given, but --kv-policy is full (the default), which keeps every token",
          "--kv-policy (window, streaming, h2o"}},
        {"recent_under_full",
         {"--kv-policy", "full", "--kv-recent", "4"},
         {"--kv-recent given, but --kv-policy is full", "which keeps every token"}},
        {"h2o_recent_not_below_budget",
         {"--kv-policy", "h2o", "--kv-budget", "8", "--kv-recent", "8"},
         {"h2o: sinks 0 + recent 8 must be < budget 8"}},
        {"negative_recent",
         {"--kv-policy", "h2o", "--kv-budget", "8", "--kv-recent", "-1"},
         {"recent -1 must be >= 0"}},
        {"decay_out_of_range",
         {"--kv-policy", "h2o", "--kv-budget", "8", "--kv-decay", "1.5"},
         {"decay", "1.5"}},
        {"bad_granularity",
         {"--kv-granularity", "bogus"},
         {"--kv-granularity", "unknown granularity 'bogus'; valid: head, layer, model"}},
        {"keyformer_negative_tau",
         {"--kv-policy", "keyformer", "--kv-budget", "8", "--kv-param", "tau=-1"},
         {"keyformer: tau -1 must be a finite number >= 0"}},
        {"scissorhands_history_too_long",
         {"--kv-policy", "scissorhands", "--kv-budget", "8", "--kv-param", "history=65"},
         {"scissorhands: history 65 must be an integer in [1, 64]"}},
        {"snapkv_even_kernel",
         {"--kv-policy", "snapkv", "--kv-budget", "16", "--kv-param", "kernel=4"},
         {"snapkv: kernel 4 must be an odd integer"}},
        {"param_of_another_policy",
         {"--kv-policy", "l2norm", "--kv-budget", "8", "--kv-param", "tau=1"},
         {"--kv-param", "unknown parameter 'tau'"}},
        {"param_not_name_value",
         {"--kv-policy", "keyformer", "--kv-budget", "8", "--kv-param", "tau"},
         {"--kv-param", "expected name=value, got 'tau'"}},
        {"param_shared_flag",
         {"--kv-policy", "h2o", "--kv-budget", "8", "--kv-param", "recent=2"},
         {"--kv-param takes the policy's own parameters"}},
        {"proxy_not_a_flag",
         {"--kv-policy", "h2o", "--kv-budget", "8", "--kv-param", "proxy=3"},
         {"h2o: proxy 3 must be 0"}},
        {"negative_n_predict", {"-n", "-1"}, {"-n -1 must be >= 0"}},
        {"top_p_zero", {"--top-p", "0"}, {"top-p 0 must be in (0, 1]"}},
        {"negative_temperature", {"--temp", "-1"}, {"temperature -1 must be a finite value >= 0"}},
        {"negative_top_k", {"--top-k", "-3"}, {"top-k -3 must be >= 0"}},
        {"prefill_chunk_zero", {"--kv-prefill-chunk", "0"}, {"prefill chunk 0 must be >= 1"}},
        {"prompt_longer_than_context",
         {"-c", "8", "-n", "0", "-p", "Once upon a time there was a little girl who liked to play"},
         {"the run needs 19 tokens but the context holds 8"}},
        {"missing_model",
         {"-m", "/nonexistent/model.gguf"},
         {"cannot open '/nonexistent/model.gguf'", "No such file"}},
        {"directory_as_model", {"-m", "/tmp"}, {"'/tmp' is not a regular file"}},
        // Refused before anything is allocated (2.5 TB and 1.3 TB of K/V for the bundled model).
        {"full_cache_too_large",
         {"-n", "2000000000", "-c", "3000000000"},
         {"the KV cache would need", "(2000000005 slots x 5 layers x 4 KV heads x head_dim 8",
          "lower the budget, the context or the run's length"}},
        {"h2o_cache_too_large",
         {"--kv-policy", "h2o", "--kv-budget", "1000000000", "-n", "2000000000"},
         {"the KV cache would need", "(1000000005 slots x 5 layers"}},
    };
}

class bad_flag : public ::testing::TestWithParam<flag_case> {};

TEST_P(bad_flag, is_refused_with_a_message) {
    const flag_case& c = GetParam();
    std::vector<std::string> args = {"generate"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto given = [&c](const char* flag) {
        return std::find(c.args.begin(), c.args.end(), flag) != c.args.end();
    };
    if (!given("-p")) args.insert(args.end(), {"-p", "Once upon a time"});
    if (!given("-n")) args.insert(args.end(), {"-n", "4"});
    const run_result r = run_cli(args);
    ASSERT_TRUE(r.exited) << c.name << " died of signal " << r.signal << "\n" << r.err;
    EXPECT_EQ(r.exit_code, 1) << r.err;
    for (const auto& e : c.expected)
        EXPECT_TRUE(has_substring(r.err, e)) << "missing '" << e << "' in\n" << r.err;
    EXPECT_EQ(r.out, "") << "nothing may be generated before the flags are checked";
}

INSTANTIATE_TEST_SUITE_P(cli, bad_flag, ::testing::ValuesIn(flag_cases()),
                         [](const ::testing::TestParamInfo<flag_case>& i) { return i.param.name; });

// Every registered policy runs from the CLI with a budget that evicts (a policy that evicts nothing takes
// none), and its own parameters go through --kv-param.
TEST(cli_input, every_policy_runs_with_its_own_parameters) {
    for (const auto& f : policy::policy_catalog()) {
        std::vector<std::string> args = {"generate",    "-p",   "Once upon a time",   "-n", "24",
                                         "--kv-policy", f.name, "--kv-prefill-chunk", "4"};
        if (policy::policy_evicts(f.name)) args.insert(args.end(), {"--kv-budget", "16"});
        for (const auto& x : f.extra)
            args.insert(args.end(), {"--kv-param", fmt::format("{}={}", x.name, x.default_value)});
        const run_result r = run_cli(args);
        ASSERT_TRUE(r.exited) << f.name;
        EXPECT_EQ(r.exit_code, 0) << f.name << ": " << r.err;
    }
}

TEST(cli_input, invalid_utf8_in_the_prompt_goes_through_byte_fallback) {
    const std::string prompt = "Once \xff\xfe upon \xc3 a \xe2\x82 time\x80";
    const run_result r = run_cli({"generate", "-p", prompt, "-n", "8"});
    ASSERT_TRUE(r.exited) << r.err;
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind(prompt, 0), 0u) << "the prompt is echoed byte for byte";
    const run_result ids = run_cli({"tokenize", "-p", "\xff", "--ids"});
    ASSERT_TRUE(ids.exited) << ids.err;
    EXPECT_EQ(ids.exit_code, 0) << ids.err;
    EXPECT_NE(ids.out.find(" 258"), std::string::npos) << "byte token <0xFF> (id 3 + 255): " << ids.out;
}

TEST(cli_input, an_empty_prompt_generates_after_bos) {
    const run_result r = run_cli({"generate", "-p", "", "-n", "4"});
    ASSERT_TRUE(r.exited) << r.err;
    EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(cli_input, a_prompt_file_generates_what_the_same_prompt_does) {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("h2okv_prompt_" + std::to_string(::getpid()) + ".txt"))
            .string();
    std::ofstream(path) << "Once upon a time";
    const run_result from_file = run_cli({"generate", "-f", path, "-n", "12"});
    const run_result from_flag = run_cli({"generate", "-p", "Once upon a time", "-n", "12"});
    std::filesystem::remove(path);
    ASSERT_TRUE(from_file.exited && from_flag.exited) << from_file.err << from_flag.err;
    EXPECT_EQ(from_file.exit_code, 0) << from_file.err;
    EXPECT_EQ(from_file.out, from_flag.out);
    const run_result none = run_cli({"generate", "-n", "4"});
    ASSERT_TRUE(none.exited);
    EXPECT_NE(none.exit_code, 0);
    EXPECT_TRUE(has_substring(none.err, "generate needs a prompt: -p TEXT or -f FILE")) << none.err;
    const run_result both = run_cli({"generate", "-p", "x", "-f", "y", "-n", "4"});
    ASSERT_TRUE(both.exited);
    EXPECT_NE(both.exit_code, 0);
    EXPECT_TRUE(has_substring(both.err, "excludes")) << both.err;
}

TEST(cli_input, unknown_flags_and_subcommands_are_refused_by_the_parser) {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"generate", "-p", "x", "--no-such-flag"},
          {"no-such-command"},
          {},
          {"generate"},
          {"generate", "-p", "x", "-n", "many"},
          {"generate", "-p", "x", "-t", "-2"}}) {
        const run_result r = run_cli(args);
        ASSERT_TRUE(r.exited) << r.err;
        EXPECT_NE(r.exit_code, 0) << r.out << r.err;
        EXPECT_FALSE(r.err.empty());
    }
}

}  // namespace
}  // namespace h2okv
