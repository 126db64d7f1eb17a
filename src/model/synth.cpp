#include "h2okv/model/synth.h"

#include <cmath>
#include <cstring>
#include <numbers>

#include "h2okv/kernels/kernels.h"

namespace h2okv::model {
namespace {

class rng {
public:
    explicit rng(uint64_t seed) : state_(seed) {}
    // Uniform in [-1, 1), the same sequence on every platform.
    float symmetric() {
        state_ += 0x9e3779b97f4a7c15ull;
        uint64_t z = state_;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        return static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0);
    }

private:
    uint64_t state_;
};

std::vector<std::string> synthetic_vocab(int64_t n, std::vector<int32_t>* types) {
    std::vector<std::string> tokens{"<unk>", "<s>", "</s>"};
    *types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
        tokens.push_back(fmt::format("<0x{:02X}>", b));
        types->push_back(6);
    }
    const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
    const std::string space = "\xe2\x96\x81";  // U+2581, SentencePiece's space
    std::vector<std::string> pieces;
    for (char c : letters) pieces.push_back(std::string(1, c));
    for (char c : letters) pieces.push_back(space + c);
    for (char a : letters) {
        for (char b : letters) pieces.push_back(std::string{a, b});
    }
    for (size_t i = 0; static_cast<int64_t>(tokens.size()) < n; ++i) {
        tokens.push_back(i < pieces.size() ? pieces[i] : fmt::format("{}{}", space, i));
        types->push_back(1);
    }
    return tokens;
}

// llama.cpp's LLAMA_FTYPE numbers for the whole-file type (Q4_K: "Q4_K_S", every matrix Q4_K).
uint32_t file_type(gguf::tensor_type t) {
    switch (t) {
        case gguf::tensor_type::f32: return 0;
        case gguf::tensor_type::f16: return 1;
        case gguf::tensor_type::q4_0: return 2;
        case gguf::tensor_type::q8_0: return 7;
        case gguf::tensor_type::q4_k: return 14;
        case gguf::tensor_type::q6_k: return 18;
        default: return 32;  // BF16
    }
}

}  // namespace

gguf::tensor_type matrix_type(gguf::tensor_type type, int64_t cols) {
    if (kernels::row_size(type, cols) != 0) return type;
    if (kernels::row_size(gguf::tensor_type::q8_0, cols) != 0) return gguf::tensor_type::q8_0;
    return gguf::tensor_type::f16;
}

status synth_shape::validate() const {
    if (n_embd < 2 || n_layer < 1 || n_head < 1 || n_kv_head < 1 || n_ff < 1) {
        return invalid_argument(
            "synthetic shape: n_embd {}, n_layer {}, n_head {}, n_kv_head {}, n_ff {} must be "
            "positive (n_embd >= 2)",
            n_embd, n_layer, n_head, n_kv_head, n_ff);
    }
    if (head_dim == 0 && (n_embd % n_head != 0 || (n_embd / n_head) % 2 != 0)) {
        return invalid_argument("synthetic shape: n_embd {} must be n_head {} times an even head_dim", n_embd,
                                n_head);
    }
    if (head_dim < 0 || head_dim % 2 != 0) {
        return invalid_argument("synthetic shape: head_dim {} must be 0 (n_embd / n_head) or even", head_dim);
    }
    if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "phi3" && arch != "gemma2" &&
        arch != "gemma3" && arch != "mistral3") {
        return invalid_argument(
            "synthetic shape: arch '{}', expected llama, qwen2, qwen3, phi3, gemma2, gemma3 or mistral3",
            arch);
    }
    if (arch != "mistral3" && (attn_temp_scale != 0.0f || rope_scale.log_mul != 0.0 ||
                               rope_scale.beta_fast != rope_scaling{}.beta_fast ||
                               rope_scale.beta_slow != rope_scaling{}.beta_slow)) {
        return invalid_argument(
            "synthetic shape: the query temperature and the yarn betas / log multiplier are mistral3 keys, "
            "not "
            "{}'s",
            arch);
    }
    const bool gemma = arch == "gemma2" || arch == "gemma3";
    if (!gemma && (sliding_window != 0 || attn_softcap != 0.0f || final_softcap != 0.0f)) {
        return invalid_argument("synthetic shape: sliding windows and soft-caps are gemma keys, not {}'s",
                                arch);
    }
    if (sliding_window < 0 || attn_softcap < 0.0f || final_softcap < 0.0f) {
        return invalid_argument("synthetic shape: sliding window {} and soft-caps {}, {} must be >= 0",
                                sliding_window, attn_softcap, final_softcap);
    }
    if (rope_freqs && arch != "llama") {
        return invalid_argument("synthetic shape: rope_freqs is a llama tensor, not one of {}", arch);
    }
    if (n_head % n_kv_head != 0) {
        return invalid_argument("synthetic shape: n_head {} must be a multiple of n_kv_head {}", n_head,
                                n_kv_head);
    }
    if (n_vocab < 259) return invalid_argument("synthetic shape: n_vocab {} must be >= 259", n_vocab);
    return ok_status();
}

result<std::vector<std::byte>> synthesize_model(const synth_shape& s, gguf::tensor_type type, uint64_t seed) {
    H2OKV_RETURN_IF_ERROR(s.validate());
    if (!kernels::matmul_supports(type)) {
        return invalid_argument(
            "synthetic model: weight type {} is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)",
            gguf::tensor_type_name(static_cast<uint32_t>(type)));
    }
    const int64_t head_dim = s.head_dim != 0 ? s.head_dim : s.n_embd / s.n_head;
    const std::string a = s.arch + ".";
    gguf::writer w;
    w.set_string("general.architecture", s.arch);
    // Not the architecture's name: llama.cpp keys vocabulary rules on names containing "phi3".
    w.set_string("general.name", "h2okv synthetic model");
    w.set_u32(a + "context_length", static_cast<uint32_t>(s.n_ctx));
    w.set_u32(a + "embedding_length", static_cast<uint32_t>(s.n_embd));
    w.set_u32(a + "block_count", static_cast<uint32_t>(s.n_layer));
    w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(s.n_ff));
    w.set_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_head));
    w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_kv_head));
    if (s.head_dim != 0) {
        w.set_u32(a + "attention.key_length", static_cast<uint32_t>(head_dim));
        w.set_u32(a + "attention.value_length", static_cast<uint32_t>(head_dim));
    }
    w.set_u32(a + "rope.dimension_count", static_cast<uint32_t>(head_dim));
    w.set_f32(a + "rope.freq_base", s.rope_freq_base);
    if (s.rope_scale.type != rope_scaling_type::none) {
        w.set_string(a + "rope.scaling.type", rope_scaling_type_name(s.rope_scale.type));
        w.set_f32(a + "rope.scaling.factor", static_cast<float>(s.rope_scale.factor));
        if (s.rope_scale.type == rope_scaling_type::yarn) {
            w.set_u32(a + "rope.scaling.original_context_length",
                      static_cast<uint32_t>(s.rope_scale.orig_ctx));
        }
        if (s.arch == "mistral3" && s.rope_scale.type == rope_scaling_type::yarn) {
            w.set_f32(a + "rope.scaling.yarn_beta_fast", static_cast<float>(s.rope_scale.beta_fast));
            w.set_f32(a + "rope.scaling.yarn_beta_slow", static_cast<float>(s.rope_scale.beta_slow));
            w.set_f32(a + "rope.scaling.yarn_log_multiplier", static_cast<float>(s.rope_scale.log_mul));
        }
    }
    if (s.attn_temp_scale != 0.0f) w.set_f32(a + "attention.temperature_scale", s.attn_temp_scale);
    w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
    if (s.sliding_window > 0)
        w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
    if (s.attn_softcap > 0.0f) w.set_f32(a + "attn_logit_softcapping", s.attn_softcap);
    if (s.final_softcap > 0.0f) w.set_f32(a + "final_logit_softcapping", s.final_softcap);
    w.set_u32("general.file_type", file_type(type));
    std::vector<int32_t> types;
    const auto tokens = synthetic_vocab(s.n_vocab, &types);
    std::vector<float> scores(tokens.size());
    for (size_t i = 0; i < scores.size(); ++i) scores[i] = i < 259 ? 0.0f : -static_cast<float>(i);
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_f32_array("tokenizer.ggml.scores", scores);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);

    rng r(seed);
    auto add = [&](const std::string& name, gguf::tensor_type t, int64_t cols, int64_t rows, float scale,
                   float offset) -> status {
        if (t != gguf::tensor_type::f32) t = matrix_type(type, cols);
        std::vector<float> values(static_cast<size_t>(cols * rows));
        for (float& v : values) v = offset + scale * r.symmetric();
        std::vector<int64_t> dims{cols};
        if (rows > 1) dims.push_back(rows);
        const size_t row_bytes = kernels::row_size(t, cols);
        if (row_bytes == 0) {
            return invalid_argument("synthetic model: tensor '{}' rows of {} elements do not fit type {}",
                                    name, cols, gguf::tensor_type_name(static_cast<uint32_t>(t)));
        }
        std::vector<std::byte> data(row_bytes * static_cast<size_t>(rows));
        for (int64_t i = 0; i < rows; ++i) {
            kernels::quantize_row(t, &values[static_cast<size_t>(i * cols)], cols,
                                  &data[static_cast<size_t>(i) * row_bytes]);
        }
        return w.add_tensor(name, t, dims, std::move(data));
    };
    // Uniform weights of variance 1 / fan_in keep activations of order 1 through the layers, and attention
    // logits of order 1: sharper attention (q and k twice as large) made 30 random layers chaotic, so that
    // two engines' f16-level rounding differences grew to nats of KL divergence within a few hundred
    // positions and the logits could not be compared.
    auto fan = [](int64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); };
    const int64_t q_dim = s.n_head * head_dim;
    const int64_t kv_dim = s.n_kv_head * head_dim;
    // The embedding is also the (tied) output matrix: entries of standard deviation 0.2 / sqrt(3) give logits
    // of standard deviation about 0.115 * sqrt(n_embd) (2.8 for SmolLM's 576), the spread of a trained
    // model's; wider logits would magnify every rounding difference between engines in their softmax.
    H2OKV_RETURN_IF_ERROR(add("token_embd.weight", type, s.n_embd, s.n_vocab, 0.2f, 0.0f));
    H2OKV_RETURN_IF_ERROR(add("output_norm.weight", gguf::tensor_type::f32, s.n_embd, 1, 0.1f, 1.0f));
    if (!s.tied_output) {
        H2OKV_RETURN_IF_ERROR(add("output.weight", type, s.n_embd, s.n_vocab, fan(s.n_embd), 0.0f));
    }
    if (s.rope_freqs) {
        // Llama 3.1's factors as its converter computes them: wavelengths beyond the original context's are
        // stretched by `factor`, those under it / high_freq are kept, a smooth blend between.
        const double factor = 8.0, low = 1.0, high = 4.0, old_ctx = 8192.0;
        std::vector<float> f(static_cast<size_t>(head_dim / 2));
        for (size_t i = 0; i < f.size(); ++i) {
            const double wavelen =
                2.0 * std::numbers::pi *
                std::pow(static_cast<double>(s.rope_freq_base), 2.0 * static_cast<double>(i) / head_dim);
            const double smooth = (old_ctx / wavelen - low) / (high - low);
            f[i] = wavelen < old_ctx / high  ? 1.0f
                   : wavelen > old_ctx / low ? static_cast<float>(factor)
                                             : static_cast<float>(1.0 / ((1.0 - smooth) / factor + smooth));
        }
        std::vector<std::byte> data(f.size() * sizeof(float));
        std::memcpy(data.data(), f.data(), data.size());
        H2OKV_RETURN_IF_ERROR(
            w.add_tensor("rope_freqs.weight", gguf::tensor_type::f32, {head_dim / 2}, std::move(data)));
    }
    const float qk_fan = fan(s.n_embd);
    for (int l = 0; l < s.n_layer; ++l) {
        const std::string p = fmt::format("blk.{}.", l);
        H2OKV_RETURN_IF_ERROR(add(p + "attn_norm.weight", gguf::tensor_type::f32, s.n_embd, 1, 0.1f, 1.0f));
        if (s.arch == "phi3") {
            H2OKV_RETURN_IF_ERROR(
                add(p + "attn_qkv.weight", type, s.n_embd, q_dim + 2 * kv_dim, qk_fan, 0.0f));
        } else {
            H2OKV_RETURN_IF_ERROR(add(p + "attn_q.weight", type, s.n_embd, q_dim, qk_fan, 0.0f));
            H2OKV_RETURN_IF_ERROR(add(p + "attn_k.weight", type, s.n_embd, kv_dim, qk_fan, 0.0f));
            H2OKV_RETURN_IF_ERROR(add(p + "attn_v.weight", type, s.n_embd, kv_dim, qk_fan, 0.0f));
        }
        if (s.arch == "qwen2") {  // biases of the size of a projection's spread
            H2OKV_RETURN_IF_ERROR(add(p + "attn_q.bias", gguf::tensor_type::f32, q_dim, 1, 0.5f, 0.0f));
            H2OKV_RETURN_IF_ERROR(add(p + "attn_k.bias", gguf::tensor_type::f32, kv_dim, 1, 0.5f, 0.0f));
            H2OKV_RETURN_IF_ERROR(add(p + "attn_v.bias", gguf::tensor_type::f32, kv_dim, 1, 0.5f, 0.0f));
        }
        if (s.arch == "qwen3" || s.arch == "gemma3") {
            H2OKV_RETURN_IF_ERROR(
                add(p + "attn_q_norm.weight", gguf::tensor_type::f32, head_dim, 1, 0.1f, 1.0f));
            H2OKV_RETURN_IF_ERROR(
                add(p + "attn_k_norm.weight", gguf::tensor_type::f32, head_dim, 1, 0.1f, 1.0f));
        }
        H2OKV_RETURN_IF_ERROR(add(p + "attn_output.weight", type, q_dim, s.n_embd, fan(q_dim), 0.0f));
        if (s.arch == "gemma2" || s.arch == "gemma3") {
            H2OKV_RETURN_IF_ERROR(
                add(p + "post_attention_norm.weight", gguf::tensor_type::f32, s.n_embd, 1, 0.1f, 1.0f));
            H2OKV_RETURN_IF_ERROR(
                add(p + "post_ffw_norm.weight", gguf::tensor_type::f32, s.n_embd, 1, 0.1f, 1.0f));
        }
        H2OKV_RETURN_IF_ERROR(add(p + "ffn_norm.weight", gguf::tensor_type::f32, s.n_embd, 1, 0.1f, 1.0f));
        if (s.arch == "phi3") {
            H2OKV_RETURN_IF_ERROR(add(p + "ffn_up.weight", type, s.n_embd, 2 * s.n_ff, fan(s.n_embd), 0.0f));
        } else {
            H2OKV_RETURN_IF_ERROR(add(p + "ffn_gate.weight", type, s.n_embd, s.n_ff, fan(s.n_embd), 0.0f));
            H2OKV_RETURN_IF_ERROR(add(p + "ffn_up.weight", type, s.n_embd, s.n_ff, fan(s.n_embd), 0.0f));
        }
        H2OKV_RETURN_IF_ERROR(add(p + "ffn_down.weight", type, s.n_ff, s.n_embd, fan(s.n_ff), 0.0f));
    }
    return w.to_bytes();
}

}  // namespace h2okv::model
