// Malformed files, built with the writer and byte surgery: each must be refused with a message naming the
// field, the value seen and what was expected; no input may crash the reader.
#include <gtest/gtest.h>

#include <functional>
#include <ostream>

#include "gguf_test_util.h"
#include "h2okv/gguf/gguf.h"

namespace h2okv::gguf {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace): bytes, patch, find_bytes ...

constexpr uint64_t k_huge = uint64_t{1} << 60;

// A small valid file: strings, arrays (of strings, of floats, of arrays) and two tensors; the file ends
// exactly where the last tensor's data ends (256 bytes, a whole number of alignments), so every proper prefix
// of it is invalid.
bytes small_file() {
    writer w;
    w.set_string("general.architecture", "llama");
    w.set_string("general.name", "tiny");
    w.set_u32("llama.block_count", 2);
    w.set_string_array("tokenizer.ggml.tokens", {"<s>", "tok_b", "tok_c"});
    w.set_f32_array("tokenizer.ggml.scores", {0.0f, -1.0f, -2.0f});
    w.set("nested.arrays",
          value::make_array(value_type::array,
                            {value::make_array(value_type::u8, {value::make_uint(value_type::u8, 1)}),
                             value::make_array(value_type::string, {value::make_string("n")})}));
    w.set_u32("k.a", 1);
    w.set_u32("k.b", 2);
    EXPECT_TRUE(w.add_tensor("tensor.a", tensor_type::q8_0, {32, 2}, pattern_bytes(68, 1)).ok());
    EXPECT_TRUE(w.add_tensor("tensor.b", tensor_type::f32, {8, 8}, pattern_bytes(256, 2)).ok());
    return w.to_bytes();
}

// Facts about small_file() the expectations refer to.
struct layout {
    bytes file = small_file();
    size_t end_of_infos = tensor_at(file, "tensor.b").offset + 8;
    size_t data_offset = end_of_infos + (32 - end_of_infos % 32) % 32;
};
const layout& base() {
    static const layout l;
    return l;
}

struct malformed_case {
    std::string name;
    std::function<bytes()> make;
    std::vector<std::string> expected;  // substrings of the error message
};
void PrintTo(const malformed_case& c, std::ostream* os) {
    *os << c.name;
}

// small_file() changed by `surgery`.
std::function<bytes()> edit(std::function<void(bytes&)> surgery) {
    return [surgery] {
        bytes b = base().file;
        surgery(b);
        return b;
    };
}
std::function<bytes()> prefix(size_t n) {
    return [n] { return bytes(base().file.begin(), base().file.begin() + static_cast<std::ptrdiff_t>(n)); };
}
std::function<bytes()> with_writer(std::function<void(writer&)> build) {
    return [build] {
        writer w;
        build(w);
        return w.to_bytes();
    };
}
void rename(bytes& b, std::string_view from, std::string_view to) {
    std::memcpy(b.data() + find_bytes(b, from), to.data(), to.size());
}

std::vector<malformed_case> cases() {
    const size_t size = base().file.size();
    const size_t b_start = base().data_offset + 96;
    return {
        {"bad_magic",
         edit([](bytes& b) { b[3] = std::byte{'X'}; }),
         {"invalid magic 'GGUX', expected 'GGUF'"}},
        {"binary_magic",
         edit([](bytes& b) { b[0] = std::byte{0}; }),
         {"invalid magic '\\x00GUF', expected 'GGUF'"}},
        {"version_1",
         edit([](bytes& b) { patch<uint32_t>(b, 4, 1); }),
         {"version 1 is not supported", "expected 2 or 3"}},
        {"unknown_version",
         edit([](bytes& b) { patch<uint32_t>(b, 4, 7); }),
         {"unsupported version 7, expected 2 or 3"}},
        {"big_endian",
         edit([](bytes& b) { patch<uint32_t>(b, 4, 0x03000000); }),
         {"version 50331648 (0x03000000) is a big-endian GGUF v3", "expected version 2 or 3"}},
        {"empty_file", prefix(0), {"truncated file: the magic needs 4 bytes at byte 0 but only 0 remain"}},
        {"truncated_magic",
         prefix(3),
         {"truncated file: the magic needs 4 bytes at byte 0 but only 3 remain"}},
        {"truncated_version",
         prefix(6),
         {"truncated file: the version needs 4 bytes at byte 4 but only 2 remain"}},
        {"truncated_tensor_count",
         prefix(10),
         {"truncated file: the tensor count needs 8 bytes at byte 8 but only 2 remain"}},
        {"truncated_metadata_count",
         prefix(20),
         {"truncated file: the metadata count needs 8 bytes at byte 16 but only 4 remain"}},
        {"metadata_count_overflow",
         edit([](bytes& b) { patch<uint64_t>(b, 16, k_huge); }),
         {"metadata count 1152921504606846976 cannot fit in the", "each entry takes at least 13 bytes"}},
        {"tensor_count_overflow",
         edit([](bytes& b) { patch<uint64_t>(b, 8, k_huge); }),
         {"tensor count 1152921504606846976 cannot fit in the", "each tensor info takes at least 32 bytes"}},
        {"key_length_past_eof",
         edit([](bytes& b) { patch<uint64_t>(b, 24, 1000000); }),
         {"metadata key #0 has string length 1000000 at byte 24, past the end of the file"}},
        {"string_value_length_past_eof",
         edit([](bytes& b) { patch<uint64_t>(b, payload_at(b, "general.name"), 1000000); }),
         {"metadata 'general.name' has string length 1000000", "past the end of the file"}},
        {"string_element_length_past_eof",
         edit([](bytes& b) { patch<uint64_t>(b, find_bytes(b, "tok_b") - 8, uint64_t{1} << 62); }),
         {"metadata 'tokenizer.ggml.tokens'[1] has string length 4611686018427387904",
          "past the end of the file"}},
        {"array_count_overflow",
         edit([](bytes& b) { patch<uint64_t>(b, payload_at(b, "tokenizer.ggml.tokens") + 4, k_huge); }),
         {"metadata 'tokenizer.ggml.tokens' has element count 1152921504606846976, but the",
          "string elements"}},
        {"array_count_past_eof",
         edit([](bytes& b) { patch<uint64_t>(b, payload_at(b, "tokenizer.ggml.scores") + 4, 1000); }),
         {"metadata 'tokenizer.ggml.scores' has element count 1000, but the", "f32 elements"}},
        {"nested_array_count_overflow",
         edit([](bytes& b) { patch<uint64_t>(b, payload_at(b, "nested.arrays") + 12 + 4, k_huge); }),
         {"metadata 'nested.arrays'[0] has element count 1152921504606846976"}},
        {"unknown_value_type",
         edit([](bytes& b) { patch<uint32_t>(b, value_type_at(b, "general.name"), 13); }),
         {"metadata 'general.name' has unknown value type 13, expected 0 to 12"}},
        {"unknown_element_type",
         edit([](bytes& b) { patch<uint32_t>(b, payload_at(b, "tokenizer.ggml.tokens"), 99); }),
         {"metadata 'tokenizer.ggml.tokens' has unknown element type 99, expected 0 to 12"}},
        {"arrays_nested_too_deep",
         with_writer([](writer& w) {
             value v = value::make_array(value_type::u8, {});
             for (int i = 0; i < 20; ++i) v = value::make_array(value_type::array, {v});
             w.set("deep", v);
         }),
         {"metadata 'deep'[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0] nests arrays deeper than 16 "
          "levels"}},
        {"duplicate_key",
         edit([](bytes& b) { rename(b, "k.b", "k.a"); }),
         {"duplicate metadata key 'k.a' (entries #6 and #7)"}},
        {"duplicate_tensor_name",
         edit([](bytes& b) { rename(b, "tensor.b", "tensor.a"); }),
         {"duplicate tensor name 'tensor.a' (tensors #0 and #1)"}},
        {"alignment_not_power_of_two",
         with_writer([](writer& w) { w.set_u32("general.alignment", 48); }),
         {"general.alignment = 48, expected a non-zero power of two"}},
        {"alignment_zero",
         with_writer([](writer& w) { w.set_u32("general.alignment", 0); }),
         {"general.alignment = 0, expected a non-zero power of two"}},
        {"alignment_wrong_type",
         with_writer([](writer& w) { w.set_string("general.alignment", "32"); }),
         {"general.alignment has type string, expected u32"}},
        {"tensor_name_length_past_eof",
         edit([](bytes& b) { patch<uint64_t>(b, tensor_at(b, "tensor.a").name_length, 1u << 20); }),
         {"the name of tensor #0 has string length 1048576", "past the end of the file"}},
        {"n_dims_zero",
         edit([](bytes& b) { patch<uint32_t>(b, tensor_at(b, "tensor.a").n_dims, 0); }),
         {"tensor 'tensor.a' has n_dims 0, expected 1 to 4"}},
        {"n_dims_five",
         edit([](bytes& b) { patch<uint32_t>(b, tensor_at(b, "tensor.a").n_dims, 5); }),
         {"tensor 'tensor.a' has n_dims 5, expected 1 to 4"}},
        {"dim_zero",
         edit([](bytes& b) { patch<uint64_t>(b, tensor_at(b, "tensor.b").dims + 8, 0); }),
         {"tensor 'tensor.b' has dims[1] = 0, expected 1 to 9223372036854775807"}},
        {"dim_negative_as_int64",
         edit([](bytes& b) { patch<int64_t>(b, tensor_at(b, "tensor.b").dims, -8); }),
         {"tensor 'tensor.b' has dims[0] = 18446744073709551608, expected 1 to 9223372036854775807"}},
        {"dims_product_overflows",
         edit([](bytes& b) {
             patch<uint64_t>(b, tensor_at(b, "tensor.b").dims, uint64_t{1} << 32);
             patch<uint64_t>(b, tensor_at(b, "tensor.b").dims + 8, uint64_t{1} << 32);
         }),
         {"tensor 'tensor.b' has dims [4294967296, 4294967296] whose element count overflows int64"}},
        {"byte_size_overflows",
         edit([](bytes& b) {
             patch<uint64_t>(b, tensor_at(b, "tensor.b").dims, uint64_t{1} << 31);
             patch<uint64_t>(b, tensor_at(b, "tensor.b").dims + 8, uint64_t{1} << 31);
         }),
         {"tensor 'tensor.b' has dims [2147483648, 2147483648] whose byte size as F32 overflows int64"}},
        {"row_not_whole_blocks",
         edit([](bytes& b) { patch<uint64_t>(b, tensor_at(b, "tensor.a").dims, 48); }),
         {"tensor 'tensor.a' has row length dims[0] = 48, expected a multiple of Q8_0's block size 32"}},
        {"unknown_tensor_type",
         edit([](bytes& b) { patch<uint32_t>(b, tensor_at(b, "tensor.b").type, 99); }),
         {"tensor 'tensor.b' has unknown type 99 (supported: F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K)"}},
        {"unsupported_ggml_type",
         edit([](bytes& b) { patch<uint32_t>(b, tensor_at(b, "tensor.b").type, 6); }),
         {"tensor 'tensor.b' has type 6 (Q5_0), which h2okv does not support"}},
        {"misaligned_offset",
         edit([](bytes& b) { patch<uint64_t>(b, tensor_at(b, "tensor.b").offset, 100); }),
         {"tensor 'tensor.b' has offset 100, expected a multiple of the alignment 32"}},
        {"offset_past_eof",
         edit([](bytes& b) { patch<uint64_t>(b, tensor_at(b, "tensor.b").offset, uint64_t{1} << 40); }),
         {fmt::format(
             "tensor 'tensor.b' starts at byte {} (offset 1099511627776 in the data section at byte {}) but "
             "the file has {} bytes",
             base().data_offset + (uint64_t{1} << 40), base().data_offset, size)}},
        {"offset_wraps_around",
         edit([](bytes& b) { patch<uint64_t>(b, tensor_at(b, "tensor.b").offset, ~uint64_t{31}); }),
         {fmt::format(
             "tensor 'tensor.b' has offset 18446744073709551584, past the end of the file ({} bytes)",
             size)}},
        {"size_past_eof",
         edit([](bytes& b) { patch<uint64_t>(b, tensor_at(b, "tensor.b").dims + 8, 9); }),
         {fmt::format("tensor 'tensor.b' ends at byte {} but the file has {} bytes", b_start + 9 * 32,
                      size)}},
        {"data_truncated",
         prefix(size - 1),
         {fmt::format("tensor 'tensor.b' ends at byte {} but the file has {} bytes", size, size - 1)}},
    };
}

class Malformed : public ::testing::TestWithParam<malformed_case> {};

TEST_P(Malformed, RefusedWithAMessageNamingTheField) {
    const bytes b = GetParam().make();
    auto f = file::parse(b.data(), b.size(), "bad.gguf");
    ASSERT_FALSE(f.ok()) << "accepted";
    EXPECT_EQ(f.error().code(), status_code::invalid_file);
    const std::string& message = f.error().message();
    EXPECT_EQ(message.rfind("gguf: bad.gguf: ", 0), 0u) << message;
    for (const auto& expected : GetParam().expected) {
        EXPECT_NE(message.find(expected), std::string::npos)
            << "message: " << message << "\nexpected: " << expected;
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, Malformed, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<malformed_case>& param_info) {
                             return param_info.param.name;
                         });

TEST(MalformedBase, IsValid) {
    auto f = file::parse(base().file.data(), base().file.size());
    ASSERT_TRUE(f.ok()) << f.error().to_string();
    EXPECT_EQ((*f)->data_offset(), base().data_offset);
    EXPECT_EQ(base().file.size(), base().data_offset + 96 + 256);
}

// Every proper prefix is refused cleanly; each prefix is a fresh allocation of exactly its size, so a
// sanitizer build catches any read past it.
TEST(MalformedTruncation, EveryPrefixIsRefused) {
    const bytes& full = base().file;
    for (size_t n = 0; n < full.size(); ++n) {
        const bytes b(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
        auto f = file::parse(b.data(), b.size());
        ASSERT_FALSE(f.ok()) << "prefix of " << n << " bytes accepted";
        const std::string& m = f.error().message();
        if (n < base().end_of_infos) {
            const bool names_the_shortfall =
                m.find("truncated file: ") != std::string::npos ||
                m.find("past the end of the file") != std::string::npos ||
                m.find("cannot fit in the") != std::string::npos ||
                m.find(" bytes left in the file hold at most") != std::string::npos;
            EXPECT_TRUE(names_the_shortfall) << "prefix " << n << ": " << m;
        } else {
            EXPECT_NE(m.find(fmt::format("but the file has {} bytes", n)), std::string::npos)
                << "prefix " << n << ": " << m;
            EXPECT_NE(m.find("tensor 'tensor."), std::string::npos) << "prefix " << n << ": " << m;
        }
    }
}

// Every byte replaced by a few values: the reader either refuses the file or returns tensors inside it.
TEST(MalformedMutation, SingleByteChangesNeverEscapeTheBuffer) {
    const bytes& full = base().file;
    size_t refused = 0;
    for (size_t i = 0; i < full.size(); ++i) {
        for (uint8_t replacement :
             {uint8_t{0x00}, uint8_t{0xff}, static_cast<uint8_t>(std::to_integer<uint8_t>(full[i]) ^ 0x80)}) {
            bytes b = full;
            b[i] = std::byte{replacement};
            auto f = file::parse(b.data(), b.size());
            if (!f.ok()) {
                ++refused;
                EXPECT_FALSE(f.error().message().empty());
                continue;
            }
            for (const auto& t : (*f)->tensors()) {
                ASSERT_GE(t.data, b.data());
                ASSERT_LE(t.data + t.n_bytes(), b.data() + b.size()) << "byte " << i << " tensor " << t.name;
            }
        }
    }
    EXPECT_GT(refused, 0u);
}

}  // namespace
}  // namespace h2okv::gguf
