// Kernel micro-benchmarks: matmul weight bandwidth (GB/s of weights streamed) per weight type, ISA, shape and
// thread count, in the file's rows and packed as the model packs them, matmul throughput (GFLOP/s, two per
// multiply-add), attention over 1k / 8k slots of f32, f16 and q8_0
// K/V (one query head or a GQA group of three, with and without the fused H2O score bookkeeping), attention
// over many caches from memory with the rows in order or scattered, and the
// machine's measured peaks to compare them with: streaming-read bandwidth of a buffer far larger than the
// caches, and fma throughput (AVX2 and AVX-512).
//
//   ./bench_kernels_bench --benchmark_filter='peak|matmul/Q8_0/avx512/rows:16384'
//   ./bench_kernels_bench --benchmark_filter='matmul/.*/n_tok:512'
//   ./bench_kernels_bench --benchmark_filter='matmul_packed/Q4_K/avx512/.*/n_tok:16'   (the model's packed layout)
//   ./bench_kernels_bench --benchmark_filter=attend
//   ./bench_kernels_bench --benchmark_filter=attend_memory   (kept rows in order against scattered, from memory)
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "h2okv/core/cpu_isa.h"
#include "h2okv/kernels/kernels.h"

namespace {

using h2okv::core::tensor_type;
namespace k = h2okv::kernels;

std::vector<float> random_floats(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

// rows x cols weights of `type` with random content (for Q8_0: random scales and int8 values; for Q4_0,
// Q4_K, Q6_K: random normal values through quantize_row).
std::vector<std::byte> random_weights(tensor_type type, int64_t rows, int64_t cols) {
    const size_t row_bytes = k::row_size(type, cols);
    std::vector<std::byte> bytes(row_bytes * static_cast<size_t>(rows));
    const std::vector<float> v = random_floats(static_cast<size_t>(rows * cols), 1);
    if (type == tensor_type::q4_0 || type == tensor_type::q4_k || type == tensor_type::q6_k) {
        for (int64_t r = 0; r < rows; ++r) {
            k::quantize_row(type, v.data() + r * cols, cols,
                            bytes.data() + static_cast<size_t>(r) * row_bytes);
        }
        return bytes;
    }
    for (int64_t r = 0; r < rows; ++r) {
        std::byte* row = bytes.data() + static_cast<size_t>(r) * row_bytes;
        for (int64_t i = 0; i < cols; ++i) {
            const float x = v[static_cast<size_t>(r * cols + i)];
            if (type == tensor_type::f32) {
                std::memcpy(row + 4 * i, &x, 4);
            } else if (type == tensor_type::f16 || type == tensor_type::bf16) {
                const uint16_t h = type == tensor_type::f16 ? k::fp32_to_fp16(x) : k::fp32_to_bf16(x);
                std::memcpy(row + 2 * i, &h, 2);
            } else if (i % 32 == 0) {
                const uint16_t d = k::fp32_to_fp16(0.01f);
                std::memcpy(row + i / 32 * 34, &d, 2);
                for (int j = 0; j < 32; ++j) {
                    const auto q =
                        static_cast<int8_t>(static_cast<int>(v[static_cast<size_t>(r * cols + i + j)] * 40));
                    std::memcpy(row + i / 32 * 34 + 2 + j, &q, 1);
                }
            }
        }
    }
    return bytes;
}

// Args: rows, cols, n_tok, threads. Bytes processed = weight bytes streamed (once per call). `packed`: the
// matrix as the model multiplies it after kernels::packed_weights (16 rows interleaved, Q8_0 and Q4_K).
void matmul_bench(benchmark::State& state, tensor_type type, k::isa isa, bool packed) {
    if (!k::set_isa(isa)) {
        state.SkipWithError("ISA not supported by this CPU");
        return;
    }
    const int64_t rows = state.range(0);
    const int64_t cols = state.range(1);
    if (k::row_size(type, cols) == 0) {
        state.SkipWithError("cols are not a whole number of this type's blocks");
        return;
    }
    const int n_tok = static_cast<int>(state.range(2));
    const int saved_threads = omp_get_max_threads();
    omp_set_num_threads(static_cast<int>(state.range(3)));
    const std::vector<std::byte> w = random_weights(type, rows, cols);
    k::packed_weights packed_copy;
    k::matrix_view view{type, w.data(), rows, cols, k::row_size(type, cols)};
    if (packed) {
        view = packed_copy.pack(view);
        if (view.layout == k::weight_layout::rows) {
            state.SkipWithError("this type and shape are not packed");
            omp_set_num_threads(saved_threads);
            return;
        }
    }
    const std::vector<float> x = random_floats(static_cast<size_t>(n_tok * cols), 2);
    std::vector<float> y(static_cast<size_t>(n_tok * rows));
    for (auto _ : state) {
        k::matmul(view, x.data(), n_tok, y.data());
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.size()));
    state.counters["GFLOP/s"] = benchmark::Counter(
        2.0 * static_cast<double>(rows * cols * n_tok) * static_cast<double>(state.iterations()),
        benchmark::Counter::kIsRate);
    omp_set_num_threads(saved_threads);
    k::set_isa(k::best_isa());
}

void matmul_args(benchmark::internal::Benchmark* b) {
    // 576x1536 / 1536x576: SmolLM-135M's FFN; 2048x2048: a 1B model's attention projection; 16384x2048:
    // larger than the L3 cache, so decode streams it from memory (compare with peak/read_bandwidth);
    // 256x256: the bundled 5M model. n_tok 1 is decode, 16 a decode step of 16 sequences, 64 and 512 prefill
    // chunks.
    for (int threads : {1, 2}) {
        for (auto [rows, cols] : {std::pair{576, 1536}, std::pair{1536, 576}, std::pair{2048, 2048},
                                  std::pair{16384, 2048}, std::pair{256, 256}}) {
            b->Args({rows, cols, 1, threads});
        }
        b->Args({2048, 2048, 64, threads});
        b->Args({1536, 576, 16, threads});
        b->Args({1536, 576, 512, threads});
        b->Args({576, 1536, 512, threads});
    }
    b->ArgNames({"rows", "cols", "n_tok", "threads"});
    b->Unit(benchmark::kMicrosecond);
    b->UseRealTime();
}

// Packed matrices in cache (1024 x 2048 is 2.4 MB in Q4_K and 2.2 MB in Q8_0, in the L3 cache; SmolLM-135M's
// 1536 x 576 FFN matrix in Q8_0 0.9 MB): the tiles' arithmetic for a decode step of 1, 4 or 16 sequences and
// a prefill chunk of 64 tokens.
void packed_args(benchmark::internal::Benchmark* b, bool with_576) {
    for (int threads : {1, 2}) {
        for (auto [rows, cols] : {std::pair{1024, 2048}, std::pair{1536, 576}}) {
            if (cols == 576 && !with_576) continue;
            for (int n_tok : {1, 4, 16, 64}) b->Args({rows, cols, n_tok, threads});
        }
    }
    b->ArgNames({"rows", "cols", "n_tok", "threads"});
    b->Unit(benchmark::kMicrosecond);
    b->UseRealTime();
}
void q8_0_packed_args(benchmark::internal::Benchmark* b) {
    packed_args(b, true);
}
void q4_k_packed_args(benchmark::internal::Benchmark* b) {
    packed_args(b, false);  // Q4_K rows are whole blocks of 256 columns: not 576
}

// K/V rows of `type` (f32, f16 or q8_0) for attend: random normal values through quantize_row.
std::vector<std::byte> random_kv(tensor_type type, int rows, int hd, uint32_t seed) {
    const size_t row_bytes = k::row_size(type, hd);
    const std::vector<float> x = random_floats(static_cast<size_t>(rows) * hd, seed);
    std::vector<std::byte> bytes(row_bytes * static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r)
        k::quantize_row(type, x.data() + static_cast<size_t>(r) * hd, hd, bytes.data() + r * row_bytes);
    return bytes;
}

// Args: head_dim, n slots, query heads of the group, with score_row (0/1). Slots are a shuffled subset of a
// store twice as large, as in a cache after evictions.
void attend_bench(benchmark::State& state, tensor_type type, k::isa isa) {
    if (!k::set_isa(isa)) {
        state.SkipWithError("ISA not supported by this CPU");
        return;
    }
    const int hd = static_cast<int>(state.range(0));
    const int n = static_cast<int>(state.range(1));
    const int n_q = static_cast<int>(state.range(2));
    const bool with_scores = state.range(3) != 0;
    if (!k::attend_supports(type, hd)) {
        state.SkipWithError("head_dim not supported by this KV type");
        return;
    }
    const int n_slots = 2 * n;
    const std::vector<float> q = random_floats(static_cast<size_t>(n_q) * hd, 3);
    const std::vector<std::byte> kb = random_kv(type, n_slots, hd, 4);
    const std::vector<std::byte> vb = random_kv(type, n_slots, hd, 5);
    const k::kv_rows kr{type, kb.data(), k::row_size(type, hd)};
    const k::kv_rows vr{type, vb.data(), k::row_size(type, hd)};
    std::vector<int32_t> slots(static_cast<size_t>(n_slots));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), std::mt19937(6));
    slots.resize(static_cast<size_t>(n));
    std::vector<float> out(static_cast<size_t>(n_q) * hd);
    std::vector<float> weights(static_cast<size_t>(n_q) * n);
    std::vector<double> score_row(static_cast<size_t>(n_slots));
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (auto _ : state) {
        k::attend(q.data(), n_q, kr, vr, hd, slots.data(), n, scale, out.data(), weights.data(),
                  static_cast<size_t>(n), with_scores ? score_row.data() : nullptr);
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(state.iterations() * n * n_q);  // (slot, head) pairs per second
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(n) * 2 *
                            static_cast<int64_t>(k::row_size(type, hd)));  // K and V read
    k::set_isa(k::best_isa());
}

void attend_args(benchmark::internal::Benchmark* b) {
    for (int hd : {8, 64, 128}) {
        for (int n : {1024, 8192}) {
            for (int n_q : {1, 3}) {
                for (int scores : {0, 1}) b->Args({hd, n, n_q, scores});
            }
        }
    }
    b->ArgNames({"head_dim", "slots", "n_q", "score_row"});
    b->Unit(benchmark::kMicrosecond);
}

// Attention as a decode step of many caches meets it: `units` (layer, KV head) stores of 512 f16 slots of 64
// (K and V: 64 MiB for 256 units, twice the L3 cache), each attended by a GQA group of three query heads over
// 448 of its slots with the fused score bookkeeping, the units split between `threads`. The slots in
// ascending order (as the engine hands them, evictions or not: kv_policy keeps the kept slots ascending) or
// shuffled (an order the engine never produces: what the order of the rows costs). Bytes: K and V rows
// read.
void attend_memory_bench(benchmark::State& state) {
    const bool scattered = state.range(0) != 0;
    const int threads = static_cast<int>(state.range(1));
    constexpr int units = 256, capacity = 512, n = 448, hd = 64, n_q = 3;
    const tensor_type type = tensor_type::f16;
    const size_t row_bytes = k::row_size(type, hd);
    const size_t unit_bytes = row_bytes * capacity;
    const std::vector<std::byte> one = random_kv(type, capacity, hd, 7);
    std::vector<std::byte> kb(unit_bytes * units), vb(unit_bytes * units);
    for (int u = 0; u < units; ++u) {
        std::memcpy(kb.data() + u * unit_bytes, one.data(), unit_bytes);
        std::memcpy(vb.data() + u * unit_bytes, one.data(), unit_bytes);
    }
    std::vector<std::vector<int32_t>> slots(units, std::vector<int32_t>(capacity));
    std::mt19937 rng(8);
    for (auto& s : slots) {
        std::iota(s.begin(), s.end(), 0);
        if (scattered) std::shuffle(s.begin(), s.end(), rng);
        s.resize(n);
        if (!scattered) std::sort(s.begin(), s.end());
    }
    const std::vector<float> q = random_floats(static_cast<size_t>(n_q) * hd, 9);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const int saved_threads = omp_get_max_threads();
    omp_set_num_threads(threads);
    for (auto _ : state) {
#pragma omp parallel
        {
            std::vector<float> out(static_cast<size_t>(n_q) * hd), w(static_cast<size_t>(n_q) * n);
            std::vector<double> row(capacity);
#pragma omp for schedule(static)
            for (int u = 0; u < units; ++u) {
                const k::kv_rows kr{type, kb.data() + u * unit_bytes, row_bytes};
                const k::kv_rows vr{type, vb.data() + u * unit_bytes, row_bytes};
                k::attend(q.data(), n_q, kr, vr, hd, slots[static_cast<size_t>(u)].data(), n, scale,
                          out.data(), w.data(), static_cast<size_t>(n), row.data());
            }
            benchmark::DoNotOptimize(out.data());
        }
        benchmark::ClobberMemory();
    }
    omp_set_num_threads(saved_threads);
    state.SetBytesProcessed(state.iterations() * int64_t{units} * n * 2 * static_cast<int64_t>(row_bytes));
}

// Streaming read of 512 MiB (16x the L3 cache) split across `threads`: the memory bandwidth a matrix-vector
// product can at best reach.
// Sum of n 64-bit words (n a multiple of 64) with the widest loads the CPU has and 8 independent
// accumulators, so that the loads, not the adds, are the limit.
__attribute__((target("avx512f"))) uint64_t read_sum_512(const uint64_t* p, size_t n) {
    __m512i acc[8];
    for (auto& a : acc) a = _mm512_setzero_si512();
    for (size_t i = 0; i < n; i += 64) {
#pragma GCC unroll 8
        for (int u = 0; u < 8; ++u) acc[u] = _mm512_add_epi64(acc[u], _mm512_loadu_si512(p + i + 8 * u));
    }
    for (int u = 1; u < 8; ++u) acc[0] = _mm512_add_epi64(acc[0], acc[u]);
    uint64_t lanes[8];
    _mm512_storeu_si512(lanes, acc[0]);
    return std::accumulate(lanes, lanes + 8, uint64_t{0});
}

__attribute__((target("avx2"))) uint64_t read_sum_256(const uint64_t* p, size_t n) {
    __m256i acc[8];
    for (auto& a : acc) a = _mm256_setzero_si256();
    for (size_t i = 0; i < n; i += 32) {
#pragma GCC unroll 8
        for (int u = 0; u < 8; ++u)
            acc[u] =
                _mm256_add_epi64(acc[u], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4 * u)));
    }
    for (int u = 1; u < 8; ++u) acc[0] = _mm256_add_epi64(acc[0], acc[u]);
    uint64_t lanes[4];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), acc[0]);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

// Streaming read bandwidth of 512 MiB (far larger than any cache), each thread summing its contiguous part.
void peak_read_bandwidth(benchmark::State& state) {
    const int threads = static_cast<int>(state.range(0));
    const size_t n = size_t{512} << 20 >> 3;
    std::vector<uint64_t> buf(n, 1);
    const bool wide = h2okv::core::cpu_supports(h2okv::core::cpu_isa::avx512);
    const bool avx2 = h2okv::core::cpu_supports(h2okv::core::cpu_isa::avx2);
    for (auto _ : state) {
        uint64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
        {
            const size_t per = n / static_cast<size_t>(omp_get_num_threads()) / 64 * 64;
            const uint64_t* p = buf.data() + per * static_cast<size_t>(omp_get_thread_num());
            if (wide) {
                total += read_sum_512(p, per);
            } else if (avx2) {
                total += read_sum_256(p, per);
            } else {
                for (size_t i = 0; i < per; ++i) total += p[i];
            }
        }
        benchmark::DoNotOptimize(total);
    }
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(n / 64 * 64 * sizeof(uint64_t)));
}

// 12 independent fma chains, enough to cover the fma latency: the f32 GFLOP/s ceiling of one vector width.
constexpr int fma_chains = 12;

__attribute__((target("avx2,fma"))) float fma_chains_256(int64_t iters) {
    __m256 acc[fma_chains];
    for (int c = 0; c < fma_chains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c));
    const __m256 a = _mm256_set1_ps(0.999999f);
    const __m256 b = _mm256_set1_ps(1e-7f);
    for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
        for (int c = 0; c < fma_chains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    }
    float s = 0.0f;
    for (int c = 0; c < fma_chains; ++c) s += _mm256_cvtss_f32(acc[c]);
    return s;
}

__attribute__((target("avx512f"))) float fma_chains_512(int64_t iters) {
    __m512 acc[fma_chains];
    for (int c = 0; c < fma_chains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
    const __m512 a = _mm512_set1_ps(0.999999f);
    const __m512 b = _mm512_set1_ps(1e-7f);
    for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
        for (int c = 0; c < fma_chains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    }
    float s = 0.0f;
    for (int c = 0; c < fma_chains; ++c) s += _mm512_cvtss_f32(acc[c]);
    return s;
}

// Args: threads. Every thread runs the chains; GFLOP/s counts 2 flops per lane per fma.
void peak_fma(benchmark::State& state, k::isa isa) {
    if (!k::set_isa(isa)) {
        state.SkipWithError("ISA not supported by this CPU");
        return;
    }
    k::set_isa(k::best_isa());
    const int threads = static_cast<int>(state.range(0));
    const int lanes = isa == k::isa::avx512 ? 16 : 8;
    constexpr int64_t iters = 1 << 22;
    for (auto _ : state) {
        float s = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : s)
        s += isa == k::isa::avx512 ? fma_chains_512(iters) : fma_chains_256(iters);
        benchmark::DoNotOptimize(s);
    }
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * lanes * fma_chains * static_cast<double>(iters) *
                                                       threads * static_cast<double>(state.iterations()),
                                                   benchmark::Counter::kIsRate);
}

void register_all() {
    benchmark::RegisterBenchmark("peak/read_bandwidth", peak_read_bandwidth)
        ->Arg(1)
        ->Arg(2)
        ->ArgName("threads")
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    for (auto [isa, name] : {std::pair{k::isa::avx2, "avx2"}, std::pair{k::isa::avx512, "avx512"}}) {
        benchmark::RegisterBenchmark((std::string("peak/fma/") + name).c_str(),
                                     [isa = isa](benchmark::State& s) { peak_fma(s, isa); })
            ->Arg(1)
            ->Arg(2)
            ->ArgName("threads")
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
    }
    benchmark::RegisterBenchmark("attend_memory", attend_memory_bench)
        ->ArgsProduct({{0, 1}, {1, 2}})
        ->ArgNames({"scattered", "threads"})
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    const std::pair<tensor_type, const char*> types[] = {
        {tensor_type::f32, "F32"},   {tensor_type::f16, "F16"},   {tensor_type::bf16, "BF16"},
        {tensor_type::q8_0, "Q8_0"}, {tensor_type::q4_0, "Q4_0"}, {tensor_type::q4_k, "Q4_K"},
        {tensor_type::q6_k, "Q6_K"}};
    const std::pair<k::isa, const char*> isas[] = {
        {k::isa::reference, "reference"}, {k::isa::avx2, "avx2"}, {k::isa::avx512, "avx512"}};
    for (const auto& [isa, isa_name] : isas) {
        for (const auto& [type, type_name] : types) {
            benchmark::RegisterBenchmark(
                (std::string("matmul/") + type_name + "/" + isa_name).c_str(),
                [type = type, isa = isa](benchmark::State& s) { matmul_bench(s, type, isa, false); })
                ->Apply(matmul_args);
        }
        for (const auto& [type, type_name] : types) {
            if (type != tensor_type::q8_0 && type != tensor_type::q4_k) continue;
            benchmark::RegisterBenchmark(
                (std::string("matmul_packed/") + type_name + "/" + isa_name).c_str(),
                [type = type, isa = isa](benchmark::State& s) { matmul_bench(s, type, isa, true); })
                ->Apply(type == tensor_type::q8_0 ? q8_0_packed_args : q4_k_packed_args);
        }
        for (const auto& [type, type_name] : types) {
            if (!k::attend_supports(type, 64)) continue;
            benchmark::RegisterBenchmark(
                (std::string("attend/") + type_name + "/" + isa_name).c_str(),
                [type = type, isa = isa](benchmark::State& s) { attend_bench(s, type, isa); })
                ->Apply(attend_args);
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    register_all();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
