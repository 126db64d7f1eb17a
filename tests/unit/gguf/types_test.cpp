#include <gtest/gtest.h>

#include <limits>

#include "h2okv/gguf/gguf.h"

namespace h2okv::gguf {
namespace {

TEST(TensorTypes, BlockSizesAndNames) {
    struct row {
        tensor_type type;
        uint32_t number;
        const char* name;
        int64_t elements, bytes;
    };
    const row rows[] = {
        {tensor_type::f32, 0, "F32", 1, 4},        {tensor_type::f16, 1, "F16", 1, 2},
        {tensor_type::q4_0, 2, "Q4_0", 32, 18},    {tensor_type::q4_1, 3, "Q4_1", 32, 20},
        {tensor_type::q8_0, 8, "Q8_0", 32, 34},    {tensor_type::q4_k, 12, "Q4_K", 256, 144},
        {tensor_type::q6_k, 14, "Q6_K", 256, 210}, {tensor_type::bf16, 30, "BF16", 1, 2},
    };
    for (const auto& r : rows) {
        EXPECT_EQ(static_cast<uint32_t>(r.type), r.number);
        EXPECT_EQ(tensor_type_name(r.number), r.name);
        EXPECT_EQ(tensor_type_name(r.type), r.name);
        EXPECT_TRUE(is_known_tensor_type(r.number));
        EXPECT_EQ(block_elements(r.type), r.elements) << r.name;
        EXPECT_EQ(block_bytes(r.type), r.bytes) << r.name;
    }
    for (uint32_t unknown : {6u, 9u, 15u, 31u, 1000u}) {
        EXPECT_FALSE(is_known_tensor_type(unknown));
        EXPECT_EQ(tensor_type_name(unknown), "type " + std::to_string(unknown));
    }
}

TEST(TensorInfo, ElementsAndBytes) {
    tensor_info t{"w", {256, 3, 2}, tensor_type::q6_k};
    EXPECT_EQ(t.n_elements(), 1536);
    EXPECT_EQ(t.n_bytes(), 6 * 210);
    t.type = tensor_type::bf16;
    EXPECT_EQ(t.n_bytes(), 1536 * 2);
}

TEST(ValueTypes, Names) {
    EXPECT_STREQ(value_type_name(value_type::u8), "u8");
    EXPECT_STREQ(value_type_name(value_type::boolean), "bool");
    EXPECT_STREQ(value_type_name(value_type::array), "array");
    EXPECT_STREQ(value_type_name(value_type::f64), "f64");
    EXPECT_STREQ(value_type_name(static_cast<value_type>(13)), "unknown");
}

TEST(Value, Conversions) {
    EXPECT_EQ(value::make_uint(value_type::u32, 7).as_int().value(), 7);
    EXPECT_EQ(value::make_int(value_type::i8, -3).as_int().value(), -3);
    EXPECT_EQ(value::make_bool(true).as_int().value(), 1);
    EXPECT_EQ(value::make_bool(false).as_bool().value(), false);
    EXPECT_DOUBLE_EQ(value::make_int(value_type::i32, -5).as_float().value(), -5.0);
    EXPECT_DOUBLE_EQ(value::make_float(value_type::f32, 0.5).as_float().value(), 0.5);
    EXPECT_EQ(value::make_string("hi").as_string().value(), "hi");

    auto too_big = value::make_uint(value_type::u64, std::numeric_limits<uint64_t>::max()).as_int();
    ASSERT_FALSE(too_big.ok());
    EXPECT_EQ(too_big.error().message(), "value 18446744073709551615 (u64) does not fit in int64");

    auto not_int = value::make_float(value_type::f32, 1.0).as_int();
    ASSERT_FALSE(not_int.ok());
    EXPECT_EQ(not_int.error().message(), "value of type f32 is not an integer");
    EXPECT_FALSE(value::make_string("1").as_int().ok());
    EXPECT_FALSE(value::make_string("1").as_float().ok());
    EXPECT_FALSE(value::make_bool(true).as_float().ok());
    EXPECT_FALSE(value::make_uint(value_type::u8, 1).as_bool().ok());
    EXPECT_FALSE(value::make_uint(value_type::u8, 1).as_string().ok());

    const value arr = value::make_array(value_type::u8, {value::make_uint(value_type::u8, 1)});
    ASSERT_NE(arr.as_array(), nullptr);
    EXPECT_EQ(arr.as_array()->size(), 1u);
    EXPECT_EQ(arr.element_type, value_type::u8);
    EXPECT_EQ(value::make_string("x").as_array(), nullptr);
    EXPECT_FALSE(arr.as_int().ok());
}

}  // namespace
}  // namespace h2okv::gguf
