// Text <-> token ids for llama-family models, matching llama.cpp token for token.
//
// Two vocabulary models (vocab.h):
//  - SentencePiece-style ("llama"): spaces become U+2581, a space is prepended to the text (the "dummy
//    prefix", tokenizer.ggml.add_space_prefix), then adjacent symbols merge greedily, the pair whose merged
//    piece has the highest score first (ties: leftmost). Pieces that are not in the vocabulary fall back to
//    byte tokens <0xNN>, or to the unknown token when the vocabulary has no byte tokens.
//  - GPT-2-style byte-level BPE ("gpt2"): the text is split into words by the pre-tokenizer's regexes
//    (tokenizer.ggml.pre; PCRE2), each word's bytes are mapped to printable code points, then adjacent
//    symbols merge in the order of tokenizer.ggml.merges. supported_pre_tokenizers() lists the names known
//    here; others fall back to GPT-2's regex with a note (notes()).
//
// Control, user-defined and unknown tokens whose text appears in the input ("<|endoftext|>", "</s>") are
// special: user-defined ones are always matched first, longest first (as llama.cpp does); control and unknown
// ones only when encode() is asked to parse specials. Otherwise their text is tokenized as plain text.
//
// Any byte string is accepted and invalid UTF-8 never fails: SPM falls back to byte tokens (a byte that
// starts no well-formed character is a symbol of its own; llama.cpp would glue the next bytes to it and can
// turn an escaped space into a literal U+2581); BPE maps every byte through the byte-level table (the
// regexes see such a byte as U+FFFD, as in llama.cpp, but the byte itself is kept where llama.cpp writes
// U+FFFD's three bytes). A byte-level character the vocabulary lacks (StarCoder-style vocabularies have no
// token for bytes C0, C1, F5..FF) becomes the unknown token, or an error when there is none; llama.cpp drops
// it silently.
//
// A tokenizer is immutable after construction: encode() and decode() may run concurrently. Copies share
// the same tables.
//
//   H2OKV_ASSIGN_OR_RETURN(auto file, h2okv::gguf::file::open("models/stories260K.gguf"));
//   H2OKV_ASSIGN_OR_RETURN(auto tok, h2okv::tokenizer::tokenizer::from_gguf(*file));
//   H2OKV_ASSIGN_OR_RETURN(auto ids, tok.encode("Once upon a time", /*add_special=*/true));
//   // ids == {1, 403, 407, 261, 378} (BOS, "▁Once", "▁upon", "▁a", "▁time")
//   std::string text = tok.decode(std::span(ids).subspan(1));  // "Once upon a time"
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "h2okv/core/status.h"
#include "h2okv/gguf/gguf.h"
#include "h2okv/tokenizer/vocab.h"

namespace h2okv::tokenizer {

// The `tokenizer.ggml.pre` names this tokenizer implements (llama.cpp's names), sorted.
std::vector<std::string> supported_pre_tokenizers();

struct decode_options {
    // Drop the BOS token at the front and the EOS token at the end when the model adds them itself.
    bool remove_special = false;
    // Render control and unknown tokens as their text ("</s>"); by default they print nothing.
    bool unparse_special = false;
};

class tokenizer {
public:
    // load_vocab() + from_vocab().
    static result<tokenizer> from_gguf(const gguf::file& file);
    // Errors: empty vocabulary, duplicate token texts, arrays whose length differs from the token count, BPE
    // without merges, add_bos/add_eos requested without a BOS/EOS token, pre-tokenizer regexes PCRE2 refuses.
    static result<tokenizer> from_vocab(vocab v);

    // Token ids of `text`. add_special: prepend BOS / append EOS when the model asks for them
    // (tokenizer.ggml.add_bos_token / add_eos_token; llama models add BOS, GPT-2 adds nothing).
    // parse_special: match control and unknown tokens written in the text. Errors only for a vocabulary that
    // cannot represent a piece at all (no byte tokens and no unknown token) or a regex that hits PCRE2's
    // match limit.
    result<std::vector<int32_t>> encode(std::string_view text, bool add_special = true,
                                        bool parse_special = false) const;

    // The text of `ids`, as llama.cpp's llama_detokenize: byte tokens become raw bytes, U+2581 a space; the
    // leading space of the dummy prefix is dropped when the sequence does not start with BOS; BPE models
    // with clean-up apply llama.cpp's clean_up_tokenization_spaces (" ," -> ","). Ids outside [0, n_vocab)
    // produce nothing. The result may end inside a UTF-8 sequence when `ids` does.
    std::string decode(std::span<const int32_t> ids, const decode_options& options = {}) const;

    // The bytes token `id` stands for, as llama.cpp's llama_token_to_piece (no leading-space stripping).
    // Control and unknown tokens give "" unless `special`. Out-of-range ids give "".
    std::string piece(int32_t id, bool special = false) const;

    int32_t n_vocab() const;
    bool is_valid(int32_t id) const { return id >= 0 && id < n_vocab(); }
    const std::string& token_text(int32_t id) const;  // the vocabulary's text; "" out of range
    float score(int32_t id) const;
    uint32_t attributes(int32_t id) const;  // token_attr bits; 0 out of range
    bool is_control(int32_t id) const { return (attributes(id) & attr_control) != 0; }
    bool is_byte(int32_t id) const { return (attributes(id) & attr_byte) != 0; }
    // End of generation: EOS, EOT, EOM and the tokens llama.cpp recognises by text ("<|im_end|>", ...).
    bool is_eog(int32_t id) const;
    const std::vector<int32_t>& eog_ids() const;  // sorted

    // Special ids; -1 when the model has none.
    int32_t bos() const;
    int32_t eos() const;
    int32_t eot() const;
    int32_t unk() const;
    int32_t pad() const;
    int32_t nl() const;  // the newline token (SPM: <0x0A>; BPE: the first token of "\n")
    bool add_bos() const;
    bool add_eos() const;
    bool add_space_prefix() const;

    vocab_model model() const;
    // The pre-tokenizer in effect ("default" for SPM and for BPE files without tokenizer.ggml.pre).
    const std::string& pre() const;
    // What loading noticed but accepted: an unknown pre-tokenizer replaced by GPT-2's, out-of-range special
    // ids, tokens forced to control type because their text marks end of generation, ...
    const std::vector<std::string>& notes() const;

    struct impl;

private:
    explicit tokenizer(std::shared_ptr<const impl> p) : impl_(std::move(p)) {}
    std::shared_ptr<const impl> impl_;
};

}  // namespace h2okv::tokenizer
