// matmul and dequantize_row: every variant against the reference and an exact oracle over odd shapes, tails,
// strided rows and token counts; bit-identical results across thread counts and token groupings.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "h2okv/core/cpu_isa.h"
#include "h2okv/core/parallel.h"
#include "h2okv/kernels/kernels.h"
#include "kernel_test_util.h"
#include "kernels/dispatch.h"
#include "kernels/ref/ref.h"
#ifdef H2OKV_KERNELS_X86
#include "kernels/x86/avx2.h"
#include "kernels/x86/avx512.h"
#endif

namespace h2okv::kernels {
namespace {

using core::tensor_type;
using test_support::encode_matrix;
using test_support::encoded_matrix;
using test_support::gamma_k;
using test_support::random_floats;

using rows_fn = void (*)(const matrix_view&, const float*, int, float*, int64_t, int64_t);

struct variant {
    const char* name;
    rows_fn rows;
    int lanes;  // floats per vector register
};

std::vector<variant> fast_variants() {
    std::vector<variant> v;
#ifdef H2OKV_KERNELS_X86
    if (core::cpu_supports(core::cpu_isa::avx2)) v.push_back({"avx2", &avx2::matmul_rows, 8});
    if (core::cpu_supports(core::cpu_isa::avx512)) v.push_back({"avx512", &avx512::matmul_rows, 16});
#endif
    return v;
}

// Roundings each product w_i*x_i can pass through in a variant with `lanes`-wide vectors. The weights are
// decoded exactly (every type), and each output is one accumulator chain: the product is rounded in its
// fma (1), then by every later fma into the same lane (at most ceil(cols/lanes) - 1, the zero-padded tail
// slice included), then by the log2(lanes) additions of the horizontal sum.
double roundings(int64_t cols, int lanes) {
    return std::ceil(static_cast<double>(cols) / lanes) + std::log2(lanes);
}

struct oracle {
    std::vector<double> exact;    // [n_tok][rows]
    std::vector<double> abs_sum;  // sum |w_i x_i|
};

oracle exact_products(const encoded_matrix& m, const std::vector<float>& x, int n_tok) {
    oracle o;
    o.exact.resize(static_cast<size_t>(n_tok * m.rows));
    o.abs_sum.resize(o.exact.size());
    for (int t = 0; t < n_tok; ++t) {
        for (int64_t r = 0; r < m.rows; ++r) {
            long double s = 0;
            long double a = 0;
            for (int64_t i = 0; i < m.cols; ++i) {
                const long double p = static_cast<long double>(m.values[r * m.cols + i]) * x[t * m.cols + i];
                s += p;
                a += std::fabs(p);
            }
            o.exact[t * m.rows + r] = static_cast<double>(s);
            o.abs_sum[t * m.rows + r] = static_cast<double>(a);
        }
    }
    return o;
}

// |got - exact| <= gamma(k) * sum|w x| + u * |exact| (+ a denormal floor): the bound of the variant's own
// roundings plus the final rounding to float.
void expect_within_bound(const char* who, const std::vector<float>& got, const oracle& o, double k) {
    for (size_t i = 0; i < got.size(); ++i) {
        const double bound =
            gamma_k(k) * o.abs_sum[i] + test_support::unit_roundoff * std::fabs(o.exact[i]) + 1e-37;
        ASSERT_LE(std::fabs(got[i] - o.exact[i]), bound)
            << who << " output " << i << ": got " << got[i] << ", exact " << o.exact[i];
    }
}

const tensor_type all_types[] = {tensor_type::f32,  tensor_type::f16,  tensor_type::bf16, tensor_type::q8_0,
                                 tensor_type::q4_0, tensor_type::q4_k, tensor_type::q6_k};

bool is_k_quant(tensor_type t) {
    return t == tensor_type::q4_k || t == tensor_type::q6_k;
}
bool is_block32(tensor_type t) {
    return t == tensor_type::q8_0 || t == tensor_type::q4_0;
}

TEST(Matmul, VariantsMatchReferenceOverOddShapes) {
    const int64_t dense_cols[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40, 63, 64, 65, 100, 172, 257, 1000};
    const int64_t q8_cols[] = {32, 64, 96, 160, 256, 704, 1024};
    // Pieces of 256 plus a partial last piece (1280 = 5 pieces, 288 / 800 for Q4_0: 1 and 3 pieces + a tail).
    const int64_t q4_0_cols[] = {32, 64, 96, 288, 800};
    const int64_t row_counts[] = {1, 5, 17};
    const int tok_counts[] = {1, 2, 3, 4, 5, 7, 26};
    int compared = 0;
    uint32_t seed = 1;
    for (tensor_type type : all_types) {
        // The k-quants and Q8_0 multiply quantised activations: tests/kernels/kquant_test.cpp, q8_0_test.cpp.
        if (is_k_quant(type) || type == tensor_type::q8_0) continue;
        std::vector<int64_t> cols_list(std::begin(dense_cols), std::end(dense_cols));
        if (type == tensor_type::q8_0) cols_list.assign(std::begin(q8_cols), std::end(q8_cols));
        if (type == tensor_type::q4_0) cols_list.assign(std::begin(q4_0_cols), std::end(q4_0_cols));
        for (int64_t cols : cols_list) {
            for (int64_t rows : row_counts) {
                for (int n_tok : tok_counts) {
                    if (rows * cols * n_tok > 200000 && n_tok > 3) continue;  // keep the test quick
                    const encoded_matrix m = encode_matrix(type, rows, cols, seed++, /*row_padding=*/6);
                    const std::vector<float> x = random_floats(static_cast<size_t>(n_tok * cols), seed++);
                    const oracle o = exact_products(m, x, n_tok);
                    std::vector<float> y_ref(static_cast<size_t>(n_tok * rows), -1.0f);
                    ref::matmul(m.view(), x.data(), n_tok, y_ref.data());
                    // The reference accumulates in double (cols * 2^-53 < 1e-3 * u for these cols); beyond
                    // that only its final rounding to float is visible.
                    expect_within_bound("reference", y_ref, o, 1e-3);
                    for (const variant& v : fast_variants()) {
                        std::vector<float> y(y_ref.size(), -1.0f);
                        v.rows(m.view(), x.data(), n_tok, y.data(), 0, rows);
                        SCOPED_TRACE(::testing::Message()
                                     << v.name << " " << core::tensor_type_label(type) << " rows " << rows
                                     << " cols " << cols << " n_tok " << n_tok);
                        expect_within_bound(v.name, y, o, roundings(cols, v.lanes));
                        ++compared;
                    }
                }
            }
        }
    }
    if (fast_variants().empty()) GTEST_SKIP() << "no SIMD variant on this CPU; the reference was checked";
    EXPECT_GT(compared, 300);
}

TEST(Matmul, PartialRowRangesWriteOnlyTheirRows) {
    const encoded_matrix m = encode_matrix(tensor_type::f16, 40, 72, 3);
    const std::vector<float> x = random_floats(3 * 72, 4);
    std::vector<rows_fn> fns = {&ref::matmul_rows};
    for (const variant& v : fast_variants()) fns.push_back(v.rows);
    for (rows_fn fn : fns) {
        std::vector<float> y(3 * 40, 7.0f);
        fn(m.view(), x.data(), 3, y.data(), 11, 29);
        std::vector<float> full(3 * 40);
        fn(m.view(), x.data(), 3, full.data(), 0, 40);
        for (int t = 0; t < 3; ++t) {
            for (int r = 0; r < 40; ++r) {
                if (r >= 11 && r < 29) {
                    EXPECT_EQ(y[t * 40 + r], full[t * 40 + r]);
                } else {
                    EXPECT_EQ(y[t * 40 + r], 7.0f);
                }
            }
        }
    }
}

// Each output's operation sequence must not depend on how many tokens share the call (prefill chunking) or
// where the row block starts: one token at a time takes the register-decoding path, 29 tokens the decoded
// panels with full and partial token tiles and row groups.
TEST(Matmul, TokenGroupingDoesNotChangeBits) {
    for (tensor_type type : all_types) {
        // Dense rows end in a partial vector (165 = 10 * 16 + 5).
        const int64_t cols = is_k_quant(type) ? 512 : (is_block32(type) ? 160 : 165);
        const encoded_matrix m = encode_matrix(type, 33, cols, 5);
        const int n_tok = 29;
        const std::vector<float> x = random_floats(static_cast<size_t>(n_tok * cols), 6);
        std::vector<rows_fn> fns = {&ref::matmul_rows};
        for (const variant& v : fast_variants()) fns.push_back(v.rows);
        for (rows_fn fn : fns) {
            std::vector<float> all(static_cast<size_t>(n_tok * 33));
            fn(m.view(), x.data(), n_tok, all.data(), 0, 33);
            for (int t = 0; t < n_tok; ++t) {
                std::vector<float> one(33);
                fn(m.view(), x.data() + t * cols, 1, one.data(), 0, 33);
                ASSERT_EQ(std::memcmp(one.data(), all.data() + t * 33, 33 * sizeof(float)), 0)
                    << core::tensor_type_label(type) << " token " << t;
            }
        }
    }
}

TEST(Matmul, BitIdenticalAcrossThreadCounts) {
    const int saved_threads = omp_get_max_threads();
    for (tensor_type type : all_types) {
        // Large enough to take the parallel path (rows * cols * n_tok well above its threshold).
        const encoded_matrix m = encode_matrix(type, 300, 512, 8);
        const int n_tok = 5;
        const std::vector<float> x = random_floats(static_cast<size_t>(n_tok * 512), 9);
        std::vector<std::vector<float>> results;
        for (int threads : {1, 2, 3}) {
            omp_set_num_threads(threads);
            std::vector<float> y(static_cast<size_t>(n_tok * 300));
            matmul(m.view(), x.data(), n_tok, y.data());
            results.push_back(std::move(y));
        }
        for (size_t i = 1; i < results.size(); ++i) {
            EXPECT_EQ(std::memcmp(results[0].data(), results[i].data(), results[0].size() * sizeof(float)), 0)
                << core::tensor_type_label(type) << ": 1 thread vs " << i + 1;
        }
    }
    omp_set_num_threads(saved_threads);
}

// Several matrices sharing an input (mixed types, k-quants among them, row counts that are not multiples of
// the row block) give the bits of separate matmul calls, for any thread count.
TEST(Matmul, SharedInputEqualsSeparateCalls) {
    const int saved_threads = omp_get_max_threads();
    const bool saved_force = core::force_parallel();
    core::set_force_parallel(true);  // one token is below the threshold: take the parallel branch anyway
    const encoded_matrix a = encode_matrix(tensor_type::q4_k, 301, 512, 21);
    const encoded_matrix b = encode_matrix(tensor_type::q8_0, 37, 512, 22);
    const encoded_matrix c = encode_matrix(tensor_type::q6_k, 130, 512, 23);
    const matrix_view ws[] = {a.view(), b.view(), c.view()};
    for (int n_tok : {1, 7}) {
        const std::vector<float> x = random_floats(static_cast<size_t>(n_tok * 512), 24);
        std::vector<std::vector<float>> want;
        for (const matrix_view& w : ws) {
            want.emplace_back(static_cast<size_t>(n_tok * w.rows));
            matmul(w, x.data(), n_tok, want.back().data());
        }
        for (int threads : {1, 2, 3}) {
            omp_set_num_threads(threads);
            const int64_t forks = core::fork_count(core::parallel_site::matmul);
            std::vector<std::vector<float>> got;
            std::vector<float*> ys;
            for (const matrix_view& w : ws) got.emplace_back(static_cast<size_t>(n_tok * w.rows), -1.0f);
            for (auto& g : got) ys.push_back(g.data());
            // Other activations first, so that the quantisation buffers hold stale blocks: a token range that
            // no thread quantised would show in the outputs.
            const std::vector<float> other = random_floats(static_cast<size_t>(n_tok * 512), 25);
            matmul_shared_input(ws, ys.data(), 3, other.data(), n_tok);
            matmul_shared_input(ws, ys.data(), 3, x.data(), n_tok);
            // With threads the call took the parallel branch, where each thread quantises a share of the
            // tokens (with one token, some threads none).
            if (threads > 1) {
                EXPECT_GT(core::fork_count(core::parallel_site::matmul), forks) << n_tok << " tokens";
            }
            for (size_t i = 0; i < got.size(); ++i) {
                EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0)
                    << "matrix " << i << ", " << n_tok << " tokens, " << threads << " threads";
            }
        }
    }
    omp_set_num_threads(saved_threads);
    core::set_force_parallel(saved_force);
}

// token_work: prepare runs on every token of the input exactly once before any row reads it, finish on every
// token of the outputs once all rows are done, on the threads' shares in the parallel branch; the result is
// the bits of preparing, multiplying and finishing one after the other, for any thread count. f32 weights
// read the prepared input itself (no quantised copy); q8_0 and q4_k read its quantisation.
TEST(Matmul, TokenWorkRunsInsideTheProductOnEveryTokenOnce) {
    const int saved_threads = omp_get_max_threads();
    const bool saved_force = core::force_parallel();
    core::set_force_parallel(true);
    const encoded_matrix a = encode_matrix(tensor_type::f32, 70, 256, 31);
    const encoded_matrix b = encode_matrix(tensor_type::q8_0, 48, 256, 32);
    const encoded_matrix c = encode_matrix(tensor_type::q4_k, 33, 256, 33);
    const matrix_view ws[] = {a.view(), b.view(), c.view()};
    const auto prep = [](const float* raw, float* x, int t0, int t1) {  // x = 2 * raw + 1, token by token
        for (int i = t0 * 256; i < t1 * 256; ++i) x[i] = 2.0f * raw[i] + 1.0f;
    };
    for (int n_tok : {1, 5, 16}) {
        const std::vector<float> raw = random_floats(static_cast<size_t>(n_tok * 256), 34);
        std::vector<float> x(raw.size());
        prep(raw.data(), x.data(), 0, n_tok);
        std::vector<std::vector<float>> want;
        for (const matrix_view& w : ws) {
            want.emplace_back(static_cast<size_t>(n_tok * w.rows));
            matmul(w, x.data(), n_tok, want.back().data());
            for (float& v : want.back()) v = v * 0.5f - 3.0f;
        }
        for (int threads : {1, 2, 3}) {
            omp_set_num_threads(threads);
            const int64_t forks = core::fork_count(core::parallel_site::matmul);
            std::vector<float> in(raw.size(), -9.0f);  // garbage until prepared
            std::vector<std::vector<float>> got;
            std::vector<float*> ys;
            for (const matrix_view& w : ws) got.emplace_back(static_cast<size_t>(n_tok * w.rows), -1.0f);
            for (auto& g : got) ys.push_back(g.data());
            std::vector<std::atomic<int>> prepared(static_cast<size_t>(n_tok)),
                finished(static_cast<size_t>(n_tok));
            matmul_shared_input(
                ws, ys.data(), 3, in.data(), n_tok,
                [&](int t0, int t1) {
                    prep(raw.data(), in.data(), t0, t1);
                    for (int t = t0; t < t1; ++t) prepared[static_cast<size_t>(t)]++;
                },
                [&](int t0, int t1) {
                    for (int t = t0; t < t1; ++t) {
                        finished[static_cast<size_t>(t)]++;
                        for (size_t i = 0; i < got.size(); ++i) {
                            const auto rows = static_cast<size_t>(ws[i].rows);
                            for (size_t r = 0; r < rows; ++r) {
                                float& v = got[i][static_cast<size_t>(t) * rows + r];
                                v = v * 0.5f - 3.0f;
                            }
                        }
                    }
                });
            const std::string what =
                std::to_string(n_tok) + " tokens, " + std::to_string(threads) + " threads";
            if (threads > 1) {
                EXPECT_GT(core::fork_count(core::parallel_site::matmul), forks) << what;
            }
            for (int t = 0; t < n_tok; ++t) {
                EXPECT_EQ(prepared[static_cast<size_t>(t)].load(), 1) << "token " << t << ", " << what;
                EXPECT_EQ(finished[static_cast<size_t>(t)].load(), 1) << "token " << t << ", " << what;
            }
            for (size_t i = 0; i < got.size(); ++i) {
                EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0)
                    << "matrix " << i << ", " << what;
            }
        }
    }
    omp_set_num_threads(saved_threads);
    core::set_force_parallel(saved_force);
}

TEST(Matmul, DispatchUsesTheSelectedVariant) {
    const isa saved = active_isa();
    const encoded_matrix m = encode_matrix(tensor_type::q8_0, 64, 256, 12);
    const std::vector<float> x = random_floats(2 * 256, 13);
    std::vector<float> expected(2 * 64);
    std::vector<float> got(2 * 64);
    ASSERT_TRUE(set_isa(isa::reference));
    EXPECT_EQ(active_isa(), isa::reference);
    ref::matmul(m.view(), x.data(), 2, expected.data());
    matmul(m.view(), x.data(), 2, got.data());
    EXPECT_EQ(std::memcmp(expected.data(), got.data(), got.size() * sizeof(float)), 0);
    isa best = isa::reference;
#ifdef H2OKV_KERNELS_X86
    const std::pair<isa, rows_fn> simd[] = {{isa::avx2, &avx2::matmul_rows},
                                            {isa::avx512, &avx512::matmul_rows}};
    const bool supported[] = {core::cpu_supports(core::cpu_isa::avx2),
                              core::cpu_supports(core::cpu_isa::avx512)};
    for (size_t i = 0; i < std::size(simd); ++i) {
        const auto [id, fn] = simd[i];
        SCOPED_TRACE(isa_name(id));
        if (!supported[i]) {
            EXPECT_FALSE(set_isa(id));
            continue;
        }
        best = id;
        ASSERT_TRUE(set_isa(id));
        EXPECT_EQ(active_isa(), id);
        fn(m.view(), x.data(), 2, expected.data(), 0, 64);
        matmul(m.view(), x.data(), 2, got.data());
        EXPECT_EQ(std::memcmp(expected.data(), got.data(), got.size() * sizeof(float)), 0);
    }
#endif
    EXPECT_EQ(best_isa(), best);
    EXPECT_STREQ(isa_name(isa::reference), "reference");
    EXPECT_STREQ(isa_name(isa::avx2), "avx2");
    EXPECT_STREQ(isa_name(isa::avx512), "avx512");
    ASSERT_TRUE(set_isa(saved));
}

TEST(Matmul, SupportedTypesAndRowSizes) {
    for (tensor_type t : all_types) EXPECT_TRUE(matmul_supports(t));
    EXPECT_FALSE(matmul_supports(tensor_type::q4_1));
    EXPECT_FALSE(matmul_supports(static_cast<tensor_type>(13)));  // Q5_K
    EXPECT_EQ(row_size(tensor_type::f32, 10), 40u);
    EXPECT_EQ(row_size(tensor_type::f16, 10), 20u);
    EXPECT_EQ(row_size(tensor_type::bf16, 10), 20u);
    EXPECT_EQ(row_size(tensor_type::q8_0, 64), 68u);
    EXPECT_EQ(row_size(tensor_type::q8_0, 40), 0u);
    EXPECT_EQ(row_size(tensor_type::q4_0, 64), 36u);
    EXPECT_EQ(row_size(tensor_type::q4_0, 48), 0u);
    EXPECT_EQ(row_size(tensor_type::q4_1, 64), 40u);  // a KV type: rows, but no matmul
    EXPECT_EQ(row_size(tensor_type::q4_1, 48), 0u);
    EXPECT_EQ(row_size(tensor_type::q4_k, 512), 288u);
    EXPECT_EQ(row_size(tensor_type::q4_k, 576), 0u);
    EXPECT_EQ(row_size(tensor_type::q6_k, 256), 210u);
    EXPECT_EQ(row_size(tensor_type::q6_k, 128), 0u);
    EXPECT_EQ(row_size(static_cast<tensor_type>(13), 256), 0u);
}

// Dequantization is exact for every type: every variant must reproduce the encoded values bit for bit.
TEST(DequantizeRow, ExactForEveryTypeAndVariant) {
    using deq_fn = void (*)(tensor_type, const std::byte*, int64_t, float*);
    std::vector<std::pair<const char*, deq_fn>> fns = {{"reference", &ref::dequantize_row},
                                                       {"dispatched", &dequantize_row}};
#ifdef H2OKV_KERNELS_X86
    if (core::cpu_supports(core::cpu_isa::avx2)) fns.push_back({"avx2", &avx2::dequantize_row});
    if (core::cpu_supports(core::cpu_isa::avx512)) fns.push_back({"avx512", &avx512::dequantize_row});
#endif
    for (tensor_type type : all_types) {
        for (int64_t cols : {1, 7, 8, 13, 32, 64, 100, 160, 256, 333, 768}) {
            if (is_block32(type) && cols % 32 != 0) continue;
            if (is_k_quant(type) && cols % 256 != 0) continue;
            const encoded_matrix m = encode_matrix(type, 1, cols, static_cast<uint32_t>(cols));
            for (const auto& [name, fn] : fns) {
                std::vector<float> out(static_cast<size_t>(cols) + 8, 123.0f);
                fn(type, m.bytes.data(), cols, out.data());
                ASSERT_EQ(std::memcmp(out.data(), m.values.data(), static_cast<size_t>(cols) * 4), 0)
                    << name << " " << core::tensor_type_label(type) << " cols " << cols;
                for (size_t i = static_cast<size_t>(cols); i < out.size(); ++i) {
                    ASSERT_EQ(out[i], 123.0f) << name << " wrote past the row";
                }
            }
        }
    }
}

}  // namespace
}  // namespace h2okv::kernels
