// Sliding-window layers (Gemma's local layers) in the KV cache: they allocate only their window's slots,
// attend exactly the window of every query (nothing inside it is ever evicted, nothing outside it read),
// hold no more positions than it, and stay out of the policy, whose units and budget count the global layers;
// the parallel runner path gives the reference path's bits on such a model, soft-capped scores included.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "h2okv/core/parallel.h"
#include "h2okv/kv/attention_runner.h"
#include "h2okv/kv/kv_cache.h"

namespace h2okv::kv {
namespace {

constexpr int64_t kWindow = 8;

// Layers 0, 2 and 3 slide over kWindow positions; 1 and 4 are global.
model::hparams shape(float softcap = 0.0f) {
    model::hparams hp;
    hp.arch = "gemma2";
    hp.n_layer = 5;
    hp.n_head = 4;
    hp.n_kv_head = 2;
    hp.head_dim = 32;
    hp.n_embd = 128;
    hp.n_ff = 256;
    hp.n_vocab = 300;
    hp.rope_dim = 32;
    hp.rope_specs = {kernels::rope_spec::plain(32, hp.rope_freq_base, hp.rope_pairing)};
    hp.layer_rope.assign(5, 0);
    hp.sliding_window = kWindow;
    hp.layer_sliding = {1, 0, 1, 1, 0};
    hp.attn_softcap = softcap;
    return hp;
}

float input(int64_t pos, int layer, int what, int i) {
    uint64_t z = static_cast<uint64_t>(pos) * 0x9e3779b97f4a7c15ull +
                 static_cast<uint64_t>(layer * 7919 + what * 104729 + i) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-53 * 4.0 - 2.0);
}

struct run_result {
    std::map<std::pair<int64_t, int>, std::vector<float>> out;  // (position, layer) -> attention output
    std::vector<std::vector<std::vector<int64_t>>> kept;        // after every chunk
    int64_t evictions = 0;
};

// One sequence of `length` positions in chunks of `chunk`, every attended row checked as it is produced.
run_result run(const model::hparams& hp, const char* spec, int chunk, int64_t length,
               attention_runner::path path) {
    run_result r;
    auto p = policy::params::parse(spec);
    EXPECT_TRUE(p.ok());
    auto made = kv_cache::create(hp, *p, chunk, length, length, kv_type::f32);
    EXPECT_TRUE(made.ok()) << made.error().to_string();
    if (!made.ok()) return r;
    kv_cache& c = **made;
    c.set_weights_observer(
        [&](int layer, int, int64_t t, std::span<const int64_t> positions, std::span<const float>) {
            if (!hp.sliding(layer)) return;
            // Exactly the window (t - W, t], each position once.
            std::vector<int64_t> got(positions.begin(), positions.end());
            std::sort(got.begin(), got.end());
            std::vector<int64_t> want;
            for (int64_t q = std::max<int64_t>(0, t - kWindow + 1); q <= t; ++q) want.push_back(q);
            EXPECT_EQ(got, want) << "layer " << layer << " query " << t;
        });
    attention_runner runner(path);
    const size_t q_dim = static_cast<size_t>(hp.n_head) * hp.head_dim;
    const size_t kv_dim = static_cast<size_t>(hp.n_kv_head) * hp.head_dim;
    for (int64_t first = 0; first < length; first += chunk) {
        const int n = static_cast<int>(std::min<int64_t>(chunk, length - first));
        EXPECT_TRUE(c.begin_chunk(first, n).ok());
        const int step = c.token_by_token() ? 1 : n;
        for (int done = 0; done < n; done += step) {
            kv_cache* cs[] = {&c};
            const int ns[] = {step};
            EXPECT_TRUE(runner.begin_step(cs, ns).ok());
            std::vector<float> q(step * q_dim), k(step * kv_dim), v(step * kv_dim), out(step * q_dim);
            for (int l = 0; l < hp.n_layer; ++l) {
                for (int t = 0; t < step; ++t) {
                    const int64_t pos = first + done + t;
                    for (size_t d = 0; d < q_dim; ++d)
                        q[t * q_dim + d] = input(pos, l, 0, static_cast<int>(d));
                    for (size_t d = 0; d < kv_dim; ++d) {
                        k[t * kv_dim + d] = input(pos, l, 1, static_cast<int>(d));
                        v[t * kv_dim + d] = input(pos, l, 2, static_cast<int>(d));
                    }
                }
                EXPECT_TRUE(runner.attend(l, step, q.data(), k.data(), v.data(), out.data()).ok());
                for (int t = 0; t < step; ++t) {
                    r.out[{first + done + t, l}].assign(
                        out.begin() + static_cast<std::ptrdiff_t>(t * q_dim),
                        out.begin() + static_cast<std::ptrdiff_t>((t + 1) * q_dim));
                }
            }
            runner.end_step();
        }
        EXPECT_TRUE(c.end_chunk().ok());
        r.kept.push_back(c.kept_per_head());
        // Window layers hold the last W - 1 positions, never more.
        const auto& kept = r.kept.back();
        for (int l = 0; l < hp.n_layer; ++l) {
            if (!hp.sliding(l)) continue;
            for (int g = 0; g < hp.n_kv_head; ++g) {
                const auto& kl = kept[static_cast<size_t>(l * hp.n_kv_head + g)];
                std::vector<int64_t> want;
                for (int64_t q = std::max<int64_t>(0, first + n - (kWindow - 1)); q < first + n; ++q)
                    want.push_back(q);
                EXPECT_EQ(kl, want) << "layer " << l << " after position " << first + n - 1;
            }
        }
    }
    EXPECT_EQ(c.window_capacity(), std::min<int64_t>(kWindow - 1 + chunk, length));
    r.evictions = c.policy().total_evictions();
    return r;
}

TEST(SlidingWindow, LayersAttendExactlyTheirWindowAndHoldNoMore) {
    const model::hparams hp = shape();
    for (const char* spec :
         {"full", "h2o:budget=12", "h2o:budget=10,granularity=layer", "tova:budget=9,granularity=model",
          "window:budget=6", "streaming:budget=10,sinks=2"}) {
        for (int chunk : {1, 5, 16}) {
            SCOPED_TRACE(std::string(spec) + " chunk " + std::to_string(chunk));
            run(hp, spec, chunk, 40, attention_runner::path::reference);
        }
    }
}

TEST(SlidingWindow, PolicyCountsTheGlobalLayersOnly) {
    const model::hparams hp = shape();
    auto p = policy::params::parse("h2o:budget=12");
    ASSERT_TRUE(p.ok());
    auto c = kv_cache::create(hp, *p, 4, 100, 100, kv_type::f16);
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    EXPECT_EQ((*c)->policy().shape().n_layer, 2) << "two global layers";
    EXPECT_EQ((*c)->policy().n_units(), 2 * hp.n_kv_head);
    EXPECT_EQ((*c)->capacity(), 12 + 4);
    ASSERT_NE((*c)->window_policy(), nullptr);
    EXPECT_EQ((*c)->window_capacity(), kWindow - 1 + 4);
    // Under `model` granularity the one unit's rows sum the global layers' heads; the window layers add none.
    auto m = policy::params::parse("h2o:budget=12,granularity=model");
    ASSERT_TRUE(m.ok());
    auto cm = kv_cache::create(hp, *m, 4, 100, 100, kv_type::f16);
    ASSERT_TRUE(cm.ok());
    EXPECT_EQ((*cm)->policy().heads_of(0).size(), static_cast<size_t>(2 * hp.n_head));
}

TEST(SlidingWindow, FootprintAllocatesOnlyTheWindow) {
    const model::hparams hp = shape();
    model::hparams global = hp;
    global.layer_sliding.clear();
    for (const char* spec : {"full", "h2o:budget=30", "window:budget=0.5"}) {
        SCOPED_TRACE(spec);
        auto p = policy::params::parse(spec);
        ASSERT_TRUE(p.ok());
        auto fp = kv_cache::plan(hp, *p, 4, 200, 200, kv_type::f16);
        ASSERT_TRUE(fp.ok()) << fp.error().to_string();
        auto c = kv_cache::create(hp, *p, 4, 200, 200, kv_type::f16);
        ASSERT_TRUE(c.ok());
        EXPECT_EQ(fp->window_capacity, kWindow - 1 + 4);
        EXPECT_EQ(fp->kv_bytes, (*c)->bytes());
        EXPECT_EQ(fp->kv_bytes,
                  slot_store::bytes_for(2, hp.n_kv_head, hp.head_dim, fp->capacity, kv_type::f16) +
                      slot_store::bytes_for(3, hp.n_kv_head, hp.head_dim, kWindow - 1 + 4, kv_type::f16));
        EXPECT_EQ((*c)->footprint().total(), fp->total());
        auto all_global = kv_cache::plan(global, *p, 4, 200, 200, kv_type::f16);
        ASSERT_TRUE(all_global.ok());
        EXPECT_LT(fp->total(), all_global->total()) << "the window layers take less than global ones";
    }
}

TEST(SlidingWindow, RefusesWhatItDoesNotDefine) {
    model::hparams hp = shape();
    auto rolling = policy::params::parse("h2o:budget=12,positions=rolling");
    ASSERT_TRUE(rolling.ok());
    auto r = kv_cache::plan(hp, *rolling, 4, 100, 100, kv_type::f16);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message().find("sliding-window"), std::string::npos) << r.error().message();
    hp.layer_sliding.assign(5, 1);
    auto full = policy::params::parse("full");
    ASSERT_TRUE(full.ok());
    EXPECT_FALSE(kv_cache::plan(hp, *full, 4, 100, 100, kv_type::f16).ok()) << "no global layer";
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The parallel path (forced to fork, 2 threads) against the reference path, with and without soft-capped
// scores: the same outputs and kept sets, bit for bit.
TEST(SlidingWindow, ParallelPathIsTheReferencePath) {
    core::set_force_parallel(true);
    omp_set_num_threads(2);
    for (float cap : {0.0f, 3.0f}) {
        const model::hparams hp = shape(cap);
        for (const char* spec : {"h2o:budget=12", "tova:budget=9,granularity=model"}) {
            for (int chunk : {1, 6}) {
                SCOPED_TRACE(std::string(spec) + " chunk " + std::to_string(chunk) + " cap " +
                             std::to_string(cap));
                const run_result a = run(hp, spec, chunk, 30, attention_runner::path::reference);
                const run_result b = run(hp, spec, chunk, 30, attention_runner::path::parallel);
                EXPECT_EQ(a.kept, b.kept);
                EXPECT_EQ(a.evictions, b.evictions);
                EXPECT_GT(a.evictions, 0);
                ASSERT_EQ(a.out.size(), b.out.size());
                for (const auto& [key, o] : a.out)
                    EXPECT_TRUE(same_bits(o, b.out.at(key))) << key.first << " " << key.second;
            }
        }
    }
    omp_set_num_threads(1);
    core::set_force_parallel(false);
}

}  // namespace
}  // namespace h2okv::kv
