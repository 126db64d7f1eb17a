#include "h2okv/model/synth.h"

#include <cmath>

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
    if (n_embd % n_head != 0 || (n_embd / n_head) % 2 != 0) {
        return invalid_argument("synthetic shape: n_embd {} must be n_head {} times an even head_dim", n_embd,
                                n_head);
    }
    if (n_head % n_kv_head != 0) {
        return invalid_argument("synthetic shape: n_head {} must be a multiple of n_kv_head {}", n_head,
                                n_kv_head);
    }
    if (n_vocab < 259) return invalid_argument("synthetic shape: n_vocab {} must be >= 259", n_vocab);
    return ok_status();
}

result<std::vector<std::byte>> synthesize_llama(const synth_shape& s, gguf::tensor_type type, uint64_t seed) {
    H2OKV_RETURN_IF_ERROR(s.validate());
    if (!kernels::matmul_supports(type)) {
        return invalid_argument(
            "synthetic model: weight type {} is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)",
            gguf::tensor_type_name(static_cast<uint32_t>(type)));
    }
    const int64_t head_dim = s.n_embd / s.n_head;
    gguf::writer w;
    w.set_string("general.architecture", "llama");
    w.set_string("general.name", "h2okv synthetic llama");
    w.set_u32("llama.context_length", static_cast<uint32_t>(s.n_ctx));
    w.set_u32("llama.embedding_length", static_cast<uint32_t>(s.n_embd));
    w.set_u32("llama.block_count", static_cast<uint32_t>(s.n_layer));
    w.set_u32("llama.feed_forward_length", static_cast<uint32_t>(s.n_ff));
    w.set_u32("llama.attention.head_count", static_cast<uint32_t>(s.n_head));
    w.set_u32("llama.attention.head_count_kv", static_cast<uint32_t>(s.n_kv_head));
    w.set_u32("llama.rope.dimension_count", static_cast<uint32_t>(head_dim));
    w.set_f32("llama.rope.freq_base", s.rope_freq_base);
    w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
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
    for (int l = 0; l < s.n_layer; ++l) {
        const std::string p = fmt::format("blk.{}.", l);
        H2OKV_RETURN_IF_ERROR(add(p + "attn_norm.weight", gguf::tensor_type::f32, s.n_embd, 1, 0.1f, 1.0f));
        H2OKV_RETURN_IF_ERROR(add(p + "attn_q.weight", type, s.n_embd, q_dim, fan(s.n_embd), 0.0f));
        H2OKV_RETURN_IF_ERROR(add(p + "attn_k.weight", type, s.n_embd, kv_dim, fan(s.n_embd), 0.0f));
        H2OKV_RETURN_IF_ERROR(add(p + "attn_v.weight", type, s.n_embd, kv_dim, fan(s.n_embd), 0.0f));
        H2OKV_RETURN_IF_ERROR(add(p + "attn_output.weight", type, q_dim, s.n_embd, fan(q_dim), 0.0f));
        H2OKV_RETURN_IF_ERROR(add(p + "ffn_norm.weight", gguf::tensor_type::f32, s.n_embd, 1, 0.1f, 1.0f));
        H2OKV_RETURN_IF_ERROR(add(p + "ffn_gate.weight", type, s.n_embd, s.n_ff, fan(s.n_embd), 0.0f));
        H2OKV_RETURN_IF_ERROR(add(p + "ffn_up.weight", type, s.n_embd, s.n_ff, fan(s.n_embd), 0.0f));
        H2OKV_RETURN_IF_ERROR(add(p + "ffn_down.weight", type, s.n_ff, s.n_embd, fan(s.n_ff), 0.0f));
    }
    return w.to_bytes();
}

}  // namespace h2okv::model
