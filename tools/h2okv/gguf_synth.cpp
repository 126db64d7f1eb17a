// h2okv gguf synth: writes a synthetic GGUF (random weights) of a named shape (architecture, sizes, RoPE
// variant) and weight type, for benchmarks and tests that need a model of a real model's shape without its
// weights.
//
//   h2okv gguf synth --shape smollm-135m --type q8_0 -o /tmp/smollm-q8_0.gguf --seed 1
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "commands.h"
#include "h2okv/kernels/kernels.h"
#include "h2okv/model/synth.h"
#include "kv_options.h"

namespace h2okv::cli {
namespace {

struct synth_options {
    std::string shape;
    std::string type;
    std::string out;
    uint64_t seed = 1;
};

const std::map<std::string, model::synth_shape>& shapes() {
    static const std::map<std::string, model::synth_shape> s = {
        // SmolLM-135M: head_dim 64, GQA 3, tied embeddings.
        {"smollm-135m", {576, 30, 9, 3, 1536, 49152, 2048, true, 10000.0f}},
        // TinyLlama-1.1B: head_dim 64, GQA 8, separate output matrix.
        {"tinyllama-1.1b", {2048, 22, 32, 4, 5632, 32000, 2048, false, 10000.0f}},
        // A few-MB model for tests: head_dim 64, GQA 2, every matrix row a multiple of 256; a long context
        // so deep benchmark runs fit under the `full` policy.
        {"tiny", {256, 2, 4, 2, 512, 512, 16384, true, 10000.0f}},
        // One small shape per architecture and RoPE variant, for tests and the llama.cpp comparison
        // (scripts/llamacpp/arch_compare.sh); each row a multiple of 256.
        // Llama 3.x: base 500000 and Llama 3.1's rope_freqs.weight factors.
        {"llama3-tiny",
         {.n_embd = 256,
          .n_layer = 2,
          .n_head = 4,
          .n_kv_head = 2,
          .n_ff = 512,
          .n_vocab = 512,
          .n_ctx = 16384,
          .rope_freq_base = 500000.0f,
          .rope_freqs = true}},
        // Llama with linear rope scaling x4 (the SuperHOT / CodeLlama-style stretch).
        {"llama-linear-tiny",
         {.n_embd = 256,
          .n_layer = 2,
          .n_head = 4,
          .n_kv_head = 2,
          .n_ff = 512,
          .n_vocab = 512,
          .n_ctx = 16384,
          .rope_scale = {.type = model::rope_scaling_type::linear, .factor = 4.0}}},
        // Mistral 7B's proportions: head_dim 128, GQA 4, base 1e6, separate output.
        {"mistral-tiny",
         {.n_embd = 512,
          .n_layer = 2,
          .n_head = 4,
          .n_kv_head = 1,
          .n_ff = 1024,
          .n_vocab = 512,
          .n_ctx = 16384,
          .tied_output = false,
          .rope_freq_base = 1000000.0f}},
        // Qwen2.5: q/k/v biases, NeoX pairing, base 1e6.
        {"qwen2-tiny",
         {.n_embd = 256,
          .n_layer = 2,
          .n_head = 4,
          .n_kv_head = 2,
          .n_ff = 512,
          .n_vocab = 512,
          .n_ctx = 16384,
          .rope_freq_base = 1000000.0f,
          .arch = "qwen2"}},
        // Qwen2.5 with yarn x4 of a 4096-token original context (its long-context setting, scaled down).
        {"qwen2-yarn-tiny",
         {.n_embd = 256,
          .n_layer = 2,
          .n_head = 4,
          .n_kv_head = 2,
          .n_ff = 512,
          .n_vocab = 512,
          .n_ctx = 16384,
          .rope_freq_base = 1000000.0f,
          .arch = "qwen2",
          .rope_scale = {.type = model::rope_scaling_type::yarn, .factor = 4.0, .orig_ctx = 4096}}},
        // Qwen3: q/k RMSNorm per head, head_dim 128 with n_embd 256 (q is wider than the residual).
        {"qwen3-tiny",
         {.n_embd = 256,
          .n_layer = 2,
          .n_head = 4,
          .n_kv_head = 2,
          .n_ff = 512,
          .n_vocab = 512,
          .n_ctx = 16384,
          .rope_freq_base = 1000000.0f,
          .arch = "qwen3",
          .head_dim = 128}},
        // Gemma 2: GeGLU, post norms, embeddings scaled, layers 0 and 2 sliding over 64 positions, 1 and 3
        // global; soft-caps far below the real 50 / 30 so that they bite on random weights.
        {"gemma2-tiny",
         {.n_embd = 256,
          .n_layer = 4,
          .n_head = 4,
          .n_kv_head = 2,
          .n_ff = 512,
          .n_vocab = 512,
          .n_ctx = 8192,
          .arch = "gemma2",
          .sliding_window = 64,
          .attn_softcap = 5.0f,
          .final_softcap = 10.0f}},
        // Gemma 3: gemma2's blocks plus q/k norms; layers 0-4 slide over 64 positions with base 10000, layer
        // 5 is global with base 1e6 and linear scaling x8 (Gemma 3 4B's settings).
        {"gemma3-tiny",
         {.n_embd = 256,
          .n_layer = 6,
          .n_head = 4,
          .n_kv_head = 2,
          .n_ff = 512,
          .n_vocab = 512,
          .n_ctx = 32768,
          .rope_freq_base = 1000000.0f,
          .arch = "gemma3",
          .rope_scale = {.type = model::rope_scaling_type::linear, .factor = 8.0},
          .sliding_window = 64}},
        // Ministral 3's settings scaled down: yarn x16 of a 64-token original context with betas 16 / 2 and
        // log multiplier 0.5 (the real files: 16384, 32 / 1, 1), and the query temperature 0.1, which
        // changes every 64 positions here, so a 256-position comparison reaches four temperatures.
        {"mistral3-tiny",
         {.n_embd = 256,
          .n_layer = 2,
          .n_head = 4,
          .n_kv_head = 2,
          .n_ff = 512,
          .n_vocab = 512,
          .n_ctx = 16384,
          .tied_output = false,
          .rope_freq_base = 1000000.0f,
          .arch = "mistral3",
          .rope_scale = {.type = model::rope_scaling_type::yarn,
                         .factor = 16.0,
                         .orig_ctx = 64,
                         .beta_fast = 16.0,
                         .beta_slow = 2.0,
                         .log_mul = 0.5},
          .attn_temp_scale = 0.1f}},
        // Phi-3: fused qkv and gate/up, multi-head attention, NeoX pairing.
        {"phi3-tiny",
         {.n_embd = 256,
          .n_layer = 2,
          .n_head = 4,
          .n_kv_head = 4,
          .n_ff = 512,
          .n_vocab = 512,
          .n_ctx = 4096,
          .arch = "phi3"}},
    };
    return s;
}

const std::map<std::string, gguf::tensor_type>& types() {
    static const std::map<std::string, gguf::tensor_type> t = {
        {"f32", gguf::tensor_type::f32},   {"f16", gguf::tensor_type::f16},
        {"q8_0", gguf::tensor_type::q8_0}, {"q4_0", gguf::tensor_type::q4_0},
        {"q4_k", gguf::tensor_type::q4_k},
    };
    return t;
}

int run_synth(const synth_options& o) {
    const model::synth_shape& s = shapes().at(o.shape);
    const gguf::tensor_type t = types().at(o.type);
    // Rows of n_embd (or n_ff) elements that are not whole blocks of `t` keep a wider type; say which.
    for (auto [what, cols] : {std::pair{"n_embd", s.n_embd}, std::pair{"n_ff", s.n_ff}}) {
        const gguf::tensor_type got = model::matrix_type(t, cols);
        if (got != t) {
            fmt::print(
                stderr,
                "h2okv gguf synth: note: matrices with rows of {} = {} elements are not whole {} blocks "
                "and are stored as {}\n",
                what, cols, gguf::tensor_type_name(t), gguf::tensor_type_name(got));
        }
    }
    auto bytes = model::synthesize_model(s, t, o.seed);
    if (!bytes.ok()) return fail(bytes.error());
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(o.out.c_str(), "wb"), &std::fclose);
    if (!f) return fail(io_error("cannot create '{}': {}", o.out, std::strerror(errno)));
    if (std::fwrite(bytes->data(), 1, bytes->size(), f.get()) != bytes->size() ||
        std::fclose(f.release()) != 0) {
        return fail(
            io_error("writing '{}' ({} bytes) failed: {}", o.out, bytes->size(), std::strerror(errno)));
    }
    fmt::print(stderr, "h2okv gguf synth: wrote {} ({} bytes, shape {}, type {}, seed {})\n", o.out,
               bytes->size(), o.shape, gguf::tensor_type_name(t), o.seed);
    return 0;
}

}  // namespace

void add_gguf_command(CLI::App& app, int* exit_code) {
    CLI::App* gguf_cmd = app.add_subcommand("gguf", "GGUF file utilities");
    gguf_cmd->require_subcommand(1);
    auto o = std::make_shared<synth_options>();
    CLI::App* cmd =
        gguf_cmd->add_subcommand("synth",
                                 "Write a synthetic GGUF with random weights of a named shape (architecture, "
                                 "sizes, RoPE variant; Q4_K "
                                 "matrices whose rows are not multiples of 256 are stored as Q8_0)");
    std::string shape_names;
    for (const auto& [name, shape] : shapes()) shape_names += (shape_names.empty() ? "" : ", ") + name;
    std::string type_names;
    for (const auto& [name, type] : types()) type_names += (type_names.empty() ? "" : ", ") + name;
    cmd->add_option("--shape", o->shape, "Model shape: " + shape_names)
        ->required()
        ->check(CLI::IsMember(shapes()));
    cmd->add_option("--type", o->type, "Weight type of the matrices: " + type_names)
        ->required()
        ->check(CLI::IsMember(types()));
    cmd->add_option("-o,--output", o->out, "Output GGUF file")->required();
    cmd->add_option("--seed", o->seed, "Seed of the random weights")->capture_default_str();
    cmd->callback([o, exit_code] { *exit_code = run_synth(*o); });
}

}  // namespace h2okv::cli
