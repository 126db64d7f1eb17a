#include "h2okv/core/parallel.h"

#include <omp.h>

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

}  // namespace h2okv::core
