// A tokenizer vocabulary as GGUF stores it (the `tokenizer.ggml.*` keys), before any rule is applied to it.
//
// `vocab` is plain data: tests build small ones by hand, load_vocab() reads one from a GGUF file. The
// tokenizer (tokenizer.h) turns it into a working tokenizer and applies llama.cpp's load-time rules: model
// defaults for unset flags and special ids, end-of-generation detection by token text, and so on. Unset
// optionals mean "the key was absent": the tokenizer then uses the default of the vocabulary's model.
//
//   using namespace h2okv::tokenizer;
//   vocab v;
//   v.model = vocab_model::spm;
//   v.tokens = {"<unk>", "<s>", "</s>", "\xe2\x96\x81a", "a"};  // U+2581 + "a"
//   v.scores = {0, 0, 0, -1, -2};
//   v.types = {token_type::unknown, token_type::control, token_type::control, token_type::normal,
//              token_type::normal};
//   H2OKV_ASSIGN_OR_RETURN(auto tok, tokenizer::from_vocab(std::move(v)));
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "h2okv/core/status.h"
#include "h2okv/gguf/gguf.h"

namespace h2okv::tokenizer {

// `tokenizer.ggml.model`: "llama" is SentencePiece-style (scores + byte fallback), "gpt2" is byte-level BPE.
enum class vocab_model { spm, bpe };
const char* vocab_model_name(vocab_model m);  // "llama" | "gpt2" (the GGUF spelling)

// `tokenizer.ggml.token_type`, numbered as in the file.
enum class token_type : int32_t {
    undefined = 0,
    normal = 1,
    unknown = 2,
    control = 3,
    user_defined = 4,
    unused = 5,
    byte = 6,
};

// Token attributes (bit flags, as llama.cpp's llama_token_attr): the tokenizer derives them from the token
// types and adjusts a few by token text and model name. One token may carry several.
enum token_attr : uint32_t {
    attr_undefined = 0,
    attr_unknown = 1u << 0,
    attr_unused = 1u << 1,
    attr_normal = 1u << 2,
    attr_control = 1u << 3,
    attr_user_defined = 1u << 4,
    attr_byte = 1u << 5,
    attr_lstrip = 1u << 7,  // a matched special token eats the whitespace before it
    attr_rstrip = 1u << 8,  // ... and after it
};

// Special token ids as the file gives them. nullopt: the key is absent (the model's default applies);
// -1: the file says "none" (GGUF writers store 4294967295 for that). Ids outside the vocabulary are refused
// by the tokenizer with a note, keeping the default, as llama.cpp does.
struct special_ids {
    std::optional<int64_t> bos, eos, eot, eom, unk, sep, pad, mask;
    std::optional<int64_t> fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
};

struct vocab {
    vocab_model model = vocab_model::spm;
    // `tokenizer.ggml.pre`: the BPE pre-tokenizer (regex split) name; empty = llama.cpp's "default".
    std::string pre;
    std::vector<std::string> tokens;  // [n_vocab] token texts (SPM: U+2581 for spaces; BPE: byte-level)
    std::vector<float> scores;        // [n_vocab] or empty (all 0): SPM merge priorities, higher first
    std::vector<token_type> types;    // [n_vocab] or empty (all normal)
    std::vector<std::string> merges;  // BPE only: "left right", rank = index (earlier merges first)
    special_ids ids;
    std::optional<bool> add_bos;           // tokenizer.ggml.add_bos_token
    std::optional<bool> add_eos;           // tokenizer.ggml.add_eos_token
    std::optional<bool> add_space_prefix;  // tokenizer.ggml.add_space_prefix (SPM default: true)
    // general.name: llama.cpp keys a few token attributes on it (Phi-3's special tokens strip the
    // whitespace after them).
    std::string model_name;
};

// Reads the `tokenizer.ggml.*` keys (and general.name) of `file`. Errors name the key that is missing or has
// the wrong type or length; unsupported models are refused by name (supported: "llama", "gpt2").
result<vocab> load_vocab(const gguf::file& file);

}  // namespace h2okv::tokenizer
