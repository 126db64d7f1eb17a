// When an OpenMP parallel region pays, decided in one place for every site that forks (weight products,
// attention, score commits, and the per-token work between them: norms, rotations, activations, residuals),
// and a count of the regions each site forked, so tests can prove that the parallel paths they name ran.
//
// A site forks only with more than one thread available, outside another parallel region, and when its work
// reaches its threshold (a fork and join cost several microseconds on a busy machine). `set_force_parallel`
// (or H2OKV_FORCE_PARALLEL=1 in the environment) drops the thresholds, so a small model takes every
// parallel path; results do not change (every kernel and commit is bit-identical for any thread count).
//
//   if (core::should_fork(core::parallel_site::attention, work, 32768)) { /* #pragma omp parallel ... */ }
//   EXPECT_GT(core::fork_count(core::parallel_site::attention), 0);
#pragma once

#include <cstdint>

namespace h2okv::core {

enum class parallel_site { matmul, attention, commit, tokens };
constexpr int k_parallel_sites = 4;
const char* parallel_site_name(parallel_site s) noexcept;  // "matmul", "attention", "commit", "tokens"

// True, and counted, when a region of `work` at `site` should fork: omp_get_max_threads() > 1, not already
// inside a parallel region, and work >= threshold (any work when forced).
bool should_fork(parallel_site site, int64_t work, int64_t threshold) noexcept;

// Regions forked at `site` since the start of the process (or the last reset).
int64_t fork_count(parallel_site site) noexcept;
void reset_fork_counts() noexcept;

// Forces every site to fork whenever more than one thread is available. Initially on when the environment
// has H2OKV_FORCE_PARALLEL=1.
void set_force_parallel(bool on) noexcept;
bool force_parallel() noexcept;

// fn(i) for i in [0, n): split between the threads when `fork` (should_fork's answer), in contiguous runs
// (`interleaved`: i, i + threads, ...); otherwise a plain loop in this thread. An OpenMP region with a false
// `if` clause would still start a team of one in the runtime, about a thousand instructions per call.
template <bool interleaved = false, typename F>
void parallel_for(bool fork, int64_t n, const F& fn) {
    if (!fork) {
        for (int64_t i = 0; i < n; ++i) fn(i);
        return;
    }
    if constexpr (interleaved) {
#pragma omp parallel for schedule(static, 1)
        for (int64_t i = 0; i < n; ++i) fn(i);
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) fn(i);
    }
}

}  // namespace h2okv::core
