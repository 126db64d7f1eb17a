// SentencePiece-style tokenization on hand-built vocabularies.
#include <gtest/gtest.h>

#include "h2okv/tokenizer/tokenizer.h"
#include "test_vocabs.h"

namespace h2okv::tokenizer {
namespace {

using testing::byte_id;
using testing::id_of;
using testing::k_sp;
using testing::spm_vocab;
using ids = std::vector<int32_t>;

tokenizer make(vocab v) {
    auto t = tokenizer::from_vocab(std::move(v));
    EXPECT_TRUE(t.ok()) << t.error().to_string();
    return std::move(t).value();
}

ids encode(const tokenizer& t, std::string_view text, bool add_special = false, bool parse_special = false) {
    auto r = t.encode(text, add_special, parse_special);
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    return r.ok() ? *r : ids{};
}

TEST(spm, the_highest_scoring_merge_goes_first) {
    auto v = spm_vocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -2}, {"bc", -1}});
    v.add_space_prefix = false;
    const tokenizer t = make(v);
    // "bc" outscores "ab": a + bc.
    EXPECT_EQ(encode(t, "abc"), (ids{id_of(v, "a"), id_of(v, "bc")}));
}

TEST(spm, merges_continue_on_merged_symbols) {
    auto v = spm_vocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -1}, {"bc", -2}, {"abc", -5}});
    v.add_space_prefix = false;
    const tokenizer t = make(v);
    EXPECT_EQ(encode(t, "abc"), (ids{id_of(v, "abc")}));  // ab first, then ab + c
}

TEST(spm, equal_scores_merge_the_leftmost_pair_first) {
    auto v = spm_vocab({{"a", -10}, {"ab", -1}, {"ba", -1}});
    v.add_space_prefix = false;
    v.tokens.push_back("b");
    v.types.push_back(token_type::normal);
    v.scores.push_back(-10);
    const tokenizer t = make(v);
    EXPECT_EQ(encode(t, "aba"), (ids{id_of(v, "ab"), id_of(v, "a")}));
    EXPECT_EQ(encode(t, "bab"), (ids{id_of(v, "ba"), id_of(v, "b")}));
}

TEST(spm, spaces_are_escaped_and_a_dummy_prefix_is_added) {
    auto v = spm_vocab({{k_sp, -5}, {"a", -10}, {k_sp + "a", -1}, {"b", -10}, {k_sp + "b", -1}});
    const tokenizer t = make(v);
    EXPECT_TRUE(t.add_space_prefix());
    EXPECT_EQ(encode(t, "a b"), (ids{id_of(v, k_sp + "a"), id_of(v, k_sp + "b")}));
    EXPECT_EQ(encode(t, " a"), (ids{id_of(v, k_sp), id_of(v, k_sp + "a")}));
    EXPECT_EQ(encode(t, ""), ids{});
    EXPECT_EQ(encode(t, "", /*add_special=*/true), (ids{1}));  // BOS only, like SentencePiece

    v.add_space_prefix = false;
    const tokenizer no_prefix = make(v);
    EXPECT_FALSE(no_prefix.add_space_prefix());
    EXPECT_EQ(encode(no_prefix, "a b"), (ids{id_of(v, "a"), id_of(v, k_sp + "b")}));
    EXPECT_EQ(no_prefix.decode(encode(no_prefix, " a")), " a");
}

TEST(spm, add_special_prepends_bos_and_appends_eos_when_asked) {
    auto v = spm_vocab({{k_sp + "a", -1}});
    const tokenizer t = make(v);
    EXPECT_EQ(encode(t, "a", true), (ids{1, id_of(v, k_sp + "a")}));
    v.add_bos = false;
    v.add_eos = true;
    const tokenizer t2 = make(v);
    EXPECT_EQ(encode(t2, "a", true), (ids{id_of(v, k_sp + "a"), 2}));
}

TEST(spm, unknown_characters_fall_back_to_byte_tokens) {
    auto v = spm_vocab({{k_sp, -1}, {"a", -1}});
    v.add_space_prefix = false;
    const tokenizer t = make(v);
    // U+00E9 is two bytes; U+1F999 four.
    EXPECT_EQ(encode(t, "\xC3\xA9"), (ids{byte_id(0xC3), byte_id(0xA9)}));
    EXPECT_EQ(encode(t, "a\xF0\x9F\xA6\x99"),
              (ids{id_of(v, "a"), byte_id(0xF0), byte_id(0x9F), byte_id(0xA6), byte_id(0x99)}));
    EXPECT_EQ(t.decode(encode(t, "a\xF0\x9F\xA6\x99")), "a\xF0\x9F\xA6\x99");
}

TEST(spm, invalid_utf8_keeps_every_byte) {
    auto v = spm_vocab({{"a", -1}, {k_sp, -2}});
    v.add_space_prefix = false;
    const tokenizer t = make(v);
    EXPECT_EQ(encode(t, "\xFF"), (ids{byte_id(0xFF)}));
    EXPECT_EQ(encode(t,
                     "\x80"
                     "a"),
              (ids{byte_id(0x80), id_of(v, "a")}));
    // A lead byte without its continuation bytes is a byte of its own (llama.cpp would swallow the 'a').
    EXPECT_EQ(encode(t,
                     "\xE2"
                     "a"),
              (ids{byte_id(0xE2), id_of(v, "a")}));
    for (const std::string s :
         {"\xFF\xFE", "a\xE2\x96", "\xC3", "\xED\xA0\x80", "\xF8\x88\x80\x80\x80", "\xCB a"}) {
        EXPECT_EQ(t.decode(encode(t, s)), s);
    }
}

TEST(spm, without_byte_tokens_unknown_pieces_become_the_unknown_token) {
    auto v = spm_vocab({{"a", -1}}, /*byte_tokens=*/false);
    v.add_space_prefix = false;
    const tokenizer t = make(v);
    EXPECT_EQ(encode(t,
                     "a\xC3\xA9"
                     "a"),
              (ids{id_of(v, "a"), 0, id_of(v, "a")}));

    v.ids.unk = -1;  // "none"
    const tokenizer no_unk = make(v);
    const auto r = no_unk.encode("\xC3\xA9", false);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message().find("neither byte tokens"), std::string::npos) << r.error().message();
}

TEST(spm, control_tokens_in_text_are_plain_text_unless_parse_special) {
    auto v = spm_vocab({{k_sp + "a", -1}, {"a", -2}});
    const tokenizer t = make(v);
    const ids plain = encode(t, "a</s>");
    EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
    EXPECT_EQ(t.decode(plain), "a</s>");
    EXPECT_EQ(encode(t, "a</s>", false, /*parse_special=*/true), (ids{id_of(v, k_sp + "a"), 2}));
    // The dummy prefix also follows a special token.
    EXPECT_EQ(encode(t, "</s>a", false, true), (ids{2, id_of(v, k_sp + "a")}));
    EXPECT_EQ(encode(t, "<unk>", false, true), (ids{0}));
}

TEST(spm, user_defined_tokens_are_always_matched_longest_first) {
    auto v = spm_vocab({{k_sp + "a", -1}, {"a", -2}});
    for (const char* s : {"<x>", "<x><y>"}) {
        v.tokens.push_back(s);
        v.types.push_back(token_type::user_defined);
        v.scores.push_back(0);
    }
    const tokenizer t = make(v);
    const int32_t x = id_of(v, "<x>");
    const int32_t xy = id_of(v, "<x><y>");
    EXPECT_EQ(encode(t, "<x>a"), (ids{x, id_of(v, k_sp + "a")}));
    EXPECT_EQ(encode(t, "a<x><y><x>"), (ids{id_of(v, k_sp + "a"), xy, x}));
    EXPECT_EQ(t.piece(x), "<x>");  // user-defined tokens print their text
    EXPECT_EQ(t.decode(encode(t, "a<x><y><x>")), "a<x><y><x>");
}

TEST(spm, phi3_special_tokens_strip_the_whitespace_after_them) {
    auto v = spm_vocab({{k_sp + "a", -1}, {"a", -2}, {k_sp, -3}});
    v.tokens.push_back("<|user|>");
    v.types.push_back(token_type::control);
    v.scores.push_back(0);
    v.model_name = "Phi3";
    const tokenizer t = make(v);
    const int32_t user = id_of(v, "<|user|>");
    EXPECT_EQ(encode(t, "<|user|>  \n a", false, true), (ids{user, id_of(v, k_sp + "a")}));
    v.model_name = "llama";
    const tokenizer plain = make(v);
    EXPECT_NE(encode(plain, "<|user|>  \n a", false, true), (ids{user, id_of(v, k_sp + "a")}));
}

TEST(spm, decode_drops_the_dummy_prefix_space_of_the_first_token) {
    auto v = spm_vocab({{k_sp + "a", -1}, {k_sp + "b", -1}, {"a", -2}});
    const tokenizer t = make(v);
    const int32_t sa = id_of(v, k_sp + "a");
    const int32_t sb = id_of(v, k_sp + "b");
    EXPECT_EQ(t.decode(ids{sa, sb}), "a b");
    EXPECT_EQ(t.piece(sa), " a");
    // After BOS the space stays, also when BOS is removed (llama.cpp's llama_detokenize does the same).
    EXPECT_EQ(t.decode(ids{1, sa, sb}), " a b");
    EXPECT_EQ(t.decode(ids{1, sa, sb}, {.remove_special = true}), " a b");
    // Control tokens print nothing unless asked; unknown ids print nothing.
    EXPECT_EQ(t.decode(ids{sa, 2, sb}), "a b");
    EXPECT_EQ(t.decode(ids{sa, 2, sb}, {.unparse_special = true}), "a</s> b");
    EXPECT_EQ(t.decode(ids{sa, -5, 1 << 30, sb}), "a b");
    EXPECT_EQ(t.decode(ids{byte_id(0xC3), byte_id(0xA9)}), "\xC3\xA9");
}

TEST(spm, end_of_generation_tokens_are_recognised_by_text) {
    auto v = spm_vocab({{"a", -1}, {"<|im_end|>", 0}});
    const tokenizer t = make(v);
    const int32_t im_end = id_of(v, "<|im_end|>");
    EXPECT_TRUE(t.is_eog(im_end));
    EXPECT_TRUE(t.is_eog(2));  // EOS
    EXPECT_FALSE(t.is_eog(1));
    EXPECT_TRUE(t.is_control(im_end));  // llama.cpp overrides its normal type
    EXPECT_EQ(t.eot(), im_end);
    ASSERT_EQ(t.notes().size(), 1u);
    EXPECT_NE(t.notes()[0].find("<|im_end|>"), std::string::npos);
    EXPECT_EQ(t.nl(), byte_id('\n'));
}

TEST(spm, bad_vocabularies_are_refused_with_a_reason) {
    auto expect_error = [](vocab v, std::string_view what) {
        const auto t = tokenizer::from_vocab(std::move(v));
        ASSERT_FALSE(t.ok()) << what;
        EXPECT_NE(t.error().message().find(what), std::string::npos) << t.error().message();
    };
    expect_error(vocab{}, "no tokens");
    auto dup = spm_vocab({{"a", -1}, {"a", -2}});
    expect_error(dup, "duplicate token");
    auto short_scores = spm_vocab({{"a", -1}});
    short_scores.scores.pop_back();
    expect_error(short_scores, "scores for");
    auto short_types = spm_vocab({{"a", -1}});
    short_types.types.resize(2);
    expect_error(short_types, "token types for");
    auto no_bos = spm_vocab({{"a", -1}});
    no_bos.ids.bos = -1;
    expect_error(no_bos, "add_bos_token is true");
}

TEST(spm, special_ids_out_of_range_keep_the_default_with_a_note) {
    auto v = spm_vocab({{"a", -1}});
    v.ids.eos = 100000;
    v.ids.pad = -1;
    const tokenizer t = make(v);
    EXPECT_EQ(t.eos(), 2);
    EXPECT_EQ(t.pad(), -1);
    ASSERT_EQ(t.notes().size(), 1u);
    EXPECT_NE(t.notes()[0].find("100000"), std::string::npos);
}

}  // namespace
}  // namespace h2okv::tokenizer
