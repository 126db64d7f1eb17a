// load_vocab() and tokenizer::from_gguf() on GGUF files built in memory.
#include <gtest/gtest.h>

#include "h2okv/gguf/gguf.h"
#include "h2okv/tokenizer/tokenizer.h"
#include "h2okv/tokenizer/vocab.h"

namespace h2okv::tokenizer {
namespace {

// A minimal SentencePiece vocabulary: <unk> <s> </s> ▁a a.
gguf::writer spm_writer() {
    gguf::writer w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>",
                                                 "\xE2\x96\x81"
                                                 "a",
                                                 "a"});
    w.set_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1, -2});
    w.set_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1});
    return w;
}

struct parsed {
    std::vector<std::byte> bytes;
    std::unique_ptr<gguf::file> file;
};

parsed parse(const gguf::writer& w) {
    parsed p;
    p.bytes = w.to_bytes();
    auto f = gguf::file::parse(p.bytes.data(), p.bytes.size(), "test.gguf");
    EXPECT_TRUE(f.ok()) << f.error().to_string();
    if (f.ok()) p.file = std::move(f).value();
    return p;
}

std::string load_error(const gguf::writer& w) {
    const auto p = parse(w);
    if (!p.file) return "parse failed";
    const auto t = tokenizer::from_gguf(*p.file);
    return t.ok() ? "" : t.error().message();
}

TEST(load_vocab, reads_tokens_scores_types_and_flags) {
    auto w = spm_writer();
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_u32("tokenizer.ggml.padding_token_id", 4294967295u);
    w.set_bool("tokenizer.ggml.add_space_prefix", false);
    w.set_string("general.name", "tiny");
    const auto p = parse(w);
    ASSERT_TRUE(p.file);
    auto v = load_vocab(*p.file);
    ASSERT_TRUE(v.ok()) << v.error().to_string();
    EXPECT_EQ(v->model, vocab_model::spm);
    EXPECT_EQ(v->tokens.size(), 5u);
    EXPECT_EQ(v->scores[4], -2.0f);
    EXPECT_EQ(v->types[0], token_type::unknown);
    EXPECT_EQ(v->ids.bos, 1);
    EXPECT_EQ(v->ids.pad, -1);  // 4294967295 means none
    EXPECT_FALSE(v->ids.unk.has_value());
    EXPECT_EQ(v->add_space_prefix, false);
    EXPECT_FALSE(v->add_bos.has_value());
    EXPECT_EQ(v->model_name, "tiny");

    auto t = tokenizer::from_gguf(*p.file);
    ASSERT_TRUE(t.ok()) << t.error().to_string();
    EXPECT_EQ(t->unk(), 0);  // SentencePiece default
    EXPECT_EQ(t->pad(), -1);
    auto ids = t->encode("a", /*add_special=*/true);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, (std::vector<int32_t>{1, 4}));  // no dummy prefix: "a", not "▁a"
}

TEST(load_vocab, reads_a_bpe_vocabulary_with_merges) {
    gguf::writer w;
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "qwen2");
    w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "ab", "<|endoftext|>"});
    w.set_i32_array("tokenizer.ggml.token_type", {1, 1, 1, 3});
    w.set_string_array("tokenizer.ggml.merges", {"a b"});
    w.set_u32("tokenizer.ggml.bos_token_id", 3);
    w.set_u32("tokenizer.ggml.eos_token_id", 3);
    const auto p = parse(w);
    ASSERT_TRUE(p.file);
    auto t = tokenizer::from_gguf(*p.file);
    ASSERT_TRUE(t.ok()) << t.error().to_string();
    EXPECT_EQ(t->model(), vocab_model::bpe);
    EXPECT_EQ(t->pre(), "qwen2");
    EXPECT_FALSE(t->add_bos());
    auto ids = t->encode("abab", true);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, (std::vector<int32_t>{2, 2}));
    EXPECT_TRUE(t->is_eog(3));
}

TEST(load_vocab, refuses_what_it_cannot_use_and_names_the_key) {
    gguf::writer no_model;
    no_model.set_string_array("tokenizer.ggml.tokens", {"a"});
    EXPECT_NE(load_error(no_model).find("tokenizer.ggml.model"), std::string::npos) << load_error(no_model);

    auto bert = spm_writer();
    bert.set_string("tokenizer.ggml.model", "bert");
    EXPECT_NE(load_error(bert).find("'bert'"), std::string::npos) << load_error(bert);

    auto no_tokens = spm_writer();
    no_tokens.set_u32("tokenizer.ggml.tokens", 5);
    EXPECT_NE(load_error(no_tokens).find("tokenizer.ggml.tokens"), std::string::npos)
        << load_error(no_tokens);

    auto short_scores = spm_writer();
    short_scores.set_f32_array("tokenizer.ggml.scores", {0, 0});
    EXPECT_NE(load_error(short_scores).find("tokenizer.ggml.scores has 2 entries"), std::string::npos)
        << load_error(short_scores);

    auto short_types = spm_writer();
    short_types.set_i32_array("tokenizer.ggml.token_type", {1});
    EXPECT_NE(load_error(short_types).find("tokenizer.ggml.token_type has 1 entries"), std::string::npos)
        << load_error(short_types);

    auto bad_flag = spm_writer();
    bad_flag.set_string("tokenizer.ggml.add_bos_token", "yes");
    EXPECT_NE(load_error(bad_flag).find("tokenizer.ggml.add_bos_token"), std::string::npos)
        << load_error(bad_flag);

    gguf::writer no_merges;
    no_merges.set_string("tokenizer.ggml.model", "gpt2");
    no_merges.set_string_array("tokenizer.ggml.tokens", {"a", "b"});
    EXPECT_NE(load_error(no_merges).find("tokenizer.ggml.merges"), std::string::npos)
        << load_error(no_merges);

    auto dup = spm_writer();
    dup.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a", "a"});
    EXPECT_NE(load_error(dup).find("duplicate token"), std::string::npos) << load_error(dup);
}

}  // namespace
}  // namespace h2okv::tokenizer
