// Q8_0 products, old against new, interleaved in one process so both see the same machine load: the
// f32-activation panels Q8_0 used before (avx512::matmul_q8_0_f32_rows / avx2::) against the integer products
// over q8_0-quantised activations (activation quantisation included), on the q8_0_x16 packing the model
// loads and on plain rows (the tied output matrix). With AVX512-VNNI also the packed product's tiles: two
// groups x 6 tokens (from 8 tokens on) against one group x 8 tokens, over the same quantised activations.
// One thread; SmolLM-135M's shapes; 1..16 tokens (decode steps of 1..16 sequences) and 64 (a prefill chunk).
//
//   ./bench_q8_0_bench [rounds] [isa: avx512|avx2] [rows: only the shapes with that many rows]
// prints, per shape and token count, the median time of each path over the rounds and the ratios.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "h2okv/core/cpu_isa.h"
#include "h2okv/kernels/kernels.h"
#include "kernels/dispatch.h"
#ifdef H2OKV_KERNELS_X86
#include "kernels/x86/avx2.h"
#include "kernels/x86/avx512.h"
#endif

namespace {

namespace k = h2okv::kernels;
using h2okv::core::tensor_type;
using rows_fn = void (*)(const k::matrix_view&, const float*, int, float*, int64_t, int64_t);

std::vector<std::byte> random_q8_0(int64_t rows, int64_t cols) {
    const size_t row_bytes = k::row_size(tensor_type::q8_0, cols);
    std::vector<std::byte> bytes(row_bytes * static_cast<size_t>(rows));
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        for (auto& x : v) x = dist(rng);
        k::quantize_row(tensor_type::q8_0, v.data(), cols, bytes.data() + static_cast<size_t>(r) * row_bytes);
    }
    return bytes;
}

template <typename X>
double seconds_of(void (*fn)(const k::matrix_view&, const X*, int, float*, int64_t, int64_t),
                  const k::matrix_view& w, const X* x, int n_tok, float* y, int reps) {
    fn(w, x, n_tok, y, 0, w.rows);  // untimed: each path starts with its matrix as far in cache as it gets
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) fn(w, x, n_tok, y, 0, w.rows);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
#ifdef H2OKV_KERNELS_X86
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
    const std::string isa = argc > 2 ? argv[2] : "avx512";
    const int64_t only_rows = argc > 3 ? std::atoll(argv[3]) : 0;  // one shape's rows (0: all shapes)
    const bool use512 = isa == "avx512";
    if (!h2okv::core::cpu_supports(use512 ? h2okv::core::cpu_isa::avx512 : h2okv::core::cpu_isa::avx2)) {
        std::fprintf(stderr, "this CPU lacks %s\n", isa.c_str());
        return 1;
    }
    omp_set_num_threads(1);
    const rows_fn old_fn = use512 ? &k::avx512::matmul_q8_0_f32_rows : &k::avx2::matmul_q8_0_f32_rows;
    const rows_fn new_fn = use512 ? &k::avx512::matmul_rows : &k::avx2::matmul_rows;
    std::printf("isa %s, 1 thread, %d rounds (median); times in microseconds per call\n", isa.c_str(),
                rounds);
    // The packed product's tiles over quantised activations (AVX512-VNNI only).
    const bool tiles = use512 && __builtin_cpu_supports("avx512vnni");
    std::printf("%6s %6s %5s %10s %10s %10s %9s %9s", "rows", "cols", "n_tok", "f32_act", "int_x16",
                "int_plain", "x16/f32", "plain/f32");
    if (tiles) std::printf(" %10s %10s %9s", "x16_tiles", "x16_1group", "tiles/1g");
    std::printf("\n");
    const std::pair<int64_t, int64_t> shapes[] = {{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}};
    for (const auto& [rows, cols] : shapes) {
        if (only_rows != 0 && rows != only_rows) continue;
        const std::vector<std::byte> bytes = random_q8_0(rows, cols);
        const k::matrix_view plain{tensor_type::q8_0, bytes.data(), rows, cols,
                                   k::row_size(tensor_type::q8_0, cols)};
        k::packed_weights packed;
        const k::matrix_view x16 = packed.pack(plain);
        for (int n_tok : {1, 2, 4, 8, 16, 64}) {
            std::vector<float> x(static_cast<size_t>(n_tok * cols));
            std::mt19937 rng(2);
            std::normal_distribution<float> dist(0.0f, 1.0f);
            for (auto& v : x) v = dist(rng);
            std::vector<float> y(static_cast<size_t>(n_tok * rows));
            // About 20 ms per measurement of the old path.
            const double once = seconds_of(old_fn, plain, x.data(), n_tok, y.data(), 1);
            const int reps = std::max(1, static_cast<int>(0.02 / std::max(once, 1e-7)));
            std::vector<k::detail::q8_0_act> xq(static_cast<size_t>(n_tok * cols / 32));
            k::avx2::quantize_q8_0_act(x.data(), n_tok * cols, xq.data());
            std::vector<double> t_old, t_x16, t_plain, t_tiles, t_one;
            for (int r = 0; r < rounds; ++r) {
                t_old.push_back(seconds_of(old_fn, plain, x.data(), n_tok, y.data(), reps));
                t_x16.push_back(seconds_of(new_fn, x16, x.data(), n_tok, y.data(), reps));
                t_plain.push_back(seconds_of(new_fn, plain, x.data(), n_tok, y.data(), reps));
                if (tiles) {
                    t_tiles.push_back(
                        seconds_of(&k::avx512::q8_0_dot_rows_vnni, x16, xq.data(), n_tok, y.data(), reps));
                    t_one.push_back(seconds_of(&k::avx512::q8_0_dot_rows_vnni_one_group, x16, xq.data(),
                                               n_tok, y.data(), reps));
                }
            }
            const double o = median(t_old), a = median(t_x16), p = median(t_plain);
            std::printf("%6lld %6lld %5d %10.1f %10.1f %10.1f %9.2f %9.2f", static_cast<long long>(rows),
                        static_cast<long long>(cols), n_tok, o * 1e6, a * 1e6, p * 1e6, o / a, o / p);
            if (tiles) {
                const double t = median(t_tiles), g = median(t_one);
                std::printf(" %10.1f %10.1f %9.2f", t * 1e6, g * 1e6, g / t);
            }
            std::printf("\n");
        }
    }
    return 0;
#else
    (void)argc;
    (void)argv;
    std::fprintf(stderr, "x86 SIMD kernels not built\n");
    return 1;
#endif
}
