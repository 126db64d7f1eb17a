#include "h2okv/core/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace h2okv::core {
namespace {

size_t whole_pages(size_t bytes) {
    constexpr size_t page = 4096;
    return (bytes + page - 1) / page * page;
}

}  // namespace

void* huge_page_alloc(size_t bytes) noexcept {
    if (bytes < huge_page_bytes) return std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
    // A mapping one huge page longer than asked, trimmed to start on a 2 MiB boundary.
    const size_t len = whole_pages(bytes);
    void* m =
        ::mmap(nullptr, len + huge_page_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    const auto base = reinterpret_cast<uintptr_t>(m);
    const uintptr_t start = (base + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
    if (start > base) ::munmap(m, start - base);
    const uintptr_t end = base + len + huge_page_bytes;
    if (end > start + len) ::munmap(reinterpret_cast<void*>(start + len), end - (start + len));
    // Advice, not a requirement: without transparent huge pages the mapping stays in 4 KiB pages.
    (void)::madvise(reinterpret_cast<void*>(start), len, MADV_HUGEPAGE);
    return reinterpret_cast<void*>(start);
}

void huge_page_free(void* p, size_t bytes) noexcept {
    if (p == nullptr) return;
    if (bytes < huge_page_bytes) {
        std::free(p);
        return;
    }
    ::munmap(p, whole_pages(bytes));
}

}  // namespace h2okv::core
