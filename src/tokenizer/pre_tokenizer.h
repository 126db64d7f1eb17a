// BPE pre-tokenizers (internal): llama.cpp's table of `tokenizer.ggml.pre` names and the regex splitter that
// runs them with PCRE2.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "h2okv/core/status.h"
#include "tokenizer/unicode.h"

namespace h2okv::tokenizer::detail {

// What a pre-tokenizer name selects in llama.cpp (llama_vocab::impl::load and llm_tokenizer_bpe).
struct pre_tokenizer_config {
    std::vector<std::string> names;    // every spelling llama.cpp accepts for it
    std::vector<std::string> regexes;  // applied one after the other, each to the pieces of the previous
    bool ignore_merges = false;        // a word that is itself a token is emitted whole
    bool clean_spaces = true;          // decode applies clean_up_tokenization_spaces
    bool add_bos = false;              // default of tokenizer.ggml.add_bos_token
    bool no_default_bos = false;       // no BOS unless the file names one
};

// The configuration for `name`, or nullptr when it is not supported here.
const pre_tokenizer_config* find_pre_tokenizer(std::string_view name);
std::vector<std::string> pre_tokenizer_names();

// Splits text into words with a list of regexes the way llama.cpp's unicode_regex_split does: each regex
// runs separately inside every piece the previous ones produced, and both its matches and the text between
// them become pieces. The regexes see the text with every non-ASCII whitespace code point replaced by U+000B
// and every byte that does not decode replaced by U+FFFD, and `\s`, `\d`, `\b` are ASCII-only, which
// reproduces llama.cpp's std::regex / collapsed-category matching. `$` matches only at the end of a piece.
class regex_splitter {
public:
    static result<regex_splitter> create(const std::vector<std::string>& regexes);

    // Appends to `lengths` the unit counts of the words of `units` (decode_utf8 of the text), in order.
    // Errors only when PCRE2 gives up (match limit on a pathological input).
    status split(const std::vector<utf8_unit>& units, std::vector<size_t>& lengths) const;

    struct compiled;

private:
    std::vector<std::shared_ptr<const compiled>> regexes_;
};

}  // namespace h2okv::tokenizer::detail
