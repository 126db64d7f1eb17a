// The weight products of one decode step of a synthetic model, every matrix its own (packed at load as the
// model packs them; SmolLM-135M in Q8_0 is 136 MB, TinyLlama-1.1B in Q4_K 580 MB: more than the last-level
// cache, so the weights stream from memory as they do in the engine), through kernels::matmul_shared_input
// with the threads OpenMP gives (the engine's dispatch, parallel regions included), for 1..16 tokens (decode
// steps of that many sequences).
//
//   OMP_NUM_THREADS=2 ./bench_stream_bench [smollm|tinyllama] [rounds]
// prints, per token count, the median time of a step's products, the tokens per second they allow and the
// multiply-adds per second.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "h2okv/core/cpu_isa.h"
#include "h2okv/kernels/kernels.h"

namespace {

namespace k = h2okv::kernels;
using h2okv::core::tensor_type;

struct matrix {
    std::vector<std::byte> plain;
    k::matrix_view view;
};

void fill(matrix& m, tensor_type type, int64_t rows, int64_t cols, k::packed_weights& packed,
          std::mt19937& rng) {
    const size_t row_bytes = k::row_size(type, cols);
    m.plain.resize(row_bytes * static_cast<size_t>(rows));
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        for (auto& x : v) x = dist(rng);
        k::quantize_row(type, v.data(), cols, m.plain.data() + static_cast<size_t>(r) * row_bytes);
    }
    m.view = packed.pack(k::matrix_view{type, m.plain.data(), rows, cols, row_bytes});
    if (m.view.layout != k::weight_layout::rows) std::vector<std::byte>().swap(m.plain);
}

// A 16-sequence decode step's attention at equal memory: 16 sequences x 30 layers x 3 KV heads (SmolLM-135M),
// each (sequence, layer, head) attending its own store of f16 rows in slot order (a cache under eviction is
// its budget's slots, the kept ones in slot order; `gap` > 1 leaves that share of slots out), 3 query heads
// per KV head, with the score row: every K/V byte comes from memory.
int attention(int rounds, int gap) {
    constexpr int items = 16 * 30 * 3, kept = 490, hd = 64, n_q = 3;
    const size_t row_bytes = k::row_size(tensor_type::f16, hd);
    const size_t store_rows = static_cast<size_t>(kept) * static_cast<size_t>(gap);
    std::mt19937 rng(1);
    std::vector<std::byte> kv(static_cast<size_t>(items) * 2 * store_rows * row_bytes);
    std::uniform_int_distribution<int> bits(0x2800, 0x3800);  // fp16 values in [2^-5, 1]
    for (size_t i = 0; i + 1 < kv.size(); i += 2) {
        const auto h = static_cast<uint16_t>(bits(rng));
        std::memcpy(&kv[i], &h, 2);
    }
    std::vector<int32_t> slots(store_rows);
    std::iota(slots.begin(), slots.end(), 0);
    std::vector<std::vector<int32_t>> item_slots(items);
    for (auto& v : item_slots) {
        std::shuffle(slots.begin(), slots.end(), rng);
        v.assign(slots.begin(), slots.begin() + kept);
        std::sort(v.begin(), v.end());
    }
    std::vector<float> q(static_cast<size_t>(n_q) * hd, 0.125f);
    std::vector<float> out(static_cast<size_t>(items) * n_q * hd);
    std::vector<float> w(static_cast<size_t>(omp_get_max_threads()) * n_q * kept);
    std::vector<double> row(static_cast<size_t>(items) * store_rows);
    std::printf(
        "attention, %d threads, %s kernels: %d (sequence, layer, KV head) items of %d f16 slots, %d query "
        "heads each; medians of %d rounds\n",
        omp_get_max_threads(), h2okv::core::cpu_isa_name(h2okv::core::selected_isa()), items, kept, n_q,
        rounds);
    std::vector<double> times;
    for (int r = 0; r < rounds; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static, 1)
        for (int it = 0; it < items; ++it) {
            const std::byte* base = kv.data() + static_cast<size_t>(it) * 2 * store_rows * row_bytes;
            const k::kv_rows kr{tensor_type::f16, base, row_bytes};
            const k::kv_rows vr{tensor_type::f16, base + store_rows * row_bytes, row_bytes};
            float* wt = w.data() + static_cast<size_t>(omp_get_thread_num()) * n_q * kept;
            k::attend(q.data(), n_q, kr, vr, hd, item_slots[static_cast<size_t>(it)].data(), kept, 0.125f,
                      out.data() + static_cast<size_t>(it) * n_q * hd, wt, kept,
                      row.data() + static_cast<size_t>(it) * store_rows);
        }
        times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    const double s = times[times.size() / 2];
    const double bytes = static_cast<double>(items) * kept * 2 * static_cast<double>(row_bytes);
    std::printf("step %.2f ms, %.1f GB/s of K/V\n", s * 1e3, bytes / s / 1e9);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string shape = argc > 1 ? argv[1] : "smollm";
    if (shape == "attention")
        return attention(argc > 2 ? std::atoi(argv[2]) : 5, argc > 3 ? std::atoi(argv[3]) : 1);
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
    if (shape != "smollm" && shape != "tinyllama") {
        std::fprintf(stderr,
                     "shape '%s': expected smollm (SmolLM-135M, Q8_0) or tinyllama (TinyLlama-1.1B, Q4_K)\n",
                     shape.c_str());
        return 2;
    }
    const bool small = shape == "smollm";
    const tensor_type type = small ? tensor_type::q8_0 : tensor_type::q4_k;
    const int64_t embd = small ? 576 : 2048, kv = small ? 192 : 256, ff = small ? 1536 : 5632,
                  vocab = small ? 49152 : 32000;
    const int layers = small ? 30 : 22;
    std::mt19937 rng(1);
    k::packed_weights packed;
    std::vector<matrix> ms(static_cast<size_t>(layers) * 7 + 1);
    int64_t macs_per_token = 0;
    for (int l = 0; l < layers; ++l) {
        const int64_t shapes[7][2] = {{embd, embd}, {kv, embd}, {kv, embd}, {embd, embd},
                                      {ff, embd},   {ff, embd}, {embd, ff}};
        for (int i = 0; i < 7; ++i) {
            fill(ms[static_cast<size_t>(l * 7 + i)], type, shapes[i][0], shapes[i][1], packed, rng);
            macs_per_token += shapes[i][0] * shapes[i][1];
        }
    }
    fill(ms.back(), type, vocab, embd, packed, rng);
    macs_per_token += vocab * embd;
    std::printf("%s, %d threads, %s kernels, %.1f M multiply-adds per token; medians of %d rounds\n",
                shape.c_str(), omp_get_max_threads(), h2okv::core::cpu_isa_name(h2okv::core::selected_isa()),
                static_cast<double>(macs_per_token) / 1e6, rounds);
    std::printf("%5s %10s %12s %10s\n", "n_tok", "step ms", "tokens/s", "GMAC/s");
    for (int n_tok : {1, 2, 4, 8, 16}) {
        std::normal_distribution<float> dist(0.0f, 1.0f);
        std::vector<float> x(static_cast<size_t>(n_tok * ff)), q(static_cast<size_t>(n_tok * vocab)),
            kk(static_cast<size_t>(n_tok * embd)), vv(static_cast<size_t>(n_tok * embd));
        for (auto& v : x) v = dist(rng);
        std::vector<double> times;
        for (int r = 0; r < rounds; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            for (int l = 0; l < layers; ++l) {
                const matrix* m = &ms[static_cast<size_t>(l * 7)];
                const k::matrix_view qkv[] = {m[0].view, m[1].view, m[2].view};
                float* const qkv_out[] = {q.data(), kk.data(), vv.data()};
                k::matmul_shared_input(qkv, qkv_out, 3, x.data(), n_tok);
                k::matmul(m[3].view, x.data(), n_tok, q.data());
                const k::matrix_view gate_up[] = {m[4].view, m[5].view};
                float* const gate_up_out[] = {q.data(), q.data() + n_tok * ff};
                k::matmul_shared_input(gate_up, gate_up_out, 2, x.data(), n_tok);
                k::matmul(m[6].view, x.data(), n_tok, kk.data());
            }
            k::matmul(ms.back().view, x.data(), n_tok, q.data());
            times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(times.begin(), times.end());
        const double s = times[times.size() / 2];
        std::printf("%5d %10.2f %12.1f %10.1f\n", n_tok, s * 1e3, n_tok / s,
                    static_cast<double>(macs_per_token) * n_tok / s / 1e9);
    }
    return 0;
}
