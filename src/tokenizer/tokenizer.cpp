#include "h2okv/tokenizer/tokenizer.h"

#include <algorithm>
#include <limits>
#include <set>

#include "tokenizer/impl.h"
#include "tokenizer/unicode.h"

namespace h2okv::tokenizer {

namespace {

constexpr std::string_view k_escaped_space = "\xE2\x96\x81";  // U+2581

bool is_c_space(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
}

uint32_t attr_of_type(token_type t) {
    switch (t) {
        case token_type::normal: return attr_normal;
        case token_type::unknown: return attr_unknown;
        case token_type::control: return attr_control;
        case token_type::user_defined: return attr_user_defined;
        case token_type::unused: return attr_unused;
        case token_type::byte: return attr_byte;
        default: return attr_undefined;
    }
}

// Token texts llama.cpp treats as special whatever their type says (llama_vocab::impl::load).
const std::vector<std::string_view> k_eot_texts = {"<|eot_id|>",
                                                   "<|im_end|>",
                                                   "<|end|>",
                                                   "<end_of_turn>",
                                                   "<|endoftext|>",
                                                   "<|end_of_text|>",
                                                   "<EOT>",
                                                   "_<EOT>",
                                                   "[EOT]",
                                                   "<\xEF\xBD\x9C"
                                                   "end\xE2\x96\x81"
                                                   "of\xE2\x96\x81"
                                                   "sentence\xEF\xBD\x9C>",
                                                   "<end_of_utterance>"};
const std::vector<std::string_view> k_eom_texts = {"<|eom_id|>"};
const std::vector<std::string_view> k_fim_pre_texts = {"<|fim_prefix|>",
                                                       "<fim-prefix>",
                                                       "<fim_prefix>",
                                                       "<\xEF\xBD\x9C"
                                                       "fim\xE2\x96\x81"
                                                       "begin\xEF\xBD\x9C>",
                                                       "<PRE>",
                                                       "\xE2\x96\x81<PRE>",
                                                       "<|code_prefix|>",
                                                       "<|prefix|>"};
const std::vector<std::string_view> k_fim_suf_texts = {"<|fim_suffix|>",
                                                       "<fim-suffix>",
                                                       "<fim_suffix>",
                                                       "<\xEF\xBD\x9C"
                                                       "fim\xE2\x96\x81"
                                                       "hole\xEF\xBD\x9C>",
                                                       "<SUF>",
                                                       "\xE2\x96\x81<SUF>",
                                                       "<|code_suffix|>",
                                                       "<|suffix|>"};
const std::vector<std::string_view> k_fim_mid_texts = {"<|fim_middle|>",
                                                       "<fim-middle>",
                                                       "<fim_middle>",
                                                       "<\xEF\xBD\x9C"
                                                       "fim\xE2\x96\x81"
                                                       "end\xEF\xBD\x9C>",
                                                       "<MID>",
                                                       "\xE2\x96\x81<MID>",
                                                       "<|code_middle|>",
                                                       "<|middle|>"};
const std::vector<std::string_view> k_fim_pad_texts = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                                       "[PAD]"};
const std::vector<std::string_view> k_fim_rep_texts = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                                       "<REPO>", "<reponame>"};
const std::vector<std::string_view> k_fim_sep_texts = {"<|file_sep|>"};
const std::vector<std::string_view> k_eog_texts = {"<|eot_id|>",
                                                   "<|im_end|>",
                                                   "<|end|>",
                                                   "<|return|>",
                                                   "<|call|>",
                                                   "<|flush|>",
                                                   "<|calls|>",
                                                   "<end_of_turn>",
                                                   "<|endoftext|>",
                                                   "</s>",
                                                   "<|eom_id|>",
                                                   "<EOT>",
                                                   "_<EOT>",
                                                   "[EOT]",
                                                   "[EOS]",
                                                   "<|end_of_text|>",
                                                   "<end_of_utterance>",
                                                   "<eos>",
                                                   "<turn|>",
                                                   "<|tool_response>",
                                                   "<\xEF\xBD\x9C"
                                                   "end\xE2\x96\x81"
                                                   "of\xE2\x96\x81"
                                                   "sentence\xEF\xBD\x9C>",
                                                   "[e~["};

bool contains(const std::vector<std::string_view>& list, std::string_view s) {
    return std::find(list.begin(), list.end(), s) != list.end();
}

// llama.cpp's model defaults, then the file's value: -1 (none) is taken as is, an id outside the vocabulary
// is refused with a note.
void resolve_id(const char* key, const std::optional<int64_t>& from_file, int32_t fallback, int32_t n_vocab,
                int32_t& id, std::vector<std::string>& notes) {
    id = fallback;
    if (id >= n_vocab) {
        notes.push_back(fmt::format("default {} {} is outside the vocabulary of {} tokens; using none", key,
                                    id, n_vocab));
        id = -1;
    }
    if (!from_file) return;
    if (*from_file == -1) {
        id = -1;
    } else if (*from_file < 0 || *from_file >= n_vocab) {
        notes.push_back(fmt::format("{} {} is outside the vocabulary of {} tokens; using {}", key, *from_file,
                                    n_vocab, id));
    } else {
        id = static_cast<int32_t>(*from_file);
    }
}

// What clean_up_tokenization_spaces does in llama.cpp's llama_detokenize, byte for byte (in place).
void clean_up_spaces(std::string& text) {
    int64_t total = static_cast<int64_t>(text.size());
    // " ?", " !", " .", " ," lose the space.
    const int64_t total1 = total;
    total = total ? 1 : 0;
    for (int64_t i = 1; i < total1; ++i) {
        const char x = text[i];
        if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --total;
        text[total++] = x;
    }
    // " ' " loses both spaces.
    const int64_t total2 = total;
    total = total ? 1 : 0;
    for (int64_t i = 1; i < total2; ++i) {
        const char x = text[i];
        if (x == '\'' && i + 1 < total2 && text[i - 1] == ' ' && text[i + 1] == ' ') {
            --total;
            text[++i] = '\0';
        }
        text[total++] = x;
    }
    // " 's", " 'm", " 're", " 've" lose the space.
    const int64_t total3 = total;
    total = total ? 1 : 0;
    for (int64_t i = 1; i < total3; ++i) {
        const char x = text[i];
        if (text[i - 1] == ' ' && x == '\'' && i + 1 < total3) {
            const char x1 = text[i + 1];
            if (x1 == 's' || x1 == 'm') {
                --total;
            } else if (x1 != 't' && x1 != 'd' && i + 2 < total3) {
                const char x2 = text[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) --total;
            }
        }
        text[total++] = x;
    }
    text.resize(static_cast<size_t>(total));
}

std::string lowercase(std::string s) {
    for (char& c : s) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return s;
}

}  // namespace

std::vector<std::string> supported_pre_tokenizers() {
    return detail::pre_tokenizer_names();
}

result<tokenizer> tokenizer::from_gguf(const gguf::file& file) {
    H2OKV_ASSIGN_OR_RETURN(vocab v, load_vocab(file));
    auto t = from_vocab(std::move(v));
    if (!t.ok()) return t.error().with_context(fmt::format("tokenizer of '{}'", file.path()));
    return t;
}

result<tokenizer> tokenizer::from_vocab(vocab v) {
    auto p = std::make_shared<impl>();
    impl& t = *p;
    const size_t n = v.tokens.size();
    if (n == 0) {
        return invalid_argument("tokenizer: the vocabulary has no tokens (tokenizer.ggml.tokens is empty)");
    }
    if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
        return invalid_argument("tokenizer: {} tokens do not fit 32-bit token ids", n);
    }
    const auto n_vocab = static_cast<int32_t>(n);
    if (!v.scores.empty() && v.scores.size() < n) {
        return invalid_argument("tokenizer: {} scores for {} tokens (tokenizer.ggml.scores)", v.scores.size(),
                                n);
    }
    if (!v.types.empty() && v.types.size() < n) {
        return invalid_argument("tokenizer: {} token types for {} tokens (tokenizer.ggml.token_type)",
                                v.types.size(), n);
    }
    t.model = v.model;

    // Flags and pre-tokenizer: the model's defaults, then the file's keys.
    if (v.model == vocab_model::bpe) {
        const detail::pre_tokenizer_config* pre = nullptr;
        if (v.pre.empty()) {
            t.notes.push_back(
                "tokenizer.ggml.pre is missing; using the 'default' pre-tokenizer (llama.cpp warns that "
                "generation quality may suffer)");
            pre = detail::find_pre_tokenizer("default");
            t.pre = "default";
        } else {
            pre = detail::find_pre_tokenizer(v.pre);
            t.pre = v.pre;
            if (pre == nullptr) {
                t.notes.push_back(fmt::format(
                    "pre-tokenizer '{}' (tokenizer.ggml.pre) is not supported; splitting words with GPT-2's "
                    "regex instead, so tokens may differ from the model's own tokenizer",
                    v.pre));
                pre = detail::find_pre_tokenizer("gpt-2");
                t.pre = "gpt-2";
            }
        }
        t.ignore_merges = pre->ignore_merges;
        t.clean_spaces = pre->clean_spaces;
        t.add_bos = pre->add_bos;
        t.add_space_prefix = false;
        H2OKV_ASSIGN_OR_RETURN(auto splitter, detail::regex_splitter::create(pre->regexes));
        t.splitter = std::move(splitter);
        if (v.merges.empty()) {
            return invalid_argument(
                "tokenizer: a gpt2 vocabulary needs merges (tokenizer.ggml.merges is missing)");
        }
        t.merge_rank.reserve(v.merges.size());
        // Keys are the merge strings themselves; a repeated merge keeps its first rank. Merges without a
        // space after their first character cannot match any pair (llama.cpp keys them ("", "")).
        for (size_t i = 0; i < v.merges.size(); ++i) {
            const std::string& m = v.merges[i];
            if (m.size() >= 2 && m.find(' ', 1) != std::string::npos) {
                t.merge_rank.emplace(m, static_cast<int32_t>(i));
            }
        }
    } else {
        t.pre = "default";
        t.add_space_prefix = true;
        t.add_bos = true;
    }
    if (v.add_space_prefix) t.add_space_prefix = *v.add_space_prefix;

    // Tokens and attributes.
    t.token_texts = std::move(v.tokens);
    t.scores.assign(n, 0.0f);
    if (!v.scores.empty()) std::copy(v.scores.begin(), v.scores.begin() + n_vocab, t.scores.begin());
    t.attrs.assign(n, attr_normal);
    t.to_id.reserve(n);
    for (int32_t i = 0; i < n_vocab; ++i) {
        if (!v.types.empty()) t.attrs[i] = attr_of_type(v.types[i]);
        if (t.token_texts[i].empty()) {
            t.notes.push_back(fmt::format("token {} has empty text; it is named '[EMPTY_{}]'", i, i));
            t.token_texts[i] = fmt::format("[EMPTY_{}]", i);
        }
        const auto [it, inserted] = t.to_id.emplace(t.token_texts[i], i);
        if (!inserted) {
            return invalid_argument("tokenizer: duplicate token in the vocabulary: '{}' has ids {} and {}",
                                    t.token_texts[i], it->second, i);
        }
    }

    // Special ids. The defaults are llama.cpp's: <unk> <s> </s> = 0 1 2 for SentencePiece, 11 (Falcon's
    // <|endoftext|>) for BPE.
    const bool spm = v.model == vocab_model::spm;
    const bool no_default_bos = !spm && detail::find_pre_tokenizer(t.pre)->no_default_bos;
    resolve_id("tokenizer.ggml.bos_token_id", v.ids.bos, spm ? 1 : (no_default_bos ? -1 : 11), n_vocab, t.bos,
               t.notes);
    resolve_id("tokenizer.ggml.eos_token_id", v.ids.eos, spm ? 2 : 11, n_vocab, t.eos, t.notes);
    resolve_id("tokenizer.ggml.eot_token_id", v.ids.eot, -1, n_vocab, t.eot, t.notes);
    resolve_id("tokenizer.ggml.eom_token_id", v.ids.eom, -1, n_vocab, t.eom, t.notes);
    resolve_id("tokenizer.ggml.unknown_token_id", v.ids.unk, spm ? 0 : -1, n_vocab, t.unk, t.notes);
    resolve_id("tokenizer.ggml.seperator_token_id", v.ids.sep, -1, n_vocab, t.sep, t.notes);
    resolve_id("tokenizer.ggml.padding_token_id", v.ids.pad, -1, n_vocab, t.pad, t.notes);
    resolve_id("tokenizer.ggml.mask_token_id", v.ids.mask, -1, n_vocab, t.mask, t.notes);
    resolve_id("tokenizer.ggml.fim_pre_token_id", v.ids.fim_pre, -1, n_vocab, t.fim_pre, t.notes);
    resolve_id("tokenizer.ggml.fim_suf_token_id", v.ids.fim_suf, -1, n_vocab, t.fim_suf, t.notes);
    resolve_id("tokenizer.ggml.fim_mid_token_id", v.ids.fim_mid, -1, n_vocab, t.fim_mid, t.notes);
    resolve_id("tokenizer.ggml.fim_pad_token_id", v.ids.fim_pad, -1, n_vocab, t.fim_pad, t.notes);
    resolve_id("tokenizer.ggml.fim_rep_token_id", v.ids.fim_rep, -1, n_vocab, t.fim_rep, t.notes);
    resolve_id("tokenizer.ggml.fim_sep_token_id", v.ids.fim_sep, -1, n_vocab, t.fim_sep, t.notes);
    if (v.add_bos) t.add_bos = *v.add_bos;
    if (v.add_eos) t.add_eos = *v.add_eos;
    if (t.add_bos && t.bos < 0) {
        return invalid_argument(
            "tokenizer: tokenizer.ggml.add_bos_token is true, but the vocabulary has no BOS token "
            "(tokenizer.ggml.bos_token_id)");
    }
    if (t.add_eos && t.eos < 0) {
        return invalid_argument(
            "tokenizer: tokenizer.ggml.add_eos_token is true, but the vocabulary has no EOS token "
            "(tokenizer.ggml.eos_token_id)");
    }

    // Special tokens recognised by text; llama.cpp makes each of them a control token.
    auto force_control = [&](int32_t id) {
        if ((t.attrs[id] & attr_control) == 0) {
            t.notes.push_back(fmt::format("token {} '{}' looks like a control token; its type is overridden",
                                          id, t.token_texts[id]));
            t.attrs[id] |= attr_control;
        }
    };
    struct detected {
        int32_t* id;
        const std::vector<std::string_view>* texts;
    };
    const detected by_text[] = {{&t.eot, &k_eot_texts},         {&t.eom, &k_eom_texts},
                                {&t.fim_pre, &k_fim_pre_texts}, {&t.fim_suf, &k_fim_suf_texts},
                                {&t.fim_mid, &k_fim_mid_texts}, {&t.fim_pad, &k_fim_pad_texts},
                                {&t.fim_rep, &k_fim_rep_texts}, {&t.fim_sep, &k_fim_sep_texts}};
    for (const auto& d : by_text) {
        if (*d.id != -1) continue;
        for (int32_t i = 0; i < n_vocab; ++i) {
            if (contains(*d.texts, t.token_texts[i])) {
                *d.id = i;
                force_control(i);
                break;
            }
        }
    }
    for (int32_t i = 0; i < n_vocab; ++i) {
        if ((t.attrs[i] & attr_control) && t.token_texts[i].find("unused") != std::string::npos) {
            t.attrs[i] |= attr_unused;
        }
    }
    std::set<int32_t> eog;
    for (const int32_t id : {t.fim_pad, t.fim_rep, t.fim_sep}) {
        if (id >= 0) eog.insert(id);
    }
    for (int32_t i = 0; i < n_vocab; ++i) {
        if (contains(k_eog_texts, t.token_texts[i])) {
            eog.insert(i);
            force_control(i);
        }
    }
    for (int32_t i = 0; i < n_vocab; ++i) {
        const std::string& s = t.token_texts[i];
        if (s == "<|channel|>" || s == "<|message|>" || s == "<|start|>" || s == "<|constrain|>") {
            t.attrs[i] = attr_user_defined;
        }
    }
    for (const int32_t id : {t.eos, t.eot, t.eom}) {
        if (id >= 0) eog.insert(id);
    }
    // Harmony-style vocabularies end a turn with <|end|> but not generation; Gemma-4-style ones keep </s>.
    auto eog_with_text = [&](std::string_view s) {
        for (const int32_t id : eog) {
            if (t.token_texts[id] == s) return id;
        }
        return -1;
    };
    const int32_t end_id = eog_with_text("<|end|>");
    const bool has_call = eog_with_text("<|call|>") >= 0 || eog_with_text("<|calls|>") >= 0;
    if (end_id >= 0 && has_call && (eog_with_text("<|return|>") >= 0 || eog_with_text("<|flush|>") >= 0)) {
        eog.erase(end_id);
        t.attrs[end_id] = attr_user_defined;
    }
    const int32_t s_id = eog_with_text("</s>");
    if (s_id >= 0 && eog_with_text("<|tool_response>") >= 0) {
        eog.erase(s_id);
        t.attrs[s_id] = attr_normal;
    }
    t.eog.assign(eog.begin(), eog.end());

    for (int32_t i = 0; i < n_vocab; ++i) {
        if (t.attrs[i] & (attr_control | attr_user_defined | attr_unknown)) t.specials.push_back(i);
    }
    std::stable_sort(t.specials.begin(), t.specials.end(),
                     [&](int32_t a, int32_t b) { return t.token_texts[a].size() > t.token_texts[b].size(); });

    const std::string name = lowercase(v.model_name);
    if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
        for (const int32_t id : t.specials) t.attrs[id] |= attr_rstrip;
        auto set_rstrip = [&](std::string_view s, bool on) {
            const int32_t id = t.find(s);
            if (id < 0) return;
            t.attrs[id] = on ? (t.attrs[id] | attr_rstrip) : (t.attrs[id] & ~attr_rstrip);
        };
        set_rstrip("</s>", true);
        for (const auto* s : {"<unk>", "<s>", "<|endoftext|>"}) set_rstrip(s, false);
    }

    // Byte tokens (SPM) and the newline token.
    t.byte_token.fill(-1);
    if (spm) {
        for (int b = 0; b < 256; ++b) {
            int32_t id = t.find(fmt::format("<0x{:02X}>", b));
            if (id < 0) id = t.find(std::string(1, static_cast<char>(b)));
            t.byte_token[b] = id;
        }
        t.newline = t.byte_token['\n'] >= 0 ? t.byte_token['\n'] : t.pad;
    } else {
        std::vector<int32_t> ids;
        if (t.encode_bpe("\n", ids).ok() && !ids.empty()) {
            t.newline = ids[0];
        } else {
            t.newline = t.pad;
        }
    }
    return tokenizer(std::move(p));
}

result<std::vector<int32_t>> tokenizer::encode(std::string_view text, bool add_special,
                                               bool parse_special) const {
    const impl& t = *impl_;
    struct fragment {
        int32_t token = -1;  // -1: raw text [offset, offset + length)
        size_t offset = 0;
        size_t length = 0;
    };
    // Special tokens first, longest first, as llama.cpp's tokenizer_st_partition.
    std::vector<fragment> fragments;
    if (!text.empty()) fragments.push_back({-1, 0, text.size()});
    std::vector<fragment> next;
    for (const int32_t id : t.specials) {
        const uint32_t attr = t.attrs[id];
        if (!parse_special && (attr & (attr_control | attr_unknown))) continue;
        const std::string_view special = t.token_texts[id];
        next.clear();
        for (const fragment& f : fragments) {
            if (f.token >= 0) {
                next.push_back(f);
                continue;
            }
            size_t offset = f.offset;
            size_t length = f.length;
            while (length > 0) {
                const size_t match = text.substr(0, offset + length).find(special, offset);
                if (match == std::string_view::npos) {
                    next.push_back({-1, offset, length});
                    break;
                }
                size_t left = match - offset;
                if (attr & attr_lstrip) {
                    while (left > 0 && is_c_space(text[offset + left - 1])) --left;
                }
                if (left > 0) next.push_back({-1, offset, left});
                next.push_back({id, 0, 0});
                size_t right_offset = match + special.size();
                size_t right = offset + length - right_offset;
                if (attr & attr_rstrip) {
                    while (right > 0 && is_c_space(text[right_offset])) {
                        ++right_offset;
                        --right;
                    }
                }
                offset = right_offset;
                length = right;
            }
        }
        fragments.swap(next);
    }

    std::vector<int32_t> out;
    if (add_special && t.add_bos) out.push_back(t.bos);
    bool prev_special = true;  // SPM: the dummy prefix goes before the first text and after special tokens
    std::string escaped;
    for (const fragment& f : fragments) {
        if (f.token >= 0) {
            out.push_back(f.token);
            prev_special = true;
            continue;
        }
        const std::string_view raw = text.substr(f.offset, f.length);
        if (t.model == vocab_model::spm) {
            escaped.clear();
            if (t.add_space_prefix && prev_special) escaped += k_escaped_space;
            for (const char c : raw) {
                if (c == ' ') {
                    escaped += k_escaped_space;
                } else {
                    escaped.push_back(c);
                }
            }
            H2OKV_RETURN_IF_ERROR(t.encode_spm(escaped, out));
            prev_special = false;
        } else {
            H2OKV_RETURN_IF_ERROR(t.encode_bpe(raw, out));
        }
    }
    if (add_special && t.add_eos) out.push_back(t.eos);
    return out;
}

std::string tokenizer::impl::piece(int32_t id, bool special) const {
    if (id < 0 || id >= static_cast<int32_t>(token_texts.size())) return {};
    const uint32_t attr = attrs[id];
    if (!special && (attr & (attr_unknown | attr_control))) return {};
    const std::string& s = token_texts[id];
    if (attr & (attr_unknown | attr_control | attr_user_defined)) return s;
    if (attr & attr_normal) {
        std::string out;
        if (model == vocab_model::spm) {
            for (size_t i = 0; i < s.size();) {
                if (s.compare(i, k_escaped_space.size(), k_escaped_space) == 0) {
                    out.push_back(' ');
                    i += k_escaped_space.size();
                } else {
                    out.push_back(s[i++]);
                }
            }
        } else {
            // Byte-level characters back to bytes; anything else (not produced by a byte-level vocabulary)
            // passes through as it is written.
            for (const auto& u : detail::decode_utf8(s)) {
                const int b = u.size == 1 && u.cpt == 0xFFFD ? -1 : detail::code_point_to_byte(u.cpt);
                if (b >= 0) {
                    out.push_back(static_cast<char>(b));
                } else {
                    out.append(s, u.offset, u.size);
                }
            }
        }
        return out;
    }
    if (attr & attr_byte) {
        // "<0xNN>"
        auto hex = [](char c) -> int {
            if (c >= '0' && c <= '9') return c - '0';
            if (c >= 'A' && c <= 'F') return c - 'A' + 10;
            if (c >= 'a' && c <= 'f') return c - 'a' + 10;
            return -1;
        };
        if (s.size() == 6 && s.compare(0, 3, "<0x") == 0 && s[5] == '>' && hex(s[3]) >= 0 && hex(s[4]) >= 0) {
            return std::string(1, static_cast<char>(hex(s[3]) * 16 + hex(s[4])));
        }
        return s;
    }
    return {};
}

std::string tokenizer::decode(std::span<const int32_t> ids, const decode_options& options) const {
    const impl& t = *impl_;
    bool remove_space = t.add_space_prefix;
    if (options.remove_special && t.add_bos && !ids.empty() && ids.front() == t.bos) {
        remove_space = false;
        ids = ids.subspan(1);
    }
    if (options.remove_special && t.add_eos && !ids.empty() && ids.back() == t.eos)
        ids = ids.first(ids.size() - 1);
    std::string out;
    for (const int32_t id : ids) {
        const std::string p = t.piece(id, options.unparse_special);
        const size_t skip = remove_space && !p.empty() && p[0] == ' ' ? 1 : 0;
        out.append(p, skip, std::string::npos);
        remove_space = false;
    }
    if (t.clean_spaces) clean_up_spaces(out);
    return out;
}

std::string tokenizer::piece(int32_t id, bool special) const {
    return impl_->piece(id, special);
}

int32_t tokenizer::n_vocab() const {
    return static_cast<int32_t>(impl_->token_texts.size());
}

const std::string& tokenizer::token_text(int32_t id) const {
    static const std::string empty;
    return is_valid(id) ? impl_->token_texts[id] : empty;
}

float tokenizer::score(int32_t id) const {
    return is_valid(id) ? impl_->scores[id] : 0.0f;
}

uint32_t tokenizer::attributes(int32_t id) const {
    return is_valid(id) ? impl_->attrs[id] : 0u;
}

bool tokenizer::is_eog(int32_t id) const {
    return std::binary_search(impl_->eog.begin(), impl_->eog.end(), id);
}

const std::vector<int32_t>& tokenizer::eog_ids() const {
    return impl_->eog;
}

int32_t tokenizer::bos() const {
    return impl_->bos;
}
int32_t tokenizer::eos() const {
    return impl_->eos;
}
int32_t tokenizer::eot() const {
    return impl_->eot;
}
int32_t tokenizer::unk() const {
    return impl_->unk;
}
int32_t tokenizer::pad() const {
    return impl_->pad;
}
int32_t tokenizer::nl() const {
    return impl_->newline;
}
bool tokenizer::add_bos() const {
    return impl_->add_bos;
}
bool tokenizer::add_eos() const {
    return impl_->add_eos;
}
bool tokenizer::add_space_prefix() const {
    return impl_->add_space_prefix;
}
vocab_model tokenizer::model() const {
    return impl_->model;
}
const std::string& tokenizer::pre() const {
    return impl_->pre;
}
const std::vector<std::string>& tokenizer::notes() const {
    return impl_->notes;
}

}  // namespace h2okv::tokenizer
