// SentencePiece-style encoding, as llama.cpp's llm_tokenizer_spm_session: every UTF-8 character starts as a
// symbol; the adjacent pair whose concatenation is the highest-scoring token merges first (ties: leftmost),
// until no adjacent pair forms a token. Symbols that are not tokens become byte tokens.
#include <algorithm>
#include <queue>

#include "tokenizer/impl.h"
#include "tokenizer/unicode.h"

namespace h2okv::tokenizer {

namespace {

struct symbol {
    int prev = -1;
    int next = -1;
    size_t offset = 0;  // into the text
    size_t size = 0;    // bytes; 0 once merged into its left neighbour
};

struct bigram {
    int left = 0;
    int right = 0;
    float score = 0;
    size_t size = 0;  // bytes of the merged piece, to spot pairs that changed since they were queued
};

// Highest score on top; among equal scores, the leftmost pair.
struct bigram_order {
    bool operator()(const bigram& a, const bigram& b) const {
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
};

}  // namespace

status tokenizer::impl::encode_spm(std::string_view text, std::vector<int32_t>& out) const {
    // One symbol per UTF-8 character. llama.cpp sizes a symbol by its lead byte alone, so after an invalid
    // lead byte it swallows the next bytes, including half of an escaped space, which then decodes as a
    // literal U+2581; a byte that starts no well-formed character is a symbol of its own here instead.
    // Well-formed text splits identically.
    std::vector<symbol> symbols;
    for (const auto& u : detail::decode_utf8(text)) {
        symbol s;
        s.offset = u.offset;
        s.size = u.size;
        s.prev = static_cast<int>(symbols.size()) - 1;
        s.next = u.offset + u.size == text.size() ? -1 : static_cast<int>(symbols.size()) + 1;
        symbols.push_back(s);
    }
    if (symbols.empty()) return ok_status();

    std::priority_queue<bigram, std::vector<bigram>, bigram_order> queue;
    auto try_add = [&](int left, int right) {
        if (left == -1 || right == -1) return;
        const std::string_view piece =
            text.substr(symbols[left].offset, symbols[left].size + symbols[right].size);
        const int32_t id = find(piece);
        if (id >= 0) queue.push({left, right, scores[id], piece.size()});
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

    while (!queue.empty()) {
        const bigram b = queue.top();
        queue.pop();
        symbol& left = symbols[b.left];
        symbol& right = symbols[b.right];
        if (left.size == 0 || right.size == 0 || left.size + right.size != b.size) continue;
        left.size += right.size;
        right.size = 0;
        left.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = b.left;
        try_add(left.prev, b.left);
        try_add(b.left, left.next);
    }

    // Merged symbols are tokens by construction; a symbol that is not is a single character, which falls back
    // to its bytes. (llama.cpp first looks the text up among the merged pairs to split it again, which cannot
    // succeed for a single character.)
    for (int i = 0; i != -1; i = symbols[i].next) {
        const std::string_view piece = text.substr(symbols[i].offset, symbols[i].size);
        const int32_t id = find(piece);
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        // Byte fallback; a vocabulary without byte tokens gets one unknown token per character instead.
        const bool bytes_ok = std::all_of(piece.begin(), piece.end(), [&](char c) {
            return byte_token[static_cast<unsigned char>(c)] >= 0;
        });
        if (bytes_ok) {
            for (const char c : piece) out.push_back(byte_token[static_cast<unsigned char>(c)]);
        } else if (unk >= 0) {
            out.push_back(unk);
        } else {
            return invalid_argument(
                "tokenizer: the input character '{}' is not in the vocabulary, which has neither byte tokens "
                "(<0xNN>) for all its bytes nor an unknown token",
                piece);
        }
    }
    return ok_status();
}

}  // namespace h2okv::tokenizer
