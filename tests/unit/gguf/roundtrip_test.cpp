// Writer -> reader round trips: every value type, nested arrays, every tensor type, several alignments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "gguf/sha256.h"
#include "gguf_test_util.h"
#include "h2okv/gguf/gguf.h"

namespace h2okv::gguf {
namespace {

using testing::bytes;
using testing::pattern_bytes;

std::unique_ptr<file> parse_ok(const bytes& b) {
    auto f = file::parse(b.data(), b.size());
    EXPECT_TRUE(f.ok()) << f.error().to_string();
    return f.ok() ? std::move(f).value() : nullptr;
}

std::vector<std::pair<std::string, value>> every_value() {
    using vt = value_type;
    std::vector<std::pair<std::string, value>> kv = {
        {"t.u8", value::make_uint(vt::u8, 255)},
        {"t.i8", value::make_int(vt::i8, -128)},
        {"t.u16", value::make_uint(vt::u16, 65535)},
        {"t.i16", value::make_int(vt::i16, -32768)},
        {"t.u32", value::make_uint(vt::u32, 4294967295u)},
        {"t.i32", value::make_int(vt::i32, std::numeric_limits<int32_t>::min())},
        {"t.u64", value::make_uint(vt::u64, std::numeric_limits<uint64_t>::max())},
        {"t.i64", value::make_int(vt::i64, std::numeric_limits<int64_t>::min())},
        {"t.f32", value::make_float(vt::f32, -1.5e-7f)},
        {"t.f64", value::make_float(vt::f64, 3.141592653589793)},
        {"t.bool_true", value::make_bool(true)},
        {"t.bool_false", value::make_bool(false)},
        {"t.string", value::make_string("héllo\n\tworld")},
        {"t.string_nul", value::make_string(std::string("a\0b", 3))},
        {"t.string_empty", value::make_string("")},
        {"t.array_u8",
         value::make_array(vt::u8, {value::make_uint(vt::u8, 0), value::make_uint(vt::u8, 200)})},
        {"t.array_i8", value::make_array(vt::i8, {value::make_int(vt::i8, -1)})},
        {"t.array_u16", value::make_array(vt::u16, {value::make_uint(vt::u16, 513)})},
        {"t.array_i16", value::make_array(vt::i16, {value::make_int(vt::i16, -513)})},
        {"t.array_u32", value::make_array(vt::u32, {value::make_uint(vt::u32, 70000)})},
        {"t.array_i32",
         value::make_array(vt::i32, {value::make_int(vt::i32, -70000), value::make_int(vt::i32, 3)})},
        {"t.array_u64", value::make_array(vt::u64, {value::make_uint(vt::u64, 1ull << 40)})},
        {"t.array_i64", value::make_array(vt::i64, {value::make_int(vt::i64, -(1ll << 40))})},
        {"t.array_f32",
         value::make_array(vt::f32, {value::make_float(vt::f32, 0.25), value::make_float(vt::f32, -2)})},
        {"t.array_f64", value::make_array(vt::f64, {value::make_float(vt::f64, 1e300)})},
        {"t.array_bool", value::make_array(vt::boolean, {value::make_bool(true), value::make_bool(false)})},
        {"t.array_string", value::make_array(vt::string, {value::make_string("<s>"), value::make_string(""),
                                                          value::make_string("\xe2\x96\x81the")})},
        {"t.array_empty", value::make_array(vt::i32, {})},
        {"t.array_of_arrays",
         value::make_array(vt::array,
                           {value::make_array(vt::u8, {value::make_uint(vt::u8, 1)}),
                            value::make_array(vt::string, {value::make_string("x"), value::make_string("y")}),
                            value::make_array(vt::f32, {})})},
        {"t.array_3_levels",
         value::make_array(
             vt::array,
             {value::make_array(vt::array, {value::make_array(vt::i64, {value::make_int(vt::i64, 9)})})})},
    };
    return kv;
}

TEST(RoundTrip, EveryValueTypeInInsertionOrder) {
    writer w;
    const auto kv = every_value();
    for (const auto& [k, v] : kv) w.set(k, v);
    const bytes b = w.to_bytes();
    auto f = parse_ok(b);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 32u);
    EXPECT_TRUE(f->tensors().empty());
    ASSERT_EQ(f->keys().size(), kv.size());
    ASSERT_EQ(f->metadata().size(), kv.size());
    for (size_t i = 0; i < kv.size(); ++i) {
        EXPECT_EQ(f->keys()[i], kv[i].first);
        const value* v = f->find(kv[i].first);
        ASSERT_NE(v, nullptr) << kv[i].first;
        EXPECT_EQ(*v, kv[i].second) << kv[i].first;
    }
    // f32 values come back as the float they were written as.
    EXPECT_EQ(f->get_float("t.f32").value(), static_cast<double>(-1.5e-7f));
    EXPECT_EQ(f->find("t.array_empty")->element_type, value_type::i32);
    EXPECT_EQ(f->get_string("t.string_nul").value().size(), 3u);
}

TEST(RoundTrip, SetHelpersAndReplacement) {
    writer w;
    w.set_string("general.architecture", "llama");
    w.set_u32("llama.block_count", 2);
    w.set_i32("a.i32", -4);
    w.set_u64("a.u64", 1ull << 50);
    w.set_f32("a.f32", 0.125f);
    w.set_bool("a.bool", true);
    w.set_string_array("a.strings", {"x", "yy"});
    w.set_f32_array("a.floats", {1.0f, -0.5f});
    w.set_i32_array("a.ints", {3, -3});
    w.set_u32("llama.block_count", 5);  // replaces the value, keeps the position
    auto f = parse_ok(w.to_bytes());
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->keys()[1], "llama.block_count");
    EXPECT_EQ(f->keys().size(), 9u);
    EXPECT_EQ(f->get_string("general.architecture").value(), "llama");
    EXPECT_EQ(f->get_u32("llama.block_count").value(), 5u);
    EXPECT_EQ(f->get_int("a.i32").value(), -4);
    EXPECT_EQ(f->get_int("a.u64").value(), int64_t{1} << 50);
    EXPECT_EQ(f->get_float("a.f32").value(), 0.125);
    EXPECT_TRUE(f->get_bool("a.bool").value());
    EXPECT_EQ(f->get_string_array("a.strings").value(), (std::vector<std::string>{"x", "yy"}));
    EXPECT_EQ(f->get_float_array("a.floats").value(), (std::vector<double>{1.0, -0.5}));
    EXPECT_EQ(f->get_int_array("a.ints").value(), (std::vector<int64_t>{3, -3}));
    EXPECT_EQ(f->find("a.ints")->element_type, value_type::i32);
}

TEST(Getters, ErrorsNameTheKey) {
    writer w;
    w.set_i32("neg", -1);
    w.set_u32("count", 7);
    w.set_string("name", "x");
    w.set("big", value::make_uint(value_type::u64, 1ull << 40));
    w.set_string_array("tokens", {"a", "b"});
    w.set("mixed", value::make_array(value_type::array, {value::make_array(value_type::u8, {})}));
    const bytes b = w.to_bytes();
    auto f = parse_ok(b);
    ASSERT_NE(f, nullptr);

    auto missing = f->get_int("absent.key");
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.error().message(), "gguf: <memory>: metadata key 'absent.key' is missing");

    auto negative = f->get_u32("neg");
    ASSERT_FALSE(negative.ok());
    EXPECT_EQ(negative.error().message(),
              "gguf: <memory>: metadata 'neg': value -1 (i32) is outside 0..4294967295");
    auto too_big = f->get_u32("big");
    ASSERT_FALSE(too_big.ok());
    EXPECT_NE(too_big.error().message().find("1099511627776"), std::string::npos);

    auto wrong = f->get_string("count");
    ASSERT_FALSE(wrong.ok());
    EXPECT_EQ(wrong.error().message(), "gguf: <memory>: metadata 'count': value of type u32 is not a string");
    EXPECT_FALSE(f->get_bool("count").ok());
    EXPECT_FALSE(f->get_float("name").ok());

    auto not_array = f->get_string_array("name");
    ASSERT_FALSE(not_array.ok());
    EXPECT_EQ(not_array.error().message(),
              "gguf: <memory>: metadata 'name' has type string, expected an array of strings");
    auto bad_element = f->get_int_array("tokens");
    ASSERT_FALSE(bad_element.ok());
    EXPECT_EQ(bad_element.error().message(),
              "gguf: <memory>: metadata 'tokens'[0]: value of type string is not an integer");
    EXPECT_FALSE(f->get_float_array("mixed").ok());

    EXPECT_EQ(f->get_int_or("absent", 42).value(), 42);
    EXPECT_EQ(f->get_int_or("count", 42).value(), 7);
    EXPECT_EQ(f->get_float_or("absent", 1e4).value(), 1e4);
    EXPECT_EQ(f->get_string_or("absent", "dflt").value(), "dflt");
    EXPECT_FALSE(f->get_string_or("count", "dflt").ok()) << "a present key of the wrong type is an error";
    EXPECT_FALSE(f->get_int_or("name", 1).ok());
}

class TensorRoundTrip : public ::testing::TestWithParam<uint32_t> {};

TEST_P(TensorRoundTrip, EveryTensorTypeAligned) {
    const uint32_t alignment = GetParam();
    const tensor_type types[] = {tensor_type::f32,  tensor_type::f16,  tensor_type::bf16, tensor_type::q4_0,
                                 tensor_type::q8_0, tensor_type::q4_k, tensor_type::q6_k};
    const std::vector<std::vector<int64_t>> shapes = {{256}, {256, 3}, {512, 1, 2}, {256, 2, 1, 3}};
    writer w;
    w.set_string("general.architecture", "test");
    if (alignment != 32) w.set_alignment(alignment);
    struct expected {
        std::string name;
        tensor_type type;
        std::vector<int64_t> dims;
        bytes data;
    };
    std::vector<expected> want;
    uint32_t seed = 1;
    for (tensor_type t : types) {
        for (const auto& dims : shapes) {
            int64_t n = 1;
            for (int64_t d : dims) n *= d;
            const auto size = static_cast<size_t>(n / block_elements(t) * block_bytes(t));
            expected e{fmt::format("{}.{}d", tensor_type_name(t), dims.size()), t, dims,
                       pattern_bytes(size, seed++)};
            ASSERT_TRUE(w.add_tensor(e.name, t, dims, e.data).ok());
            want.push_back(std::move(e));
        }
    }
    const bytes b = w.to_bytes();
    auto f = parse_ok(b);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->alignment(), alignment);
    EXPECT_EQ(f->data_offset() % alignment, 0u);
    ASSERT_EQ(f->tensors().size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        const tensor_info& t = f->tensors()[i];
        EXPECT_EQ(t.name, want[i].name);
        EXPECT_EQ(t.type, want[i].type);
        EXPECT_EQ(t.dims, want[i].dims);
        EXPECT_EQ(static_cast<size_t>(t.n_bytes()), want[i].data.size());
        EXPECT_EQ(t.offset % alignment, 0u);
        const auto at = static_cast<size_t>(t.data - b.data());
        EXPECT_EQ(at, f->data_offset() + t.offset);
        EXPECT_EQ(at % alignment, 0u) << t.name;
        EXPECT_EQ(bytes(t.data, t.data + t.n_bytes()), want[i].data) << t.name;
        EXPECT_EQ(f->find_tensor(want[i].name), &t);
    }
    EXPECT_EQ(f->find_tensor("absent"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Alignments, TensorRoundTrip, ::testing::Values(1u, 8u, 32u, 64u, 256u));

TEST(RoundTrip, WriteFileThenOpenMapsTheSameContent) {
    writer w;
    w.set_string("general.architecture", "llama");
    w.set_string_array("tokenizer.ggml.tokens", {"a", "b"});
    ASSERT_TRUE(w.add_tensor("w", tensor_type::q8_0, {64, 2}, pattern_bytes(4 * 34, 7)).ok());
    const std::string path = ::testing::TempDir() + "/gguf_roundtrip_test.gguf";
    ASSERT_TRUE(w.write_file(path).ok());
    auto f = file::open(path);
    ASSERT_TRUE(f.ok()) << f.error().to_string();
    const bytes b = w.to_bytes();
    EXPECT_EQ((*f)->path(), path);
    EXPECT_EQ((*f)->file_size(), b.size());
    EXPECT_EQ((*f)->sha256(), detail::sha256_hex(b.data(), b.size()));
    const tensor_info* t = (*f)->find_tensor("w");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(bytes(t->data, t->data + t->n_bytes()), pattern_bytes(4 * 34, 7));
    EXPECT_EQ((*f)->get_string_array("tokenizer.ggml.tokens").value().size(), 2u);
    std::remove(path.c_str());
}

TEST(RoundTrip, Version2IsAccepted) {
    writer w;
    w.set_u32("x", 1);
    ASSERT_TRUE(w.add_tensor("w", tensor_type::f16, {4}, pattern_bytes(8, 1)).ok());
    bytes b = w.to_bytes();
    testing::patch<uint32_t>(b, 4, 2);
    auto f = parse_ok(b);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->version(), 2u);
}

TEST(Open, RefusesMissingFilesAndDirectories) {
    auto missing = file::open("/nonexistent/dir/model.gguf");
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.error().code(), status_code::io_error);
    EXPECT_EQ(missing.error().message(),
              "gguf: cannot open '/nonexistent/dir/model.gguf': No such file or directory");

    auto dir = file::open(::testing::TempDir());
    ASSERT_FALSE(dir.ok());
    EXPECT_NE(dir.error().message().find("is not a regular file"), std::string::npos);

    const std::string empty = ::testing::TempDir() + "/gguf_empty_test.gguf";
    std::fclose(std::fopen(empty.c_str(), "wb"));
    auto e = file::open(empty);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.error().message(),
              "gguf: " + empty + ": truncated file: the magic needs 4 bytes at byte 0 but only 0 remain");
    std::remove(empty.c_str());
}

TEST(Writer, RefusesInconsistentTensors) {
    writer w;
    ASSERT_TRUE(w.add_tensor("a", tensor_type::f32, {2}, bytes(8)).ok());
    auto expect_refused = [&](const char* name, tensor_type t, std::vector<int64_t> dims, size_t n,
                              const std::string& message) {
        const status s = w.add_tensor(name, t, std::move(dims), bytes(n));
        ASSERT_FALSE(s.ok());
        EXPECT_EQ(s.code(), status_code::invalid_argument);
        EXPECT_EQ(s.message(), message);
    };
    expect_refused("a", tensor_type::f32, {2}, 8, "gguf writer: duplicate tensor name 'a'");
    expect_refused(std::string(64, 'n').c_str(), tensor_type::f32, {2}, 8,
                   "gguf writer: tensor name '" + std::string(64, 'n') +
                       "' has 64 bytes, expected at most 63 (ggml's limit)");
    EXPECT_TRUE(w.add_tensor(std::string(63, 'n'), tensor_type::f32, {2}, bytes(8)).ok());
    expect_refused("b", tensor_type::f32, {2}, 7,
                   "gguf writer: tensor 'b' has 7 bytes of data, expected 8 for F32 [2]");
    expect_refused("b", tensor_type::f32, {}, 0, "gguf writer: tensor 'b' has n_dims 0, expected 1 to 4");
    expect_refused("b", tensor_type::f32, {1, 1, 1, 1, 1}, 4,
                   "gguf writer: tensor 'b' has n_dims 5, expected 1 to 4");
    expect_refused("b", tensor_type::f32, {2, 0}, 0,
                   "gguf writer: tensor 'b' has dims[1] = 0, expected >= 1");
    expect_refused(
        "b", tensor_type::q8_0, {48}, 51,
        "gguf writer: tensor 'b' has row length dims[0] = 48, expected a multiple of Q8_0's block size 32");
    expect_refused("b", static_cast<tensor_type>(6), {32}, 22,
                   "gguf writer: tensor 'b' has unknown type 6 (supported: F32, F16, BF16, Q4_0, Q4_1, Q8_0, "
                   "Q4_K, Q6_K)");
    expect_refused(
        "b", tensor_type::f32, {int64_t{1} << 32, int64_t{1} << 32}, 0,
        "gguf writer: tensor 'b' has dims [4294967296, 4294967296] whose element count overflows int64");
}

TEST(Writer, LayoutFollowsGeneralAlignmentOnlyWhenValid) {
    writer w;
    w.set_u32("general.alignment", 48);  // not a power of two: written as given, layout stays at 32
    ASSERT_TRUE(w.add_tensor("tensor_a", tensor_type::f32, {3}, bytes(12)).ok());
    ASSERT_TRUE(w.add_tensor("tensor_b", tensor_type::f32, {3}, bytes(12)).ok());
    const bytes b = w.to_bytes();
    EXPECT_EQ(b.size() % 32, 0u);
    EXPECT_EQ(testing::peek<uint64_t>(b, testing::tensor_at(b, "tensor_b").offset), 32u);
}

}  // namespace
}  // namespace h2okv::gguf
