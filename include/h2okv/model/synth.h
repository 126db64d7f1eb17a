// Synthetic models: random weights of a chosen architecture, shape and weight type written as a complete GGUF
// (the architecture's metadata and tensors, and a SentencePiece-type vocabulary of byte tokens plus
// synthetic pieces), loadable by h2okv and llama.cpp alike. Tests use them to exercise shapes the bundled
// model lacks; benchmarks to compare engines on identical files.
//
//   model::synth_shape s{.n_embd = 256, .n_layer = 2, .n_head = 4, .n_kv_head = 1, .n_ff = 512,
//                        .n_vocab = 300};
//   auto bytes = model::synthesize_model(s, gguf::tensor_type::q8_0, /*seed=*/1);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "h2okv/core/status.h"
#include "h2okv/gguf/gguf.h"
#include "h2okv/model/rope.h"

namespace h2okv::model {

struct synth_shape {
    int64_t n_embd = 64;
    int n_layer = 2;
    int n_head = 4;
    int n_kv_head = 2;
    int64_t n_ff = 128;
    int64_t n_vocab = 300;  // >= 259: <unk>, <s>, </s> and 256 byte tokens, then synthetic pieces
    int64_t n_ctx = 2048;
    bool tied_output = true;
    float rope_freq_base = 10000.0f;
    // The architecture's tensors and keys: llama, qwen2 (q/k/v biases), qwen3 (q/k norms), phi3 (fused qkv
    // and gate/up), gemma2, gemma3, mistral3 (llama's tensors). NeoX pairing comes with the architecture, as
    // in real files.
    std::string arch = "llama";
    int head_dim = 0;  // 0: n_embd / n_head; else written as attention.key_length (Qwen3: 128)
    // Written as rope.scaling.type / factor / original_context_length; mistral3 with yarn also gets
    // yarn_beta_fast / yarn_beta_slow / yarn_log_multiplier (only mistral3 may set them).
    rope_scaling rope_scale{};
    bool rope_freqs = false;  // llama: Llama 3.1's rope_freqs.weight (factor 8, low 1, high 4, 8192)
    // gemma2 / gemma3 (post-attention and post-FFN norms; gemma3 also q/k norms): written when nonzero as
    // attention.sliding_window, attn_logit_softcapping and final_logit_softcapping.
    int64_t sliding_window = 0;
    float attn_softcap = 0.0f;
    float final_softcap = 0.0f;
    float attn_temp_scale = 0.0f;  // mistral3: attention.temperature_scale when nonzero
    status validate() const;
};

// Matrices take `type` (any type kernels::matmul_supports), except those whose rows are not a whole number
// of its blocks, which take matrix_type(type, cols) (as llama.cpp's quantiser falls back for such tensors);
// norms stay F32. The result holds the whole file; building it needs about twice the file's size in memory
// (the tensors, then the serialised copy).
result<std::vector<std::byte>> synthesize_model(const synth_shape& shape, gguf::tensor_type type,
                                                uint64_t seed);

// The type a synthetic matrix with rows of `cols` elements gets when the file's type is `type`: `type` when
// cols is a whole number of its blocks, else Q8_0 when cols is a multiple of 32, else F16 (e.g. Q4_K with
// n_embd 576 keeps Q8_0 for the matrices whose rows are 576 long).
gguf::tensor_type matrix_type(gguf::tensor_type type, int64_t cols);

}  // namespace h2okv::model
