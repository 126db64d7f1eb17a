// model::make_rope_spec against the formulas of h2okv/model/rope.h, computed here directly.
#include "h2okv/model/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

namespace h2okv {
namespace {

using kernels::rope_pairing;

TEST(RopeSpec, FrequencyFactorsAndLinearScalingDivideTheFrequencies) {
    const int dim = 64;
    const float base = 500000.0f;
    std::vector<float> factors(dim / 2);
    for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + static_cast<float>(i) / 4.0f;
    const model::rope_scaling linear{.type = model::rope_scaling_type::linear, .factor = 4.0};
    const auto s = model::make_rope_spec(dim, base, rope_pairing::normal, factors, linear);
    ASSERT_EQ(s.inv_freq.size(), factors.size());
    for (size_t i = 0; i < factors.size(); ++i) {
        const double want = std::pow(double{base}, -2.0 * static_cast<double>(i) / dim) / factors[i] / 4.0;
        EXPECT_DOUBLE_EQ(s.inv_freq[i], want) << i;
    }
    EXPECT_EQ(s.magnitude, 1.0);
    EXPECT_EQ(s.pairing, rope_pairing::normal);
}

// YaRN: pairs that turn more than beta_fast = 32 times within the original context keep their frequency,
// pairs turning less than beta_slow = 1 time are interpolated by the factor, a linear ramp between; the
// rotation grows by 0.1 ln(factor) + 1, times attn_factor.
TEST(RopeSpec, YarnBlendsByTurnsInTheOriginalContext) {
    const int dim = 128;
    const float base = 1000000.0f;
    const model::rope_scaling yarn{
        .type = model::rope_scaling_type::yarn, .factor = 4.0, .orig_ctx = 4096, .attn_factor = 1.5};
    ASSERT_TRUE(yarn.validate().ok());
    const auto s = model::make_rope_spec(dim, base, rope_pairing::neox, {}, yarn);
    const auto plain = kernels::rope_spec::plain(dim, base, rope_pairing::neox);
    int kept = 0, interpolated = 0, blended = 0;
    for (size_t i = 0; i < s.inv_freq.size(); ++i) {
        const double turns = 4096.0 * plain.inv_freq[i] / (2.0 * std::numbers::pi);
        const double ratio = s.inv_freq[i] / plain.inv_freq[i];
        if (turns > 33.0) {  // clear of the floor / ceil at the correction dims
            EXPECT_DOUBLE_EQ(ratio, 1.0) << i;
            ++kept;
        } else if (turns < 0.9) {
            EXPECT_DOUBLE_EQ(ratio, 0.25) << i;
            ++interpolated;
        } else {
            EXPECT_GE(ratio, 0.25) << i;
            EXPECT_LE(ratio, 1.0) << i;
            if (i > 0) {
                EXPECT_LE(ratio, s.inv_freq[i - 1] / plain.inv_freq[i - 1]) << i;
            }
            ++blended;
        }
    }
    EXPECT_GT(kept, 0);
    EXPECT_GT(interpolated, 0);
    EXPECT_GT(blended, 0);
    EXPECT_DOUBLE_EQ(s.magnitude, 1.5 * (1.0 + 0.1 * std::log(4.0)));
}

TEST(RopeSpec, InvalidScalingIsRefusedWithTheValues) {
    const model::rope_scaling zero{.type = model::rope_scaling_type::linear, .factor = 0.0};
    const status a = zero.validate();
    ASSERT_FALSE(a.ok());
    EXPECT_NE(a.message().find("rope.scaling.factor is 0"), std::string::npos) << a.message();
    const model::rope_scaling no_ctx{.type = model::rope_scaling_type::yarn, .factor = 4.0, .orig_ctx = 0};
    const status b = no_ctx.validate();
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.message().find("original_context_length is 0"), std::string::npos) << b.message();
}

}  // namespace
}  // namespace h2okv
