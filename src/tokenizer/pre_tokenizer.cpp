#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

namespace h2okv::tokenizer::detail {

namespace {

// The regexes are llama.cpp's (src/llama-vocab.cpp, llm_tokenizer_bpe), in PCRE2 syntax with non-ASCII
// characters written as \x{...}. Where llama.cpp adapted a tokenizer.json regex (case-insensitive groups
// spelled out, possessive quantifiers dropped), the adapted form is used: it is what llama.cpp runs.
const std::string k_contractions = R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))re";
const std::string k_gpt2 = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
const std::string k_llama3 =
    k_contractions +
    R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const std::string k_qwen2 =
    k_contractions +
    R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const std::string k_cjk = R"re([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)re";
// Cased letters (Unicode LC), as DeepSeek's tokenizer.json lists them.
const std::string k_deepseek_letters =
    R"re(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})re"
    R"re(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})re"
    R"re(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})re"
    R"re(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77})re"
    R"re(\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D})re"
    R"re(\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC})re"
    R"re(\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC})re"
    R"re(\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D})re"
    R"re(\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})re"
    R"re(\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE})re"
    R"re(\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})re"
    R"re(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A})re"
    R"re(\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2})re"
    R"re(\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)re";
const std::string k_poro = R"re( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)re";
// Letters split at ASCII case changes (the lookaheads stand in for \p{Lu}/\p{Ll}, as in llama.cpp).
std::string case_split(const std::string& letter, const std::string& suffix) {
    const std::string upper = "((?=[" + letter + "])([^a-z]))";
    const std::string lower = "((?=[" + letter + "])([^A-Z]))";
    return R"re([^\r\n\p{L}\p{N}]?)re" + upper + "*" + lower + "+" + suffix + R"re(|[^\r\n\p{L}\p{N}]?)re" +
           upper + "+" + lower + "*" + suffix;
}

std::vector<pre_tokenizer_config> make_table() {
    std::vector<pre_tokenizer_config> t;
    auto add = [&](std::vector<std::string> names,
                   std::vector<std::string> regexes) -> pre_tokenizer_config& {
        t.push_back({std::move(names), std::move(regexes)});
        return t.back();
    };
    add({"default"}, {R"re([\p{P}\$\+<=>\^~\|]+)re", k_gpt2, R"re(\p{N}+)re", "[0-9][0-9][0-9]"});
    {
        auto& c = add({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                       "lfm2", "jina-v5-nano"},
                      {k_llama3});
        c.ignore_merges = true;
        c.add_bos = true;
    }
    add({"dbrx", "smaug-bpe"}, {k_llama3});
    add({"glm4", "chatglm-bpe"}, {k_llama3}).no_default_bos = true;
    add({"jais-2"},
        {k_contractions +
         R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)re"
         R"re(|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S))re"
         R"re(|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})re"});
    add({"deepseek-llm"},
        {R"re([\r\n])re", k_deepseek_letters,
         R"re(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)re",
         R"re(\s+$)re", k_cjk, R"re(\p{N}+)re"})
        .clean_spaces = false;
    add({"deepseek-coder"}, {R"re([\r\n])re", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", k_cjk, R"re(\p{N})re"})
        .clean_spaces = false;
    add({"falcon"}, {R"re([\p{P}\$\+<=>\^~\|`]+)re", k_gpt2, "[0-9][0-9][0-9]"});
    add({"starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"}, {R"re(\p{N})re", k_gpt2});
    add({"command-r", "smollm"}, {R"re(\p{N})re", k_gpt2}).clean_spaces = false;
    add({"gpt-2", "phi-2", "gigachat", "a.x-4.0", "mellum", "exaone4", "mpt", "olmo", "jais"}, {k_gpt2});
    add({"trillion", "granite-docling"}, {k_gpt2}).clean_spaces = false;
    add({"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open", "grok-2"}, {k_qwen2})
        .clean_spaces = false;
    add({"stablelm2", "megrez"}, {k_qwen2});
    add({"qwen35"},
        {k_contractions + R"re(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*)re"
                          R"re(|\s*[\r\n]+|\s+(?!\S)|\s+)re"})
        .clean_spaces = false;
    add({"poro-chat"}, {k_poro}).clean_spaces = false;
    add({"bloom", "gpt3-finnish"}, {k_poro});
    add({"viking"}, {k_poro, R"re(\p{N})re"}).clean_spaces = false;
    {
        auto& c = add({"tekken"}, {case_split(R"re(\p{L})re", "") +
                                   R"re(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"});
        c.clean_spaces = false;
        c.ignore_merges = true;
        c.add_bos = true;
    }
    {
        auto& c = add({"chameleon"},
                      {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", R"re(([\t\n]|    |  ))re",
                       R"re(\p{N})re", R"re([\p{P}!-/:-@\[-`{-~])re", k_gpt2});
        c.clean_spaces = false;
        c.add_bos = true;
    }
    const std::string gpt4o_tail = R"re(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
    add({"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"},
        {case_split(R"re(\p{L})re", k_contractions + "?") + gpt4o_tail})
        .clean_spaces = false;
    {
        auto& c = add({"granite-embed-multi-97m"},
                      {case_split(R"re(\p{L}\p{M})re", k_contractions + "?") + gpt4o_tail});
        c.clean_spaces = false;
        c.ignore_merges = true;
    }
    add({"superbpe"}, {R"re(\p{N}+)re", R"re((?=(\d{3})+(?!\d)))re"}).clean_spaces = false;
    add({"bailingmoe", "bailingmoe2", "llada-moe"},
        {R"re('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*)re"
         R"re(|\s*[\r\n]|\s+(?!\S)|\s+)re"})
        .clean_spaces = false;
    add({"seed-coder"}, {k_contractions + R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+)re"
                                          R"re(|\s*[\r\n]+|\s+(?!\S)|\s+)re"})
        .clean_spaces = false;
    add({"ufakzeka"},
        {R"re([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"})
        .clean_spaces = false;
    add({"laguna"}, {R"re([^\n]+|[\n]+)re", k_qwen2}).clean_spaces = false;
    add({"exaone-moe"}, {k_contractions + R"re(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N})re"
                                          R"re(| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)re"});
    add({"minicpm5"},
        {R"re(\p{N}{1,3})re", k_contractions + R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+)re"
                                               R"re(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"})
        .ignore_merges = true;
    return t;
}

const std::vector<pre_tokenizer_config>& table() {
    static const std::vector<pre_tokenizer_config> t = make_table();
    return t;
}

}  // namespace

const pre_tokenizer_config* find_pre_tokenizer(std::string_view name) {
    for (const auto& c : table()) {
        if (std::find(c.names.begin(), c.names.end(), name) != c.names.end()) return &c;
    }
    return nullptr;
}

std::vector<std::string> pre_tokenizer_names() {
    std::vector<std::string> names;
    for (const auto& c : table()) names.insert(names.end(), c.names.begin(), c.names.end());
    std::sort(names.begin(), names.end());
    return names;
}

struct regex_splitter::compiled {
    pcre2_code* code = nullptr;
    std::string pattern;
    ~compiled() { pcre2_code_free(code); }
};

result<regex_splitter> regex_splitter::create(const std::vector<std::string>& regexes) {
    regex_splitter s;
    for (const auto& pattern : regexes) {
        int error = 0;
        PCRE2_SIZE error_offset = 0;
        auto c = std::make_shared<compiled>();
        c->pattern = pattern;
        c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_NO_AUTO_CAPTURE, &error,
                                &error_offset, nullptr);
        if (c->code == nullptr) {
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(error, message, sizeof(message));
            return invalid_argument("pre-tokenizer regex '{}' does not compile at offset {}: {}", pattern,
                                    error_offset, reinterpret_cast<const char*>(message));
        }
        // Without JIT support PCRE2 interprets the pattern: slower, same matches.
        (void)pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);
        s.regexes_.push_back(std::move(c));
    }
    return s;
}

namespace {

// The text the regexes see, and where each unit starts in it.
struct regex_subject {
    std::string text;
    std::vector<size_t> unit_offset;  // [n_units + 1], increasing

    explicit regex_subject(const std::vector<utf8_unit>& units) {
        unit_offset.reserve(units.size() + 1);
        for (const auto& u : units) {
            unit_offset.push_back(text.size());
            uint32_t c = u.cpt;
            if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) c = 0xFFFD;
            if (c >= 0x80 && is_white_space(c)) c = 0x0B;
            append_utf8(text, c);
        }
        unit_offset.push_back(text.size());
    }

    // The unit that starts at byte `offset` of the text (PCRE2 in UTF mode matches on character boundaries).
    size_t unit_at(size_t offset) const {
        return static_cast<size_t>(std::lower_bound(unit_offset.begin(), unit_offset.end(), offset) -
                                   unit_offset.begin());
    }
};

}  // namespace

status regex_splitter::split(const std::vector<utf8_unit>& units, std::vector<size_t>& lengths) const {
    if (units.empty()) return ok_status();
    const regex_subject subject(units);
    std::vector<size_t> pieces{units.size()};
    std::vector<size_t> next;
    for (const auto& re : regexes_) {
        std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
            pcre2_match_data_create_from_pattern(re->code, nullptr), &pcre2_match_data_free);
        if (!md) return out_of_memory("pre-tokenizer: cannot allocate PCRE2 match data");
        next.clear();
        size_t first_unit = 0;
        for (const size_t n_units : pieces) {
            const size_t base = subject.unit_offset[first_unit];
            const size_t size = subject.unit_offset[first_unit + n_units] - base;
            const auto* piece = reinterpret_cast<PCRE2_SPTR>(subject.text.data() + base);
            auto unit_of = [&](size_t byte) { return subject.unit_at(base + byte); };
            size_t start = 0;  // where the next search begins (bytes into the piece)
            size_t done = 0;   // end of what has been emitted
            uint32_t options = 0;
            while (start <= size) {
                uint32_t match_options = options | PCRE2_NO_UTF_CHECK;
                int rc = pcre2_match(re->code, piece, size, start, match_options, md.get(), nullptr);
                if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
                    rc = pcre2_match(re->code, piece, size, start, match_options | PCRE2_NO_JIT, md.get(),
                                     nullptr);
                }
                if (rc == PCRE2_ERROR_NOMATCH) {
                    if (options == 0 || start >= size) break;
                    // After an empty match, std::regex_iterator retries for a non-empty match at the same
                    // place, then moves on by one character.
                    options = 0;
                    start += utf8_sequence_length(piece[start]);
                    continue;
                }
                if (rc < 0) {
                    PCRE2_UCHAR message[256];
                    pcre2_get_error_message(rc, message, sizeof(message));
                    return internal_error(
                        "pre-tokenizer regex '{}' failed on a {}-byte piece of the input: {}", re->pattern,
                        size, reinterpret_cast<const char*>(message));
                }
                const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
                const size_t match_begin = ov[0];
                const size_t match_end = ov[1];
                if (match_begin > done) next.push_back(unit_of(match_begin) - unit_of(done));
                if (match_end > match_begin) next.push_back(unit_of(match_end) - unit_of(match_begin));
                done = match_end;
                start = match_end;
                options = match_end == match_begin ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
                if (start == size && options == 0) break;
            }
            if (done < size) next.push_back(unit_of(size) - unit_of(done));
            first_unit += n_units;
        }
        pieces.swap(next);
    }
    lengths.insert(lengths.end(), pieces.begin(), pieces.end());
    return ok_status();
}

}  // namespace h2okv::tokenizer::detail
