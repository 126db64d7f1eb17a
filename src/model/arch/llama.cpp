// Architecture `llama` (Llama 1/2/3, TinyLlama, SmolLM, Mistral without sliding window): pre-norm decoder
// with RMSNorm, RoPE (normal pairing), grouped-query attention, SwiGLU and a tied or separate output matrix.
#include <algorithm>
#include <cmath>
#include <limits>

#include "model/arch/archs.h"

namespace h2okv::model {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 24;  // far above any real model; guards products against overflow

result<int64_t> read_dim(const gguf::file& f, const std::string& key, std::optional<int64_t> fallback) {
    result<int64_t> v = fallback ? f.get_int_or(key, *fallback) : f.get_int(key);
    if (!v.ok()) return v.error();  // the getters name the file already
    if (*v < 1 || *v > kMaxDim) {
        return invalid_file("{}: {} is {}, expected a value in [1, {}]", f.path(), key, *v, kMaxDim);
    }
    return *v;
}

bool supported_weight_type(gguf::tensor_type t) {
    switch (t) {
        case gguf::tensor_type::f32:
        case gguf::tensor_type::f16:
        case gguf::tensor_type::bf16:
        case gguf::tensor_type::q8_0:
        case gguf::tensor_type::q4_0:
        case gguf::tensor_type::q4_k:
        case gguf::tensor_type::q6_k: return true;
        default: return false;
    }
}

class llama_model final : public model {
public:
    llama_model(const gguf::file& f, hparams hp) : model(f, std::move(hp)) {}

    status load_weights();
    int64_t weight_bytes() const override { return weight_bytes_; }
    status forward(const batch& b, attention_backend& attn, float* logits) override;
    int64_t work_bytes() const override;

private:
    struct layer {
        std::vector<float> attn_norm, ffn_norm;
        kernels::matrix_view wq, wk, wv, wo, w_gate, w_up, w_down;
    };

    result<const gguf::tensor_info*> tensor(const std::string& name, std::vector<int64_t> dims) const;
    // A weight matrix for the products, packed when the kernels have a faster layout for it (pack = false:
    // the plain rows, for matrices read otherwise, as the embedding).
    result<kernels::matrix_view> matrix(const std::string& name, int64_t cols, int64_t rows,
                                        bool pack = true);
    result<std::vector<float>> vector(const std::string& name, int64_t n) const;
    void resize_scratch(int n);

    kernels::packed_weights packed_;  // owns the packed matrices (declared before the views into it)
    kernels::matrix_view tok_embd_{}, output_{};
    std::vector<float> output_norm_;
    std::vector<layer> layers_;
    int64_t weight_bytes_ = 0;

    // Scratch for forward(), sized for the largest chunk seen so far.
    int scratch_tokens_ = 0;
    std::vector<float> x_, xn_, q_, k_, v_, att_, proj_, gate_, up_, rope_cs_;
    std::vector<size_t> out_rows_;  // the batch's tokens that produce logits
};

result<const gguf::tensor_info*> llama_model::tensor(const std::string& name,
                                                     std::vector<int64_t> dims) const {
    const gguf::tensor_info* t = file().find_tensor(name);
    if (t == nullptr) return invalid_file("{}: required tensor '{}' is missing", file().path(), name);
    if (t->dims != dims) {
        auto show = [](const std::vector<int64_t>& d) { return fmt::format("[{}]", fmt::join(d, ", ")); };
        return invalid_file("{}: tensor '{}' has shape {}, expected {} from the hyper-parameters",
                            file().path(), name, show(t->dims), show(dims));
    }
    if (!supported_weight_type(t->type)) {
        return invalid_file(
            "{}: tensor '{}' has type {}, expected one of F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K",
            file().path(), name, gguf::tensor_type_name(static_cast<uint32_t>(t->type)));
    }
    return t;
}

result<kernels::matrix_view> llama_model::matrix(const std::string& name, int64_t cols, int64_t rows,
                                                 bool pack) {
    H2OKV_ASSIGN_OR_RETURN(const gguf::tensor_info* t, tensor(name, {cols, rows}));
    const kernels::matrix_view plain{t->type, t->data, rows, cols, static_cast<size_t>(t->n_bytes() / rows)};
    bool packed = false;
    const kernels::matrix_view w = pack ? packed_.pack(plain, &packed) : plain;
    if (packed) file().release(*t);                             // the file's pages of it are not read again
    weight_bytes_ += static_cast<int64_t>(w.row_bytes) * rows;  // what the products read
    return w;
}

result<std::vector<float>> llama_model::vector(const std::string& name, int64_t n) const {
    H2OKV_ASSIGN_OR_RETURN(const gguf::tensor_info* t, tensor(name, {n}));
    if (t->type != gguf::tensor_type::f32 && t->type != gguf::tensor_type::f16 &&
        t->type != gguf::tensor_type::bf16) {
        return invalid_file("{}: norm tensor '{}' is {}, expected F32, F16 or BF16", file().path(), name,
                            gguf::tensor_type_name(t->type));
    }
    std::vector<float> out(static_cast<size_t>(n));
    kernels::dequantize_row(t->type, t->data, n, out.data());
    return out;
}

status llama_model::load_weights() {
    const hparams& hp = params();
    const int64_t q_dim = int64_t{hp.n_head} * hp.head_dim;
    const int64_t kv_dim = int64_t{hp.n_kv_head} * hp.head_dim;
    H2OKV_ASSIGN_OR_RETURN(tok_embd_, matrix("token_embd.weight", hp.n_embd, hp.n_vocab, false));
    weight_bytes_ = 0;  // the embedding is read one row per token, not as a whole
    H2OKV_ASSIGN_OR_RETURN(output_norm_, vector("output_norm.weight", hp.n_embd));
    if (hp.tied_output) {
        output_ = tok_embd_;
        weight_bytes_ += static_cast<int64_t>(output_.row_bytes) * output_.rows;
    } else {
        H2OKV_ASSIGN_OR_RETURN(output_, matrix("output.weight", hp.n_embd, hp.n_vocab));
    }
    layers_.resize(static_cast<size_t>(hp.n_layer));
    for (int l = 0; l < hp.n_layer; ++l) {
        layer& ly = layers_[static_cast<size_t>(l)];
        const std::string p = fmt::format("blk.{}.", l);
        H2OKV_ASSIGN_OR_RETURN(ly.attn_norm, vector(p + "attn_norm.weight", hp.n_embd));
        H2OKV_ASSIGN_OR_RETURN(ly.ffn_norm, vector(p + "ffn_norm.weight", hp.n_embd));
        H2OKV_ASSIGN_OR_RETURN(ly.wq, matrix(p + "attn_q.weight", hp.n_embd, q_dim));
        H2OKV_ASSIGN_OR_RETURN(ly.wk, matrix(p + "attn_k.weight", hp.n_embd, kv_dim));
        H2OKV_ASSIGN_OR_RETURN(ly.wv, matrix(p + "attn_v.weight", hp.n_embd, kv_dim));
        H2OKV_ASSIGN_OR_RETURN(ly.wo, matrix(p + "attn_output.weight", q_dim, hp.n_embd));
        H2OKV_ASSIGN_OR_RETURN(ly.w_gate, matrix(p + "ffn_gate.weight", hp.n_embd, hp.n_ff));
        H2OKV_ASSIGN_OR_RETURN(ly.w_up, matrix(p + "ffn_up.weight", hp.n_embd, hp.n_ff));
        H2OKV_ASSIGN_OR_RETURN(ly.w_down, matrix(p + "ffn_down.weight", hp.n_ff, hp.n_embd));
    }
    return ok_status();
}

void llama_model::resize_scratch(int n) {
    if (n <= scratch_tokens_) return;
    const hparams& hp = params();
    const auto rows = static_cast<size_t>(n);
    const auto q_dim = static_cast<size_t>(hp.n_head) * static_cast<size_t>(hp.head_dim);
    const auto kv_dim = static_cast<size_t>(hp.n_kv_head) * static_cast<size_t>(hp.head_dim);
    const auto embd = static_cast<size_t>(hp.n_embd);
    const auto ff = static_cast<size_t>(hp.n_ff);
    x_.resize(rows * embd);
    xn_.resize(rows * embd);
    proj_.resize(rows * embd);
    q_.resize(rows * q_dim);
    att_.resize(rows * q_dim);
    k_.resize(rows * kv_dim);
    v_.resize(rows * kv_dim);
    gate_.resize(rows * ff);
    up_.resize(rows * ff);
    rope_cs_.resize(rows * static_cast<size_t>(hp.rope_dim));
    scratch_tokens_ = n;
}

int64_t llama_model::work_bytes() const {
    size_t floats = 0;
    for (const auto* v : {&x_, &xn_, &q_, &k_, &v_, &att_, &proj_, &gate_, &up_, &rope_cs_})
        floats += v->capacity();
    return static_cast<int64_t>(floats * sizeof(float) + out_rows_.capacity() * sizeof(size_t));
}

status llama_model::forward(const batch& b, attention_backend& attn, float* logits) {
    const hparams& hp = params();
    const int n = static_cast<int>(b.tokens.size());
    if (n < 1 || b.positions.size() != b.tokens.size() ||
        (!b.output.empty() && b.output.size() != b.tokens.size())) {
        return invalid_argument(
            "forward: {} tokens, {} positions and {} output flags; expected >= 1 token and "
            "as many positions (and flags, when given)",
            b.tokens.size(), b.positions.size(), b.output.size());
    }
    for (int t = 0; t < n; ++t) {
        if (b.tokens[t] < 0 || b.tokens[t] >= hp.n_vocab) {
            return invalid_argument("token id {} at position {} is outside the vocabulary [0, {})",
                                    b.tokens[t], b.positions[t], hp.n_vocab);
        }
    }
    resize_scratch(n);
    const auto embd = static_cast<size_t>(hp.n_embd);
    const auto q_dim = static_cast<size_t>(hp.n_head) * static_cast<size_t>(hp.head_dim);
    const auto kv_dim = static_cast<size_t>(hp.n_kv_head) * static_cast<size_t>(hp.head_dim);
    const auto ff = static_cast<size_t>(hp.n_ff);
    const auto un = static_cast<size_t>(n);

    for (size_t t = 0; t < un; ++t) {
        kernels::dequantize_row(tok_embd_.type,
                                tok_embd_.data + tok_embd_.row_bytes * static_cast<size_t>(b.tokens[t]),
                                hp.n_embd, &x_[t * embd]);
    }
    // Every layer rotates q and k of a position by the same angles: computed once per call.
    for (size_t t = 0; t < un; ++t) {
        kernels::rope_rotation(b.positions[t], hp.rope_dim, hp.rope_freq_base,
                               &rope_cs_[t * static_cast<size_t>(hp.rope_dim)]);
    }
    for (const layer& ly : layers_) {
        const int l = static_cast<int>(&ly - layers_.data());
        for (size_t t = 0; t < un; ++t) {
            kernels::rmsnorm(&x_[t * embd], ly.attn_norm.data(), static_cast<int>(embd), hp.rms_eps,
                             &xn_[t * embd]);
        }
        const kernels::matrix_view qkv[] = {ly.wq, ly.wk, ly.wv};
        float* const qkv_out[] = {q_.data(), k_.data(), v_.data()};
        kernels::matmul_shared_input(qkv, qkv_out, 3, xn_.data(), n);
        for (size_t t = 0; t < un; ++t) {
            const float* cs = &rope_cs_[t * static_cast<size_t>(hp.rope_dim)];
            kernels::rope_apply(&q_[t * q_dim], hp.n_head, hp.head_dim, hp.rope_dim, cs, hp.rope_pairing);
            kernels::rope_apply(&k_[t * kv_dim], hp.n_kv_head, hp.head_dim, hp.rope_dim, cs, hp.rope_pairing);
        }
        H2OKV_RETURN_IF_ERROR(attn.attend(l, n, q_.data(), k_.data(), v_.data(), att_.data()));
        kernels::matmul(ly.wo, att_.data(), n, proj_.data());
        for (size_t i = 0; i < un * embd; ++i) x_[i] += proj_[i];

        for (size_t t = 0; t < un; ++t) {
            kernels::rmsnorm(&x_[t * embd], ly.ffn_norm.data(), static_cast<int>(embd), hp.rms_eps,
                             &xn_[t * embd]);
        }
        const kernels::matrix_view gate_up[] = {ly.w_gate, ly.w_up};
        float* const gate_up_out[] = {gate_.data(), up_.data()};
        kernels::matmul_shared_input(gate_up, gate_up_out, 2, xn_.data(), n);
        for (size_t t = 0; t < un; ++t) {
            kernels::swiglu(&gate_[t * ff], &up_[t * ff], static_cast<int>(ff), &gate_[t * ff]);
        }
        kernels::matmul(ly.w_down, gate_.data(), n, proj_.data());
        for (size_t i = 0; i < un * embd; ++i) x_[i] += proj_[i];
    }
    out_rows_.clear();
    for (size_t t = 0; t < b.output.size(); ++t) {
        if (b.output[t] != 0) out_rows_.push_back(t);
    }
    if (out_rows_.empty()) return ok_status();
    for (size_t i = 0; i < out_rows_.size(); ++i) {
        kernels::rmsnorm(&x_[out_rows_[i] * embd], output_norm_.data(), static_cast<int>(embd), hp.rms_eps,
                         &xn_[i * embd]);
    }
    kernels::matmul(output_, xn_.data(), static_cast<int>(out_rows_.size()), logits);
    return ok_status();
}

}  // namespace

result<std::unique_ptr<model>> load_llama(const gguf::file& f) {
    hparams hp;
    hp.arch = "llama";
    const std::string a = "llama.";
    H2OKV_ASSIGN_OR_RETURN(hp.n_embd, read_dim(f, a + "embedding_length", std::nullopt));
    H2OKV_ASSIGN_OR_RETURN(int64_t n_layer, read_dim(f, a + "block_count", std::nullopt));
    H2OKV_ASSIGN_OR_RETURN(int64_t n_head, read_dim(f, a + "attention.head_count", std::nullopt));
    H2OKV_ASSIGN_OR_RETURN(int64_t n_kv_head, read_dim(f, a + "attention.head_count_kv", n_head));
    H2OKV_ASSIGN_OR_RETURN(hp.n_ff, read_dim(f, a + "feed_forward_length", std::nullopt));
    hp.n_layer = static_cast<int>(n_layer);
    hp.n_head = static_cast<int>(n_head);
    hp.n_kv_head = static_cast<int>(n_kv_head);
    if (hp.n_embd % hp.n_head != 0) {
        return invalid_file(
            "{}: llama.embedding_length {} is not a multiple of llama.attention.head_count {}", f.path(),
            hp.n_embd, hp.n_head);
    }
    H2OKV_ASSIGN_OR_RETURN(int64_t head_dim, read_dim(f, a + "attention.key_length", hp.n_embd / hp.n_head));
    H2OKV_ASSIGN_OR_RETURN(int64_t v_dim, read_dim(f, a + "attention.value_length", head_dim));
    if (v_dim != head_dim) {
        return invalid_file("{}: llama.attention.value_length {} differs from key_length {}; expected equal",
                            f.path(), v_dim, head_dim);
    }
    hp.head_dim = static_cast<int>(head_dim);
    H2OKV_ASSIGN_OR_RETURN(int64_t rope_dim, read_dim(f, a + "rope.dimension_count", head_dim));
    hp.rope_dim = static_cast<int>(rope_dim);
    H2OKV_ASSIGN_OR_RETURN(double base, f.get_float_or(a + "rope.freq_base", 10000.0));
    hp.rope_freq_base = static_cast<float>(base);
    H2OKV_ASSIGN_OR_RETURN(double eps, f.get_float_or(a + "attention.layer_norm_rms_epsilon", 1e-5));
    hp.rms_eps = static_cast<float>(eps);
    H2OKV_ASSIGN_OR_RETURN(hp.n_ctx_train, f.get_int_or(a + "context_length", 2048));
    const gguf::tensor_info* embd = f.find_tensor("token_embd.weight");
    if (embd == nullptr) return invalid_file("{}: required tensor 'token_embd.weight' is missing", f.path());
    if (embd->dims.size() != 2) {
        return invalid_file("{}: tensor 'token_embd.weight' has {} dims, expected 2", f.path(),
                            embd->dims.size());
    }
    hp.n_vocab = embd->dims[1];
    hp.tied_output = f.find_tensor("output.weight") == nullptr;
    H2OKV_RETURN_IF_ERROR(hp.validate());
    // Every layer has 9 tensors: a block count the file cannot hold is refused before anything is sized by
    // it.
    constexpr size_t k_tensors_per_layer = 9;
    if (static_cast<size_t>(hp.n_layer) > f.tensors().size() / k_tensors_per_layer) {
        return invalid_file("{}: llama.block_count is {} but the file has {} tensors; each layer needs {}",
                            f.path(), hp.n_layer, f.tensors().size(), k_tensors_per_layer);
    }

    auto m = std::make_unique<llama_model>(f, std::move(hp));
    H2OKV_RETURN_IF_ERROR(m->load_weights());
    return std::unique_ptr<model>(std::move(m));
}

}  // namespace h2okv::model
