// H2OKV_ISA: parsed and checked against what the CPU runs; the value names what was wrong.
#include "h2okv/core/cpu_isa.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace h2okv {
namespace {

// Sets H2OKV_ISA for one scope and restores it.
class isa_env {
public:
    explicit isa_env(const char* v) {
        if (const char* old = std::getenv("H2OKV_ISA")) old_ = old;
        had_ = std::getenv("H2OKV_ISA") != nullptr;
        v ? setenv("H2OKV_ISA", v, 1) : unsetenv("H2OKV_ISA");
    }
    ~isa_env() { had_ ? setenv("H2OKV_ISA", old_.c_str(), 1) : unsetenv("H2OKV_ISA"); }

private:
    std::string old_;
    bool had_ = false;
};

TEST(CpuIsa, DetectedIsSupportedAndScalarAlwaysIs) {
    EXPECT_TRUE(core::cpu_supports(core::cpu_isa::scalar));
    EXPECT_TRUE(core::cpu_supports(core::detected_isa()));
    if (core::detected_isa() == core::cpu_isa::avx512) {
        EXPECT_TRUE(core::cpu_supports(core::cpu_isa::avx2));
    }
#ifdef H2OKV_KERNELS_NO_SIMD
    // A build without SIMD code (scripts/check_no_simd.sh) runs scalar whatever the CPU offers.
    EXPECT_EQ(core::detected_isa(), core::cpu_isa::scalar);
    EXPECT_FALSE(core::cpu_supports(core::cpu_isa::avx2));
#endif
}

TEST(CpuIsa, RequestedIsaComesFromTheEnvironment) {
    {
        isa_env e(nullptr);
        auto r = core::requested_isa();
        ASSERT_TRUE(r.ok());
        EXPECT_FALSE(r->has_value());
    }
    {
        isa_env e("scalar");
        auto r = core::requested_isa();
        ASSERT_TRUE(r.ok());
        EXPECT_EQ(**r, core::cpu_isa::scalar);
    }
    for (core::cpu_isa i : {core::cpu_isa::avx2, core::cpu_isa::avx512}) {
        isa_env e(core::cpu_isa_name(i));
        auto r = core::requested_isa();
        EXPECT_EQ(r.ok(), core::cpu_supports(i)) << core::cpu_isa_name(i);
        if (!r.ok()) {
            EXPECT_NE(r.error().message().find("does not run"), std::string::npos) << r.error().message();
        }
    }
    {
        isa_env e("sse9");
        auto r = core::requested_isa();
        ASSERT_FALSE(r.ok());
        EXPECT_NE(r.error().message().find("H2OKV_ISA is 'sse9', expected scalar, avx2 or avx512"),
                  std::string::npos)
            << r.error().message();
    }
}

// What this process runs with: H2OKV_ISA's ISA when the suite runs under one (.ci/run's scalar pass).
TEST(CpuIsa, SelectedFollowsTheEnvironmentOfTheProcess) {
    auto r = core::requested_isa();
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    EXPECT_EQ(core::selected_isa(), r->value_or(core::detected_isa()));
}

}  // namespace
}  // namespace h2okv
