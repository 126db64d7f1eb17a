#include "h2okv/core/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace h2okv::core {
namespace {

std::atomic<int64_t> g_forks[k_parallel_sites];

std::atomic<bool>& forced() {
    static std::atomic<bool> on{[] {
        const char* env = std::getenv("H2OKV_FORCE_PARALLEL");
        return env != nullptr && std::strcmp(env, "1") == 0;
    }()};
    return on;
}

}  // namespace

const char* parallel_site_name(parallel_site s) noexcept {
    switch (s) {
        case parallel_site::matmul: return "matmul";
        case parallel_site::attention: return "attention";
        case parallel_site::commit: return "commit";
        case parallel_site::tokens: return "tokens";
        case parallel_site::close: return "close";
    }
    return "unknown";
}

bool should_fork(parallel_site site, int64_t work, int64_t threshold) noexcept {
    if (omp_in_parallel() || omp_get_max_threads() < 2) return false;
    if (work < threshold && !forced().load(std::memory_order_relaxed)) return false;
    g_forks[static_cast<int>(site)].fetch_add(1, std::memory_order_relaxed);
    return true;
}

int64_t fork_count(parallel_site site) noexcept {
    return g_forks[static_cast<int>(site)].load(std::memory_order_relaxed);
}

void reset_fork_counts() noexcept {
    for (auto& c : g_forks) c.store(0, std::memory_order_relaxed);
}

void set_force_parallel(bool on) noexcept {
    forced().store(on, std::memory_order_relaxed);
}

bool force_parallel() noexcept {
    return forced().load(std::memory_order_relaxed);
}

stealing_ranges::stealing_ranges(int64_t n, int threads)
    : ranges_(static_cast<size_t>(std::max(1, threads))) {
    const auto t = static_cast<int64_t>(ranges_.size());
    for (int64_t i = 0; i < t; ++i) {
        const auto lo = static_cast<uint64_t>(n * i / t);
        const auto hi = static_cast<uint64_t>(n * (i + 1) / t);
        ranges_[static_cast<size_t>(i)].front_back.store(lo << 32 | hi, std::memory_order_relaxed);
    }
}

bool stealing_ranges::take(int r, bool back_end, int64_t run, int64_t* i0, int64_t* i1) noexcept {
    std::atomic<uint64_t>& fb = ranges_[static_cast<size_t>(r)].front_back;
    uint64_t v = fb.load(std::memory_order_relaxed);
    for (;;) {
        const uint64_t front = v >> 32, back = v & 0xFFFFFFFFu;
        if (front >= back) return false;
        const uint64_t n = std::min(back - front, static_cast<uint64_t>(run));
        const uint64_t lo = back_end ? back - n : front;
        const uint64_t left = back_end ? front << 32 | lo : (lo + n) << 32 | back;
        if (fb.compare_exchange_weak(v, left, std::memory_order_relaxed)) {
            *i0 = static_cast<int64_t>(lo);
            *i1 = static_cast<int64_t>(lo + n);
            return true;
        }
    }
}

}  // namespace h2okv::core
