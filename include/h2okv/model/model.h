// A decoder-only transformer loaded from a GGUF file: hyper-parameters, weights (views into the mapped file)
// and the forward pass. The forward pass knows nothing about caches: for each layer it hands the chunk's
// post-RoPE queries, keys and values (rotated at the batch's positions) to an `attention_backend` (the KV
// cache, see h2okv/kv/kv_cache.h) and continues with the attention output it gets back.
//
//   H2OKV_ASSIGN_OR_RETURN(auto file, gguf::file::open(path));
//   H2OKV_ASSIGN_OR_RETURN(auto m, model::load(*file));     // the file must outlive the model
//   m->forward(tokens, n, first_pos, cache, logits, logits_mode::last);
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "h2okv/core/status.h"
#include "h2okv/gguf/gguf.h"
#include "h2okv/kernels/kernels.h"
#include "h2okv/model/rope.h"

namespace h2okv::model {

struct hparams {
    std::string arch;
    int64_t n_vocab = 0;
    int64_t n_embd = 0;
    int n_layer = 0;
    int n_head = 0;     // query heads per layer
    int n_kv_head = 0;  // key/value heads per layer; n_head is a multiple of it
    int head_dim = 0;
    int64_t n_ff = 0;
    int rope_dim = 0;  // leading dims of each head that RoPE rotates
    float rope_freq_base = 10000.0f;
    kernels::rope_pairing rope_pairing = kernels::rope_pairing::normal;
    float rms_eps = 1e-5f;
    int64_t n_ctx_train = 0;  // what the file says (may be wrong: stories260K says 2048, trained at 512)
    bool tied_output = false;
    rope_scaling rope_scale{};  // the file's rope.scaling.* keys
    // The RoPE every layer applies (base, rope_freqs factors and scaling folded in): distinct specs, and per
    // layer the index of its own. Use rope(layer).
    std::vector<kernels::rope_spec> rope_specs;
    std::vector<int> layer_rope;
    // Sliding-window (local) layers, Gemma's: layer l attends only the positions p with t - p <
    // sliding_window from its query t (the query's own included) when layer_sliding[l]; the other layers are
    // global. Empty / 0: every layer is global.
    int64_t sliding_window = 0;
    std::vector<uint8_t> layer_sliding;
    float attn_scale = 0.0f;     // multiplies q.k before the softmax; 0: 1 / sqrt(head_dim)
    float attn_softcap = 0.0f;   // > 0: attention scores s become cap * tanh(s / cap) (Gemma 2)
    float final_softcap = 0.0f;  // > 0: the same on the output logits
    // Llama 4's attention temperature (mistral3's attention.temperature_scale): after RoPE, a query at RoPE
    // position p is multiplied by 1 + attn_temp_scale * ln(floor(p / attn_temp_floor) + 1), so queries
    // within the first attn_temp_floor positions (the yarn original context) are unchanged. 0: none.
    float attn_temp_scale = 0.0f;
    int64_t attn_temp_floor = 0;

    int gqa_group() const { return n_head / n_kv_head; }
    bool sliding(int layer) const {
        return !layer_sliding.empty() && layer_sliding[static_cast<size_t>(layer)] != 0;
    }
    int n_sliding() const;  // layers that are sliding-window ones
    float attention_scale() const;
    float query_temperature(int64_t rope_position) const;  // 1 unless attn_temp_scale is set
    const kernels::rope_spec& rope(int layer) const {
        return rope_specs[static_cast<size_t>(layer_rope[static_cast<size_t>(layer)])];
    }
    // Checks internal consistency; the error names the values.
    status validate() const;
    std::string to_string() const;
};

// Receives one layer's attention inputs for a batch of tokens and produces its output.
class attention_backend {
public:
    virtual ~attention_backend() = default;
    // q: [n_tok][n_head * head_dim], k and v: [n_tok][n_kv_head * head_dim], all after RoPE, for the batch's
    // tokens in order. out: [n_tok][n_head * head_dim].
    virtual status attend(int layer, int n_tok, const float* q, const float* k, const float* v,
                          float* out) = 0;
};

// The tokens of one forward pass: token i at positions[i]. Logits are produced for the tokens whose
// output[i] is nonzero, one row each, in batch order (output empty: none).
struct batch {
    std::span<const int32_t> tokens;
    std::span<const int64_t> positions;
    std::span<const uint8_t> output;
};

// Which logits a caller wants of a run of tokens.
enum class logits_mode { none, last, all };

class model {
public:
    // Loads the architecture named by `general.architecture` (see archs.def). `file` must outlive the model.
    static result<std::unique_ptr<model>> load(const gguf::file& file);
    virtual ~model() = default;

    const hparams& params() const { return hp_; }
    const gguf::file& file() const { return *file_; }
    // Bytes of weights the forward pass reads per token.
    virtual int64_t weight_bytes() const = 0;

    // Runs the batch through the model. logits: [n_out][n_vocab], n_out = the tokens with output set. Token
    // ids are checked against the vocabulary. The work buffers grow to the largest batch seen.
    virtual status forward(const batch& b, attention_backend& attn, float* logits) = 0;
    // Bytes of the work buffers forward() holds now.
    virtual int64_t work_bytes() const = 0;

protected:
    model(const gguf::file& f, hparams hp) : file_(&f), hp_(std::move(hp)) {}

private:
    const gguf::file* file_;
    hparams hp_;
};

// The architectures h2okv can load, in registry order ("llama", ...).
std::vector<std::string> architecture_names();

}  // namespace h2okv::model
