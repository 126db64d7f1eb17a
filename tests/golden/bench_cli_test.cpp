// `h2okv gguf synth` and `h2okv bench` as a user runs them: a tiny synthetic model of each type is written,
// loads, and benchmarks; the JSON report carries positive throughputs and KV bytes consistent with the
// policy (a full cache holds exactly the run; H2O with a 20% budget holds budget + chunk slots).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "test_support.h"

using h2okv::testing::read_file;
using h2okv::testing::run_command;

namespace {

namespace fs = std::filesystem;

const std::string kCli = H2OKV_CLI;

class BenchCli : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("h2okv_bench_cli_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string synth(const std::string& type) {
        const std::string path = (dir_ / ("tiny_" + type + ".gguf")).string();
        int rc = -1;
        run_command(
            kCli + " gguf synth --shape tiny --type " + type + " -o " + path + " --seed 3 2>/dev/null", &rc);
        EXPECT_EQ(rc, 0) << type;
        return path;
    }
    fs::path dir_;
};

TEST_F(BenchCli, SynthWritesLoadableModelsOfEveryType) {
    for (const std::string type : {"f32", "f16", "q8_0", "q4_0", "q4_k"}) {
        const std::string path = synth(type);
        int rc = -1;
        const std::string out = run_command(kCli + " info -m " + path + " 2>&1", &rc);
        EXPECT_EQ(rc, 0) << type << ": " << out;
        EXPECT_NE(out.find("llama"), std::string::npos) << type << ": " << out;
    }
}

// Every small shape of `gguf synth --help` (one per architecture and RoPE variant) is written, loads as its
// architecture and generates. The two real-size shapes (smollm-135m, tinyllama-1.1b) are the same llama
// blocks at hundreds of MB; scripts/run_speed.sh and run_throughput.sh run them.
TEST_F(BenchCli, EverySmallShapeLoadsAndGenerates) {
    int rc = -1;
    const std::string help = run_command(kCli + " gguf synth --help", &rc);
    ASSERT_EQ(rc, 0);
    const size_t at = help.find("Model shape: ");
    ASSERT_NE(at, std::string::npos) << help;
    std::string list = help.substr(at + 13, help.find_first_of("\n", at) - at - 13);
    std::vector<std::string> shapes;
    for (size_t p = 0; p < list.size();) {
        const size_t end = std::min(list.find(", ", p), list.size());
        const std::string name = list.substr(p, end - p);
        if (name != "smollm-135m" && name != "tinyllama-1.1b") shapes.push_back(name);
        p = end + 2;
    }
    EXPECT_GE(shapes.size(), 8u) << list;
    for (const std::string& shape : shapes) {
        const std::string path = (dir_ / (shape + ".gguf")).string();
        run_command(kCli + " gguf synth --shape " + shape + " --type q8_0 -o " + path + " 2>/dev/null", &rc);
        ASSERT_EQ(rc, 0) << shape;
        std::string arch = shape.substr(0, shape.find('-'));  // the shape's family
        if (arch == "llama3" || arch == "mistral" || arch == "tiny") arch = "llama";
        const std::string info = run_command(kCli + " info -m " + path + " 2>&1", &rc);
        EXPECT_EQ(rc, 0) << shape << ": " << info;
        EXPECT_NE(info.find("\"" + arch + "\""), std::string::npos) << shape << ": " << info;
        const std::string out =
            run_command(kCli + " generate -m " + path + " -p 'once upon' -n 6 --seed 1 2>&1", &rc);
        EXPECT_EQ(rc, 0) << shape << ": " << out;
        EXPECT_NE(out.find("evicted: 0"), std::string::npos) << shape << ": " << out;
    }
}

// H2OKV_ISA=scalar runs the reference kernels (bench reports them); a value the CPU cannot run, or a
// misspelt one, stops the CLI with the value named.
TEST_F(BenchCli, IsaFromTheEnvironment) {
    const std::string model = synth("f32");
    int rc = -1;
    const std::string out = run_command(
        "H2OKV_ISA=scalar " + kCli + " bench -m " + model + " -p 8 -n 2 -r 1 --json 2>/dev/null", &rc);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_EQ(nlohmann::json::parse(out).at("isa"), "reference") << out;
    const std::string bad = run_command("H2OKV_ISA=avx9 " + kCli + " info -m " + model + " 2>&1", &rc);
    EXPECT_NE(rc, 0);
    EXPECT_NE(bad.find("H2OKV_ISA is 'avx9', expected scalar, avx2 or avx512"), std::string::npos) << bad;
}

TEST_F(BenchCli, SynthIsDeterministicPerSeed) {
    const std::string a = synth("q4_k");
    const std::string b = (dir_ / "again.gguf").string();
    int rc = -1;
    run_command(kCli + " gguf synth --shape tiny --type q4_k -o " + b + " --seed 3 2>/dev/null", &rc);
    ASSERT_EQ(rc, 0);
    run_command("cmp -s " + a + " " + b, &rc);
    EXPECT_EQ(rc, 0) << "the same seed must give the same file";
    run_command(kCli + " gguf synth --shape tiny --type q4_k -o " + b + " --seed 4 2>/dev/null", &rc);
    ASSERT_EQ(rc, 0);
    run_command("cmp -s " + a + " " + b, &rc);
    EXPECT_NE(rc, 0) << "another seed must give other weights";
}

TEST_F(BenchCli, SynthRefusesUnknownShapeAndType) {
    int rc = -1;
    run_command(
        kCli + " gguf synth --shape huge --type f16 -o " + (dir_ / "x.gguf").string() + " 2>/dev/null", &rc);
    EXPECT_NE(rc, 0);
    run_command(
        kCli + " gguf synth --shape tiny --type q2_k -o " + (dir_ / "x.gguf").string() + " 2>/dev/null", &rc);
    EXPECT_NE(rc, 0);
    EXPECT_FALSE(fs::exists(dir_ / "x.gguf"));
}

TEST_F(BenchCli, JsonReportFullVersusH2O) {
    const std::string model = synth("q4_k");
    // tiny: 2 layers, 2 KV heads, head_dim 64: 1 KiB of f32 K and V per token per layer.
    const long per_token = 2L * 2 * 64 * 4 * 2;
    const std::string common = kCli + " bench -m " + model + " -p 32 -n 8 --depth 64 -t 1 -r 2 --json";
    int rc = -1;
    const std::string full_out = run_command(common + " --kv-type f32 2>/dev/null", &rc);
    ASSERT_EQ(rc, 0) << full_out;
    const auto full = nlohmann::json::parse(full_out);
    EXPECT_GT(full["prefill_tps"].get<double>(), 0.0);
    EXPECT_GT(full["decode_tps"].get<double>(), 0.0);
    EXPECT_LE(full["decode_tps_min"].get<double>(), full["decode_tps"].get<double>());
    EXPECT_GE(full["decode_tps_max"].get<double>(), full["decode_tps"].get<double>());
    EXPECT_EQ(full["run_length"].get<long>(), 104);
    EXPECT_EQ(full["kv_type"].get<std::string>(), "f32");
    EXPECT_EQ(full["kv_bytes"].get<long>(), 104 * per_token);
    EXPECT_EQ(full["kv_bytes_full"].get<long>(), 104 * per_token);
    EXPECT_GT(full["peak_rss_bytes"].get<long>(), 0);

    const std::string h2o_out = run_command(
        common + " --kv-type f32 --kv-policy h2o --kv-budget 0.2 --kv-prefill-chunk 16 2>/dev/null", &rc);
    ASSERT_EQ(rc, 0) << h2o_out;
    const auto h2o = nlohmann::json::parse(h2o_out);
    EXPECT_GT(h2o["decode_tps"].get<double>(), 0.0);
    // Budget: 20% of 104 tokens, rounded by the policy; plus one prefill chunk of 16 slots.
    const long slots = h2o["kv_bytes"].get<long>() / per_token;
    EXPECT_GE(slots, 20 + 16);
    EXPECT_LE(slots, 21 + 16);
    EXPECT_LT(h2o["kv_bytes"].get<long>(), full["kv_bytes"].get<long>());

    // The default f16 stores 2 bytes an element, q8_0 34 bytes per 32, q4_0 18, q4_1 20: the full cache of
    // the run in each.
    for (const auto& [flag, type, bytes] :
         {std::tuple<std::string, std::string, long>{"", "f16", per_token / 2},
          {"--kv-type q8_0", "q8_0", per_token / 4 / 32 * 34},
          {"--kv-type q4_0", "q4_0", per_token / 4 / 32 * 18},
          {"--kv-type q4_1", "q4_1", per_token / 4 / 32 * 20}}) {
        const std::string out = run_command(common + " " + flag + " 2>/dev/null", &rc);
        ASSERT_EQ(rc, 0) << out;
        const auto j = nlohmann::json::parse(out);
        EXPECT_EQ(j["kv_type"].get<std::string>(), type);
        EXPECT_EQ(j["kv_bytes"].get<long>(), 104 * bytes) << type;
        EXPECT_EQ(j["kv_bytes_full"].get<long>(), 104 * bytes) << type;
    }
    const std::string err = run_command(common + " --kv-type q5_0 2>&1 >/dev/null", &rc);
    EXPECT_NE(rc, 0);
    EXPECT_NE(err.find("f32, f16, q8_0, q4_0, q4_1"), std::string::npos)
        << "the error lists the valid types: " << err;
}

// --phases: the decode time split by phase in the JSON report; the phases and `other` add up to the decode
// seconds, an evicting policy's steps open and close chunks and hand score rows over, `full`'s hand none
// over.
TEST_F(BenchCli, PhasesSplitTheDecodeTime) {
    const std::string model = synth("q4_k");
    const std::string common =
        kCli + " bench -m " + model + " -p 0 -n 16 --depth 64 -t 1 -r 1 --phases --json";
    for (const std::string policy : {"full", "h2o"}) {
        int rc = -1;
        const std::string out = run_command(
            common + " --kv-policy " + policy + (policy == "h2o" ? " --kv-budget 0.5" : "") + " 2>/dev/null",
            &rc);
        ASSERT_EQ(rc, 0) << out;
        const auto p = nlohmann::json::parse(out).at("decode_phases");
        double sum = 0.0;
        for (const char* name : {"products", "kv_store", "attention", "scores", "chunks", "other"}) {
            EXPECT_GE(p.at(name).get<double>(), 0.0 - 1e-9) << policy << " " << name;
            sum += p.at(name).get<double>();
        }
        EXPECT_NEAR(sum, p.at("seconds").get<double>(), 1e-6) << policy;
        EXPECT_GT(p.at("products").get<double>(), 0.0) << policy;
        EXPECT_GT(p.at("attention").get<double>(), 0.0) << policy;
        EXPECT_GT(p.at("chunks").get<double>(), 0.0) << policy;
        if (policy == "h2o") {
            EXPECT_GT(p.at("handover_thread_seconds").get<double>(), 0.0);
        } else {
            EXPECT_EQ(p.at("handover_thread_seconds").get<double>(), 0.0);
        }
    }
}

// --kv-budget-bytes: the largest token budget whose K/V rows (budget + the prefill chunk's slots) fit the
// size, at the type's row size; refused, saying why, when it cannot be honoured.
TEST_F(BenchCli, KvBudgetBytes) {
    const std::string model = synth("q4_k");
    // tiny: 2 layers, 2 KV heads, head_dim 64: q4_1 rows of 40 bytes, 320 bytes of K and V per slot.
    const std::string common = kCli + " bench -m " + model + " -p 32 -n 8 --depth 64 -t 1 -r 1 --json " +
                               "--kv-policy h2o --kv-prefill-chunk 16 --kv-type q4_1";
    int rc = -1;
    for (long size : {320L * (20 + 16), 320L * (20 + 16) + 319}) {
        const std::string out =
            run_command(common + " --kv-budget-bytes " + std::to_string(size) + " 2>/dev/null", &rc);
        ASSERT_EQ(rc, 0) << out;
        const auto j = nlohmann::json::parse(out);
        EXPECT_EQ(j["kv_bytes"].get<long>(), 320L * (20 + 16)) << size;
    }
    const std::string kib = run_command(common + " --kv-budget-bytes 11.25KiB 2>/dev/null", &rc);
    ASSERT_EQ(rc, 0) << kib;
    EXPECT_EQ(nlohmann::json::parse(kib)["kv_bytes"].get<long>(), 11520);  // 11.25 KiB = 36 slots exactly
    auto refused = [&](const std::string& flags) {
        const std::string e = run_command(common + " " + flags + " 2>&1 >/dev/null", &rc);
        EXPECT_NE(rc, 0) << flags;
        return e;
    };
    std::string e = refused("--kv-budget-bytes 1KiB");
    EXPECT_NE(e.find("one token takes 320 bytes"), std::string::npos) << e;
    EXPECT_NE(e.find("prefill chunk's 16 slots"), std::string::npos) << e;
    e = refused("--kv-budget-bytes 64KiB --kv-budget 0.2");
    EXPECT_NE(e.find("not both"), std::string::npos) << e;
    e = refused("--kv-budget-bytes 64KiB --kv-recent 200");
    EXPECT_NE(e.find("at most 104 tokens"), std::string::npos) << e;  // the whole run fits: 104 slots
    e = refused("--kv-budget-bytes lots");
    EXPECT_NE(e.find("--kv-budget-bytes"), std::string::npos) << e;
    e = run_command(kCli + " bench -m " + model + " -p 8 -n 2 -r 1 --kv-budget-bytes 64KiB 2>&1 >/dev/null",
                    &rc);
    EXPECT_NE(rc, 0);
    EXPECT_NE(e.find("--kv-budget-bytes given, but --kv-policy is full"), std::string::npos) << e;
}

// --sequences: the sequences that fit --kv-memory run at once, in waves; the report says how many, charges
// each its cache's footprint, and accounts for the peak RSS.
TEST_F(BenchCli, SequencesAndTheKvPool) {
    const std::string model = synth("q8_0");
    const std::string common = kCli + " bench -m " + model + " -p 16 -n 4 -t 1 -r 1 --json";
    int rc = -1;
    const std::string one_out = run_command(common + " 2>/dev/null", &rc);
    ASSERT_EQ(rc, 0) << one_out;
    const auto one = nlohmann::json::parse(one_out);
    EXPECT_EQ(one["sequences"].get<int>(), 1);
    EXPECT_FALSE(one["cpu"].get<std::string>().empty());
    const long footprint = one["kv_footprint"].get<long>();
    EXPECT_GT(footprint, one["kv_bytes"].get<long>()) << "the slot tables are charged too";

    const std::string all_out = run_command(common + " --sequences 5 2>/dev/null", &rc);
    ASSERT_EQ(rc, 0) << all_out;
    const auto all = nlohmann::json::parse(all_out);
    EXPECT_EQ(all["concurrent"].get<int>(), 5);
    EXPECT_EQ(all["waves"].get<int>(), 1);
    EXPECT_GT(all["decode_tps"].get<double>(), 0.0);
    EXPECT_EQ(all["kv_pool_peak"].get<long>(), 5 * footprint);
    EXPECT_GT(all["rss_accounted_bytes"].get<long>(), all["rss_base_bytes"].get<long>() + 5 * footprint);

    const std::string pooled_out = run_command(
        common + " --sequences 5 --kv-memory " + std::to_string(2 * footprint + 1) + " 2>/dev/null", &rc);
    ASSERT_EQ(rc, 0) << pooled_out;
    const auto pooled = nlohmann::json::parse(pooled_out);
    EXPECT_EQ(pooled["concurrent"].get<int>(), 2);
    EXPECT_EQ(pooled["waves"].get<int>(), 3);

    const std::string err = run_command(common + " --sequences 2 --kv-memory 1KiB 2>&1 >/dev/null", &rc);
    EXPECT_NE(rc, 0);
    EXPECT_NE(err.find("--kv-memory"), std::string::npos) << err;
    run_command(common + " --kv-memory lots 2>/dev/null", &rc);
    EXPECT_NE(rc, 0);
    run_command(common + " --sequences 0 2>/dev/null", &rc);
    EXPECT_NE(rc, 0);
}

TEST_F(BenchCli, TableOutputAndBadArguments) {
    const std::string model = synth("f16");
    int rc = -1;
    const std::string out =
        run_command(kCli + " bench -m " + model + " -p 16 -n 4 -t 1 -r 1 2>/dev/null", &rc);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("pp16@d0"), std::string::npos) << out;
    EXPECT_NE(out.find("tg4@d0"), std::string::npos) << out;
    run_command(kCli + " bench -m " + model + " -p 0 -n 0 2>/dev/null", &rc);
    EXPECT_NE(rc, 0) << "nothing to run";
    run_command(kCli + " bench -m " + model + " -p 8 -n 2 -r 0 2>/dev/null", &rc);
    EXPECT_NE(rc, 0) << "repeats must be positive";
    run_command(kCli + " bench -m " + model + " -p 8 -n 2 --kv-policy nosuch 2>/dev/null", &rc);
    EXPECT_NE(rc, 0);
}

}  // namespace
