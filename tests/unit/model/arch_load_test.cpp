// Loading every architecture of archs.def from synthetic files, and the loader's accounting: a tensor or an
// `<arch>.` key that the architecture does not use, or a RoPE / expert setting it does not support, is
// refused with its name (never skipped).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "h2okv/gguf/gguf.h"
#include "h2okv/model/model.h"
#include "h2okv/model/synth.h"

namespace h2okv {
namespace {

model::synth_shape shape_of(const std::string& arch) {
    model::synth_shape s{.n_embd = 128, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_ff = 256};
    s.arch = arch;
    if (arch == "qwen3") s.head_dim = 64;  // q wider than the residual, as Qwen3's
    if (arch == "gemma3") s.n_layer = 7;   // layers 0-4 and 6 slide, 5 is global
    if (arch == "gemma2" || arch == "gemma3") s.sliding_window = 16;
    return s;
}

std::vector<std::byte> synth(const model::synth_shape& s) {
    auto bytes = model::synthesize_model(s, gguf::tensor_type::f32, 1);
    EXPECT_TRUE(bytes.ok()) << bytes.error().to_string();
    return bytes.ok() ? *bytes : std::vector<std::byte>{};
}

result<std::unique_ptr<model::model>> load(const std::vector<std::byte>& bytes,
                                           std::unique_ptr<gguf::file>* keep) {
    H2OKV_ASSIGN_OR_RETURN(*keep, gguf::file::parse(bytes.data(), bytes.size()));
    return model::model::load(**keep);
}

// The file of `bytes` written again with one more key and/or tensor (f32 values).
std::vector<std::byte> with_extra(const std::vector<std::byte>& bytes, const std::string& key,
                                  const gguf::value* v, const std::string& tensor = "", int64_t n = 0) {
    auto f = gguf::file::parse(bytes.data(), bytes.size());
    EXPECT_TRUE(f.ok());
    gguf::writer w;
    for (const std::string& k : (*f)->keys()) w.set(k, *(*f)->find(k));
    if (v != nullptr) w.set(key, *v);
    for (const auto& t : (*f)->tensors()) {
        EXPECT_TRUE(w.add_tensor(t.name, t.type, t.dims,
                                 std::vector<std::byte>(t.data, t.data + static_cast<size_t>(t.n_bytes())))
                        .ok());
    }
    if (!tensor.empty()) {
        EXPECT_TRUE(w.add_tensor(tensor, gguf::tensor_type::f32, {n},
                                 std::vector<std::byte>(static_cast<size_t>(n) * sizeof(float)))
                        .ok());
    }
    return w.to_bytes();
}

std::string refusal(const std::vector<std::byte>& bytes) {
    std::unique_ptr<gguf::file> f;
    auto m = load(bytes, &f);
    EXPECT_FALSE(m.ok()) << "the file was accepted";
    return m.ok() ? "" : m.error().message();
}

TEST(ArchLoad, EveryRegisteredArchitectureLoads) {
    const auto names = model::architecture_names();
    for (const std::string arch : {"llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "mistral3"}) {
        SCOPED_TRACE(arch);
        EXPECT_NE(std::find(names.begin(), names.end(), arch), names.end());
        const model::synth_shape s = shape_of(arch);
        std::unique_ptr<gguf::file> f;
        auto m = load(synth(s), &f);
        ASSERT_TRUE(m.ok()) << m.error().to_string();
        const model::hparams& hp = (*m)->params();
        EXPECT_EQ(hp.arch, arch);
        EXPECT_EQ(hp.head_dim, s.head_dim != 0 ? s.head_dim : s.n_embd / s.n_head);
        EXPECT_EQ(hp.rope(0).pairing, arch == "llama" || arch == "mistral3" ? kernels::rope_pairing::normal
                                                                            : kernels::rope_pairing::neox);
        EXPECT_EQ(hp.rope(1).inv_freq.size(), static_cast<size_t>(hp.rope_dim / 2));
    }
}

TEST(ArchLoad, UnusedTensorIsRefusedByName) {
    // Qwen3's q/k norms under the llama architecture (both names 5 bytes: relabel every key and the value).
    auto bytes = synth(shape_of("qwen3"));
    const std::string from = "qwen3", to = "llama";
    for (auto it = bytes.begin();
         (it = std::search(it, bytes.end(), reinterpret_cast<const std::byte*>(from.data()),
                           reinterpret_cast<const std::byte*>(from.data() + from.size()))) != bytes.end();)
        std::memcpy(&*it, to.data(), to.size());
    const std::string msg = refusal(bytes);
    EXPECT_NE(msg.find("tensor 'blk.0.attn_q_norm.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("not used by h2okv's llama architecture"), std::string::npos) << msg;

    // An attention-output bias (llama.cpp's llama has an optional one; h2okv does not apply it).
    const std::string bias =
        refusal(with_extra(synth(shape_of("llama")), "", nullptr, "blk.1.attn_output.bias", 128));
    EXPECT_NE(bias.find("'blk.1.attn_output.bias'"), std::string::npos) << bias;
    // Llama 3.1's frequency factors belong to llama alone (llama.cpp's qwen2 never applies them).
    const std::string freqs =
        refusal(with_extra(synth(shape_of("qwen2")), "", nullptr, "rope_freqs.weight", 16));
    EXPECT_NE(freqs.find("'rope_freqs.weight'"), std::string::npos) << freqs;
}

TEST(ArchLoad, UnsupportedMetadataIsRefusedByName) {
    const auto llama = synth(shape_of("llama"));
    const gguf::value experts = gguf::value::make_uint(gguf::value_type::u32, 8);
    std::string msg = refusal(with_extra(llama, "llama.expert_count", &experts));
    EXPECT_NE(msg.find("llama.expert_count is 8"), std::string::npos) << msg;
    EXPECT_NE(msg.find("mixture-of-experts"), std::string::npos) << msg;

    const gguf::value longrope = gguf::value::make_string("longrope");
    msg = refusal(with_extra(llama, "llama.rope.scaling.type", &longrope));
    EXPECT_NE(msg.find("llama.rope.scaling.type is 'longrope'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected none, linear or yarn"), std::string::npos) << msg;

    // A window h2okv's llama would not apply, and a yarn variant it does not implement.
    const gguf::value window = gguf::value::make_uint(gguf::value_type::u32, 4096);
    msg = refusal(with_extra(llama, "llama.attention.sliding_window", &window));
    EXPECT_NE(msg.find("'llama.attention.sliding_window'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("refusing the file rather than ignoring it"), std::string::npos) << msg;
    const gguf::value log_mul = gguf::value::make_float(gguf::value_type::f32, 0.1);
    msg = refusal(with_extra(llama, "llama.rope.scaling.yarn_log_multiplier", &log_mul));
    EXPECT_NE(msg.find("'llama.rope.scaling.yarn_log_multiplier'"), std::string::npos) << msg;

    model::synth_shape yarn = shape_of("qwen2");
    yarn.rope_scale = {.type = model::rope_scaling_type::yarn, .factor = 4.0, .orig_ctx = 4096};
    const gguf::value beta = gguf::value::make_float(gguf::value_type::f32, 16.0);
    msg = refusal(with_extra(synth(yarn), "qwen2.rope.scaling.yarn_beta_fast", &beta));
    EXPECT_NE(msg.find("qwen2.rope.scaling.yarn_beta_fast is 16"), std::string::npos) << msg;
}

// What does not change the math is accepted: the key llama.cpp itself ignores for Phi-3, and a llama.cpp
// default written out.
TEST(ArchLoad, KeysThatLeaveTheMathAloneAreAccepted) {
    const gguf::value window = gguf::value::make_uint(gguf::value_type::u32, 2047);
    std::unique_ptr<gguf::file> f;
    auto m = load(with_extra(synth(shape_of("phi3")), "phi3.attention.sliding_window", &window), &f);
    EXPECT_TRUE(m.ok()) << m.error().to_string();
    const gguf::value finetuned = gguf::value::make_bool(true);
    m = load(with_extra(synth(shape_of("qwen3")), "qwen3.rope.scaling.finetuned", &finetuned), &f);
    EXPECT_TRUE(m.ok()) << m.error().to_string();
}

// Gemma's layer kinds as llama.cpp defines them: gemma2 slides on even layers with the file's rope (4096
// positions when the file does not say); gemma3 on five of six with base 10000 unscaled while its global
// layers take the file's base and scaling, and only when the file names a window; soft-caps and the
// attention scale from the file or llama.cpp's defaults; what Gemma does not define is refused by name.
TEST(ArchLoad, GemmaLayerKinds) {
    std::unique_ptr<gguf::file> f;
    model::synth_shape g2 = shape_of("gemma2");
    g2.n_layer = 4;
    g2.attn_softcap = 7.0f;
    auto m2 = load(synth(g2), &f);
    ASSERT_TRUE(m2.ok()) << m2.error().to_string();
    const model::hparams& h2 = (*m2)->params();
    EXPECT_EQ(h2.layer_sliding, (std::vector<uint8_t>{1, 0, 1, 0}));
    EXPECT_EQ(h2.sliding_window, 16);
    EXPECT_EQ(h2.attn_softcap, 7.0f);
    EXPECT_EQ(h2.final_softcap, 30.0f) << "llama.cpp's default when the file has none";
    EXPECT_FLOAT_EQ(h2.attention_scale(), 1.0f / std::sqrt(32.0f)) << "1 / sqrt(head_dim)";
    EXPECT_EQ(h2.rope(0).inv_freq, h2.rope(1).inv_freq) << "gemma2's local layers rotate as the global";
    g2.sliding_window = 0;
    g2.attn_softcap = 0.0f;
    auto d2 = load(synth(g2), &f);
    ASSERT_TRUE(d2.ok()) << d2.error().to_string();
    EXPECT_EQ((*d2)->params().sliding_window, 4096);
    EXPECT_EQ((*d2)->params().attn_softcap, 50.0f);

    model::synth_shape g3 = shape_of("gemma3");
    g3.rope_freq_base = 1000000.0f;
    g3.rope_scale = {.type = model::rope_scaling_type::linear, .factor = 8.0};
    auto m3 = load(synth(g3), &f);
    ASSERT_TRUE(m3.ok()) << m3.error().to_string();
    const model::hparams& h3 = (*m3)->params();
    EXPECT_EQ(h3.layer_sliding, (std::vector<uint8_t>{1, 1, 1, 1, 1, 0, 1}));
    EXPECT_EQ(h3.attn_softcap, 0.0f);
    EXPECT_EQ(h3.final_softcap, 0.0f);
    const auto local = kernels::rope_spec::plain(h3.rope_dim, 10000.0f, kernels::rope_pairing::neox);
    EXPECT_EQ(h3.rope(0).inv_freq, local.inv_freq) << "base 10000, unscaled";
    const auto global =
        model::make_rope_spec(h3.rope_dim, 1000000.0f, kernels::rope_pairing::neox, {}, g3.rope_scale);
    EXPECT_EQ(h3.rope(5).inv_freq, global.inv_freq) << "the file's base and linear scaling";
    g3.sliding_window = 0;
    auto d3 = load(synth(g3), &f);
    ASSERT_TRUE(d3.ok()) << d3.error().to_string();
    EXPECT_EQ((*d3)->params().n_sliding(), 0) << "no window key: every layer global";

    const gguf::value scale = gguf::value::make_float(gguf::value_type::f32, 0.5);
    std::string msg = refusal(with_extra(synth(shape_of("gemma2")), "gemma2.attention.scale", &scale));
    EXPECT_NE(msg.find("'gemma2.attention.scale'"), std::string::npos) << msg;
    msg = refusal(with_extra(synth(shape_of("gemma3")), "gemma3.attn_logit_softcapping", &scale));
    EXPECT_NE(msg.find("'gemma3.attn_logit_softcapping'"), std::string::npos) << msg;
    model::synth_shape yarn = shape_of("gemma3");
    yarn.rope_scale = {.type = model::rope_scaling_type::yarn, .factor = 4.0, .orig_ctx = 4096};
    msg = refusal(synth(yarn));
    EXPECT_NE(msg.find("only linear scaling"), std::string::npos) << msg;
}

TEST(ArchLoad, RopeScalingReachesTheLayerSpecs) {
    model::synth_shape s = shape_of("qwen2");
    s.rope_scale = {.type = model::rope_scaling_type::yarn, .factor = 4.0, .orig_ctx = 4096};
    std::unique_ptr<gguf::file> f;
    auto m = load(synth(s), &f);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    const model::hparams& hp = (*m)->params();
    const kernels::rope_spec want =
        model::make_rope_spec(hp.rope_dim, hp.rope_freq_base, kernels::rope_pairing::neox, {}, s.rope_scale);
    EXPECT_EQ(hp.rope(0).inv_freq, want.inv_freq);
    EXPECT_EQ(hp.rope(0).magnitude, want.magnitude);
    EXPECT_GT(hp.rope(0).magnitude, 1.0);

    model::synth_shape l3 = shape_of("llama");
    l3.rope_freq_base = 500000.0f;
    l3.rope_freqs = true;
    auto m3 = load(synth(l3), &f);
    ASSERT_TRUE(m3.ok()) << m3.error().to_string();
    const kernels::rope_spec plain =
        kernels::rope_spec::plain((*m3)->params().rope_dim, 500000.0f, kernels::rope_pairing::normal);
    const auto& got = (*m3)->params().rope(0).inv_freq;
    EXPECT_EQ(got.front(), plain.inv_freq.front()) << "the fastest pair keeps its frequency";
    EXPECT_DOUBLE_EQ(got.back(), plain.inv_freq.back() / 8.0) << "the slowest pair is stretched 8 times";
}

// mistral3 applies the file's yarn betas and log multiplier (the other architectures refuse values other
// than llama.cpp's defaults, UnsupportedMetadataIsRefusedByName) and the query temperature.
TEST(ArchLoad, Mistral3YarnKeysAndQueryTemperature) {
    model::synth_shape s = shape_of("mistral3");
    s.rope_scale = {.type = model::rope_scaling_type::yarn,
                    .factor = 16.0,
                    .orig_ctx = 64,
                    .beta_fast = 16.0,
                    .beta_slow = 2.0,
                    .log_mul = 0.5};
    s.attn_temp_scale = 0.25f;
    std::unique_ptr<gguf::file> f;
    auto m = load(synth(s), &f);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    const model::hparams& hp = (*m)->params();
    EXPECT_EQ(hp.rope_scale.beta_fast, 16.0);
    EXPECT_EQ(hp.rope_scale.beta_slow, 2.0);
    EXPECT_EQ(hp.rope_scale.log_mul, 0.5);
    const double ln16 = std::log(16.0);
    EXPECT_NEAR(hp.rope(0).magnitude, (1.0 + 0.1 * ln16) / (1.0 + 0.05 * ln16), 1e-12);
    model::rope_scaling defaults = s.rope_scale;
    defaults.beta_fast = 32.0;
    defaults.beta_slow = 1.0;
    EXPECT_NE(hp.rope(0).inv_freq, model::make_rope_spec(hp.rope_dim, hp.rope_freq_base,
                                                         kernels::rope_pairing::normal, {}, defaults)
                                       .inv_freq)
        << "the file's betas move the ramp";
    EXPECT_EQ(hp.attn_temp_floor, 64);
    EXPECT_EQ(hp.query_temperature(0), 1.0f);
    EXPECT_EQ(hp.query_temperature(63), 1.0f);
    EXPECT_FLOAT_EQ(hp.query_temperature(64), static_cast<float>(1.0 + 0.25 * std::log(2.0)));
    EXPECT_FLOAT_EQ(hp.query_temperature(200), static_cast<float>(1.0 + 0.25 * std::log(4.0)));

    s.attn_temp_scale = 0.0f;
    auto plain = load(synth(s), &f);
    ASSERT_TRUE(plain.ok()) << plain.error().to_string();
    EXPECT_EQ((*plain)->params().query_temperature(1000), 1.0f);
    // A mixture-of-experts mistral3 file is refused, not run as a dense one.
    const gguf::value experts = gguf::value::make_uint(gguf::value_type::u32, 8);
    const std::string msg = refusal(with_extra(synth(s), "mistral3.expert_count", &experts));
    EXPECT_NE(msg.find("mixture-of-experts"), std::string::npos) << msg;
}

}  // namespace
}  // namespace h2okv
