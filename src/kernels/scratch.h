// A per-thread scratch buffer that grows to the largest size asked for and is kept for later calls: the
// kernels' panels and quantised activations, so the hot paths allocate only the first time.
//
//   float* panel = detail::thread_scratch<float>(rows * cols);   // null when it cannot be allocated
#pragma once

#include <cstddef>
#include <memory>
#include <new>

namespace h2okv::kernels::detail {

// This thread's buffer of at least n elements of T (one buffer per T), or null when it cannot be allocated.
template <typename T>
T* thread_scratch(size_t n) {
    thread_local std::unique_ptr<T[]> buf;
    thread_local size_t capacity = 0;
    if (capacity < n) {
        buf.reset(new (std::nothrow) T[n]);
        capacity = buf ? n : 0;
    }
    return buf.get();
}

}  // namespace h2okv::kernels::detail
