#include "h2okv/core/status.h"

#include <gtest/gtest.h>

namespace h2okv {
namespace {

result<int> parse_positive(int x) {
    if (x <= 0) return invalid_argument("value {} must be >= 1", x);
    return x;
}

result<int> doubled(int x) {
    H2OKV_ASSIGN_OR_RETURN(int v, parse_positive(x));
    return 2 * v;
}

status check(int x) {
    H2OKV_RETURN_IF_ERROR(parse_positive(x));
    return ok_status();
}

TEST(Status, OkByDefault) {
    status s;
    EXPECT_TRUE(s.ok());
    EXPECT_EQ(s.to_string(), "ok");
}

TEST(Status, ErrorCarriesCodeAndMessage) {
    status s = invalid_argument("budget {} must be >= {}", 0, 1);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.code(), status_code::invalid_argument);
    EXPECT_EQ(s.to_string(), "invalid argument: budget 0 must be >= 1");
    EXPECT_EQ(s.with_context("policy").message(), "policy: budget 0 must be >= 1");
}

TEST(Result, PropagatesValuesAndErrors) {
    auto good = doubled(3);
    ASSERT_TRUE(good.ok());
    EXPECT_EQ(*good, 6);
    auto bad = doubled(-1);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error().message(), "value -1 must be >= 1");
    EXPECT_TRUE(check(2).ok());
    EXPECT_EQ(check(0).code(), status_code::invalid_argument);
}

}  // namespace
}  // namespace h2okv
