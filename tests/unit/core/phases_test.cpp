// core::phase_scope: exclusive wall time on the driving thread, thread time inside parallel regions and for
// hand-overs, nothing while disabled. Sleeps give each scope a known least duration; every assertion is a
// lower bound a sleep guarantees or a sum that exclusivity bounds by the elapsed time, so no assertion
// depends on the machine's speed.
#include "h2okv/core/phases.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <thread>

namespace h2okv::core {
namespace {

using namespace std::chrono_literals;

double wall(const phase_times& t, phase p) {
    return t.wall[static_cast<size_t>(phase_index(p))];
}
double busy(const phase_times& t, phase p) {
    return t.busy[static_cast<size_t>(phase_index(p))];
}

class Phases : public ::testing::Test {
protected:
    void SetUp() override {
        phases::reset();
        phases::enable(true);
    }
    void TearDown() override {
        phases::enable(false);
        phases::reset();
    }
};

TEST_F(Phases, NestedScopesAreExclusive) {
    const auto t0 = std::chrono::steady_clock::now();
    {
        const phase_scope outer(phase::products);
        std::this_thread::sleep_for(5ms);
        {
            const phase_scope inner(phase::attention);
            std::this_thread::sleep_for(10ms);
        }
        std::this_thread::sleep_for(5ms);
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const phase_times t = phases::read();
    EXPECT_GE(wall(t, phase::attention), 0.010);
    EXPECT_GE(wall(t, phase::products), 0.010) << "the outer scope's own time, both sides of the inner one";
    EXPECT_LE(wall(t, phase::products) + wall(t, phase::attention), elapsed) << "no time counted twice";
    EXPECT_EQ(wall(t, phase::scores), 0.0);
    EXPECT_EQ(busy(t, phase::products), 0.0);
}

TEST_F(Phases, HandOversAndParallelRegionsCountThreadTime) {
    {
        const phase_scope attention(phase::attention);
        {
            const phase_scope handing(phase::handover);
            std::this_thread::sleep_for(5ms);
        }
#pragma omp parallel num_threads(2)
        {
            const phase_scope chunks(phase::chunks);
            std::this_thread::sleep_for(5ms);
        }
    }
    const phase_times t = phases::read();
    EXPECT_GE(busy(t, phase::handover), 0.005);
    EXPECT_EQ(wall(t, phase::handover), 0.0) << "a hand-over is part of the attention scope around it";
    EXPECT_GE(wall(t, phase::attention), 0.010);
    EXPECT_GE(busy(t, phase::chunks), 0.010) << "both threads' time";
    EXPECT_EQ(wall(t, phase::chunks), 0.0);
}

TEST_F(Phases, DisabledScopesCountNothing) {
    phases::enable(false);
    {
        const phase_scope s(phase::products);
        std::this_thread::sleep_for(2ms);
    }
    const phase_times t = phases::read();
    for (double x : t.wall) EXPECT_EQ(x, 0.0);
    for (double x : t.busy) EXPECT_EQ(x, 0.0);
    EXPECT_STREQ(phase_name(phase::kv_store), "kv_store");
}

}  // namespace
}  // namespace h2okv::core
