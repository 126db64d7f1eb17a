// Small hand-built vocabularies for the tokenizer tests.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "h2okv/tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace h2okv::tokenizer::testing {

inline const std::string k_sp = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// <unk> <s> </s>, then (optionally) the 256 byte tokens <0x00>..<0xFF>, then `pieces` as normal tokens.
inline vocab spm_vocab(const std::vector<std::pair<std::string, float>>& pieces, bool byte_tokens = true) {
    vocab v;
    v.model = vocab_model::spm;
    v.tokens = {"<unk>", "<s>", "</s>"};
    v.types = {token_type::unknown, token_type::control, token_type::control};
    v.scores = {0, 0, 0};
    if (byte_tokens) {
        for (int b = 0; b < 256; ++b) {
            v.tokens.push_back(fmt::format("<0x{:02X}>", b));
            v.types.push_back(token_type::byte);
            v.scores.push_back(0);
        }
    }
    for (const auto& [text, score] : pieces) {
        v.tokens.push_back(text);
        v.types.push_back(token_type::normal);
        v.scores.push_back(score);
    }
    return v;
}

// The 256 byte-level characters (ids 0..255 in byte order), then `words` (byte-level spelled), then
// "<|endoftext|>" as a control token; `merges` as given.
inline vocab bpe_vocab(const std::vector<std::string>& words, const std::vector<std::string>& merges,
                       std::string pre = "gpt-2") {
    vocab v;
    v.model = vocab_model::bpe;
    v.pre = std::move(pre);
    for (int b = 0; b < 256; ++b) {
        v.tokens.push_back(detail::byte_level_utf8()[b]);
        v.types.push_back(token_type::normal);
    }
    for (const auto& w : words) {
        v.tokens.push_back(w);
        v.types.push_back(token_type::normal);
    }
    v.tokens.push_back("<|endoftext|>");
    v.types.push_back(token_type::control);
    v.merges = merges;
    v.ids.bos = static_cast<int64_t>(v.tokens.size()) - 1;
    v.ids.eos = v.ids.bos;
    return v;
}

inline int32_t id_of(const vocab& v, const std::string& text) {
    const auto it = std::find(v.tokens.begin(), v.tokens.end(), text);
    return it == v.tokens.end() ? -1 : static_cast<int32_t>(it - v.tokens.begin());
}

inline int32_t byte_id(int b) {
    return 3 + b;  // spm_vocab with byte tokens
}

}  // namespace h2okv::tokenizer::testing
