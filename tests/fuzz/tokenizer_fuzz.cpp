// libFuzzer target: arbitrary bytes through every vocabulary's encode() and decode().
//
// The vocabularies are loaded once: the bundled stories260K (SPM) and, when ../shared is present, every
// vocab/*.gguf (SPM llama-spm, phi-3; BPE gpt-2, deepseek-llm, mpt, refact). The first input byte picks the
// vocabulary and the flags, the rest is the text. Checked, beyond "never crashes":
//  - every id encode() returns is inside the vocabulary;
//  - decode() of arbitrary ids (the text's bytes read as int32, in range or not) returns;
//  - round trip decode(encode(x)) == x for valid UTF-8 x without U+2581 and without the text of any
//    special (control, user-defined, unknown) token. SPM always; BPE only when x has no " ?", " !", " .",
//    " ," or " '" (tokenizer.h: BPE models with clean-up apply llama.cpp's clean_up_tokenization_spaces on
//    decode, which removes those spaces) and no id is the unknown token (bytes the vocabulary lacks).
//
//   fuzz_tokenizer -max_total_time=30 tests/fuzz/corpus/tokenizer
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "h2okv/gguf/gguf.h"
#include "h2okv/tokenizer/tokenizer.h"

namespace {

using namespace h2okv;

struct loaded_vocab {
    std::string name;
    std::unique_ptr<gguf::file> file;
    tokenizer::tokenizer tok;
    std::vector<std::string> special_texts;  // non-empty texts of control, user-defined and unknown tokens
};

std::vector<loaded_vocab> load_all() {
    std::vector<std::string> paths = {H2OKV_SOURCE_DIR "/models/stories260K.gguf"};
    const std::filesystem::path vocab_dir = H2OKV_SHARED_DIR "/vocab";
    std::error_code ec;
    std::vector<std::string> shared;
    for (const auto& e : std::filesystem::directory_iterator(vocab_dir, ec)) {
        if (e.path().extension() == ".gguf") shared.push_back(e.path().string());
    }
    std::sort(shared.begin(), shared.end());  // the first byte must pick the same vocabulary on every run
    paths.insert(paths.end(), shared.begin(), shared.end());

    std::vector<loaded_vocab> out;
    for (const auto& path : paths) {
        auto f = gguf::file::open(path);
        if (!f.ok()) {
            std::fprintf(stderr, "fuzz_tokenizer: %s\n", f.error().message().c_str());
            std::abort();
        }
        auto tok = tokenizer::tokenizer::from_gguf(**f);
        if (!tok.ok()) {
            std::fprintf(stderr, "fuzz_tokenizer: %s\n", tok.error().message().c_str());
            std::abort();
        }
        loaded_vocab v{std::filesystem::path(path).filename().string(), std::move(*f), std::move(*tok), {}};
        for (int32_t id = 0; id < v.tok.n_vocab(); ++id) {
            const uint32_t a = v.tok.attributes(id);
            const bool special =
                (a & (tokenizer::attr_control | tokenizer::attr_user_defined | tokenizer::attr_unknown)) != 0;
            if (special && !v.tok.token_text(id).empty()) v.special_texts.push_back(v.tok.token_text(id));
        }
        out.push_back(std::move(v));
    }
    std::fprintf(stderr, "fuzz_tokenizer: %zu vocabularies\n", out.size());
    return out;
}

const std::vector<loaded_vocab>& vocabs() {
    static const std::vector<loaded_vocab> v = load_all();
    return v;
}

bool valid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        size_t n = 0;
        uint32_t cp = 0;
        if (c < 0x80) {
            ++i;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 1;
            cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2;
            cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (i + n >= s.size()) return false;  // the sequence runs past the end
        for (size_t k = 1; k <= n; ++k) {
            const auto cc = static_cast<unsigned char>(s[i + k]);
            if ((cc & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (cc & 0x3f);
        }
        const uint32_t min_cp[] = {0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += n + 1;
    }
    return true;
}

bool changed_by_clean_up(std::string_view s) {
    for (size_t i = 0; i + 1 < s.size(); ++i) {
        if (s[i] != ' ') continue;
        const char x = s[i + 1];
        if (x == '?' || x == '!' || x == '.' || x == ',' || x == '\'') return true;
    }
    return false;
}

void fail(const loaded_vocab& v, std::string_view what, std::string_view text, std::string_view got) {
    std::fprintf(stderr, "fuzz_tokenizer: %s: %.*s\n  input (%zu bytes): ", v.name.c_str(),
                 static_cast<int>(what.size()), what.data(), text.size());
    for (const char c : text) std::fprintf(stderr, "\\x%02x", static_cast<unsigned char>(c));
    std::fprintf(stderr, "\n  got (%zu bytes): ", got.size());
    for (const char c : got) std::fprintf(stderr, "\\x%02x", static_cast<unsigned char>(c));
    std::fprintf(stderr, "\n");
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto& all = vocabs();
    if (size == 0) return 0;
    const uint8_t selector = data[0];
    const loaded_vocab& v = all[selector % all.size()];
    const bool add_special = (selector & 0x40) != 0;
    const bool parse_special = (selector & 0x80) != 0;
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

    auto ids = v.tok.encode(text, add_special, parse_special);
    if (ids.ok()) {
        for (const int32_t id : *ids) {
            if (!v.tok.is_valid(id)) fail(v, "encode returned an id outside the vocabulary", text, "");
        }
        (void)v.tok.decode(*ids, {.remove_special = true, .unparse_special = true});
        const std::string plain = v.tok.decode(*ids);

        const bool is_spm = v.tok.model() == tokenizer::vocab_model::spm;
        bool round_trip =
            !add_special && valid_utf8(text) && text.find("\xe2\x96\x81") == std::string_view::npos;
        for (const auto& s : v.special_texts)
            round_trip = round_trip && text.find(s) == std::string_view::npos;
        if (!is_spm) {
            round_trip = round_trip && !changed_by_clean_up(text);
            for (const int32_t id : *ids) round_trip = round_trip && id != v.tok.unk();
        }
        if (round_trip && plain != text) fail(v, "decode(encode(x)) != x", text, plain);
    } else if (ids.error().message().empty()) {
        fail(v, "encode failed without a message", text, "");
    }

    // Arbitrary ids, in range or not.
    std::vector<int32_t> raw((size - 1) / sizeof(int32_t));
    if (!raw.empty()) std::memcpy(raw.data(), data + 1, raw.size() * sizeof(int32_t));
    (void)v.tok.decode(raw);
    (void)v.tok.decode(raw, {.remove_special = true, .unparse_special = true});
    for (const int32_t id : raw) (void)v.tok.piece(id, (selector & 1) != 0);
    return 0;
}
