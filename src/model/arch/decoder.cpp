#include "model/arch/decoder.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "h2okv/core/parallel.h"
#include "h2okv/core/phases.h"

namespace h2okv::model {

constexpr int64_t kMaxDim = int64_t{1} << 24;  // far above any real model; guards products against overflow

result<int64_t> metadata_use::dim(const std::string& key, std::optional<int64_t> fallback) {
    const std::string k = arch_ + "." + key;
    keys_.insert(k);
    result<int64_t> v = fallback ? file_->get_int_or(k, *fallback) : file_->get_int(k);
    if (!v.ok()) return v.error();  // the getters name the file already
    if (*v < 1 || *v > kMaxDim) {
        return invalid_file("{}: {} is {}, expected a value in [1, {}]", file_->path(), k, *v, kMaxDim);
    }
    return *v;
}

result<double> metadata_use::real(const std::string& key, double fallback) {
    const std::string k = arch_ + "." + key;
    keys_.insert(k);
    return file_->get_float_or(k, fallback);
}

result<std::string> metadata_use::text(const std::string& key, std::string fallback) {
    const std::string k = arch_ + "." + key;
    keys_.insert(k);
    return file_->get_string_or(k, std::move(fallback));
}

bool metadata_use::has(const std::string& key) const {
    return file_->has(arch_ + "." + key);
}

const gguf::tensor_info* metadata_use::tensor(const std::string& name) {
    const gguf::tensor_info* t = file_->find_tensor(name);
    if (t != nullptr) tensors_.insert(name);
    return t;
}

status metadata_use::check_all_used() const {
    std::vector<std::string> keys, tensors;
    const std::string prefix = arch_ + ".";
    for (const std::string& k : file_->keys()) {
        if (k.compare(0, prefix.size(), prefix) == 0 && keys_.count(k) == 0) keys.push_back(k);
    }
    for (const auto& t : file_->tensors()) {
        if (tensors_.count(t.name) == 0) tensors.push_back(t.name);
    }
    auto first = [](const std::vector<std::string>& v) {
        std::string s;
        for (size_t i = 0; i < v.size() && i < 4; ++i) s += (i ? ", '" : "'") + v[i] + "'";
        return v.size() > 4 ? fmt::format("{} and {} more", s, v.size() - 4) : s;
    };
    if (!keys.empty()) {
        return invalid_file(
            "{}: metadata {} not supported by h2okv's {} architecture (it would change the model's math); "
            "refusing the file rather than ignoring it",
            file_->path(), first(keys), arch_);
    }
    if (!tensors.empty()) {
        return invalid_file(
            "{}: tensor {} not used by h2okv's {} architecture; refusing the file rather than ignoring it",
            file_->path(), first(tensors), arch_);
    }
    return ok_status();
}

namespace {

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

std::string show_dims(const std::vector<int64_t>& d) {
    return fmt::format("[{}]", fmt::join(d, ", "));
}

// A tensor of exactly these dims: required, or absent (nullptr) when `optional`.
result<const gguf::tensor_info*> find(metadata_use& use, const std::string& name, std::vector<int64_t> dims,
                                      bool optional = false) {
    const gguf::tensor_info* t = use.tensor(name);
    if (t == nullptr) {
        if (optional) return t;
        return invalid_file("{}: required tensor '{}' is missing", use.file().path(), name);
    }
    if (t->dims != dims) {
        return invalid_file("{}: tensor '{}' has shape {}, expected {} from the hyper-parameters",
                            use.file().path(), name, show_dims(t->dims), show_dims(dims));
    }
    if (!supported_weight_type(t->type)) {
        return invalid_file(
            "{}: tensor '{}' has type {}, expected one of F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K",
            use.file().path(), name, gguf::tensor_type_name(static_cast<uint32_t>(t->type)));
    }
    return t;
}

// A norm, bias or factor vector as f32 (empty when optional and absent).
result<std::vector<float>> vector(metadata_use& use, const std::string& name, int64_t n,
                                  bool optional = false) {
    H2OKV_ASSIGN_OR_RETURN(const gguf::tensor_info* t, find(use, name, {n}, optional));
    if (t == nullptr) return std::vector<float>{};
    if (t->type != gguf::tensor_type::f32 && t->type != gguf::tensor_type::f16 &&
        t->type != gguf::tensor_type::bf16) {
        return invalid_file("{}: vector tensor '{}' is {}, expected F32, F16 or BF16", use.file().path(),
                            name, gguf::tensor_type_name(t->type));
    }
    std::vector<float> out(static_cast<size_t>(n));
    kernels::dequantize_row(t->type, t->data, n, out.data());
    return out;
}

// Rows [r0, r0 + rows) of a matrix tensor as a view (a part of a fused tensor).
kernels::matrix_view rows_of(const gguf::tensor_info& t, int64_t r0, int64_t rows) {
    const auto row_bytes = static_cast<size_t>(t.n_bytes() / t.dims[1]);
    return kernels::matrix_view{t.type, t.data + row_bytes * static_cast<size_t>(r0), rows, t.dims[0],
                                row_bytes};
}

class decoder_model final : public model {
public:
    decoder_model(const gguf::file& f, hparams hp, decoder_options o) : model(f, std::move(hp)), opt_(o) {}

    status load_weights(metadata_use& use);
    int64_t weight_bytes() const override { return weight_bytes_; }
    status forward(const batch& b, attention_backend& attn, float* logits) override;
    int64_t work_bytes() const override;

private:
    struct layer {
        std::vector<float> attn_norm, ffn_norm, bq, bk, bv, q_norm, k_norm, attn_post_norm, ffn_post_norm;
        kernels::matrix_view wq, wk, wv, wo, w_gate, w_up, w_down;
    };

    // A weight matrix tensor as a view for the products (for_products).
    result<kernels::matrix_view> matrix(metadata_use& use, const std::string& name, int64_t cols,
                                        int64_t rows);
    // `plain` (rows of a tensor) packed when the kernels have a faster layout for it; counts the bytes the
    // products read.
    kernels::matrix_view for_products(const kernels::matrix_view& plain);
    // After a tensor's views were made: its mapped pages are released when every view is a packed copy.
    void release_if_packed(const gguf::tensor_info& t,
                           std::initializer_list<kernels::matrix_view> views) const;
    void resize_scratch(int n);

    decoder_options opt_;
    kernels::packed_weights packed_;  // owns the packed matrices (declared before the views into it)
    kernels::matrix_view tok_embd_{}, output_{};
    std::vector<float> output_norm_, output_bias_;
    std::vector<layer> layers_;
    int64_t weight_bytes_ = 0;

    // Scratch for forward(), sized for the largest chunk seen so far.
    int scratch_tokens_ = 0;
    std::vector<float> x_, xn_, q_, k_, v_, att_, proj_, gate_, up_, rope_cs_;
    std::vector<size_t> out_rows_;  // the batch's tokens that produce logits
};

result<kernels::matrix_view> decoder_model::matrix(metadata_use& use, const std::string& name, int64_t cols,
                                                   int64_t rows) {
    H2OKV_ASSIGN_OR_RETURN(const gguf::tensor_info* t, find(use, name, {cols, rows}));
    const kernels::matrix_view w = for_products(rows_of(*t, 0, rows));
    release_if_packed(*t, {w});
    return w;
}

kernels::matrix_view decoder_model::for_products(const kernels::matrix_view& plain) {
    const kernels::matrix_view w = packed_.pack(plain);
    weight_bytes_ += static_cast<int64_t>(w.row_bytes) * w.rows;
    return w;
}

void decoder_model::release_if_packed(const gguf::tensor_info& t,
                                      std::initializer_list<kernels::matrix_view> views) const {
    for (const kernels::matrix_view& v : views)
        if (v.layout == kernels::weight_layout::rows) return;
    file().release(t);  // the file's pages are not read again
}

status decoder_model::load_weights(metadata_use& use) {
    const hparams& hp = params();
    const int64_t q_dim = int64_t{hp.n_head} * hp.head_dim;
    const int64_t kv_dim = int64_t{hp.n_kv_head} * hp.head_dim;
    // The embedding is read one row per token (never packed, not counted as read by the products).
    H2OKV_ASSIGN_OR_RETURN(const gguf::tensor_info* embd,
                           find(use, "token_embd.weight", {hp.n_embd, hp.n_vocab}));
    tok_embd_ = rows_of(*embd, 0, hp.n_vocab);
    H2OKV_ASSIGN_OR_RETURN(output_norm_, vector(use, "output_norm.weight", hp.n_embd));
    if (hp.tied_output) {
        // The output products read every row each step, the lookups a few rows: a packed copy for the
        // products (the same bits), and the embedding's pages left to fault back in as tokens need them.
        output_ = for_products(tok_embd_);
        if (output_.layout != kernels::weight_layout::rows) file().release(*embd);
    } else {
        H2OKV_ASSIGN_OR_RETURN(output_, matrix(use, "output.weight", hp.n_embd, hp.n_vocab));
    }
    H2OKV_ASSIGN_OR_RETURN(output_bias_, vector(use, "output.bias", hp.n_vocab, true));
    layers_.resize(static_cast<size_t>(hp.n_layer));
    for (int l = 0; l < hp.n_layer; ++l) {
        layer& ly = layers_[static_cast<size_t>(l)];
        const std::string p = fmt::format("blk.{}.", l);
        H2OKV_ASSIGN_OR_RETURN(ly.attn_norm, vector(use, p + "attn_norm.weight", hp.n_embd));
        H2OKV_ASSIGN_OR_RETURN(const gguf::tensor_info* qkv,
                               find(use, p + "attn_qkv.weight", {hp.n_embd, q_dim + 2 * kv_dim}, true));
        if (qkv != nullptr) {  // one fused matrix: q rows, then k, then v
            ly.wq = for_products(rows_of(*qkv, 0, q_dim));
            ly.wk = for_products(rows_of(*qkv, q_dim, kv_dim));
            ly.wv = for_products(rows_of(*qkv, q_dim + kv_dim, kv_dim));
            release_if_packed(*qkv, {ly.wq, ly.wk, ly.wv});
            H2OKV_ASSIGN_OR_RETURN(std::vector<float> b,
                                   vector(use, p + "attn_qkv.bias", q_dim + 2 * kv_dim, true));
            if (!b.empty()) {
                ly.bq.assign(b.begin(), b.begin() + q_dim);
                ly.bk.assign(b.begin() + q_dim, b.begin() + q_dim + kv_dim);
                ly.bv.assign(b.begin() + q_dim + kv_dim, b.end());
            }
        } else {
            H2OKV_ASSIGN_OR_RETURN(ly.wq, matrix(use, p + "attn_q.weight", hp.n_embd, q_dim));
            H2OKV_ASSIGN_OR_RETURN(ly.wk, matrix(use, p + "attn_k.weight", hp.n_embd, kv_dim));
            H2OKV_ASSIGN_OR_RETURN(ly.wv, matrix(use, p + "attn_v.weight", hp.n_embd, kv_dim));
            H2OKV_ASSIGN_OR_RETURN(ly.bq, vector(use, p + "attn_q.bias", q_dim, true));
            H2OKV_ASSIGN_OR_RETURN(ly.bk, vector(use, p + "attn_k.bias", kv_dim, true));
            H2OKV_ASSIGN_OR_RETURN(ly.bv, vector(use, p + "attn_v.bias", kv_dim, true));
        }
        if (opt_.qk_norm) {
            H2OKV_ASSIGN_OR_RETURN(ly.q_norm, vector(use, p + "attn_q_norm.weight", hp.head_dim));
            H2OKV_ASSIGN_OR_RETURN(ly.k_norm, vector(use, p + "attn_k_norm.weight", hp.head_dim));
        }
        H2OKV_ASSIGN_OR_RETURN(ly.wo, matrix(use, p + "attn_output.weight", q_dim, hp.n_embd));
        if (opt_.post_norms) {
            H2OKV_ASSIGN_OR_RETURN(ly.attn_post_norm,
                                   vector(use, p + "post_attention_norm.weight", hp.n_embd));
            H2OKV_ASSIGN_OR_RETURN(ly.ffn_post_norm, vector(use, p + "post_ffw_norm.weight", hp.n_embd));
        }
        H2OKV_ASSIGN_OR_RETURN(ly.ffn_norm, vector(use, p + "ffn_norm.weight", hp.n_embd));
        if (opt_.fused_gate_up) {  // [gate; up] in one matrix
            H2OKV_ASSIGN_OR_RETURN(const gguf::tensor_info* up,
                                   find(use, p + "ffn_up.weight", {hp.n_embd, 2 * hp.n_ff}));
            ly.w_gate = for_products(rows_of(*up, 0, hp.n_ff));
            ly.w_up = for_products(rows_of(*up, hp.n_ff, hp.n_ff));
            release_if_packed(*up, {ly.w_gate, ly.w_up});
        } else {
            H2OKV_ASSIGN_OR_RETURN(ly.w_gate, matrix(use, p + "ffn_gate.weight", hp.n_embd, hp.n_ff));
            H2OKV_ASSIGN_OR_RETURN(ly.w_up, matrix(use, p + "ffn_up.weight", hp.n_embd, hp.n_ff));
        }
        H2OKV_ASSIGN_OR_RETURN(ly.w_down, matrix(use, p + "ffn_down.weight", hp.n_ff, hp.n_embd));
    }
    return use.check_all_used();
}

void decoder_model::resize_scratch(int n) {
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
    rope_cs_.resize(rows * hp.rope_specs.size() * static_cast<size_t>(hp.rope_dim));
    scratch_tokens_ = n;
}

int64_t decoder_model::work_bytes() const {
    size_t floats = 0;
    for (const auto* v : {&x_, &xn_, &q_, &k_, &v_, &att_, &proj_, &gate_, &up_, &rope_cs_})
        floats += v->capacity();
    return static_cast<int64_t>(floats * sizeof(float) + out_rows_.capacity() * sizeof(size_t));
}

// Below this many elements of a step's per-token work (a norm, rotation, activation or residual over every
// token) a parallel region costs more than it saves.
constexpr int64_t k_tokens_min_work = 8192;

// fn(t) for t < n: the tokens split between the threads when `per_token` elements each pay for a fork. Each
// token's arithmetic is the same either way, so the result does not depend on the thread count.
template <typename F>
void for_each_token(size_t n, size_t per_token, const F& fn) {
    const auto nt = static_cast<int64_t>(n);
    const bool fork = nt > 1 && core::should_fork(core::parallel_site::tokens,
                                                  nt * static_cast<int64_t>(per_token), k_tokens_min_work);
    core::parallel_for(fork, nt, [&](int64_t t) { fn(static_cast<size_t>(t)); });
}

// y[t][i] += b[i] for t < n_tok rows of width b.size(); nothing when b is empty.
void add_bias(float* y, const std::vector<float>& b, size_t n_tok) {
    for (size_t t = 0; t < n_tok && !b.empty(); ++t) {
        for (size_t i = 0; i < b.size(); ++i) y[t * b.size() + i] += b[i];
    }
}

// RMSNorm of each head_dim vector of x ([n_rows][head_dim]) with weight w, in place; nothing when w is empty.
void head_norm(float* x, size_t n_rows, const std::vector<float>& w, float eps) {
    for (size_t r = 0; r < n_rows && !w.empty(); ++r) {
        kernels::rmsnorm(x + r * w.size(), w.data(), static_cast<int>(w.size()), eps, x + r * w.size());
    }
}

// RMSNorm of each of the n_tok rows of x (w.size() floats each) in place; nothing when w is empty.
void post_norm(float* x, size_t n_tok, const std::vector<float>& w, float eps) {
    head_norm(x, n_tok, w, eps);
}

status decoder_model::forward(const batch& b, attention_backend& attn, float* logits) {
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
    // The whole pass; attention's own scopes (attention_runner) take their share out of it.
    const core::phase_scope timed(core::phase::products);
    resize_scratch(n);
    const auto embd = static_cast<size_t>(hp.n_embd);
    const auto q_dim = static_cast<size_t>(hp.n_head) * static_cast<size_t>(hp.head_dim);
    const auto kv_dim = static_cast<size_t>(hp.n_kv_head) * static_cast<size_t>(hp.head_dim);
    const auto ff = static_cast<size_t>(hp.n_ff);
    const auto un = static_cast<size_t>(n);
    const auto rd = static_cast<size_t>(hp.rope_dim);
    const size_t n_specs = hp.rope_specs.size();

    for (size_t t = 0; t < un; ++t) {
        kernels::dequantize_row(tok_embd_.type,
                                tok_embd_.data + tok_embd_.row_bytes * static_cast<size_t>(b.tokens[t]),
                                hp.n_embd, &x_[t * embd]);
    }
    if (opt_.embd_scale) {
        const float scale = std::sqrt(static_cast<float>(hp.n_embd));
        for (size_t i = 0; i < un * embd; ++i) x_[i] *= scale;
    }
    // Layers sharing a rope spec rotate q and k of a position by the same angles: computed once per call.
    for (size_t r = 0; r < n_specs; ++r) {
        for (size_t t = 0; t < un; ++t)
            kernels::rope_rotation(hp.rope_specs[r], b.positions[t], &rope_cs_[(r * un + t) * rd]);
    }
    // The per-token work between the products runs inside the products' parallel regions (token_work): each
    // product prepares its input's tokens or finishes its outputs' on the threads' shares of the tokens, so a
    // layer forks once per product and for attention's stages only. The residual of a layer's FFN is added as
    // the next layer prepares its input (after the last layer, on its own). x[t] += proj[t], proj[t] first
    // normed by post (none when empty).
    const auto add_residual = [&](size_t t, const std::vector<float>& post) {
        float* x = &x_[t * embd];
        const float* p = &proj_[t * embd];
        post_norm(&proj_[t * embd], 1, post, hp.rms_eps);
        for (size_t i = 0; i < embd; ++i) x[i] += p[i];
    };
    for (const layer& ly : layers_) {
        const int l = static_cast<int>(&ly - layers_.data());
        const kernels::rope_spec& rs = hp.rope(l);
        const float* cs_base =
            &rope_cs_[static_cast<size_t>(hp.layer_rope[static_cast<size_t>(l)]) * un * rd];
        const layer* prev = l > 0 ? &layers_[static_cast<size_t>(l - 1)] : nullptr;
        const kernels::matrix_view qkv[] = {ly.wq, ly.wk, ly.wv};
        float* const qkv_out[] = {q_.data(), k_.data(), v_.data()};
        kernels::matmul_shared_input(
            qkv, qkv_out, 3, xn_.data(), n,
            [&](int t0, int t1) {
                for (auto t = static_cast<size_t>(t0); t < static_cast<size_t>(t1); ++t) {
                    if (prev != nullptr) add_residual(t, prev->ffn_post_norm);
                    kernels::rmsnorm(&x_[t * embd], ly.attn_norm.data(), static_cast<int>(embd), hp.rms_eps,
                                     &xn_[t * embd]);
                }
            },
            [&](int t0, int t1) {
                for (auto t = static_cast<size_t>(t0); t < static_cast<size_t>(t1); ++t) {
                    float* q = &q_[t * q_dim];
                    float* k = &k_[t * kv_dim];
                    add_bias(q, ly.bq, 1);
                    add_bias(k, ly.bk, 1);
                    add_bias(&v_[t * kv_dim], ly.bv, 1);
                    head_norm(q, static_cast<size_t>(hp.n_head), ly.q_norm, hp.rms_eps);
                    head_norm(k, static_cast<size_t>(hp.n_kv_head), ly.k_norm, hp.rms_eps);
                    const float* cs = cs_base + t * rd;
                    kernels::rope_apply(q, hp.n_head, hp.head_dim, hp.rope_dim, cs, rs.pairing);
                    kernels::rope_apply(k, hp.n_kv_head, hp.head_dim, hp.rope_dim, cs, rs.pairing);
                    const float temp = hp.query_temperature(b.positions[t]);
                    if (temp != 1.0f) {
                        for (size_t i = 0; i < q_dim; ++i) q[i] *= temp;
                    }
                }
            });
        H2OKV_RETURN_IF_ERROR(attn.attend(l, n, q_.data(), k_.data(), v_.data(), att_.data()));
        kernels::matmul(ly.wo, att_.data(), n, proj_.data());
        const kernels::matrix_view gate_up[] = {ly.w_gate, ly.w_up};
        float* const gate_up_out[] = {gate_.data(), up_.data()};
        kernels::matmul_shared_input(gate_up, gate_up_out, 2, xn_.data(), n, [&](int t0, int t1) {
            for (auto t = static_cast<size_t>(t0); t < static_cast<size_t>(t1); ++t) {
                add_residual(t, ly.attn_post_norm);
                kernels::rmsnorm(&x_[t * embd], ly.ffn_norm.data(), static_cast<int>(embd), hp.rms_eps,
                                 &xn_[t * embd]);
            }
        });
        kernels::matmul(ly.w_down, gate_.data(), n, proj_.data(), [&](int t0, int t1) {
            for (auto t = static_cast<size_t>(t0); t < static_cast<size_t>(t1); ++t) {
                if (opt_.glu == glu_kind::gelu_tanh) {
                    kernels::gelu_tanh_glu(&gate_[t * ff], &up_[t * ff], static_cast<int>(ff),
                                           &gate_[t * ff]);
                } else {
                    kernels::swiglu(&gate_[t * ff], &up_[t * ff], static_cast<int>(ff), &gate_[t * ff]);
                }
            }
        });
    }
    if (!layers_.empty())
        for_each_token(un, 2 * embd, [&](size_t t) { add_residual(t, layers_.back().ffn_post_norm); });
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
    add_bias(logits, output_bias_, out_rows_.size());
    if (hp.final_softcap > 0.0f) {
        kernels::softcap(logits, static_cast<int>(out_rows_.size() * static_cast<size_t>(hp.n_vocab)),
                         hp.final_softcap);
    }
    return ok_status();
}

// rope.scaling.* keys into `hp.rope_scale`. `yarn_keys`: the architecture's yarn betas and log multiplier
// apply (llama.cpp reads them for mistral3); otherwise they are accepted only at llama.cpp's defaults, which
// is what llama.cpp computes with for the other architectures.
status read_rope_scaling(metadata_use& use, hparams& hp, bool yarn_keys) {
    H2OKV_ASSIGN_OR_RETURN(std::string type, use.text("rope.scaling.type", ""));
    H2OKV_ASSIGN_OR_RETURN(double factor, use.real("rope.scaling.factor", 0.0));
    H2OKV_ASSIGN_OR_RETURN(double old_factor, use.real("rope.scale_linear", 0.0));  // the key's older name
    if (factor == 0.0) factor = old_factor;
    rope_scaling& sc = hp.rope_scale;
    const std::string a = use.arch() + ".";
    // As llama.cpp: no type is linear, and linear without a factor (or a factor of 1) is no scaling.
    if (type.empty() || type == "linear") {
        sc.type = factor != 0.0 && factor != 1.0 ? rope_scaling_type::linear : rope_scaling_type::none;
    } else if (type == "yarn") {
        sc.type = rope_scaling_type::yarn;
    } else if (type == "none") {
        sc.type = rope_scaling_type::none;
    } else {
        return invalid_file("{}: {}rope.scaling.type is '{}', expected none, linear or yarn{}",
                            use.file().path(), a, type,
                            type == "longrope" ? " (longrope, Phi-3's 128k scaling, is not supported)" : "");
    }
    if (sc.type != rope_scaling_type::none) sc.factor = factor == 0.0 ? 1.0 : factor;
    H2OKV_ASSIGN_OR_RETURN(sc.attn_factor, use.real("rope.scaling.attn_factor", 1.0));
    H2OKV_ASSIGN_OR_RETURN(sc.orig_ctx, use.dim("rope.scaling.original_context_length", hp.n_ctx_train));
    use.accept("rope.scaling.finetuned");
    if (sc.type == rope_scaling_type::yarn && yarn_keys) {
        H2OKV_ASSIGN_OR_RETURN(sc.beta_fast, use.real("rope.scaling.yarn_beta_fast", sc.beta_fast));
        H2OKV_ASSIGN_OR_RETURN(sc.beta_slow, use.real("rope.scaling.yarn_beta_slow", sc.beta_slow));
        H2OKV_ASSIGN_OR_RETURN(sc.log_mul, use.real("rope.scaling.yarn_log_multiplier", 0.0));
    } else if (sc.type == rope_scaling_type::yarn) {
        for (auto [key, expected] : {std::pair{"rope.scaling.yarn_beta_fast", sc.beta_fast},
                                     std::pair{"rope.scaling.yarn_beta_slow", sc.beta_slow}}) {
            H2OKV_ASSIGN_OR_RETURN(double v, use.real(key, expected));
            if (v != expected) {
                return invalid_file("{}: {}{} is {}; only llama.cpp's {} is supported for {}",
                                    use.file().path(), a, key, v, expected, use.arch());
            }
        }
    }
    return sc.validate();
}

}  // namespace

result<hparams> read_decoder_hparams(metadata_use& use, kernels::rope_pairing pairing, bool rope_freqs,
                                     bool yarn_keys) {
    const gguf::file& f = use.file();
    const std::string a = use.arch() + ".";
    hparams hp;
    hp.arch = use.arch();
    H2OKV_ASSIGN_OR_RETURN(hp.n_embd, use.dim("embedding_length", std::nullopt));
    H2OKV_ASSIGN_OR_RETURN(int64_t n_layer, use.dim("block_count", std::nullopt));
    H2OKV_ASSIGN_OR_RETURN(int64_t n_head, use.dim("attention.head_count", std::nullopt));
    H2OKV_ASSIGN_OR_RETURN(int64_t n_kv_head, use.dim("attention.head_count_kv", n_head));
    H2OKV_ASSIGN_OR_RETURN(hp.n_ff, use.dim("feed_forward_length", std::nullopt));
    hp.n_layer = static_cast<int>(n_layer);
    hp.n_head = static_cast<int>(n_head);
    hp.n_kv_head = static_cast<int>(n_kv_head);
    if (hp.n_embd % hp.n_head != 0 && !use.has("attention.key_length")) {
        return invalid_file("{}: {}embedding_length {} is not a multiple of {}attention.head_count {}",
                            f.path(), a, hp.n_embd, a, hp.n_head);
    }
    H2OKV_ASSIGN_OR_RETURN(int64_t head_dim, use.dim("attention.key_length", hp.n_embd / hp.n_head));
    H2OKV_ASSIGN_OR_RETURN(int64_t v_dim, use.dim("attention.value_length", head_dim));
    if (v_dim != head_dim) {
        return invalid_file("{}: {}attention.value_length {} differs from key_length {}; expected equal",
                            f.path(), a, v_dim, head_dim);
    }
    hp.head_dim = static_cast<int>(head_dim);
    H2OKV_ASSIGN_OR_RETURN(int64_t rope_dim, use.dim("rope.dimension_count", head_dim));
    hp.rope_dim = static_cast<int>(rope_dim);
    hp.rope_pairing = pairing;
    H2OKV_ASSIGN_OR_RETURN(double base, use.real("rope.freq_base", 10000.0));
    hp.rope_freq_base = static_cast<float>(base);
    H2OKV_ASSIGN_OR_RETURN(double eps, use.real("attention.layer_norm_rms_epsilon", 1e-5));
    hp.rms_eps = static_cast<float>(eps);
    H2OKV_ASSIGN_OR_RETURN(hp.n_ctx_train, use.dim("context_length", 2048));
    for (const char* key : {"expert_count", "expert_used_count"}) {
        H2OKV_ASSIGN_OR_RETURN(double experts, use.real(key, 0.0));
        if (experts != 0.0) {
            return invalid_file("{}: {}{} is {}: mixture-of-experts layers are not supported", f.path(), a,
                                key, experts);
        }
    }
    const gguf::tensor_info* embd = use.tensor("token_embd.weight");
    if (embd == nullptr) return invalid_file("{}: required tensor 'token_embd.weight' is missing", f.path());
    if (embd->dims.size() != 2) {
        return invalid_file("{}: tensor 'token_embd.weight' has {} dims, expected 2", f.path(),
                            embd->dims.size());
    }
    hp.n_vocab = embd->dims[1];
    H2OKV_ASSIGN_OR_RETURN(int64_t vocab_size, use.dim("vocab_size", hp.n_vocab));
    if (vocab_size != hp.n_vocab) {
        return invalid_file("{}: {}vocab_size is {} but token_embd.weight has {} rows", f.path(), a,
                            vocab_size, hp.n_vocab);
    }
    hp.tied_output = f.find_tensor("output.weight") == nullptr;
    H2OKV_RETURN_IF_ERROR(read_rope_scaling(use, hp, yarn_keys));
    std::vector<float> factors;
    if (rope_freqs && f.find_tensor("rope_freqs.weight") != nullptr) {
        H2OKV_ASSIGN_OR_RETURN(factors, vector(use, "rope_freqs.weight", rope_dim / 2));
        for (float v : factors) {
            if (!(v > 0.0f) || !std::isfinite(v)) {
                return invalid_file("{}: rope_freqs.weight holds {}, expected finite factors > 0", f.path(),
                                    v);
            }
        }
    }
    if (hp.rope_dim >= 2 && hp.rope_dim % 2 == 0 && hp.rope_dim <= hp.head_dim) {
        hp.rope_specs = {make_rope_spec(hp.rope_dim, hp.rope_freq_base, pairing, factors, hp.rope_scale)};
        hp.layer_rope.assign(static_cast<size_t>(hp.n_layer), 0);
    }
    return hp;
}

status read_sliding_hparams(metadata_use& use, hparams& hp, const sliding_options& o) {
    const gguf::file& f = use.file();
    const std::string a = use.arch() + ".";
    if (hp.rope_scale.type == rope_scaling_type::yarn) {
        return invalid_file("{}: {}rope.scaling.type is yarn; only linear scaling is supported for {}",
                            f.path(), a, use.arch());
    }
    H2OKV_ASSIGN_OR_RETURN(double window,
                           use.real("attention.sliding_window", static_cast<double>(o.default_window)));
    if (!(window >= 0.0) || window != std::floor(window) || window > static_cast<double>(kMaxDim)) {
        return invalid_file("{}: {}attention.sliding_window is {}, expected a whole number in [0, {}]",
                            f.path(), a, window, kMaxDim);
    }
    H2OKV_ASSIGN_OR_RETURN(int64_t period, use.dim("attention.sliding_window_pattern", o.default_period));
    H2OKV_ASSIGN_OR_RETURN(double base,
                           use.real("rope.freq_base_swa", o.local_base.value_or(hp.rope_freq_base)));
    if (!(base > 0.0)) return invalid_file("{}: {}rope.freq_base_swa is {}, expected > 0", f.path(), a, base);
    hp.sliding_window = static_cast<int64_t>(window);
    if (hp.sliding_window > 0) {
        // As llama.cpp: layer l slides unless l % period == period - 1 (a period of 1: every layer global).
        hp.layer_sliding.resize(static_cast<size_t>(hp.n_layer));
        for (int l = 0; l < hp.n_layer; ++l)
            hp.layer_sliding[static_cast<size_t>(l)] = l % period < period - 1 ? 1 : 0;
    }
    if (hp.n_sliding() > 0 && !hp.rope_specs.empty()) {
        hp.rope_specs.push_back(make_rope_spec(hp.rope_dim, static_cast<float>(base), hp.rope_pairing, {},
                                               o.local_scaled ? hp.rope_scale : rope_scaling{}));
        for (int l = 0; l < hp.n_layer; ++l) hp.layer_rope[static_cast<size_t>(l)] = hp.sliding(l) ? 1 : 0;
    }
    if (o.attn_softcap) {
        H2OKV_ASSIGN_OR_RETURN(double cap, use.real("attn_logit_softcapping", 50.0));
        hp.attn_softcap = static_cast<float>(cap);
    }
    H2OKV_ASSIGN_OR_RETURN(double final_cap, use.real("final_logit_softcapping", o.final_softcap));
    hp.final_softcap = static_cast<float>(final_cap);
    // llama.cpp's rule (Gemma's reference code: query_pre_attn_scalar is head_dim, or n_embd / n_head for
    // the 27B models, which it recognises by their block count).
    hp.attn_scale = o.big_layers > 0 && hp.n_layer == o.big_layers
                        ? 1.0f / std::sqrt(static_cast<float>(hp.n_embd / hp.n_head))
                        : 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
    return ok_status();
}

result<std::unique_ptr<model>> load_decoder(metadata_use& use, hparams hp, const decoder_options& o) {
    H2OKV_RETURN_IF_ERROR(hp.validate());
    // A layer has at least its two norms and four matrices (fused q/k/v and gate/up): a block count the file
    // cannot hold is refused before anything is sized by it.
    const size_t per_layer = 6 + (o.qk_norm ? 2 : 0) + (o.post_norms ? 2 : 0);
    if (static_cast<size_t>(hp.n_layer) > use.file().tensors().size() / per_layer) {
        return invalid_file(
            "{}: {}.block_count is {} but the file has {} tensors; each layer needs at least {}",
            use.file().path(), hp.arch, hp.n_layer, use.file().tensors().size(), per_layer);
    }
    auto m = std::make_unique<decoder_model>(use.file(), std::move(hp), o);
    H2OKV_RETURN_IF_ERROR(m->load_weights(use));
    return std::unique_ptr<model>(std::move(m));
}

}  // namespace h2okv::model
