// Byte-level BPE and its pre-tokenizers on hand-built vocabularies.
#include <gtest/gtest.h>

#include "h2okv/tokenizer/tokenizer.h"
#include "test_vocabs.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"

namespace h2okv::tokenizer {
namespace {

using testing::bpe_vocab;
using testing::id_of;
using ids = std::vector<int32_t>;
using words = std::vector<std::string>;

tokenizer make(vocab v) {
    auto t = tokenizer::from_vocab(std::move(v));
    EXPECT_TRUE(t.ok()) << t.error().to_string();
    return std::move(t).value();
}

ids encode(const tokenizer& t, std::string_view text, bool parse_special = false) {
    auto r = t.encode(text, /*add_special=*/false, parse_special);
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    return r.ok() ? *r : ids{};
}

// The words a pre-tokenizer splits `text` into.
words split(std::string_view pre, std::string_view text) {
    const auto* config = detail::find_pre_tokenizer(pre);
    EXPECT_NE(config, nullptr) << pre;
    if (config == nullptr) return {};
    auto splitter = detail::regex_splitter::create(config->regexes);
    EXPECT_TRUE(splitter.ok()) << splitter.error().to_string();
    const auto units = detail::decode_utf8(text);
    std::vector<size_t> lengths;
    const auto st = splitter->split(units, lengths);
    EXPECT_TRUE(st.ok()) << st.to_string();
    words out;
    size_t first = 0;
    for (const size_t n : lengths) {
        const size_t begin = units[first].offset;
        const size_t end = first + n < units.size() ? units[first + n].offset : text.size();
        out.emplace_back(text.substr(begin, end - begin));
        first += n;
    }
    return out;
}

TEST(byte_level, printable_bytes_map_to_themselves_and_the_rest_above_0xff) {
    EXPECT_EQ(detail::byte_to_code_point('a'), uint32_t{'a'});
    EXPECT_EQ(detail::byte_to_code_point(' '), 0x120u);   // 'Ġ'
    EXPECT_EQ(detail::byte_to_code_point('\n'), 0x10Au);  // 'Ċ'
    EXPECT_EQ(detail::byte_to_code_point(0x00), 0x100u);
    EXPECT_EQ(detail::byte_to_code_point(0xAD), 0x143u);
    EXPECT_EQ(detail::byte_to_code_point(0xFF), 0xFFu);
    for (int b = 0; b < 256; ++b) EXPECT_EQ(detail::code_point_to_byte(detail::byte_to_code_point(b)), b);
    EXPECT_EQ(detail::code_point_to_byte(0xA0), -1);  // remapped, so not in the alphabet itself
    EXPECT_EQ(detail::code_point_to_byte(0x2581), -1);
}

TEST(pre_tokenizer, gpt2_splits_contractions_letters_numbers_and_spaces) {
    EXPECT_EQ(split("gpt-2", "Hello world's  3 apples!!\t\n x"),
              (words{"Hello", " world", "'s", " ", " 3", " apples", "!!", "\t\n", " x"}));
    EXPECT_EQ(split("gpt-2", "   Hello"), (words{"  ", " Hello"}));
    EXPECT_EQ(split("gpt-2", "a  "), (words{"a", "  "}));
}

TEST(pre_tokenizer, llama3_groups_digits_by_three_and_keeps_newlines_apart) {
    EXPECT_EQ(split("llama-bpe", "1234567 I'M here\n\n  x"),
              (words{"123", "456", "7", " I", "'M", " here", "\n\n", " ", " x"}));
    EXPECT_EQ(split("llama-bpe", "a,b"), (words{"a", ",b"}));
}

TEST(pre_tokenizer, regexes_apply_one_after_another) {
    // deepseek-llm: newlines first, then cased letters, punctuation, trailing spaces, CJK, digits.
    EXPECT_EQ(split("deepseek-llm", "Hi, 3.14\n\xE6\x88\x91\xE6\x83\xB3  "),
              (words{"Hi", ",", " ", "3", ".", "14", "\n", "\xE6\x88\x91\xE6\x83\xB3", "  "}));
    // starcoder: every digit alone before the GPT-2 regex runs.
    EXPECT_EQ(split("starcoder", "x 123"), (words{"x", " ", "1", "2", "3"}));
}

TEST(pre_tokenizer, empty_matches_split_as_std_regex_does) {
    // superbpe's second regex matches only empty strings: before each group of three digits from the right.
    EXPECT_EQ(split("superbpe", "1234567"), (words{"1", "234", "567"}));
}

TEST(pre_tokenizer, dollar_matches_only_at_the_end_of_a_piece) {
    // As in std::regex (llama.cpp), not Perl: '$' does not match before a final newline.
    auto splitter = detail::regex_splitter::create({"x+$"});
    ASSERT_TRUE(splitter.ok());
    std::vector<size_t> lengths;
    ASSERT_TRUE(splitter->split(detail::decode_utf8("xx\n"), lengths).ok());
    EXPECT_EQ(lengths, (std::vector<size_t>{3}));
    lengths.clear();
    ASSERT_TRUE(splitter->split(detail::decode_utf8("axx"), lengths).ok());
    EXPECT_EQ(lengths, (std::vector<size_t>{1, 2}));
}

TEST(pre_tokenizer, non_ascii_whitespace_counts_as_whitespace) {
    // U+3000 IDEOGRAPHIC SPACE and U+00A0 NO-BREAK SPACE behave like spaces in \s (not like letters/symbols).
    EXPECT_EQ(split("gpt-2",
                    "a\xE3\x80\x80\xE3\x80\x80"
                    "b"),
              (words{"a", "\xE3\x80\x80", "\xE3\x80\x80", "b"}));
    EXPECT_EQ(split("llama-bpe",
                    "a\xC2\xA0"
                    "b"),
              (words{"a",
                     "\xC2\xA0"
                     "b"}));
}

TEST(pre_tokenizer, invalid_utf8_is_split_as_u_fffd_and_no_byte_is_lost) {
    const std::string text =
        "ab\xFF\xFE"
        "cd \xC3";
    const words w = split("gpt-2", text);
    std::string joined;
    for (const auto& s : w) joined += s;
    EXPECT_EQ(joined, text);
    EXPECT_EQ(w, (words{"ab", "\xFF\xFE", "cd", " \xC3"}));
}

TEST(pre_tokenizer, every_supported_name_compiles_and_covers_the_text) {
    const std::string text =
        "Hello, y'all! 1234567 \xE6\x88\x91\xE6\x83\xB3 \xD0\xBD\xD0\xB5\xD1\x89\xD0\xBE  \t\n\n"
        "\xF0\x9F\xA6\x99.cpp \xFF";
    const auto names = supported_pre_tokenizers();
    EXPECT_GE(names.size(), 60u);
    for (const auto& name : names) {
        const words w = split(name, text);
        std::string joined;
        for (const auto& s : w) {
            EXPECT_FALSE(s.empty()) << name;
            joined += s;
        }
        EXPECT_EQ(joined, text) << name;
    }
    for (const char* required :
         {"default", "gpt-2", "llama-bpe", "deepseek-llm", "deepseek-coder", "falcon", "mpt", "starcoder",
          "refact", "qwen2", "command-r", "olmo", "dbrx", "smaug-bpe", "gpt-4o"}) {
        EXPECT_NE(detail::find_pre_tokenizer(required), nullptr) << required;
    }
}

TEST(pre_tokenizer, long_runs_of_one_class_split_without_hitting_match_limits) {
    const std::vector<std::string> runs = {
        std::string(20000, ' '),  std::string(20000, 'A'),
        std::string(20000, '7'),  std::string(20000, '!'),
        std::string(20000, '\n'), std::string(10000, 'a') + std::string(10000, 'B') + "\xFF"};
    for (const auto& name : supported_pre_tokenizers()) {
        const auto* config = detail::find_pre_tokenizer(name);
        ASSERT_NE(config, nullptr);
        auto splitter = detail::regex_splitter::create(config->regexes);
        ASSERT_TRUE(splitter.ok()) << name;
        for (const auto& run : runs) {
            // superbpe's lookahead rescans the rest of a digit run at every digit (quadratic, in llama.cpp
            // too).
            if (name == "superbpe" && run[0] == '7') continue;
            const auto units = detail::decode_utf8(run);
            std::vector<size_t> lengths;
            const auto st = splitter->split(units, lengths);
            ASSERT_TRUE(st.ok()) << name << ": " << st.to_string();
            size_t total = 0;
            for (const size_t n : lengths) total += n;
            EXPECT_EQ(total, units.size()) << name;
        }
    }
}

TEST(bpe, merges_apply_in_rank_order) {
    // "ab" ranks before "bc", so "abc" becomes ab + c even though bc is also a merge.
    const auto v = bpe_vocab({"ab", "bc", "abc"}, {"a b", "b c", "ab c"});
    const tokenizer t = make(v);
    EXPECT_EQ(encode(t, "abc"), (ids{id_of(v, "abc")}));
    const auto v2 = bpe_vocab({"ab", "bc"}, {"b c", "a b"});
    const tokenizer t2 = make(v2);
    EXPECT_EQ(encode(t2, "abc"), (ids{'a', id_of(v2, "bc")}));
    // Equal ranks cannot happen for different pairs, but the same pair twice merges leftmost first.
    const auto v3 = bpe_vocab({"aa"}, {"a a"});
    const tokenizer t3 = make(v3);
    EXPECT_EQ(encode(t3, "aaa"), (ids{id_of(v3, "aa"), 'a'}));
}

TEST(bpe, bytes_are_written_in_the_byte_level_alphabet) {
    const std::string sp = "\xC4\xA0";  // 'Ġ', the byte-level space
    const auto v = bpe_vocab({sp + "a", sp + "b"}, {sp + " a", sp + " b"});
    const tokenizer t = make(v);
    EXPECT_EQ(encode(t, "a b a"), (ids{'a', id_of(v, sp + "b"), id_of(v, sp + "a")}));
    // U+00E9 is bytes C3 A9: the tokens of those two bytes.
    EXPECT_EQ(encode(t, "\xC3\xA9"), (ids{0xC3, 0xA9}));
    EXPECT_EQ(t.piece(id_of(v, sp + "a")), " a");
    EXPECT_EQ(t.nl(), '\n');
}

TEST(bpe, invalid_utf8_keeps_every_byte) {
    const auto v = bpe_vocab({}, {"a b"});
    const tokenizer t = make(v);
    for (const std::string s : {"\xFF",
                                "a\x80"
                                "b",
                                "\xE2\x96", "\xC0\x80", "\xED\xA0\x80", "x\xF8\x88\x80\x80\x80"}) {
        const ids got = encode(t, s);
        EXPECT_EQ(got.size(), s.size()) << "one token per byte here";
        EXPECT_EQ(t.decode(got), s);
    }
}

TEST(bpe, ignore_merges_emits_whole_words_that_are_tokens) {
    // llama3 vocabularies: a word that is a token is taken whole even when no merge chain builds it.
    auto v = bpe_vocab({"xyz"}, {"a b"}, "llama-bpe");
    v.ids.bos = id_of(v, "<|endoftext|>");
    const tokenizer t = make(v);
    EXPECT_EQ(encode(t, "xyz"), (ids{id_of(v, "xyz")}));
    const tokenizer gpt2 = make(bpe_vocab({"xyz"}, {"a b"}));
    EXPECT_EQ(encode(gpt2, "xyz"), (ids{'x', 'y', 'z'}));
    EXPECT_TRUE(t.add_bos());  // llama3's default
    EXPECT_FALSE(gpt2.add_bos());
}

TEST(bpe, control_tokens_need_parse_special_but_user_defined_ones_do_not) {
    auto v = bpe_vocab({}, {"a b"});
    v.tokens.push_back("<tool>");
    v.types.push_back(token_type::user_defined);
    const tokenizer t = make(v);
    const int32_t eot = id_of(v, "<|endoftext|>");
    const ids plain = encode(t, "a<|endoftext|>");
    EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
    EXPECT_EQ(t.decode(plain), "a<|endoftext|>");
    EXPECT_EQ(encode(t, "a<|endoftext|>", /*parse_special=*/true), (ids{'a', eot}));
    EXPECT_EQ(encode(t, "a<tool>b"), (ids{'a', id_of(v, "<tool>"), 'b'}));
    EXPECT_TRUE(t.is_eog(eot));
    EXPECT_EQ(t.decode(ids{'a', eot}), "a");
    EXPECT_EQ(t.decode(ids{'a', eot}, {.unparse_special = true}), "a<|endoftext|>");
}

TEST(bpe, decode_cleans_up_spaces_as_llama_cpp_does) {
    const tokenizer t = make(bpe_vocab({}, {"a b"}));  // gpt-2: clean-up on
    auto round = [&](std::string_view s) { return t.decode(encode(t, s)); };
    EXPECT_EQ(round("a , b ."), "a, b.");
    EXPECT_EQ(round("it ' s"), "it's");
    EXPECT_EQ(round("we 're i 'm"), "we're i'm");
    EXPECT_EQ(round("don 't"), "don 't");
    const tokenizer q = make(bpe_vocab({}, {"a b"}, "qwen2"));  // clean-up off
    EXPECT_EQ(q.decode(encode(q, "a , b .")), "a , b .");
}

TEST(bpe, unknown_pre_tokenizers_fall_back_to_gpt2_with_a_note) {
    const tokenizer t = make(bpe_vocab({}, {"a b"}, "no-such-pre"));
    EXPECT_EQ(t.pre(), "gpt-2");
    ASSERT_EQ(t.notes().size(), 1u);
    EXPECT_NE(t.notes()[0].find("'no-such-pre'"), std::string::npos);
    const tokenizer missing = make(bpe_vocab({}, {"a b"}, ""));
    EXPECT_EQ(missing.pre(), "default");
    ASSERT_EQ(missing.notes().size(), 1u);
}

TEST(bpe, a_vocabulary_without_merges_is_refused) {
    const auto t = tokenizer::from_vocab(bpe_vocab({}, {}));
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.error().message().find("merges"), std::string::npos);
}

}  // namespace
}  // namespace h2okv::tokenizer
