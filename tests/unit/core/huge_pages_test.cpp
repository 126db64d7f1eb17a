#include "h2okv/core/huge_pages.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace h2okv::core {
namespace {

TEST(HugePages, LargeBuffersStartOnAHugePageBoundaryAndHoldTheirBytes) {
    for (const size_t bytes :
         {huge_page_bytes, huge_page_bytes + 1, 3 * huge_page_bytes + 4095, 5 * huge_page_bytes}) {
        auto* p = static_cast<unsigned char*>(huge_page_alloc(bytes));
        ASSERT_NE(p, nullptr) << bytes;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % huge_page_bytes, 0u) << bytes;
        // Every byte is writable and keeps what was written (the mapping covers the whole size).
        for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(i * 7 + 3);
        size_t wrong = 0;
        for (size_t i = 0; i < bytes; ++i) wrong += p[i] != static_cast<unsigned char>(i * 7 + 3);
        EXPECT_EQ(wrong, 0u) << bytes;
        huge_page_free(p, bytes);
    }
}

// The VmFlags of the mapping that holds `addr` in /proc/self/smaps ("" when none is found).
std::string vm_flags_of(const void* addr) {
    std::ifstream smaps("/proc/self/smaps");
    const auto a = reinterpret_cast<uintptr_t>(addr);
    std::string line;
    bool inside = false;
    while (std::getline(smaps, line)) {
        uintptr_t lo = 0, hi = 0;
        char dash = 0;
        std::istringstream head(line);
        if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
            inside = lo <= a && a < hi;
        } else if (inside && line.rfind("VmFlags:", 0) == 0) {
            return line;
        }
    }
    return "";
}

// The buffer's mapping carries the kernel's MADV_HUGEPAGE flag ("hg"): the advice was given, whatever the
// machine's THP mode makes of it.
TEST(HugePages, LargeBuffersAreAdvisedForHugePages) {
    if (!std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled")) {
        GTEST_SKIP() << "this kernel has no transparent huge pages";
    }
    const size_t bytes = 4 * huge_page_bytes;
    void* p = huge_page_alloc(bytes);
    ASSERT_NE(p, nullptr);
    const std::string flags = vm_flags_of(p);
    if (flags.empty()) {
        huge_page_free(p, bytes);
        GTEST_SKIP() << "/proc/self/smaps shows no VmFlags";
    }
    EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
    huge_page_free(p, bytes);
    // A small buffer is ordinary memory, not advised.
    void* q = huge_page_alloc(4096);
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(vm_flags_of(q).find(" hg"), std::string::npos);
    huge_page_free(q, 4096);
}

TEST(HugePages, SmallBuffersAreCacheLineAligned) {
    for (const size_t bytes : {size_t{0}, size_t{1}, size_t{100}, huge_page_bytes - 1}) {
        auto* p = static_cast<unsigned char*>(huge_page_alloc(bytes));
        ASSERT_NE(p, nullptr) << bytes;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
        std::memset(p, 0xAB, bytes);
        huge_page_free(p, bytes);
    }
}

TEST(HugePages, VectorsGrowShrinkAndCopyThroughTheAllocator) {
    std::vector<std::byte, huge_page_allocator<std::byte>> v(3 * huge_page_bytes + 17, std::byte{0});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % huge_page_bytes, 0u);
    v[v.size() - 1] = std::byte{42};
    auto copy = v;  // a second large buffer, freed with its own size
    v.resize(10);   // capacity unchanged; shrink_to_fit moves to a small buffer
    v.shrink_to_fit();
    EXPECT_EQ(v.size(), 10u);
    EXPECT_EQ(copy.back(), std::byte{42});
    EXPECT_EQ(copy.front(), std::byte{0});
}

}  // namespace
}  // namespace h2okv::core
