// Policy bookkeeping cost per decode step: one add_row plus the pick of one victim, chunk of 1, one unit at
// steady state (the cache full, one token in, one out). `time_per_slot` is the CPU time per kept slot per
// step (printed with an SI prefix: 214ps = 0.214 ns); the target is <= 0.3 ns at budget 4096 (H2O's
// bookkeeping must stay a small part of a decode step).
//
//   bench_policy_bench --benchmark_min_time=0.2 --benchmark_filter=h2o_decode_step
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "h2okv/policy/policy.h"
#include "policy/score_pass.h"

namespace {

using h2okv::policy::kv_policy;

constexpr int k_rows = 8;  // distinct rows cycled through, so scores keep moving

// `full` keeps every position, so its capacity is max_positions: keep that modest.
std::unique_ptr<kv_policy> create_policy(const std::string& spec, int max_chunk) {
    h2okv::policy::layout l;
    l.max_chunk = max_chunk;
    l.max_positions = spec == "full" ? int64_t{1} << 20 : int64_t{1} << 40;
    auto p = h2okv::policy::params::parse(spec);
    if (!p.ok()) return nullptr;
    auto pol = kv_policy::create(*p, l, l.max_positions);
    if (!pol.ok()) return nullptr;
    return std::move(pol).value();
}

// Rows shaped like softmax output over `budget` slots: positive, summing to about 1.
std::vector<std::vector<double>> make_rows(int64_t capacity, int64_t budget) {
    std::mt19937_64 rng(42);
    std::exponential_distribution<double> e(1.0);
    std::vector<std::vector<double>> rows(k_rows, std::vector<double>(capacity));
    for (auto& row : rows) {
        for (double& x : row) x = e(rng) / static_cast<double>(budget);
    }
    return rows;
}

// Decode steps through the public API, `pol` already created; fills the cache before timing.
void run_decode(benchmark::State& state, kv_policy& pol, int64_t budget) {
    const auto rows = make_rows(pol.capacity(), budget);
    int64_t t = 0;
    auto step = [&] {
        (void)pol.begin_chunk(t, 1);
        pol.add_row(0, 0, rows[t % k_rows].data());
        (void)pol.end_chunk();
        ++t;
    };
    auto warm_up = [&] {
        while (t < budget + 2 * k_rows) step();
    };
    warm_up();
    for (auto _ : state) {
        if (t == pol.shape().max_positions) {  // only `full` gets here
            state.PauseTiming();
            pol.reset();
            t = 0;
            warm_up();
            state.ResumeTiming();
        }
        step();
        benchmark::DoNotOptimize(pol.victim_slots(0).data());
    }
    state.counters["time_per_slot"] =
        benchmark::Counter(static_cast<double>(budget),
                           benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
    state.counters["evictions"] = static_cast<double>(pol.total_evictions());
}

// h2o per decode step; range(0) = budget, range(1) = decay in thousandths.
void h2o_decode_step(benchmark::State& state) {
    const int64_t budget = state.range(0);
    const double decay = static_cast<double>(state.range(1)) / 1000.0;
    auto pol = create_policy("h2o:budget=" + std::to_string(budget) + ",decay=" + std::to_string(decay), 1);
    if (!pol) return state.SkipWithError("cannot create the policy");
    run_decode(state, *pol, budget);
}
BENCHMARK(h2o_decode_step)
    ->ArgNames({"budget", "decay_x1000"})
    ->ArgsProduct({{64, 256, 1024, 4096, 16384, 32768}, {1000, 980}});

// The same step after a prefill in chunks of 512 (capacity budget + 512): the prefill scatters the kept
// slots over the whole capacity and heavy hitters keep some high slots, so the pass covers up to 12 % more
// slots than in a decode-only run. time_per_slot still divides by the budget.
void h2o_decode_step_after_prefill(benchmark::State& state) {
    const int64_t budget = state.range(0);
    auto pol = create_policy("h2o:budget=" + std::to_string(budget), 512);
    if (!pol) return state.SkipWithError("cannot create the policy");
    const auto rows = make_rows(pol->capacity(), budget);
    int64_t t = 0;
    for (; t < 2 * budget; t += 512) {
        (void)pol->begin_chunk(t, 512);
        for (int i = 0; i < 512; ++i) pol->add_row(0, i, rows[i % k_rows].data());
        (void)pol->end_chunk();
    }
    auto step = [&] {
        (void)pol->begin_chunk(t, 1);
        pol->add_row(0, 0, rows[t % k_rows].data());
        (void)pol->end_chunk();
        ++t;
    };
    for (int64_t k = 0; k < 4 * budget; ++k) step();
    for (auto _ : state) {
        step();
        benchmark::DoNotOptimize(pol->victim_slots(0).data());
    }
    state.counters["time_per_slot"] =
        benchmark::Counter(static_cast<double>(budget),
                           benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(h2o_decode_step_after_prefill)->ArgName("budget")->Arg(4096);

// A prefill chunk of 64 at steady state: 64 rows, then 64 victims by partial selection. Per token.
void h2o_prefill_chunk64(benchmark::State& state) {
    const int64_t budget = state.range(0);
    auto pol = create_policy("h2o:budget=" + std::to_string(budget), 64);
    if (!pol) return state.SkipWithError("cannot create the policy");
    const auto rows = make_rows(pol->capacity(), budget);
    int64_t t = 0;
    auto chunk = [&] {
        (void)pol->begin_chunk(t, 64);
        for (int i = 0; i < 64; ++i) pol->add_row(0, i, rows[(t + i) % k_rows].data());
        (void)pol->end_chunk();
        t += 64;
    };
    while (t < 2 * budget) chunk();
    for (auto _ : state) {
        chunk();
        benchmark::DoNotOptimize(pol->victim_slots(0).data());
    }
    state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(h2o_prefill_chunk64)->ArgName("budget")->Arg(4096);

// The score pass alone per variant (scalar reference, AVX2, AVX-512), fused add + lowest-slot search.
void score_pass_variant(benchmark::State& state) {
    const auto variants = h2okv::policy::detail::score_pass_variants();
    if (static_cast<size_t>(state.range(0)) >= variants.size()) return state.SkipWithError("not on this CPU");
    const auto& pass = *variants[state.range(0)];
    state.SetLabel(pass.isa);
    const auto n = static_cast<int32_t>(state.range(1));
    std::vector<double> score(n, 0.5);
    const auto rows = make_rows(n, n);
    std::vector<int64_t> pos(n);
    for (int32_t s = 0; s < n; ++s) pos[s] = (static_cast<int64_t>(s) * 7919) % n;
    int k = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(
            pass.add_row_find_lowest(score.data(), rows[k++ % k_rows].data(), pos.data(), n, 0.98, 0, n / 2));
    }
    state.counters["time_per_slot"] = benchmark::Counter(
        static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(score_pass_variant)->ArgNames({"variant", "slots"})->ArgsProduct({{0, 1, 2}, {4096}});

// Every registered policy's decode step at budget 4096 (policies that read no attention skip the pass).
const bool k_every_policy = [] {
    for (const std::string& name : h2okv::policy::policy_names()) {
        benchmark::RegisterBenchmark(
            ("policy_decode_step/" + name + "/budget:4096").c_str(), [name](benchmark::State& state) {
                auto pol = create_policy(name == "full" ? name : name + ":budget=4096", 1);
                if (!pol) return state.SkipWithError("cannot create the policy");
                run_decode(state, *pol, 4096);
            });
    }
    return true;
}();

}  // namespace

BENCHMARK_MAIN();
