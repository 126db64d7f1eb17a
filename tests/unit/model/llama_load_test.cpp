// Loading `llama` models: hyper-parameters the file cannot back are refused before anything is sized by them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "h2okv/gguf/gguf.h"
#include "h2okv/model/model.h"
#include "h2okv/model/synth.h"

namespace h2okv {
namespace {

// Overwrites the u32 value of metadata key `key` in a GGUF held in memory.
void patch_u32(std::vector<std::byte>& bytes, const std::string& key, uint32_t value) {
    const std::string needle = key;
    auto it = std::search(bytes.begin(), bytes.end(), reinterpret_cast<const std::byte*>(needle.data()),
                          reinterpret_cast<const std::byte*>(needle.data() + needle.size()));
    ASSERT_NE(it, bytes.end()) << key;
    const size_t at = static_cast<size_t>(it - bytes.begin()) + needle.size();
    uint32_t type = 0;
    std::memcpy(&type, &bytes[at], 4);
    ASSERT_EQ(type, static_cast<uint32_t>(gguf::value_type::u32));
    std::memcpy(&bytes[at + 4], &value, 4);
}

TEST(LlamaLoad, SyntheticModelLoads) {
    auto bytes = model::synthesize_model(model::synth_shape{}, gguf::tensor_type::f32, 1);
    ASSERT_TRUE(bytes.ok()) << bytes.error().to_string();
    auto f = gguf::file::parse(bytes->data(), bytes->size());
    ASSERT_TRUE(f.ok()) << f.error().to_string();
    auto m = model::model::load(**f);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    EXPECT_EQ((*m)->params().n_layer, model::synth_shape{}.n_layer);
}

// Found by fuzz_gguf: a block count of 2^24 made the loader size a 5 GB layer table before finding that the
// file has no such layers.
TEST(LlamaLoad, BlockCountTheFileCannotHoldIsRefusedFirst) {
    auto bytes = model::synthesize_model(model::synth_shape{}, gguf::tensor_type::f32, 1);
    ASSERT_TRUE(bytes.ok());
    patch_u32(*bytes, "llama.block_count", 1u << 24);
    auto f = gguf::file::parse(bytes->data(), bytes->size());
    ASSERT_TRUE(f.ok()) << f.error().to_string();
    auto m = model::model::load(**f);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().message().find("llama.block_count is 16777216"), std::string::npos)
        << m.error().message();
    EXPECT_NE(m.error().message().find("each layer needs at least 6"), std::string::npos)
        << m.error().message();
}

TEST(LlamaLoad, MissingLayerTensorIsNamed) {
    auto bytes = model::synthesize_model(model::synth_shape{}, gguf::tensor_type::f32, 1);
    ASSERT_TRUE(bytes.ok());
    const std::string name = "blk.1.ffn_up.weight";
    auto it = std::search(bytes->begin(), bytes->end(), reinterpret_cast<const std::byte*>(name.data()),
                          reinterpret_cast<const std::byte*>(name.data() + name.size()));
    ASSERT_NE(it, bytes->end());
    std::memcpy(&*(it + 9), "XX", 2);  // "blk.1.ffn_XX.weight": the layer loses its up projection
    auto f = gguf::file::parse(bytes->data(), bytes->size());
    ASSERT_TRUE(f.ok()) << f.error().to_string();
    auto m = model::model::load(**f);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().message().find("required tensor 'blk.1.ffn_up.weight' is missing"), std::string::npos)
        << m.error().message();
}

}  // namespace
}  // namespace h2okv
