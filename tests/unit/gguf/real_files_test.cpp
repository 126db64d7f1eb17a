// The real files: the bundled stories260K model and llama.cpp's vocabulary-only GGUFs in ../shared/vocab.
#include <gtest/gtest.h>

#include <filesystem>

#include "h2okv/gguf/gguf.h"

namespace h2okv::gguf {
namespace {

TEST(Stories260K, HeaderMetadataAndTensors) {
    auto opened = file::open(H2OKV_SOURCE_DIR "/models/stories260K.gguf");
    ASSERT_TRUE(opened.ok()) << opened.error().to_string();
    const file& f = **opened;
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), 32u);
    EXPECT_EQ(f.file_size(), 1185376u);
    EXPECT_EQ(f.metadata().size(), 19u);
    EXPECT_EQ(f.keys().front(), "tokenizer.ggml.tokens");
    EXPECT_EQ(f.get_string("general.architecture").value(), "llama");
    EXPECT_EQ(f.get_u32("llama.block_count").value(), 5u);
    EXPECT_EQ(f.get_u32("llama.embedding_length").value(), 64u);
    EXPECT_EQ(f.get_u32("llama.attention.head_count").value(), 8u);
    EXPECT_EQ(f.get_u32("llama.attention.head_count_kv").value(), 4u);
    EXPECT_EQ(f.get_string("tokenizer.ggml.model").value(), "llama");
    EXPECT_GT(f.get_float("llama.attention.layer_norm_rms_epsilon").value(), 0.0);

    const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.ok()) << tokens.error().to_string();
    EXPECT_EQ(tokens->size(), 512u);
    EXPECT_EQ(tokens->front(), "<unk>");
    EXPECT_EQ(f.get_float_array("tokenizer.ggml.scores").value().size(), 512u);
    EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type").value().size(), 512u);

    ASSERT_EQ(f.tensors().size(), 48u);
    const tensor_info* embd = f.find_tensor("token_embd.weight");
    ASSERT_NE(embd, nullptr);
    EXPECT_EQ(embd->dims, (std::vector<int64_t>{64, 512}));
    EXPECT_EQ(embd->type, tensor_type::f32);
    EXPECT_EQ(embd->n_bytes(), 64 * 512 * 4);
    ASSERT_NE(f.find_tensor("blk.4.attn_q.weight"), nullptr);
    EXPECT_EQ(f.find_tensor("blk.5.attn_q.weight"), nullptr);
    for (const auto& t : f.tensors()) {
        EXPECT_EQ(t.offset % 32, 0u) << t.name;
        EXPECT_LE(f.data_offset() + t.offset + static_cast<uint64_t>(t.n_bytes()), f.file_size()) << t.name;
        EXPECT_NE(t.data, nullptr) << t.name;
    }
    EXPECT_EQ(f.sha256(), "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d");
}

TEST(VocabFiles, LoadWithZeroTensors) {
    const std::filesystem::path dir = H2OKV_SHARED_DIR "/vocab";
    if (!std::filesystem::is_directory(dir)) GTEST_SKIP() << "no vocabulary folder at " << dir;
    const std::pair<const char*, size_t> files[] = {
        {"ggml-vocab-llama-spm.gguf", 32000}, {"ggml-vocab-phi-3.gguf", 32064},
        {"ggml-vocab-gpt-2.gguf", 50257},     {"ggml-vocab-deepseek-llm.gguf", 102400},
        {"ggml-vocab-mpt.gguf", 50432},       {"ggml-vocab-refact.gguf", 49216},
    };
    for (const auto& [name, n_tokens] : files) {
        SCOPED_TRACE(name);
        const auto path = (dir / name).string();
        if (!std::filesystem::exists(path)) {
            ADD_FAILURE() << "missing " << path;
            continue;
        }
        auto f = file::open(path);
        ASSERT_TRUE(f.ok()) << f.error().to_string();
        EXPECT_EQ((*f)->version(), 3u);
        EXPECT_TRUE((*f)->tensors().empty());
        EXPECT_EQ((*f)->get_string_array("tokenizer.ggml.tokens").value().size(), n_tokens);
        EXPECT_EQ((*f)->get_int_array("tokenizer.ggml.token_type").value().size(), n_tokens);
        EXPECT_TRUE((*f)->has("tokenizer.ggml.model"));
    }
}

}  // namespace
}  // namespace h2okv::gguf
