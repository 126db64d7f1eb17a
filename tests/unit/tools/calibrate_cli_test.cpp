// `h2okv calibrate` and `--kv-config` / `--kv-schedule` as a user runs them: calibrate writes a
// configuration whose statistics and candidates are there and whose choice is the lowest calibration
// perplexity; perplexity with --kv-config runs exactly the configuration the file names (the same number as
// the equivalent spec through the library), with the per-unit budgets' real KV bytes; bad files and flag
// combinations exit 1 with a message naming the problem.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "h2okv/engine/session.h"
#include "test_support.h"

namespace h2okv {
namespace {

namespace fs = std::filesystem;
using testing::bundled_stories;
using testing::read_file;
using testing::run_command;

const std::string kCli = H2OKV_CLI;

fs::path scratch(const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / ("h2okv_calibrate_test_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    return dir / name;
}

// A text of a few hundred tokens for the bundled model.
std::string text_file() {
    const fs::path p = scratch("text.txt");
    std::ofstream f(p);
    for (int i = 0; i < 12; ++i) {
        f << "Once upon a time there was a little girl named Lily. She loved to play in the park with her "
             "friend Tom. One day they found a big red ball under a tree.\n";
    }
    return p.string();
}

nlohmann::json last_jsonl(const std::string& path) {
    std::ifstream f(path);
    std::string line, last;
    while (std::getline(f, line)) last = line;
    return nlohmann::json::parse(last);
}

TEST(CalibrateCli, WritesAConfigurationThatPerplexityRunsExactly) {
    const std::string text = text_file();
    const std::string cfg = scratch("cfg.json").string();
    int rc = 0;
    const std::string out = run_command(
        kCli + " calibrate -f " + text + " --max-tokens 64 --segments 4 --kv-budget 0.2 -o " + cfg + " 2>&1",
        &rc);
    ASSERT_EQ(rc, 0) << out;
    const auto j = nlohmann::json::parse(read_file(cfg));
    EXPECT_EQ(j["format"], "h2okv-kv-config");
    EXPECT_EQ(j["budget"], "0.2");
    EXPECT_EQ(j["segments"], 4);
    const auto& hp = bundled_stories().model->params();
    EXPECT_EQ(j["n_layer"], hp.n_layer);
    ASSERT_EQ(j["statistics"].size(), static_cast<size_t>(hp.n_layer));
    EXPECT_EQ(j["statistics"][0]["positions_to_90_percent"].size(), static_cast<size_t>(hp.n_kv_head));
    // The mass by distance of a layer sums to 1.
    double mass = 0.0;
    for (const auto& b : j["statistics"][0]["mass_by_distance"]) mass += b["mass"].get<double>();
    EXPECT_NEAR(mass, 1.0, 1e-9);
    // The candidates include the baselines: window, streaming, h2o's defaults (recent share 0.5, decay 1)
    // and h2o with decay 0.98; each has one mean NLL per segment.
    const nlohmann::json* lowest = nullptr;
    const nlohmann::json* chosen = nullptr;
    double defaults = 0.0;
    std::set<std::string> baselines;
    for (const auto& c : j["candidates"]) {
        ASSERT_EQ(c["segment_nll"].size(), 4u) << c.dump();
        if (lowest == nullptr || c["perplexity"] < (*lowest)["perplexity"]) lowest = &c;
        if (c["chosen"].get<bool>()) {
            EXPECT_EQ(chosen, nullptr) << "one candidate is chosen";
            chosen = &c;
        }
        if (c["baseline"].get<bool>())
            baselines.insert(c["policy"].get<std::string>() + "/" + c["decay"].dump());
        if (c["policy"] == "h2o" && c["label"] == "uniform recent share 0.500" && c["decay"] == 1.0 &&
            c["shares"].empty() && !c.contains("sinks"))
            defaults = c["perplexity"].get<double>();
    }
    EXPECT_EQ(baselines, (std::set<std::string>{"window/1.0", "streaming/1.0", "h2o/1.0", "h2o/0.98"}));
    ASSERT_GT(defaults, 0.0) << "h2o's defaults are a candidate";
    ASSERT_NE(chosen, nullptr);
    EXPECT_EQ(j["policy"], (*chosen)["policy"]);
    // The one-standard-error rule: the chosen candidate's mean NLL is within one standard error (over the
    // segments) of the lowest's, and no simpler candidate's is.
    const auto excess = [&](const nlohmann::json& c) {
        std::vector<double> d;
        for (size_t i = 0; i < 4; ++i)
            d.push_back(c["segment_nll"][i].get<double>() - (*lowest)["segment_nll"][i].get<double>());
        const double mean = (d[0] + d[1] + d[2] + d[3]) / 4.0;
        double sq = 0.0;
        for (double x : d) sq += (x - mean) * (x - mean);
        return mean - std::sqrt(sq / 3.0 / 4.0);
    };
    // On this text and budget a simpler candidate than the lowest is within the noise, so the rule, not the
    // plain minimum, decides.
    EXPECT_LT((*chosen)["complexity"], (*lowest)["complexity"]) << "chosen " << chosen->dump();
    EXPECT_LE(excess(*chosen), 1e-12);
    for (const auto& c : j["candidates"]) {
        if (c["complexity"] < (*chosen)["complexity"]) {
            EXPECT_GT(excess(c), -1e-12) << c.dump();
        }
    }

    // perplexity --kv-config runs the file's configuration (policy and budget from it) over the same runs.
    const std::string jsonl = scratch("ppl.jsonl").string();
    const std::string ppl =
        run_command(kCli + " perplexity -f " + text + " --max-tokens 64 --segments 4 --kv-config " + cfg +
                        " --jsonl " + jsonl + " 2>&1",
                    &rc);
    ASSERT_EQ(rc, 0) << ppl;
    const auto r = last_jsonl(jsonl);
    EXPECT_EQ(r["policy_name"], (*chosen)["policy"]);
    EXPECT_EQ(r["kv_config"], cfg);
    EXPECT_EQ(r["segments"], 4);
    EXPECT_EQ(r["n_tokens"], 4 * 64);
    EXPECT_EQ(r["run_nll"], (*chosen)["segment_nll"]) << "the calibration runs again";
    EXPECT_NEAR(r["perplexity"].get<double>(), (*chosen)["perplexity"].get<double>(),
                1e-12 * r["perplexity"].get<double>());
    // h2o's defaults on the same runs: the same number as the candidate.
    const std::string jsonl2 = scratch("ppl2.jsonl").string();
    ASSERT_EQ(std::system((kCli + " perplexity -f " + text +
                           " --max-tokens 64 --segments 4 --kv-policy h2o --kv-budget 0.2 --jsonl " + jsonl2 +
                           " >/dev/null 2>&1")
                              .c_str()),
              0);
    EXPECT_EQ(last_jsonl(jsonl2)["perplexity"].get<double>(), defaults);

    // --segments' errors name what is wrong.
    for (const auto& [flags, want] : std::vector<std::pair<std::string, std::string>>{
             {"--segments 2", "--segments 2 needs --max-tokens"},
             {"--segments 100 --max-tokens 128", "100 runs of 128 (BOS + 127 each) need 12700"},
             {"--segments 2 --max-tokens 64 --nll-window 8", "give it without --segments"}}) {
        const std::string msg = run_command(kCli + " perplexity -f " + text + " " + flags + " 2>&1", &rc);
        EXPECT_EQ(WEXITSTATUS(rc), 1) << flags << ": " << msg;
        EXPECT_NE(msg.find(want), std::string::npos) << flags << ": want '" << want << "' in: " << msg;
    }

    // Unknown fields, a wrong format or granularity, and a policy that keeps everything are refused.
    const std::string bad = scratch("bad.json").string();
    auto refused = [&](const std::string& content, const std::string& flags, const std::string& want) {
        std::ofstream(bad) << content;
        int code = 0;
        const std::string msg = run_command(
            kCli + " perplexity -f " + text + " --max-tokens 64 --kv-config " + bad + " " + flags + " 2>&1",
            &code);
        EXPECT_EQ(WEXITSTATUS(code), 1) << msg;
        EXPECT_NE(msg.find(want), std::string::npos) << "want '" << want << "' in: " << msg;
    };
    refused(
        "{\"format\": \"h2okv-kv-config\", \"version\": 1, \"n_layer\": 5, \"n_kv_head\": 4, \"budgets\": "
        "[1]}",
        "", "unknown field 'budgets'");
    refused("[1, 2]", "", "\"format\": \"h2okv-kv-config\"");
    refused(
        "{\"format\": \"h2okv-kv-config\", \"version\": 1, \"n_layer\": 5, \"n_kv_head\": 4, \"policy\": "
        "\"h2o\", "
        "\"budget\": \"0.2\", \"shares\": [1, 2]}",
        "", "2 shares given, but granularity=head has 20 units");
    refused(read_file(cfg), "--kv-granularity layer", "calibrated for granularity head");
    refused(read_file(cfg), "--kv-policy full", "--kv-config given, but --kv-policy is full");

    // A configuration's sinks apply to every unit; --kv-sinks overrides them.
    std::ofstream(bad)
        << "{\"format\": \"h2okv-kv-config\", \"version\": 1, \"n_layer\": 5, \"n_kv_head\": 4, "
           "\"policy\": \"h2o\", \"budget\": \"0.2\", \"sinks\": 2}";
    for (const auto& [flags, want] :
         std::vector<std::pair<std::string, std::string>>{{"", "sinks=2"}, {"--kv-sinks 3", "sinks=3"}}) {
        const std::string sj = scratch("sinks.jsonl").string();
        const std::string msg =
            run_command(kCli + " perplexity -f " + text + " --max-tokens 64 --kv-config " + bad + " " +
                            flags + " --jsonl " + sj + " 2>&1",
                        &rc);
        ASSERT_EQ(rc, 0) << msg;
        EXPECT_NE(last_jsonl(sj)["policy"].get<std::string>().find(want), std::string::npos) << flags;
    }
}

// A run's granularity: --kv-granularity when given, else the --kv-config's, else the policy's default (layer
// for tova, head for the others); a sweep spec's own granularity= wins over all of them.
TEST(CalibrateCli, GranularityComesFromTheFlagsTheConfigurationOrThePolicy) {
    const std::string text = text_file();
    const std::string cfg = scratch("head_cfg.json").string();
    std::ofstream(cfg) << "{\"format\": \"h2okv-kv-config\", \"version\": 1, \"n_layer\": 5, "
                          "\"n_kv_head\": 4, \"policy\": \"h2o\", \"budget\": \"0.2\"}";
    const auto grans = [&](const std::string& flags) {
        const std::string jsonl = scratch("gran.jsonl").string();
        fs::remove(jsonl);
        int rc = 0;
        const std::string out = run_command(
            kCli + " perplexity -f " + text + " --max-tokens 48 " + flags + " --jsonl " + jsonl + " 2>&1",
            &rc);
        EXPECT_EQ(rc, 0) << flags << ": " << out;
        std::vector<std::string> g;
        std::ifstream f(jsonl);
        for (std::string line; std::getline(f, line);)
            g.push_back(nlohmann::json::parse(line)["granularity"].get<std::string>());
        return g;
    };
    using v = std::vector<std::string>;
    EXPECT_EQ(grans("--kv-policy tova --kv-budget 0.2"), v{"layer"});
    EXPECT_EQ(grans("--kv-policy h2o --kv-budget 0.2"), v{"head"});
    EXPECT_EQ(grans("--kv-policy tova --kv-budget 0.2 --kv-granularity head"), v{"head"});
    EXPECT_EQ(grans("--kv-policy tova --kv-config " + cfg), v{"head"});
    EXPECT_EQ(grans("--sweep-policies tova tova:granularity=head h2o --sweep-budgets 0.2"),
              (v{"layer", "head", "head"}));
    EXPECT_EQ(
        grans("--sweep-policies tova tova:granularity=head h2o --sweep-budgets 0.2 --kv-granularity model"),
        (v{"model", "head", "model"}));
}

TEST(CalibrateCli, PyramidScheduleGivesRealPerLayerCapacities) {
    const std::string text = text_file();
    const std::string jsonl = scratch("pyramid.jsonl").string();
    int rc = 0;
    const std::string out =
        run_command(kCli + " perplexity -f " + text +
                        " --max-tokens 200 --kv-policy h2o --kv-budget 20 --kv-granularity layer "
                        "--kv-schedule pyramid --kv-ratio 0.5 --jsonl " +
                        jsonl + " 2>&1",
                    &rc);
    ASSERT_EQ(rc, 0) << out;
    const auto r = last_jsonl(jsonl);
    // The KV bytes are the per-unit capacities', as the library plans them for the same spec.
    engine::session_params sp;
    sp.kv = policy::params::parse("h2o:budget=20,granularity=layer,schedule=pyramid,ratio=0.5").value();
    sp.prefill_chunk = 1;
    const auto& lm = bundled_stories();
    auto fp = engine::session::plan(*lm.model, sp, 200);
    ASSERT_TRUE(fp.ok()) << fp.error().to_string();
    const auto& hp = lm.model->params();
    // 5 layers: budgets 30, 25, 20, 15, 10 (+ the chunk of 1 each), every KV head of a layer alike.
    EXPECT_EQ(fp->head_capacity.front(), 31);
    EXPECT_EQ(fp->head_capacity.back(), 11);
    const int64_t row = static_cast<int64_t>(kv::kv_row_bytes(kv::kv_type::f16, hp.head_dim));
    EXPECT_EQ(fp->kv_bytes, 2 * row * hp.n_kv_head * (31 + 26 + 21 + 16 + 11));
    EXPECT_EQ(r["kv_bytes"].get<int64_t>(), fp->kv_bytes);
    for (const auto& [flags, want] : std::vector<std::pair<std::string, std::string>>{
             {"--kv-schedule steep", "valid: uniform, pyramid"},
             {"--kv-schedule pyramid --kv-ratio 1.5", "ratio in [0, 1)"},
             {"--kv-ratio 0.3", "ratio applies to schedule=pyramid only"},
             {"--kv-schedule pyramid --kv-granularity model", "granularity=model"},
             {"--kv-schedule pyramid --kv-positions rolling", "rolling positions need"}}) {
        const std::string msg =
            run_command(kCli + " perplexity -f " + text + " --max-tokens 64 --kv-policy h2o --kv-budget 8 " +
                            flags + " 2>&1",
                        &rc);
        EXPECT_EQ(WEXITSTATUS(rc), 1) << flags << ": " << msg;
        EXPECT_NE(msg.find(want), std::string::npos) << flags << ": want '" << want << "' in: " << msg;
    }
}

}  // namespace
}  // namespace h2okv
