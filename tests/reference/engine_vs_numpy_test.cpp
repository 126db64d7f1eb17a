// The engine against the independent numpy reference (tests/reference/llama_ref.py, float64, its own GGUF
// parser and eviction code): logits to 1e-4 relative and identical kept sets after every chunk, full cache
// and evicting runs, with f32 KV (and f16/q8_0/q4_0/q4_1 KV against the reference's matching rounding), on
// the bundled model, on synthetic GGUFs written with our GGUF writer (head_dim 64 and 128, GQA 1, 4 and 8,
// separate output, F16, BF16, Q8_0 and Q4_K weights; every architecture's own parts) and on ../shared's
// h2o-eval-5M model when present.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "h2okv/engine/session.h"
#include "h2okv/gguf/gguf.h"
#include "h2okv/kernels/kernels.h"
#include "h2okv/model/model.h"
#include "h2okv/model/synth.h"

namespace h2okv {
namespace {

namespace fs = std::filesystem;
const std::string kSource = H2OKV_SOURCE_DIR;

// Writes a float32 C-order .npy file of shape [rows][cols].
void write_npy_f32(const std::string& path, const std::vector<float>& v, size_t rows, size_t cols) {
    std::string header =
        fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}", rows, cols);
    header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
    header += '\n';
    std::ofstream out(path, std::ios::binary);
    out.write("\x93NUMPY\x01\x00", 8);
    out.put(static_cast<char>(header.size() & 0xff));
    out.put(static_cast<char>(header.size() >> 8));
    out << header;
    out.write(reinterpret_cast<const char*>(v.data()),
              static_cast<std::streamsize>(v.size() * sizeof(float)));
}

// Reads a little-endian float64 C-order .npy file written by numpy.save.
std::vector<double> read_npy(const std::string& path, std::vector<size_t>* shape) {
    std::ifstream in(path, std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (all.size() < 10 || all.compare(0, 6, "\x93NUMPY") != 0) return {};
    const int major = static_cast<unsigned char>(all[6]);
    size_t header_len = 0;
    size_t offset = 0;
    if (major == 1) {
        header_len = static_cast<unsigned char>(all[8]) |
                     (static_cast<size_t>(static_cast<unsigned char>(all[9])) << 8);
        offset = 10;
    } else {
        for (int i = 0; i < 4; ++i)
            header_len |= static_cast<size_t>(static_cast<unsigned char>(all[8 + i])) << (8 * i);
        offset = 12;
    }
    const std::string header = all.substr(offset, header_len);
    EXPECT_NE(header.find("'<f8'"), std::string::npos) << header;
    EXPECT_NE(header.find("'fortran_order': False"), std::string::npos) << header;
    shape->clear();
    const size_t open = header.find('(', header.find("shape"));
    const size_t close = header.find(')', open);
    std::stringstream dims(header.substr(open + 1, close - open - 1));
    std::string item;
    while (std::getline(dims, item, ',')) {
        if (item.find_first_not_of(' ') != std::string::npos) shape->push_back(std::stoul(item));
    }
    const size_t data_off = offset + header_len;
    std::vector<double> out((all.size() - data_off) / sizeof(double));
    std::memcpy(out.data(), all.data() + data_off, out.size() * sizeof(double));
    return out;
}

struct run_config {
    std::string policy = "full";  // a policy spec: "h2o:budget=12,recent=4"
    int chunk = 1;
    std::string kv_type = "f32";  // the engine's KV type and the reference's matching rounding
    bool act_quant = true;        // the reference rounds k-quant products' activations, as the engine
};

// The numpy reference's command-line flags for a policy spec.
std::string numpy_flags(const run_config& c) {
    auto p = policy::params::parse(c.policy);
    EXPECT_TRUE(p.ok());
    std::string f = " --policy " + p->name + " --chunk " + std::to_string(c.chunk) + " --granularity " +
                    policy::granularity_name(policy::granularity_of(*p)) + " --kv-type " + c.kv_type;
    if (p->budget) f += " --budget " + p->budget->to_string();
    if (p->recent) f += " --recent " + std::to_string(*p->recent);
    if (p->sinks) f += " --sinks " + std::to_string(*p->sinks);
    if (p->decay) f += " --decay " + fmt::format("{}", *p->decay);
    if (p->positions == policy::position_mode::rolling) f += " --positions rolling";
    if (p->schedule != policy::budget_schedule::uniform)
        f += std::string(" --schedule ") + policy::budget_schedule_name(p->schedule);
    if (p->ratio) f += fmt::format(" --ratio {}", *p->ratio);
    if (!p->shares.empty()) f += fmt::format(" --shares {}", fmt::join(p->shares, "/"));
    if (!p->recents.empty()) f += fmt::format(" --recents {}", fmt::join(p->recents, "/"));
    if (!p->decays.empty()) f += fmt::format(" --decays {}", fmt::join(p->decays, "/"));
    for (const auto& [key, value] : p->extra) f += fmt::format(" --param {}={}", key, value);
    if (!c.act_quant) f += " --no-act-quant";
    return f;
}

// The largest over positions of max_v |a - b| / max_v |a| (a: the reference's logits, [n_pos][n_vocab]).
template <typename T>
double worst_relative(const std::vector<double>& a, const std::vector<T>& b, size_t n_vocab) {
    double worst = 0.0;
    for (size_t t = 0; t < a.size() / n_vocab; ++t) {
        double scale = 0.0, diff = 0.0;
        for (size_t v = 0; v < n_vocab; ++v) {
            scale = std::max(scale, std::fabs(a[t * n_vocab + v]));
            diff = std::max(diff, std::fabs(a[t * n_vocab + v] - static_cast<double>(b[t * n_vocab + v])));
        }
        worst = std::max(worst, diff / std::max(scale, 1e-30));
    }
    return worst;
}

// Runs the numpy reference; returns its logits [tokens][n_vocab] and writes its kept-set trace to `trace`.
std::vector<double> run_numpy(const std::string& model_path, const std::vector<int32_t>& tokens,
                              const run_config& c, const fs::path& dir, const std::string& trace) {
    const std::string npy = (dir / "logits.npy").string();
    std::string ids;
    for (int32_t t : tokens) ids += (ids.empty() ? "" : " ") + std::to_string(t);
    const std::string cmd = "/usr/bin/python3 " + kSource + "/tests/reference/llama_ref.py --model " +
                            model_path + " --tokens '" + ids + "' --out " + npy + " --trace " + trace +
                            numpy_flags(c);
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::vector<size_t> shape;
    auto ref = read_npy(npy, &shape);
    EXPECT_EQ(shape.size(), 2u);
    EXPECT_EQ(shape.empty() ? 0 : shape[0], tokens.size());
    return ref;
}

// Runs the engine and the reference on `tokens` and compares logits and, chunk by chunk, the kept sets.
// Logits: with f32 KV and no k-quant weights within 1e-4 relative to the largest logit of the position (f32
// against float64 arithmetic). With f16, q8_0, q4_0 or q4_1 KV both sides round the stored K/V, but the
// engine rounds its f32 K/V and the reference its float64 K/V, so an element whose two values straddle a
// rounding midpoint lands on neighbouring grid points: a sparse perturbation of one grid step. Its effect is
// a small part of the rounding's own effect on the logits (every element moved by up to half a step), which
// the reference measures by running again without rounding. The bound is 1e-4 plus a quarter of that effect:
// an engine that did not round, or rounded differently (truncation, another scale), would be off by about the
// whole effect and fail. With Q4_K/Q6_K/Q8_0 weights both sides also round the activations of those products
// to 8 bits (src/kernels/q8k.h, src/kernels/q8_0_act.h), thousands of elements per position, and there one
// straddled midpoint is not small: on the Q4_K case below a single element (x * 127/amax = -16.5000019 in
// float64, just above -16.5 in the engine) moves every later position's logits by 1.1 % of the largest, about
// half the rounding's whole effect, and with that element rounded the engine's way the two agree to 1e-7
// again. So for these models the bound is 1e-4 plus the whole effect: it catches a wrong matrix, layout or
// scale (errors of order one), and the exact rounding is checked where both sides see the same activations
// (KQuantProductsOnModelTensors, and bit for bit in tests/kernels/kquant_test.cpp and q8_0_test.cpp).
void compare(const std::string& model_path, const std::vector<int32_t>& tokens, const run_config& c) {
    SCOPED_TRACE(model_path + " " + c.policy + " chunk " + std::to_string(c.chunk) + " kv " + c.kv_type);
    auto file = gguf::file::open(model_path);
    ASSERT_TRUE(file.ok()) << file.error().to_string();
    auto m = model::model::load(**file);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    engine::session_params sp;
    auto pp = policy::params::parse(c.policy);
    ASSERT_TRUE(pp.ok()) << pp.error().to_string();
    sp.kv = *pp;
    sp.prefill_chunk = c.chunk;
    auto type = kv::parse_kv_type(c.kv_type);
    ASSERT_TRUE(type.ok()) << type.error().to_string();
    sp.kv_type = *type;
    auto s = engine::session::create(**m, sp, static_cast<int64_t>(tokens.size()));
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    std::vector<std::vector<std::vector<int64_t>>> engine_trace;
    (*s)->set_chunk_observer([&](int64_t) { engine_trace.push_back((*s)->cache().kept_per_head()); });
    std::vector<float> logits;
    ASSERT_TRUE((*s)->process(tokens, model::logits_mode::all, &logits).ok());

    const fs::path dir = fs::temp_directory_path() / fmt::format("h2okv_ref_{}", ::getpid());
    fs::create_directories(dir);
    const std::string trace = (dir / "trace.jsonl").string();
    const auto n_vocab = static_cast<size_t>((*m)->params().n_vocab);
    double tolerance = 1e-4;
    bool k_quant = false;
    for (const auto& t : (*file)->tensors())
        k_quant = k_quant || t.type == gguf::tensor_type::q4_k || t.type == gguf::tensor_type::q6_k ||
                  t.type == gguf::tensor_type::q8_0;
    if (c.kv_type != "f32" || k_quant) {
        run_config unrounded = c;
        unrounded.kv_type = "f32";
        unrounded.act_quant = false;
        const auto ref32 = run_numpy(model_path, tokens, unrounded, dir, trace);
        const auto ref = run_numpy(model_path, tokens, c, dir, trace);
        ASSERT_EQ(ref.size(), ref32.size());
        const double effect = worst_relative(ref32, ref, n_vocab);
        EXPECT_GT(effect, 1e-4) << "the rounding should move the logits more than f32 arithmetic does";
        tolerance += (k_quant ? 1.0 : 0.25) * effect;
    }
    const auto ref = run_numpy(model_path, tokens, c, dir, trace);
    ASSERT_EQ(ref.size(), logits.size());
    const double worst = worst_relative(ref, logits, n_vocab);
    EXPECT_LE(worst, tolerance) << "largest logit error relative to the position's largest |logit|";
    std::fprintf(stderr, "[engine vs numpy] %s kv %s: worst %.3g, tolerance %.3g\n", c.policy.c_str(),
                 c.kv_type.c_str(), worst, tolerance);

    std::ifstream tin(trace);
    std::string line;
    size_t chunk = 0;
    while (std::getline(tin, line)) {
        ASSERT_LT(chunk, engine_trace.size());
        const auto j = nlohmann::json::parse(line);
        const auto kept = j.at("kept").get<std::vector<std::vector<int64_t>>>();
        EXPECT_EQ(kept, engine_trace[chunk])
            << "kept sets differ after chunk " << chunk << " (position " << j.at("pos") << ")";
        ++chunk;
    }
    EXPECT_EQ(chunk, engine_trace.size());
    fs::remove_all(dir);
}

std::vector<int32_t> random_tokens(int n, int64_t n_vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t{1};
    while (static_cast<int>(t.size()) < n) t.push_back(static_cast<int32_t>(3 + rng() % (n_vocab - 3)));
    return t;
}

const std::vector<run_config> kRuns = {
    {"full", 1},
    {"full", 16},
    {"h2o:budget=12", 1},
    {"h2o:budget=10,recent=3,sinks=1,decay=0.95,granularity=layer", 5},
    {"tova:budget=9,granularity=model", 7},
    {"streaming:budget=10,sinks=2", 4},
    {"window:budget=8", 1},
    {"scissorhands:budget=12,history=8", 1},
    {"scissorhands:budget=10,recent=3,granularity=layer", 5},
    {"keyformer:budget=12,tau=0.5,seed=3", 1},
    {"keyformer:budget=10,recent=3,decay=0.95,tau=2,granularity=model", 7},
    {"l2norm:budget=12", 1},
    {"l2norm:budget=10,recent=3,sinks=1,granularity=layer", 5},
    {"keydiff:budget=12", 1},
    {"keydiff:budget=10,recent=3,granularity=model", 5},
    {"h2o:budget=12,proxy=1", 1},
    {"scissorhands:budget=10,recent=3,history=8,granularity=layer,proxy=1", 7},
    // Budgets per unit (clause 11): the model's 5 layers x 4 KV heads get their own capacities.
    {"h2o:budget=12,schedule=pyramid,ratio=0.6", 1},
    {"h2o:budget=10,schedule=pyramid,granularity=layer,recents=0.2/0.4/0.6/0.8/0.3,decays=1/0.98/0.9/1/0.95",
     5},
    {"window:budget=10,schedule=pyramid,ratio=0.8", 4},
    {"h2o:budget=9,shares=1/2/0.5/1.5/1/1/1/1/3/0.2/0.3/1/1/1/2/2/0.5/0.5/1/1,recents=0.5/0.3/0.7/0.5/0.1",
     1},
    {"keydiff:budget=12,shares=1/2/0.5/1.5/1/1/1/1/3/0.2/0.3/1/1/1/2/2/0.5/0.5/1/1", 5},
    {"tova:budget=9,schedule=pyramid,ratio=0.5,granularity=layer", 7},
    // snapkv (clause 9.6): 40 tokens in chunks of 13 are three prefill chunks, each ending over budget (the
    // last `window` queries vote), then one decode chunk; chunks of 7 and 5 vote with every query.
    {"snapkv:budget=12", 13},
    {"snapkv:budget=10,window=4,decode=1", 13},
    {"snapkv:budget=12,window=3,kernel=1,granularity=layer", 7},
    {"snapkv:budget=10,window=4,kernel=3,sinks=1,granularity=model", 5},
    {"snapkv:budget=12,window=4,proxy=1", 13},
    {"snapkv:budget=10,window=3,schedule=pyramid,ratio=0.4", 7},
};

// Rolling positions (docs/EVICTION_CONTRACT.md, clause 8): every evicting policy, prefill chunks and decode,
// the three granularities.
const std::vector<run_config> kRollingRuns = {
    {"window:budget=8,positions=rolling", 1},
    {"streaming:budget=10,sinks=2,positions=rolling", 4},
    {"h2o:budget=12,positions=rolling", 1},
    {"h2o:budget=10,recent=3,sinks=1,decay=0.95,granularity=layer,positions=rolling", 5},
    {"tova:budget=9,granularity=model,positions=rolling", 7},
    {"scissorhands:budget=12,positions=rolling", 4},
    {"keyformer:budget=12,tau=0.5,positions=rolling", 1},
    {"l2norm:budget=10,granularity=model,positions=rolling", 5},
    {"keydiff:budget=12,positions=rolling", 4},
    {"tova:budget=9,proxy=1,positions=rolling", 1},
    {"snapkv:budget=12,window=4,positions=rolling", 13},
};

TEST(EngineVsNumpy, BundledModel) {
    const auto tokens = random_tokens(40, 512, 1);
    for (const auto& r : kRuns) compare(kSource + "/models/stories260K.gguf", tokens, r);
}

// The snapkv runs above reach the vote: after the first prefill chunk (13 tokens, budget 12) the kept sets
// differ from h2o's at the same budget and recent window, and after the decode chunk decode=0 and decode=1
// differ, so both rankings chose victims.
TEST(EngineVsNumpy, SnapkvEvictsByVotesAtPrefillChunkEnds) {
    auto file = gguf::file::open(kSource + "/models/stories260K.gguf");
    ASSERT_TRUE(file.ok()) << file.error().to_string();
    auto m = model::model::load(**file);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    const auto tokens = random_tokens(40, 512, 1);
    auto traces = [&](const std::string& spec) {
        engine::session_params sp;
        auto pp = policy::params::parse(spec);
        EXPECT_TRUE(pp.ok()) << pp.error().to_string();
        sp.kv = *pp;
        sp.prefill_chunk = 13;
        auto s = engine::session::create(**m, sp, static_cast<int64_t>(tokens.size()));
        EXPECT_TRUE(s.ok()) << s.error().to_string();
        std::vector<std::vector<std::vector<int64_t>>> out;
        (*s)->set_chunk_observer([&](int64_t) { out.push_back((*s)->cache().kept_per_head()); });
        EXPECT_TRUE((*s)->process(tokens, model::logits_mode::none, nullptr).ok());
        return out;
    };
    const auto snap = traces("snapkv:budget=12,window=4,recent=4");
    const auto h2o = traces("h2o:budget=12,recent=4");
    const auto snap_h2o_decode = traces("snapkv:budget=12,window=4,recent=4,decode=1");
    ASSERT_EQ(snap.size(), 4u);
    ASSERT_EQ(h2o.size(), 4u);
    ASSERT_EQ(snap_h2o_decode.size(), 4u);
    for (const auto& unit : snap[0]) EXPECT_EQ(unit.size(), 12u) << "the first prefill chunk evicts";
    EXPECT_NE(snap[0], h2o[0]) << "votes of the last window's queries, not the sum, choose the victim";
    EXPECT_EQ(snap[2], snap_h2o_decode[2]) << "decode is not reached before the fourth chunk";
    EXPECT_NE(snap[3], snap_h2o_decode[3]) << "decode=0 evicts the oldest, decode=1 the lowest sum";
}

struct synth_case {
    std::string name;
    model::synth_shape shape;
    gguf::tensor_type type;
};

TEST(EngineVsNumpy, SyntheticModels) {
    const std::vector<synth_case> cases = {
        // head_dim 64, GQA 1 (multi-head attention), separate output, F32
        {"hd64_gqa1_f32", {128, 2, 2, 2, 160, 300, 2048, false}, gguf::tensor_type::f32},
        // head_dim 128, GQA 4, F16
        {"hd128_gqa4_f16", {512, 1, 4, 1, 256, 300, 2048, true}, gguf::tensor_type::f16},
        // head_dim 64, GQA 8, separate output, Q8_0
        {"hd64_gqa8_q8_0", {512, 2, 8, 1, 256, 320, 2048, false}, gguf::tensor_type::q8_0},
        // head_dim 64, GQA 4, BF16
        {"hd64_gqa4_bf16", {256, 1, 4, 1, 192, 300, 2048, true}, gguf::tensor_type::bf16},
        // head_dim 64, GQA 4, separate output, Q4_K in every matrix (n_embd and n_ff multiples of 256)
        {"hd64_gqa4_q4_k", {512, 2, 8, 2, 512, 300, 2048, false}, gguf::tensor_type::q4_k},
    };
    const fs::path dir = fs::temp_directory_path() / fmt::format("h2okv_synth_{}", ::getpid());
    fs::create_directories(dir);
    for (const auto& c : cases) {
        auto bytes = model::synthesize_model(c.shape, c.type, 7);
        ASSERT_TRUE(bytes.ok()) << c.name << ": " << bytes.error().to_string();
        const std::string path = (dir / (c.name + ".gguf")).string();
        std::ofstream(path, std::ios::binary)
            .write(reinterpret_cast<const char*>(bytes->data()), static_cast<std::streamsize>(bytes->size()));
        const auto tokens = random_tokens(24, c.shape.n_vocab, 2);
        for (const auto& r : {kRuns[0], kRuns[2], kRuns[3], kRuns[4]}) compare(path, tokens, r);
    }
    fs::remove_all(dir);
}

// Each architecture's own parts against the reference's independent implementation of them, full and
// evicting: Llama 3.1's rope_freqs factors, linear and yarn rope scaling (with its magnitude), qwen2's q/k/v
// biases and NeoX pairing, qwen3's per-head q/k RMSNorm with a head_dim wider than n_embd / n_head, phi3's
// fused qkv and gate/up, mistral3's yarn keys and query temperature (also under rolling positions).
TEST(EngineVsNumpy, Architectures) {
    using model::rope_scaling_type;
    auto shape = [](std::string arch) {
        model::synth_shape s{.n_embd = 128, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_ff = 192};
        s.arch = std::move(arch);
        return s;
    };
    std::vector<std::pair<std::string, model::synth_shape>> cases;
    cases.emplace_back("llama3_rope_freqs", shape("llama"));
    cases.back().second.rope_freq_base = 500000.0f;
    cases.back().second.rope_freqs = true;
    cases.emplace_back("llama_linear", shape("llama"));
    cases.back().second.rope_scale = {.type = rope_scaling_type::linear, .factor = 4.0};
    cases.emplace_back("qwen2_yarn", shape("qwen2"));
    cases.back().second.rope_scale = {.type = rope_scaling_type::yarn, .factor = 4.0, .orig_ctx = 256};
    cases.emplace_back("qwen3_qk_norm", shape("qwen3"));
    cases.back().second.head_dim = 64;
    cases.emplace_back("phi3_fused", shape("phi3"));
    // The file's yarn betas and log multiplier, and the query temperature stepping every 8 positions.
    cases.emplace_back("mistral3_temperature", shape("mistral3"));
    cases.back().second.rope_scale = {.type = rope_scaling_type::yarn,
                                      .factor = 16.0,
                                      .orig_ctx = 8,
                                      .beta_fast = 16.0,
                                      .beta_slow = 2.0,
                                      .log_mul = 0.5};
    cases.back().second.attn_temp_scale = 0.1f;
    const fs::path dir = fs::temp_directory_path() / fmt::format("h2okv_arch_{}", ::getpid());
    fs::create_directories(dir);
    for (const auto& [name, s] : cases) {
        auto bytes = model::synthesize_model(s, gguf::tensor_type::f32, 13);
        ASSERT_TRUE(bytes.ok()) << name << ": " << bytes.error().to_string();
        const std::string path = (dir / (name + ".gguf")).string();
        std::ofstream(path, std::ios::binary)
            .write(reinterpret_cast<const char*>(bytes->data()), static_cast<std::streamsize>(bytes->size()));
        const auto tokens = random_tokens(24, s.n_vocab, 6);
        for (const auto& r : {kRuns[1], kRuns[2], kRuns[3]}) compare(path, tokens, r);
        // Under rolling positions the temperature follows the queries' rolling positions.
        if (s.attn_temp_scale != 0.0f) compare(path, tokens, kRollingRuns[3]);
    }
    fs::remove_all(dir);
}

// Gemma 2 and 3 against the reference, full and evicting: GeGLU, post norms, embedding scaling, soft-caps
// (gemma2), q/k norms and the local layers' own rope (gemma3: base 10000 unscaled, the global layer base 1e6
// with linear scaling), and sliding-window layers with a window of 8 over 40 positions, so that windows bite
// in decode and inside prefill chunks longer than the window (chunk 16). The kept sets compared chunk by
// chunk include the window layers' (the last W - 1 positions) and the global layers' under every
// granularity (their units count the global layers only).
TEST(EngineVsNumpy, SlidingWindowArchitectures) {
    auto shape = [](std::string arch, int n_layer) {
        model::synth_shape s{.n_embd = 128, .n_layer = n_layer, .n_head = 4, .n_kv_head = 2, .n_ff = 192};
        s.arch = std::move(arch);
        s.sliding_window = 8;
        return s;
    };
    std::vector<std::pair<std::string, model::synth_shape>> cases;
    cases.emplace_back("gemma2_window8", shape("gemma2", 4));
    cases.back().second.attn_softcap = 3.0f;
    cases.back().second.final_softcap = 5.0f;
    cases.emplace_back("gemma3_window8", shape("gemma3", 7));
    cases.back().second.rope_freq_base = 1000000.0f;
    cases.back().second.rope_scale = {.type = model::rope_scaling_type::linear, .factor = 8.0};
    const std::vector<run_config> runs = {
        {"full", 1},
        {"full", 16},
        {"h2o:budget=12", 1},
        {"h2o:budget=10,recent=3,sinks=1,decay=0.95,granularity=layer", 5},
        {"tova:budget=9,granularity=model", 7},
        {"window:budget=6", 16},
    };
    const fs::path dir = fs::temp_directory_path() / fmt::format("h2okv_swa_{}", ::getpid());
    fs::create_directories(dir);
    for (const auto& [name, s] : cases) {
        auto bytes = model::synthesize_model(s, gguf::tensor_type::f32, 17);
        ASSERT_TRUE(bytes.ok()) << name << ": " << bytes.error().to_string();
        const std::string path = (dir / (name + ".gguf")).string();
        std::ofstream(path, std::ios::binary)
            .write(reinterpret_cast<const char*>(bytes->data()), static_cast<std::streamsize>(bytes->size()));
        const auto tokens = random_tokens(40, s.n_vocab, 8);
        for (const auto& r : runs) compare(path, tokens, r);
        run_config f16 = runs[2];
        f16.kv_type = "f16";
        compare(path, tokens, f16);
    }
    fs::remove_all(dir);
}

// The k-quant products alone, on model tensors, with the same float32 activations on both sides: both
// round them with the same float32 operations (x * (127 / amax)), so the engine's integer products must agree
// with the reference's float64 product over the rounded activations to float32 accuracy. The activations
// include a zero block and outliers; the reference without rounding must differ by far more.
TEST(EngineVsNumpy, KQuantProductsOnModelTensors) {
    const fs::path dir = fs::temp_directory_path() / fmt::format("h2okv_kq_{}", ::getpid());
    fs::create_directories(dir);
    for (gguf::tensor_type type :
         {gguf::tensor_type::q4_k, gguf::tensor_type::q6_k, gguf::tensor_type::q8_0}) {
        const std::string tname = gguf::tensor_type_name(static_cast<uint32_t>(type));
        auto bytes = model::synthesize_model({512, 1, 8, 2, 768, 300, 2048, false}, type, 11);
        ASSERT_TRUE(bytes.ok()) << bytes.error().to_string();
        const std::string path = (dir / (tname + ".gguf")).string();
        std::ofstream(path, std::ios::binary)
            .write(reinterpret_cast<const char*>(bytes->data()), static_cast<std::streamsize>(bytes->size()));
        auto file = gguf::file::open(path);
        ASSERT_TRUE(file.ok()) << file.error().to_string();
        for (const std::string name : {"blk.0.attn_q.weight", "blk.0.ffn_down.weight", "output.weight"}) {
            SCOPED_TRACE(tname + " " + name);
            const gguf::tensor_info* t = (*file)->find_tensor(name);
            ASSERT_NE(t, nullptr);
            ASSERT_EQ(t->type, type);
            const int64_t cols = t->dims[0];
            const int64_t rows = t->dims[1];
            const kernels::matrix_view w{t->type, t->data, rows, cols,
                                         static_cast<size_t>(t->n_bytes() / rows)};
            const int n_tok = 5;
            std::mt19937 rng(static_cast<uint32_t>(cols));
            std::normal_distribution<float> normal(0.0f, 1.0f);
            std::vector<float> x(static_cast<size_t>(n_tok * cols));
            for (float& v : x) v = normal(rng);
            std::fill(x.begin(), x.begin() + 256, 0.0f);  // a zero block
            for (int i = 1; i < n_tok; ++i)
                x[static_cast<size_t>(i * cols + 37 * i)] = 40.0f * i;  // outliers
            std::vector<float> y(static_cast<size_t>(n_tok * rows));
            kernels::matmul(w, x.data(), n_tok, y.data());
            const std::string x_path = (dir / "x.npy").string();
            const std::string y_path = (dir / "y.npy").string();
            write_npy_f32(x_path, x, n_tok, static_cast<size_t>(cols));
            auto numpy = [&](const std::string& extra) {
                const std::string cmd = "/usr/bin/python3 " + kSource +
                                        "/tests/reference/llama_ref.py --model " + path + " --matmul " +
                                        name + " --x " + x_path + " --out " + y_path + extra;
                EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
                std::vector<size_t> shape;
                return read_npy(y_path, &shape);
            };
            const auto ref = numpy("");
            const auto unrounded = numpy(" --no-act-quant");
            ASSERT_EQ(ref.size(), y.size());
            const double worst = worst_relative(ref, y, static_cast<size_t>(rows));
            const double effect = worst_relative(ref, unrounded, static_cast<size_t>(rows));
            EXPECT_LE(worst, 1e-5);
            EXPECT_GT(effect, 100 * worst) << "the rounding should be visible";
            std::fprintf(stderr, "[k-quant product] %s %s: worst %.3g, rounding effect %.3g\n", tname.c_str(),
                         name.c_str(), worst, effect);
        }
    }
    fs::remove_all(dir);
}

// The KV types other than f32 against the reference's matching rounding (see compare), full and evicting:
// head_dim 8 (f16 only; q8_0, q4_0 and q4_1 need multiples of 32) on the bundled model, 64 with GQA 4 on a
// synthetic one.
TEST(EngineVsNumpy, RoundedKvTypes) {
    const auto tokens = random_tokens(40, 512, 4);
    for (const auto& r : {kRuns[1], kRuns[2], kRuns[3]}) {
        run_config c = r;
        c.kv_type = "f16";
        compare(kSource + "/models/stories260K.gguf", tokens, c);
    }
    const fs::path dir = fs::temp_directory_path() / fmt::format("h2okv_synth_kv_{}", ::getpid());
    fs::create_directories(dir);
    auto bytes = model::synthesize_model({256, 2, 4, 1, 192, 300, 2048, true}, gguf::tensor_type::f32, 9);
    ASSERT_TRUE(bytes.ok()) << bytes.error().to_string();
    const std::string path = (dir / "hd64_gqa4.gguf").string();
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes->data()), static_cast<std::streamsize>(bytes->size()));
    const auto synth_tokens = random_tokens(32, 300, 5);
    for (const char* type : {"f16", "q8_0", "q4_0", "q4_1"}) {
        for (const auto& r : {kRuns[1], kRuns[2], kRuns[4]}) {
            run_config c = r;
            c.kv_type = type;
            compare(path, synth_tokens, c);
        }
    }
    fs::remove_all(dir);
}

TEST(EngineVsNumpy, RollingPositions) {
    const auto tokens = random_tokens(48, 512, 6);
    for (const auto& r : kRollingRuns) compare(kSource + "/models/stories260K.gguf", tokens, r);
    run_config f16 = kRollingRuns[2];
    f16.kv_type = "f16";
    compare(kSource + "/models/stories260K.gguf", tokens, f16);
    // head_dim 64 with GQA 4 and q8_0 keys, turned by up to the whole budget.
    const fs::path dir = fs::temp_directory_path() / fmt::format("h2okv_synth_roll_{}", ::getpid());
    fs::create_directories(dir);
    auto bytes = model::synthesize_model({256, 2, 4, 1, 192, 300, 2048, true}, gguf::tensor_type::f32, 9);
    ASSERT_TRUE(bytes.ok()) << bytes.error().to_string();
    const std::string path = (dir / "hd64_gqa4.gguf").string();
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes->data()), static_cast<std::streamsize>(bytes->size()));
    const auto synth_tokens = random_tokens(32, 300, 7);
    compare(path, synth_tokens, kRollingRuns[3]);
    run_config q8 = kRollingRuns[2];
    q8.kv_type = "q8_0";
    compare(path, synth_tokens, q8);
    run_config q4 = kRollingRuns[2];
    q4.kv_type = "q4_0";
    compare(path, synth_tokens, q4);
    q4.kv_type = "q4_1";
    compare(path, synth_tokens, q4);
    fs::remove_all(dir);
}

TEST(EngineVsNumpy, EvalModel5M) {
    const std::string path = std::string(H2OKV_SHARED_DIR) + "/models/h2o-eval-5M/h2o-eval-llama-5M.gguf";
    if (!fs::exists(path)) GTEST_SKIP() << "../shared's h2o-eval-5M model is absent: " << path;
    const auto tokens = random_tokens(64, 4096, 3);
    compare(path, tokens, {"full", 64});
    compare(path, tokens, {"h2o:budget=16,decay=0.98", 8});
    compare(path, tokens, {"tova:budget=12,granularity=layer", 1});
    compare(path, tokens, {"h2o:budget=16,positions=rolling", 4});
}

}  // namespace
}  // namespace h2okv
