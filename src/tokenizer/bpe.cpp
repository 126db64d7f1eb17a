// Byte-level BPE encoding, as llama.cpp's llm_tokenizer_bpe_session: the pre-tokenizer splits the text into
// words; each word's bytes are written in GPT-2's byte-level alphabet; adjacent symbols merge, the pair with
// the lowest merge rank first (ties: leftmost), until no adjacent pair has a merge.
#include <algorithm>
#include <queue>

#include "tokenizer/impl.h"
#include "tokenizer/unicode.h"

namespace h2okv::tokenizer {

int32_t tokenizer::impl::find_merge(std::string_view left, std::string_view right) const {
    // Merge keys split at their first space after the first character, so a left side with a later space
    // can never be a merge's left side (and would make the joined key ambiguous).
    if (left.empty() || left.find(' ', 1) != std::string_view::npos) return -1;
    std::string key;
    key.reserve(left.size() + 1 + right.size());
    key.append(left).push_back(' ');
    key.append(right);
    const auto it = merge_rank.find(key);
    return it == merge_rank.end() ? -1 : it->second;
}

namespace {

struct symbol {
    int prev = -1;
    int next = -1;
    size_t offset = 0;
    size_t size = 0;  // 0 once merged into its left neighbour
};

struct bigram {
    int left = 0;
    int right = 0;
    int32_t rank = 0;
    std::string text;  // the merged piece, to spot pairs that changed since they were queued
};

// Lowest rank on top; among equal ranks, the leftmost pair.
struct bigram_order {
    bool operator()(const bigram& a, const bigram& b) const {
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
};

}  // namespace

status tokenizer::impl::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
    const std::vector<detail::utf8_unit> units = detail::decode_utf8(text);
    std::vector<size_t> word_lengths;
    H2OKV_RETURN_IF_ERROR(splitter->split(units, word_lengths));

    const auto& byte_level = detail::byte_level_utf8();
    std::string word;
    std::vector<symbol> symbols;
    size_t first_unit = 0;
    for (const size_t n_units : word_lengths) {
        const size_t begin = units[first_unit].offset;
        const size_t end =
            first_unit + n_units < units.size() ? units[first_unit + n_units].offset : text.size();
        first_unit += n_units;
        word.clear();
        for (size_t i = begin; i < end; ++i) word += byte_level[static_cast<unsigned char>(text[i])];

        symbols.clear();
        if (ignore_merges) {
            const int32_t id = find(word);
            if (id >= 0) {
                out.push_back(id);
                continue;
            }
        }
        for (size_t offset = 0; offset < word.size();) {
            symbol s;
            s.offset = offset;
            s.size = std::min(detail::utf8_sequence_length(static_cast<unsigned char>(word[offset])),
                              word.size() - offset);
            offset += s.size;
            s.prev = static_cast<int>(symbols.size()) - 1;
            s.next = offset == word.size() ? -1 : static_cast<int>(symbols.size()) + 1;
            symbols.push_back(s);
        }

        const std::string_view w = word;
        auto piece_of = [&](const symbol& s) { return w.substr(s.offset, s.size); };
        std::priority_queue<bigram, std::vector<bigram>, bigram_order> queue;
        auto try_add = [&](int left, int right) {
            if (left == -1 || right == -1) return;
            const int32_t rank = find_merge(piece_of(symbols[left]), piece_of(symbols[right]));
            if (rank < 0) return;
            queue.push(
                {left, right, rank,
                 std::string(w.substr(symbols[left].offset, symbols[left].size + symbols[right].size))});
        };
        for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

        while (!queue.empty()) {
            const bigram b = queue.top();
            queue.pop();
            symbol& left = symbols[b.left];
            symbol& right = symbols[b.right];
            if (left.size == 0 || right.size == 0) continue;
            if (left.size + right.size != b.text.size() ||
                w.substr(left.offset, left.size + right.size) != b.text) {
                continue;
            }
            left.size += right.size;
            right.size = 0;
            left.next = right.next;
            if (right.next >= 0) symbols[right.next].prev = b.left;
            try_add(left.prev, b.left);
            try_add(b.left, left.next);
        }

        for (int i = 0; i != -1 && !symbols.empty(); i = symbols[i].next) {
            const std::string_view piece = piece_of(symbols[i]);
            const int32_t id = find(piece);
            if (id >= 0) {
                out.push_back(id);
                continue;
            }
            // A piece that is not a token: one token per byte-level character (llama.cpp tries each raw byte
            // of the piece instead, which loses the bytes whose character is not ASCII).
            for (size_t offset = 0; offset < piece.size();) {
                const size_t n =
                    std::min(detail::utf8_sequence_length(static_cast<unsigned char>(piece[offset])),
                             piece.size() - offset);
                const std::string_view ch = piece.substr(offset, n);
                offset += n;
                int32_t char_id = find(ch);
                if (char_id < 0) char_id = unk;
                if (char_id < 0) {
                    return invalid_argument(
                        "tokenizer: the byte-level character '{}' of the input is not in the vocabulary, "
                        "which has "
                        "no unknown token",
                        ch);
                }
                out.push_back(char_id);
            }
        }
    }
    return ok_status();
}

}  // namespace h2okv::tokenizer
