#include "h2okv/tokenizer/vocab.h"

namespace h2okv::tokenizer {

const char* vocab_model_name(vocab_model m) {
    return m == vocab_model::spm ? "llama" : "gpt2";
}

namespace {

// A token-id key: absent -> nullopt; 4294967295 (how writers store "none") or -1 -> -1.
result<std::optional<int64_t>> read_id(const gguf::file& file, std::string_view key) {
    if (!file.has(key)) return std::optional<int64_t>{};
    H2OKV_ASSIGN_OR_RETURN(const int64_t id, file.get_int(key));
    if (id == 4294967295LL || id == -1) return std::optional<int64_t>{-1};
    return std::optional<int64_t>{id};
}

result<std::optional<bool>> read_flag(const gguf::file& file, std::string_view key) {
    if (!file.has(key)) return std::optional<bool>{};
    H2OKV_ASSIGN_OR_RETURN(const bool b, file.get_bool(key));
    return std::optional<bool>{b};
}

}  // namespace

result<vocab> load_vocab(const gguf::file& file) {
    vocab v;
    H2OKV_ASSIGN_OR_RETURN(const std::string model, file.get_string("tokenizer.ggml.model"));
    if (model == "llama") {
        v.model = vocab_model::spm;
    } else if (model == "gpt2") {
        v.model = vocab_model::bpe;
    } else {
        return invalid_file(
            "{}: tokenizer.ggml.model is '{}'; supported tokenizer models are 'llama' (SentencePiece) "
            "and 'gpt2' (byte-level BPE)",
            file.path(), model);
    }
    H2OKV_ASSIGN_OR_RETURN(v.pre, file.get_string_or("tokenizer.ggml.pre", ""));
    H2OKV_ASSIGN_OR_RETURN(v.tokens, file.get_string_array("tokenizer.ggml.tokens"));
    const size_t n = v.tokens.size();
    if (file.has("tokenizer.ggml.scores")) {
        H2OKV_ASSIGN_OR_RETURN(const auto scores, file.get_float_array("tokenizer.ggml.scores"));
        if (scores.size() < n) {
            return invalid_file("{}: tokenizer.ggml.scores has {} entries, expected one per token ({})",
                                file.path(), scores.size(), n);
        }
        v.scores.assign(scores.begin(), scores.begin() + static_cast<std::ptrdiff_t>(n));
    }
    if (file.has("tokenizer.ggml.token_type")) {
        H2OKV_ASSIGN_OR_RETURN(const auto types, file.get_int_array("tokenizer.ggml.token_type"));
        if (types.size() < n) {
            return invalid_file("{}: tokenizer.ggml.token_type has {} entries, expected one per token ({})",
                                file.path(), types.size(), n);
        }
        v.types.reserve(n);
        for (size_t i = 0; i < n; ++i) {
            // Numbers outside the known types mean "undefined", as in llama.cpp.
            const int64_t t = types[i];
            v.types.push_back(t >= 0 && t <= 6 ? static_cast<token_type>(t) : token_type::undefined);
        }
    }
    if (file.has("tokenizer.ggml.merges")) {
        H2OKV_ASSIGN_OR_RETURN(v.merges, file.get_string_array("tokenizer.ggml.merges"));
    } else if (v.model == vocab_model::bpe) {
        return invalid_file("tokenizer.ggml.merges is missing; a gpt2 (BPE) vocabulary needs its merges");
    }

    struct id_key {
        const char* key;
        std::optional<int64_t> special_ids::*field;
    };
    static const id_key keys[] = {
        {"tokenizer.ggml.bos_token_id", &special_ids::bos},
        {"tokenizer.ggml.eos_token_id", &special_ids::eos},
        {"tokenizer.ggml.eot_token_id", &special_ids::eot},
        {"tokenizer.ggml.eom_token_id", &special_ids::eom},
        {"tokenizer.ggml.unknown_token_id", &special_ids::unk},
        {"tokenizer.ggml.seperator_token_id", &special_ids::sep},  // sic: the GGUF key is spelled so
        {"tokenizer.ggml.padding_token_id", &special_ids::pad},
        {"tokenizer.ggml.mask_token_id", &special_ids::mask},
        {"tokenizer.ggml.fim_pre_token_id", &special_ids::fim_pre},
        {"tokenizer.ggml.fim_suf_token_id", &special_ids::fim_suf},
        {"tokenizer.ggml.fim_mid_token_id", &special_ids::fim_mid},
        {"tokenizer.ggml.fim_pad_token_id", &special_ids::fim_pad},
        {"tokenizer.ggml.fim_rep_token_id", &special_ids::fim_rep},
        {"tokenizer.ggml.fim_sep_token_id", &special_ids::fim_sep},
        // Older spellings of the FIM keys; the newer ones win when both are present.
        {"tokenizer.ggml.prefix_token_id", &special_ids::fim_pre},
        {"tokenizer.ggml.suffix_token_id", &special_ids::fim_suf},
        {"tokenizer.ggml.middle_token_id", &special_ids::fim_mid},
    };
    for (const auto& k : keys) {
        H2OKV_ASSIGN_OR_RETURN(const auto id, read_id(file, k.key));
        auto& field = v.ids.*k.field;
        if (id && !field) field = id;
    }
    H2OKV_ASSIGN_OR_RETURN(v.add_bos, read_flag(file, "tokenizer.ggml.add_bos_token"));
    H2OKV_ASSIGN_OR_RETURN(v.add_eos, read_flag(file, "tokenizer.ggml.add_eos_token"));
    H2OKV_ASSIGN_OR_RETURN(v.add_space_prefix, read_flag(file, "tokenizer.ggml.add_space_prefix"));
    H2OKV_ASSIGN_OR_RETURN(v.model_name, file.get_string_or("general.name", ""));
    return v;
}

}  // namespace h2okv::tokenizer
