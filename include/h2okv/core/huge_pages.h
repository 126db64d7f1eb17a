// Memory for large buffers that are read or written all over on every step (the KV cache's slot rows): an
// allocation of at least huge_page_bytes starts on a 2 MiB boundary and asks the kernel for transparent
// huge pages over it (madvise MADV_HUGEPAGE). A KV pool of hundreds of MiB in 4 KiB pages costs a TLB miss
// at nearly every recycled slot and every few rows of attention; 2 MiB pages cover it with a few entries.
// Only the whole 2 MiB pages inside the buffer are eligible, so the memory in use is the same. Where the
// kernel has no transparent huge pages, or they are off, the buffer is ordinary memory.
//
//   std::vector<std::byte, core::huge_page_allocator<std::byte>> rows(n);
#pragma once

#include <cstddef>
#include <new>

namespace h2okv::core {

inline constexpr size_t huge_page_bytes = size_t{2} << 20;

// `bytes` of memory (64-byte aligned; 2 MiB aligned from huge_page_bytes up), or nullptr when the system has
// none. Free with huge_page_free and the same size.
void* huge_page_alloc(size_t bytes) noexcept;
void huge_page_free(void* p, size_t bytes) noexcept;

template <typename T>
struct huge_page_allocator {
    using value_type = T;
    huge_page_allocator() = default;
    template <typename U>
    huge_page_allocator(const huge_page_allocator<U>&) noexcept {}

    T* allocate(size_t n) {
        if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
        void* p = huge_page_alloc(n * sizeof(T));
        if (p == nullptr) throw std::bad_alloc();
        return static_cast<T*>(p);
    }
    void deallocate(T* p, size_t n) noexcept { huge_page_free(p, n * sizeof(T)); }

    template <typename U>
    bool operator==(const huge_page_allocator<U>&) const noexcept {
        return true;
    }
};

}  // namespace h2okv::core
