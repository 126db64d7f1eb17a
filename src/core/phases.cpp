#include "h2okv/core/phases.h"

#include <omp.h>

#include <atomic>
#include <cstdint>

namespace h2okv::core {
namespace {

using clock = std::chrono::steady_clock;

std::atomic<bool> g_on{false};
std::atomic<int64_t> g_wall[k_phases];
std::atomic<int64_t> g_busy[k_phases];

// The innermost wall scope open on this thread, and since when its phase is being charged.
struct open_scope {
    bool active = false;
    phase p = phase::products;
    clock::time_point since;
};
thread_local open_scope t_open;

void charge(std::atomic<int64_t>* table, phase p, clock::time_point a, clock::time_point b) {
    table[phase_index(p)].fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count(),
                                    std::memory_order_relaxed);
}

}  // namespace

const char* phase_name(phase p) noexcept {
    switch (p) {
        case phase::products: return "products";
        case phase::kv_store: return "kv_store";
        case phase::attention: return "attention";
        case phase::scores: return "scores";
        case phase::chunks: return "chunks";
        case phase::handover: return "handover";
    }
    return "unknown";
}

namespace phases {

void enable(bool on) noexcept {
    g_on.store(on, std::memory_order_relaxed);
}

bool enabled() noexcept {
    return g_on.load(std::memory_order_relaxed);
}

void reset() noexcept {
    for (int i = 0; i < k_phases; ++i) {
        g_wall[i].store(0, std::memory_order_relaxed);
        g_busy[i].store(0, std::memory_order_relaxed);
    }
}

phase_times read() noexcept {
    phase_times t;
    for (int i = 0; i < k_phases; ++i) {
        t.wall[static_cast<size_t>(i)] =
            static_cast<double>(g_wall[i].load(std::memory_order_relaxed)) * 1e-9;
        t.busy[static_cast<size_t>(i)] =
            static_cast<double>(g_busy[i].load(std::memory_order_relaxed)) * 1e-9;
    }
    return t;
}

}  // namespace phases

phase_scope::phase_scope(phase p) noexcept : p_(p) {
    if (!phases::enabled()) return;
    start_ = clock::now();
    if (p == phase::handover || omp_in_parallel()) {
        mode_ = mode::busy;
        return;
    }
    mode_ = mode::wall;
    had_outer_ = t_open.active;
    if (had_outer_) {
        outer_ = t_open.p;
        charge(g_wall, outer_, t_open.since, start_);
    }
    t_open = {true, p, start_};
}

phase_scope::~phase_scope() {
    if (mode_ == mode::off) return;
    const clock::time_point end = clock::now();
    if (mode_ == mode::busy) {
        charge(g_busy, p_, start_, end);
        return;
    }
    charge(g_wall, p_, t_open.since, end);
    t_open = {had_outer_, outer_, end};
}

}  // namespace h2okv::core
