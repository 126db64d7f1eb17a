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

#include <omp.h>

#include <atomic>
#include <cstdint>
#include <vector>

namespace h2okv::core {

// tokens: the per-token work between products (and a pass's logits copies); close: the sessions whose chunk a
// pass completes, closing it (their evictions) side by side.
enum class parallel_site { matmul, attention, commit, tokens, close };
constexpr int k_parallel_sites = 5;
// "matmul", "attention", "commit", "tokens", "close"
const char* parallel_site_name(parallel_site s) noexcept;

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

// [0, n) cut into one contiguous range per thread of a team. Each thread takes runs from the front of its
// own range, and once that is empty, from the back of the others' ranges: a thread streams its own part in
// order, and a thread the machine slows down does not keep the rest of the team waiting at the join.
// Construct it before the parallel region; every thread of the team calls run(). n < 2^32.
class stealing_ranges {
public:
    stealing_ranges(int64_t n, int threads);

    // fn(i0, i1) for runs of at most `run` indices until none is left anywhere.
    template <typename F>
    void run(int id, int64_t run, const F& fn) {
        int64_t i0 = 0, i1 = 0;
        while (take(id, false, run, &i0, &i1)) fn(i0, i1);
        for (int k = 1; k < static_cast<int>(ranges_.size()); ++k) {
            const int other = (id + k) % static_cast<int>(ranges_.size());
            while (take(other, true, run, &i0, &i1)) fn(i0, i1);
        }
    }

private:
    struct alignas(64) range {
        std::atomic<uint64_t> front_back{0};  // front << 32 | back: [front, back) is left
    };
    // Up to `run` indices [*i0, *i1) off range r's front, or its back when `back_end`; false when it is
    // empty.
    bool take(int r, bool back_end, int64_t run, int64_t* i0, int64_t* i1) noexcept;

    std::vector<range> ranges_;
};

// fn(i) for i in [0, n): split between the threads when `fork` (should_fork's answer), in contiguous runs
// (`balanced`: one index at a time out of stealing_ranges, for items whose cost varies or a team whose
// threads run at different speeds); otherwise a plain loop in this thread. An OpenMP region with a false
// `if` clause would still start a team of one in the runtime, about a thousand instructions per call.
template <bool balanced = false, typename F>
void parallel_for(bool fork, int64_t n, const F& fn) {
    if (!fork) {
        for (int64_t i = 0; i < n; ++i) fn(i);
        return;
    }
    if constexpr (balanced) {
        stealing_ranges work(n, omp_get_max_threads());
#pragma omp parallel
        work.run(omp_get_thread_num(), 1, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) fn(i);
        });
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) fn(i);
    }
}

}  // namespace h2okv::core
