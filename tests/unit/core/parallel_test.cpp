#include "h2okv/core/parallel.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace h2okv::core {
namespace {

// Every index of [0, n) is taken exactly once, by runs of at most `run`, for any team size.
TEST(StealingRanges, EveryIndexOnce) {
    for (int threads : {1, 2, 3, 5}) {
        for (int64_t n : {0, 1, 2, 7, 64, 1000}) {
            for (int64_t run : {1, 3, 16}) {
                std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
                std::atomic<bool> too_long{false};
                stealing_ranges work(n, threads);
#pragma omp parallel num_threads(threads)
                work.run(omp_get_thread_num(), run, [&](int64_t i0, int64_t i1) {
                    if (i1 - i0 > run || i1 <= i0) too_long = true;
                    for (int64_t i = i0; i < i1; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
                });
                EXPECT_FALSE(too_long);
                for (int64_t i = 0; i < n; ++i)
                    ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n " << n << " index " << i;
            }
        }
    }
}

// Two real threads: thread 1 is slow on its first run, so thread 0 finishes its own range and takes the
// tail of thread 1's range from the back.
TEST(StealingRanges, AFastThreadTakesTheTailOfASlowOnesRange) {
    constexpr int64_t n = 64;
    std::vector<int> taken_by(n, -1);
    int team = 0;
    std::atomic<bool> started{false};
    std::vector<int64_t> order0;  // the indices thread 0 took, in order
    stealing_ranges work(n, 2);
#pragma omp parallel num_threads(2)
    {
#pragma omp single
        team = omp_get_num_threads();
        const int id = omp_get_thread_num();
        bool first = true;
        work.run(id, 1, [&](int64_t i0, int64_t i1) {
            if (first && id == 1) {
                started = true;  // it holds index 32 now
                std::this_thread::sleep_for(std::chrono::milliseconds(200));
            } else if (first) {  // thread 0 waits (up to 5 s) until thread 1 holds its first index
                const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
                while (!started && std::chrono::steady_clock::now() < until) std::this_thread::yield();
            }
            first = false;
            for (int64_t i = i0; i < i1; ++i) {
                taken_by[static_cast<size_t>(i)] = id;
                if (id == 0) order0.push_back(i);
            }
        });
    }
    ASSERT_EQ(team, 2) << "the runtime did not start two threads";
    // Thread 1's own range is [32, 64); it starts at 32, so thread 0 took the last of it.
    EXPECT_EQ(taken_by[32], 1);
    EXPECT_EQ(taken_by[63], 0);
    // Its own range in order, then thread 1's from the back: 0 .. 31, 63, 62, ..., 33.
    ASSERT_EQ(order0.size(), size_t{63});
    for (int64_t k = 0; k < 63; ++k)
        EXPECT_EQ(order0[static_cast<size_t>(k)], k < 32 ? k : 63 - (k - 32)) << "take " << k;
    for (int64_t i = 0; i < n / 2; ++i) EXPECT_EQ(taken_by[static_cast<size_t>(i)], 0) << i;
}

// parallel_for<true> runs every index once on a team of two.
TEST(ParallelFor, BalancedRunsEveryIndexOnce) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    std::vector<std::atomic<int>> hits(100);
    std::atomic<int> max_team{0};
    parallel_for<true>(true, 100, [&](int64_t i) {
        max_team = std::max(max_team.load(), omp_get_num_threads());
        hits[static_cast<size_t>(i)].fetch_add(1);
    });
    omp_set_num_threads(saved);
    EXPECT_EQ(max_team.load(), 2);
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

}  // namespace
}  // namespace h2okv::core
