// The KV memory pool: one byte budget shared by every sequence's cache. A sequence is admitted only when its
// cache's footprint (kv_cache::plan: K/V rows plus the slot tables) fits what is left; its bytes return when
// it finishes. The pool counts bytes, it does not allocate them: each cache allocates its own, so the
// process never holds more than the pool's capacity in caches.
//
//   kv::memory_pool pool(512ll << 20);
//   if (pool.try_take(fp.total())) { /* create the cache */ } ... pool.give(fp.total());
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "h2okv/core/status.h"

namespace h2okv::kv {

class memory_pool {
public:
    // capacity: bytes (0: no limit).
    explicit memory_pool(int64_t capacity = 0) : capacity_(capacity) {}

    // Takes `bytes` when they fit what is left; false (taking nothing) otherwise.
    bool try_take(int64_t bytes);
    // Returns bytes taken before.
    void give(int64_t bytes);
    // Whether `bytes` could ever fit (in an empty pool).
    bool could_fit(int64_t bytes) const { return capacity_ == 0 || bytes <= capacity_; }

    int64_t capacity() const { return capacity_; }
    int64_t used() const { return used_; }
    int64_t peak() const { return peak_; }

private:
    int64_t capacity_;
    int64_t used_ = 0;
    int64_t peak_ = 0;
};

// Parses a byte size: "536870912", "512MiB", "512M", "1.5GiB", "64KiB" (K, M, G, T as powers of 1024, with or
// without "iB" / "B"); the error names the text and the accepted forms.
result<int64_t> parse_bytes(std::string_view text);
// "512.0 MiB", "1.50 GiB", "900 B".
std::string format_bytes(int64_t bytes);

}  // namespace h2okv::kv
