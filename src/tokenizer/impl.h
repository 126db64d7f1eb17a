// The tokenizer's tables and algorithms (internal). tokenizer.cpp builds an impl from a vocab, applying
// llama.cpp's load-time rules; spm.cpp and bpe.cpp encode one piece of raw text (no special tokens in it).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "h2okv/tokenizer/tokenizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace h2okv::tokenizer {

// std::string keys looked up by string_view without a copy.
struct string_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using string_map = std::unordered_map<std::string, int32_t, string_hash, std::equal_to<>>;

struct tokenizer::impl {
    vocab_model model = vocab_model::spm;
    std::string pre = "default";
    std::vector<std::string> token_texts;  // [n_vocab]
    std::vector<float> scores;             // [n_vocab]
    std::vector<uint32_t> attrs;           // [n_vocab] token_attr bits
    string_map to_id;
    string_map merge_rank;  // BPE: "left right" -> rank

    int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1;
    int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
    int32_t newline = -1;
    bool add_bos = false;
    bool add_eos = false;
    bool add_space_prefix = false;
    bool ignore_merges = false;
    bool clean_spaces = false;

    std::vector<int32_t> specials;  // control, user-defined and unknown tokens, longest text first
    std::vector<int32_t> eog;       // sorted
    // SPM: the token of each byte (<0xNN>, else the one-byte text), -1 when the vocabulary has none.
    std::array<int32_t, 256> byte_token{};
    std::optional<detail::regex_splitter> splitter;  // BPE
    std::vector<std::string> notes;

    int32_t find(std::string_view s) const {
        const auto it = to_id.find(s);
        return it == to_id.end() ? -1 : it->second;
    }
    // Rank of merging `left` and `right`, or -1.
    int32_t find_merge(std::string_view left, std::string_view right) const;

    // Appends the tokens of `text` (already free of special tokens; SPM: spaces already escaped).
    status encode_spm(std::string_view text, std::vector<int32_t>& out) const;
    status encode_bpe(std::string_view text, std::vector<int32_t>& out) const;
    std::string piece(int32_t id, bool special) const;
};

}  // namespace h2okv::tokenizer
