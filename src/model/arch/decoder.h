// The blocks decoder architectures are built from, and the one model class that runs them. An architecture
// file (src/model/arch/<name>.cpp) says which blocks its layers use (decoder_options) and reads any keys of
// its own; read_decoder_hparams and load_decoder do the rest:
//   norms        RMSNorm before attention and FFN, and on the output
//   qkv          separate q/k/v matrices or one fused attn_qkv (split into views), each with an optional
//                bias; optional per-head RMSNorm of q and k before RoPE (attn_q_norm / attn_k_norm)
//   rope         per-layer kernels::rope_spec: base, pairing, rope_freqs factors, rope.scaling.*
//   ffn          SwiGLU with separate gate/up or one fused ffn_up holding [gate; up]
//   output       tied or separate matrix, optional bias
// Every tensor of the file and every `<arch>.` key must be used by the loader, or be one that does not change
// the math (context_length, vocab_size checked against the embedding, rope.scaling.finetuned, an
// expert_count of 0); anything else is refused with its name (metadata_use::check_all_used).
//
//   metadata_use use(file, "qwen2");
//   H2OKV_ASSIGN_OR_RETURN(hparams hp, read_decoder_hparams(use, kernels::rope_pairing::neox, false));
//   return load_decoder(use, std::move(hp), decoder_options{});
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>

#include "h2okv/model/model.h"

namespace h2okv::model {

// One file's metadata and tensors as an architecture reads them, remembering what it used.
class metadata_use {
public:
    metadata_use(const gguf::file& f, std::string arch) : file_(&f), arch_(std::move(arch)) {}
    const gguf::file& file() const { return *file_; }
    const std::string& arch() const { return arch_; }
    // `<arch>.key`, with the fallback when absent (nullopt: required).
    result<int64_t> dim(const std::string& key, std::optional<int64_t> fallback);  // in [1, 2^24]
    result<double> real(const std::string& key, double fallback);
    result<std::string> text(const std::string& key, std::string fallback);
    bool has(const std::string& key) const;
    // Marks `<arch>.key` as read without changing the math.
    void accept(const std::string& key) { keys_.insert(arch_ + "." + key); }
    // The tensor `name`, marked used, or nullptr when absent.
    const gguf::tensor_info* tensor(const std::string& name);
    // Refuses the file when a tensor or an `<arch>.` key was not used, naming the first few.
    status check_all_used() const;

private:
    const gguf::file* file_;
    std::string arch_;
    std::set<std::string> keys_;
    std::set<std::string> tensors_;
};

// The hyper-parameters every decoder file has: sizes, heads, RMS epsilon, RoPE (dims, base, rope.scaling.*
// keys; `rope_freqs`: whether rope_freqs.weight frequency factors apply, Llama 3.1's; `yarn_keys`: whether
// the file's yarn betas and log multiplier apply, else they must be llama.cpp's defaults) with one spec for
// all layers.
result<hparams> read_decoder_hparams(metadata_use& use, kernels::rope_pairing pairing, bool rope_freqs,
                                     bool yarn_keys = false);

// The gated FFN's activation: SiLU (SwiGLU) or GELU's tanh approximation (GeGLU, Gemma).
enum class glu_kind { silu, gelu_tanh };

struct decoder_options {
    bool qk_norm = false;        // attn_q_norm / attn_k_norm [head_dim] RMSNorm per head before RoPE (Qwen3)
    bool fused_gate_up = false;  // ffn_up is [n_embd, 2 * n_ff], gate then up (Phi-3); no ffn_gate
    glu_kind glu = glu_kind::silu;
    bool embd_scale = false;  // the token embeddings are multiplied by sqrt(n_embd) (Gemma)
    bool post_norms = false;  // attn_post_norm / ffn_post_norm: RMSNorm of the attention and FFN outputs
                              // before their residual adds (Gemma 2 and 3)
};

// Gemma's per-layer keys into hp: attention.sliding_window and its pattern (every `period`-th layer,
// counting from 1, is global; the others slide), the rope of the local layers (rope.freq_base_swa, else
// `local_base`; with the file's scaling when `local_scaled`, else unscaled), the attention scale
// (attention.query_pre_attn_scalar q: 1 / sqrt(q); else llama.cpp's rule) and the soft-caps.
struct sliding_options {
    int64_t default_window = 0;  // 0: the key is required for sliding layers to exist
    int64_t default_period = 2;
    std::optional<double> local_base;  // nullopt: the file's rope.freq_base
    bool local_scaled = true;
    bool attn_softcap = false;   // attn_logit_softcapping read (default 50)
    double final_softcap = 0.0;  // final_logit_softcapping's default (0: none)
    int big_layers = 0;          // llama.cpp's 27B rule: this block count scales by n_embd / n_head
};
status read_sliding_hparams(metadata_use& use, hparams& hp, const sliding_options& o);

// Loads the weights of a decoder with these blocks and checks that the file holds nothing else.
result<std::unique_ptr<model>> load_decoder(metadata_use& use, hparams hp, const decoder_options& o);

}  // namespace h2okv::model
