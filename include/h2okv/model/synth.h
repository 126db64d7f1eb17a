// Synthetic llama models: random weights of a chosen shape and weight type written as a complete GGUF (llama
// metadata and a SentencePiece-type vocabulary of byte tokens plus synthetic pieces), loadable by h2okv and
// llama.cpp alike. Tests use them to exercise shapes the bundled model lacks; benchmarks to compare engines
// on identical files.
//
//   model::synth_shape s{.n_embd = 256, .n_layer = 2, .n_head = 4, .n_kv_head = 1, .n_ff = 512, .n_vocab =
//   300}; auto bytes = model::synthesize_llama(s, gguf::tensor_type::q8_0, /*seed=*/1);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "h2okv/core/status.h"
#include "h2okv/gguf/gguf.h"

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
    status validate() const;
};

// Matrices take `type` (F32, F16, BF16, Q8_0; Q8_0 needs row lengths that are multiples of 32); norms stay
// F32.
result<std::vector<std::byte>> synthesize_llama(const synth_shape& shape, gguf::tensor_type type,
                                                uint64_t seed);

}  // namespace h2okv::model
