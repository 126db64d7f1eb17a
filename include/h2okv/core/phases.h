// Where the time of forward passes goes, measured in the process (`h2okv bench --phases`): the share of a
// step that the eviction bookkeeping costs, against the products and attention, without a profiler.
//
// Two tables, both off until enable(true) (a disabled scope costs one relaxed load):
//   - wall: seconds of the threads that drive the passes, outside parallel regions. Scopes nest and are
//     exclusive: an inner scope's time is not its outer scope's, so the phases of one thread add up to the
//     time its outermost scopes covered.
//   - busy: seconds summed over the threads, for scopes opened inside a parallel region and for `handover`
//     scopes anywhere (work inside the items of another phase, whose wall time already counts it).
//
//   core::phases::enable(true);
//   core::phases::reset();
//   { core::phase_scope s(core::phase::attention); /* ... */ }
//   const core::phase_times t = core::phases::read();  // t.wall[phase_index(phase::attention)]
#pragma once

#include <array>
#include <chrono>

namespace h2okv::core {

// products: the model's layers outside attention (weight products with the per-token work fused into them:
//   norms, rotations, activations, residuals; embeddings and the output head).
// kv_store: a step's K/V rows written to the caches.
// attention: the attention items (kernels, and score rows handed to the policy where an item completes one).
// scores: score rows committed and handed to the policies outside the attention items.
// chunks: chunks opened (slots for the new tokens) and closed (the policies' evictions).
// handover (busy only): score rows handed to the policies inside the attention items (part of `attention`).
enum class phase { products, kv_store, attention, scores, chunks, handover };
constexpr int k_phases = 6;
// "products", "kv_store", "attention", "scores", "chunks", "handover"
const char* phase_name(phase p) noexcept;
constexpr int phase_index(phase p) noexcept {
    return static_cast<int>(p);
}

struct phase_times {
    std::array<double, k_phases> wall{};  // seconds
    std::array<double, k_phases> busy{};  // thread-seconds
};

namespace phases {
void enable(bool on) noexcept;
bool enabled() noexcept;
void reset() noexcept;
phase_times read() noexcept;
}  // namespace phases

// Charges the time from its construction to its destruction to `p` (see above); nothing when disabled.
class phase_scope {
public:
    explicit phase_scope(phase p) noexcept;
    ~phase_scope();
    phase_scope(const phase_scope&) = delete;
    phase_scope& operator=(const phase_scope&) = delete;

private:
    enum class mode : unsigned char { off, wall, busy };
    phase p_;
    mode mode_ = mode::off;
    phase outer_ = phase::products;
    bool had_outer_ = false;
    std::chrono::steady_clock::time_point start_;
};

}  // namespace h2okv::core
