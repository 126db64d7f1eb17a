// The decode path (begin_chunk, add_row per unit, end_chunk with chunks of one token) allocates nothing.
// This file replaces the global operator new of the test executable with a counting one.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "h2okv/policy/policy.h"
#include "policy/policy_test_support.h"

namespace {
std::atomic<int64_t> g_allocations{0};

void* counted_malloc(std::size_t n) noexcept {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    return std::malloc(n == 0 ? 1 : n);
}

void* counted_alloc(std::size_t n) {
    if (void* p = counted_malloc(n)) return p;
    throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t n) {
    return counted_alloc(n);
}
void* operator new[](std::size_t n) {
    return counted_alloc(n);
}
// The nothrow forms too (std::stable_sort's temporary buffer uses them): every form this file does not
// replace would pair the runtime's allocator with the free() below, which AddressSanitizer reports as a
// mismatch.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    return counted_malloc(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
    return counted_malloc(n);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
    std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
    std::free(p);
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete[](void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
    std::free(p);
}

namespace h2okv::testing {
namespace {

class no_allocation : public ::testing::TestWithParam<std::string> {};

TEST_P(no_allocation, SteadyStateDecodeAllocatesNothing) {
    policy::layout l;
    l.n_layer = 2;
    l.n_kv_head = 2;
    l.n_head = 4;
    l.max_chunk = 64;
    l.max_positions = 100000;
    auto p = policy::params::parse(GetParam() + ":budget=100");
    ASSERT_TRUE(p.ok());
    auto pol = must_create(*p, l, l.max_positions);
    ASSERT_NE(pol, nullptr);
    attention_source src(4);
    int64_t first = 0;
    for (int n : chunk_plan(400, 64, 128)) {  // a prefill that scatters the slots, then decode
        feed_chunk(*pol, nullptr, first, n, src, 0.0);
        first += n;
    }
    // Rows prepared up front: what an engine's kernel would write into its own buffers.
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> u(0.0, 0.02);
    std::vector<std::vector<double>> rows(pol->n_units(), std::vector<double>(pol->capacity()));
    for (auto& row : rows) {
        for (double& x : row) x = u(rng);
    }
    const int64_t probe = g_allocations.load();
    auto counted = std::make_unique<int>(1);
    ASSERT_GT(g_allocations.load(), probe) << "the counting operator new is not in use";
    const int64_t before = g_allocations.load();
    for (int step = 0; step < 500; ++step, ++first) {
        ASSERT_TRUE(pol->begin_chunk(first, 1).ok());
        for (int unit = 0; unit < pol->n_units(); ++unit) pol->add_row(unit, 0, rows[unit].data());
        ASSERT_TRUE(pol->end_chunk().ok());
    }
    EXPECT_EQ(g_allocations.load() - before, 0) << "allocations on the decode path";
    if (pol->config().budget > 0) {
        EXPECT_GT(pol->total_evictions(), 0);
    }
}

INSTANTIATE_TEST_SUITE_P(every_policy, no_allocation, ::testing::ValuesIn(policy::policy_names()),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace h2okv::testing
