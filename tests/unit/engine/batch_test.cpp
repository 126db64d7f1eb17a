// Results do not depend on batching: a sequence's logits, kept sets and generated tokens are the same bits
// in any mix of sequences as alone. Random mixes of 1-16 sequences with different prompts, lengths,
// policies, granularities, KV types, chunk sizes and arrival times, on synthetic models whose products go
// through the multi-token tiles (Q8_0, Q4_K), at 1 and 2 threads with every parallel path forced and
// counted. And the scheduler's admission: the KV memory pool, first in first out, cancellation.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "h2okv/core/parallel.h"
#include "h2okv/engine/forward_pass.h"
#include "h2okv/engine/generate.h"
#include "h2okv/engine/scheduler.h"
#include "h2okv/engine/session.h"
#include "unit/engine/synthetic_models.h"

namespace h2okv {
namespace {

struct spec {
    engine::session_params sp;
    std::vector<int32_t> tokens;
    int arrival = 0;  // the first step it takes part in
};

std::vector<spec> random_specs(int n, std::mt19937& rng, int n_vocab) {
    const char* policies[] = {"full",          "window:budget=12",          "streaming:budget=14,sinks=2",
                              "h2o:budget=10", "h2o:budget=0.3,decay=0.95", "tova:budget=9"};
    const char* grans[] = {"head", "layer", "model"};
    const kv::kv_type types[] = {kv::kv_type::f32, kv::kv_type::f16, kv::kv_type::q8_0};
    std::vector<spec> out;
    for (int i = 0; i < n; ++i) {
        spec s;
        std::string p = policies[rng() % 6];
        p += std::string(p.find(':') == std::string::npos ? ":" : ",") + "granularity=" + grans[rng() % 3];
        if (rng() % 2 == 0) p += ",positions=rolling";
        s.sp.kv = *policy::params::parse(p);
        s.sp.kv_type = types[rng() % 3];
        s.sp.prefill_chunk = 1 + static_cast<int>(rng() % 16);
        s.tokens = testing::random_ids(8 + rng() % 48, n_vocab, rng());
        s.arrival = static_cast<int>(rng() % 12);
        out.push_back(s);
    }
    return out;
}

// Every position's logits and the kept sets after every chunk.
struct trace {
    std::vector<float> logits;
    std::vector<std::vector<std::vector<int64_t>>> kept;
};

trace solo(model::model& m, const spec& s) {
    trace t;
    auto ses = engine::session::create(m, s.sp, static_cast<int64_t>(s.tokens.size()));
    EXPECT_TRUE(ses.ok()) << ses.error().to_string();
    if (!ses.ok()) return t;
    engine::session* p = ses->get();
    p->set_chunk_observer([&t, p](int64_t) { t.kept.push_back(p->cache().kept_per_head()); });
    const status st = p->process(s.tokens, model::logits_mode::all, &t.logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return t;
}

// The sequences together through one forward pass per step: each step takes every arrived sequence with a
// random part size (parts spread chunks over steps), or skips it at random.
std::vector<trace> together(model::model& m, const std::vector<spec>& specs, std::mt19937& rng) {
    const auto n_vocab = static_cast<size_t>(m.params().n_vocab);
    std::vector<trace> traces(specs.size());
    std::vector<std::unique_ptr<engine::session>> sessions;
    for (size_t i = 0; i < specs.size(); ++i) {
        auto s = engine::session::create(m, specs[i].sp, static_cast<int64_t>(specs[i].tokens.size()));
        EXPECT_TRUE(s.ok()) << s.error().to_string();
        if (!s.ok()) return traces;
        engine::session* p = s->get();
        trace* t = &traces[i];
        p->set_chunk_observer([t, p](int64_t) { t->kept.push_back(p->cache().kept_per_head()); });
        t->logits.assign(specs[i].tokens.size() * n_vocab, 0.0f);
        sessions.push_back(std::move(s).value());
    }
    engine::forward_pass pass(m);
    std::vector<size_t> fed(specs.size(), 0);
    for (int step = 0;; ++step) {
        std::vector<engine::step_part> parts;
        bool left = false;
        for (size_t i = 0; i < specs.size(); ++i) {
            const size_t remaining = specs[i].tokens.size() - fed[i];
            left = left || remaining > 0;
            if (remaining == 0 || step < specs[i].arrival || rng() % 5 == 0) continue;
            auto n = sessions[i]->next_part(remaining, 1 + static_cast<int>(rng() % 20));
            EXPECT_TRUE(n.ok()) << n.error().to_string();
            if (!n.ok()) return traces;
            parts.push_back(
                {sessions[i].get(),
                 std::span<const int32_t>(specs[i].tokens).subspan(fed[i], static_cast<size_t>(*n)),
                 model::logits_mode::all, traces[i].logits.data() + fed[i] * n_vocab});
            fed[i] += static_cast<size_t>(*n);
        }
        if (!left) break;
        if (parts.empty()) continue;
        const status st = pass.run(parts);
        EXPECT_TRUE(st.ok()) << st.to_string();
        if (!st.ok()) return traces;
    }
    return traces;
}

size_t mismatches(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return std::max(a.size(), b.size());
    size_t n = 0;
    for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return n;
}

class Batching : public ::testing::TestWithParam<gguf::tensor_type> {
protected:
    void SetUp() override {
        forced_ = core::force_parallel();
        core::set_force_parallel(true);
        // head_dim 64 (q8_0 KV), GQA 2, rows of 256 (whole Q4_K blocks).
        sm_ = testing::load_synthetic({256, 2, 4, 2, 512, 300, 2048, true}, 3, GetParam());
        ASSERT_NE(sm_.model, nullptr);
    }
    void TearDown() override {
        omp_set_num_threads(1);
        core::set_force_parallel(forced_);
    }
    testing::synthetic_model sm_;
    bool forced_ = false;
};

TEST_P(Batching, LogitsAndKeptSetsEqualSolo) {
    model::model& m = *sm_.model;
    for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        core::reset_fork_counts();
        for (uint32_t seed = 1; seed <= 5; ++seed) {
            std::mt19937 rng(seed * 31 + static_cast<uint32_t>(threads));
            const int n = seed == 1 ? 16 : 1 + static_cast<int>(rng() % 16);
            const auto specs = random_specs(n, rng, 300);
            const auto got = together(m, specs, rng);
            for (size_t i = 0; i < specs.size(); ++i) {
                const trace want = solo(m, specs[i]);
                const std::string what = "seed " + std::to_string(seed) + " threads " +
                                         std::to_string(threads) + " sequence " + std::to_string(i) + " of " +
                                         std::to_string(n) + ": " + specs[i].sp.kv.to_string() + " " +
                                         kv::kv_type_name(specs[i].sp.kv_type) + " chunk " +
                                         std::to_string(specs[i].sp.prefill_chunk);
                EXPECT_EQ(mismatches(want.logits, got[i].logits), 0u) << what;
                EXPECT_EQ(want.kept, got[i].kept) << what;
            }
        }
        for (auto site :
             {core::parallel_site::matmul, core::parallel_site::attention, core::parallel_site::commit,
              core::parallel_site::tokens, core::parallel_site::close}) {
            if (threads == 2) {
                EXPECT_GT(core::fork_count(site), 0)
                    << core::parallel_site_name(site) << ": the parallel path ran";
            } else {
                EXPECT_EQ(core::fork_count(site), 0) << core::parallel_site_name(site);
            }
        }
    }
}

// The scheduler's generated tokens equal engine::generate's for each request alone: greedy and sampled,
// requests arriving at different steps, a pool that holds only some of them at once.
TEST_P(Batching, SchedulerTokensEqualGenerateAlone) {
    model::model& m = *sm_.model;
    for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        core::reset_fork_counts();
        std::mt19937 rng(7 + static_cast<uint32_t>(threads));
        const auto specs = random_specs(12, rng, 300);
        std::vector<engine::generation_params> gens;
        for (size_t i = 0; i < specs.size(); ++i) {
            engine::generation_params gp;
            gp.n_predict = 1 + static_cast<int>(rng() % 24);
            if (i % 2 == 1) gp.sampling = {0.8f, 40, 0.95f, rng()};
            gens.push_back(gp);
        }
        auto is_end = [](int32_t id) { return id == 2; };
        std::vector<std::vector<int32_t>> want;
        int64_t largest = 0;
        for (size_t i = 0; i < specs.size(); ++i) {
            const int64_t run = static_cast<int64_t>(specs[i].tokens.size()) + gens[i].n_predict;
            engine::session_params sp = specs[i].sp;
            sp.prefill_chunk = std::min(sp.prefill_chunk, static_cast<int>(specs[i].tokens.size()));
            auto s = engine::session::create(m, sp, run);
            ASSERT_TRUE(s.ok()) << s.error().to_string();
            auto g = engine::generate(**s, specs[i].tokens, gens[i], is_end, nullptr);
            ASSERT_TRUE(g.ok()) << g.error().to_string();
            want.push_back(g->tokens);
            largest = std::max(largest, engine::session::plan(m, sp, run)->total());
        }
        engine::scheduler_params params;
        params.parallel = 6;
        params.step_tokens = 24;
        params.kv_memory = 3 * largest;  // at least three of them at once, not always all
        auto sch = engine::scheduler::create(m, params);
        ASSERT_TRUE(sch.ok()) << sch.error().to_string();
        std::map<uint64_t, size_t> index;
        std::vector<std::vector<int32_t>> streamed(specs.size());
        std::vector<engine::sequence_result> results(specs.size());
        size_t submitted = 0;
        for (int step = 0; submitted < specs.size() || !(*sch)->idle(); ++step) {
            for (size_t i = 0; i < specs.size(); ++i) {
                if (specs[i].arrival != step) continue;
                engine::request r;
                r.prompt = specs[i].tokens;
                r.session = specs[i].sp;
                r.generation = gens[i];
                r.is_end = is_end;
                r.on_token = [&streamed, i](int32_t id) {
                    streamed[i].push_back(id);
                    return true;
                };
                auto id = (*sch)->submit(std::move(r));
                ASSERT_TRUE(id.ok()) << id.error().to_string();
                index[*id] = i;
                ++submitted;
            }
            auto done = (*sch)->step();
            ASSERT_TRUE(done.ok()) << done.error().to_string();
            for (auto& r : *done) results[index.at(r.id)] = std::move(r);
            EXPECT_LE((*sch)->pool().used(), params.kv_memory);
        }
        for (size_t i = 0; i < specs.size(); ++i) {
            EXPECT_EQ(results[i].tokens, want[i]) << "request " << i << " " << specs[i].sp.kv.to_string();
            EXPECT_EQ(streamed[i], want[i]) << "request " << i;
            EXPECT_NE(results[i].reason, engine::finish_reason::error) << results[i].error.to_string();
        }
        EXPECT_EQ((*sch)->pool().used(), 0);
        EXPECT_LE((*sch)->pool().peak(), params.kv_memory);
        EXPECT_GE((*sch)->stats().max_active, 3);
        if (threads == 2) {
            EXPECT_GT(core::fork_count(core::parallel_site::matmul), 0);
        }
    }
}

// The blocks of the other architectures (q/k/v biases, per-head q/k norms, fused qkv and gate/up, scaled
// RoPE with a magnitude) keep a sequence's results the same bits in a batch as alone, at 2 threads.
TEST(BatchingArchitectures, LogitsAndKeptSetsEqualSolo) {
    const bool forced = core::force_parallel();
    core::set_force_parallel(true);
    omp_set_num_threads(2);
    std::vector<model::synth_shape> shapes(4, model::synth_shape{256, 2, 4, 2, 512, 300, 2048, true});
    shapes[0].arch = "qwen2";
    shapes[0].rope_scale = {.type = model::rope_scaling_type::yarn, .factor = 4.0, .orig_ctx = 512};
    shapes[1].arch = "qwen3";
    shapes[1].head_dim = 128;
    shapes[2].arch = "phi3";
    shapes[3].rope_freq_base = 500000.0f;
    shapes[3].rope_freqs = true;
    for (const auto& shape : shapes) {
        const testing::synthetic_model sm = testing::load_synthetic(shape, 8, gguf::tensor_type::q8_0);
        ASSERT_NE(sm.model, nullptr) << shape.arch;
        std::mt19937 rng(17);
        const auto specs = random_specs(6, rng, 300);
        const auto got = together(*sm.model, specs, rng);
        for (size_t i = 0; i < specs.size(); ++i) {
            const trace want = solo(*sm.model, specs[i]);
            const std::string what = shape.arch + " sequence " + std::to_string(i) + ": " +
                                     specs[i].sp.kv.to_string() + " " + kv::kv_type_name(specs[i].sp.kv_type);
            EXPECT_EQ(mismatches(want.logits, got[i].logits), 0u) << what;
            EXPECT_EQ(want.kept, got[i].kept) << what;
        }
    }
    omp_set_num_threads(1);
    core::set_force_parallel(forced);
}

INSTANTIATE_TEST_SUITE_P(Weights, Batching,
                         ::testing::Values(gguf::tensor_type::q8_0, gguf::tensor_type::q4_k),
                         [](const auto& p) { return std::string(gguf::tensor_type_name(p.param)); });

class Scheduler : public ::testing::Test {
protected:
    void SetUp() override {
        sm_ = testing::load_synthetic({128, 2, 4, 2, 256, 300, 2048, true}, 4);
        ASSERT_NE(sm_.model, nullptr);
    }
    engine::request make(size_t prompt, int n, const char* policy = "full") {
        engine::request r;
        r.prompt = testing::random_ids(prompt, 300, static_cast<uint32_t>(prompt));
        r.session.kv = *policy::params::parse(policy);
        r.generation.n_predict = n;
        r.session.prefill_chunk = static_cast<int>(prompt);  // as the scheduler takes it
        return r;
    }
    testing::synthetic_model sm_;
};

TEST_F(Scheduler, AdmitsWhatFitsThePoolFirstInFirstOut) {
    const auto fp = engine::session::plan(*sm_.model, make(20, 10).session, 30);
    ASSERT_TRUE(fp.ok());
    engine::scheduler_params p;
    p.kv_memory = 2 * fp->total() + fp->total() / 2;  // two at once
    auto sch = engine::scheduler::create(*sm_.model, p);
    ASSERT_TRUE(sch.ok());
    for (int i = 0; i < 5; ++i) ASSERT_TRUE((*sch)->submit(make(20, 10)).ok());
    std::vector<uint64_t> order;
    while (!(*sch)->idle()) {
        auto done = (*sch)->step();
        ASSERT_TRUE(done.ok());
        EXPECT_LE((*sch)->active(), 2);
        for (const auto& r : *done) {
            order.push_back(r.id);
            EXPECT_EQ(r.reason, engine::finish_reason::length);
            EXPECT_EQ(r.tokens.size(), 10u);
            EXPECT_EQ(r.kv_footprint, fp->total());
        }
    }
    EXPECT_EQ(order, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
    EXPECT_EQ((*sch)->stats().max_active, 2);
    EXPECT_EQ((*sch)->pool().peak(), 2 * fp->total());
}

// The equal-memory case in small: a pool holding 4 full caches of an 800-token prompt admits 16 under
// h2o at 20 % (head_dim 64, as the models people run; the slot tables are charged too). The model is as
// narrow as that head allows: the test runs under the scalar kernels and the sanitizers too.
TEST(SchedulerMemory, EvictionAdmitsMoreSequencesInTheSameMemory) {
    const testing::synthetic_model sm = testing::load_synthetic({128, 2, 2, 1, 128, 300, 2048, true}, 6);
    ASSERT_NE(sm.model, nullptr);
    auto request = [](const char* policy) {
        engine::request r;
        r.prompt = testing::random_ids(800, 300, 1);
        r.session.kv = *policy::params::parse(policy);
        r.session.prefill_chunk = 16;
        r.generation.n_predict = 8;
        return r;
    };
    const auto full = engine::session::plan(*sm.model, request("full").session, 808);
    ASSERT_TRUE(full.ok());
    engine::scheduler_params p;
    p.parallel = 16;
    p.step_tokens = 256;
    p.kv_memory = 4 * full->total();
    for (const char* policy : {"full", "h2o:budget=0.2"}) {
        auto sch = engine::scheduler::create(*sm.model, p);
        ASSERT_TRUE(sch.ok());
        for (int i = 0; i < 16; ++i) ASSERT_TRUE((*sch)->submit(request(policy)).ok());
        while (!(*sch)->idle()) {
            auto done = (*sch)->step();
            ASSERT_TRUE(done.ok());
            for (const auto& r : *done)
                EXPECT_EQ(r.reason, engine::finish_reason::length) << r.error.to_string();
        }
        EXPECT_EQ((*sch)->stats().max_active, std::string(policy) == "full" ? 4 : 16) << policy;
        EXPECT_LE((*sch)->pool().peak(), p.kv_memory) << policy;
    }
}

TEST_F(Scheduler, RefusesWhatCouldNeverRun) {
    engine::scheduler_params p;
    p.kv_memory = 1000;
    auto sch = engine::scheduler::create(*sm_.model, p);
    ASSERT_TRUE(sch.ok());
    auto big = (*sch)->submit(make(20, 10));
    ASSERT_FALSE(big.ok());
    EXPECT_EQ(big.error().code(), status_code::out_of_memory);
    EXPECT_NE(big.error().message().find("--kv-memory"), std::string::npos) << big.error().message();
    auto bad = make(20, 10);
    bad.prompt[3] = 300;
    EXPECT_FALSE((*sch)->submit(bad).ok());
    auto empty = make(20, 10);
    empty.prompt.clear();
    EXPECT_FALSE((*sch)->submit(empty).ok());
    EXPECT_FALSE((*sch)->submit(make(20, 10, "h2o")).ok()) << "h2o without a budget";
    auto neg = make(20, -1);
    EXPECT_FALSE((*sch)->submit(neg).ok());
    engine::scheduler_params q;
    q.parallel = 8;
    q.step_tokens = 4;
    EXPECT_FALSE(engine::scheduler::create(*sm_.model, q).ok()) << "a step must hold every decode token";
}

TEST_F(Scheduler, CancelledSequencesFinishAndFreeTheirMemory) {
    engine::scheduler_params p;
    p.parallel = 1;
    auto sch = engine::scheduler::create(*sm_.model, p);
    ASSERT_TRUE(sch.ok());
    const uint64_t a = *(*sch)->submit(make(20, 50));
    const uint64_t b = *(*sch)->submit(make(20, 50));
    ASSERT_TRUE((*sch)->step().ok());
    EXPECT_EQ((*sch)->active(), 1);
    EXPECT_EQ((*sch)->waiting(), 1);
    EXPECT_GT((*sch)->pool().used(), 0);
    (*sch)->cancel(b);
    (*sch)->cancel(a);
    auto done = (*sch)->step();
    ASSERT_TRUE(done.ok());
    ASSERT_EQ(done->size(), 2u);
    for (const auto& r : *done) EXPECT_EQ(r.reason, engine::finish_reason::cancelled);
    EXPECT_TRUE((*sch)->idle());
    EXPECT_EQ((*sch)->pool().used(), 0);
}

TEST_F(Scheduler, OnTokenCanStopASequence) {
    auto sch = engine::scheduler::create(*sm_.model, {});
    ASSERT_TRUE(sch.ok());
    auto r = make(10, 30);
    int seen = 0;
    r.on_token = [&seen](int32_t) { return ++seen < 5; };
    ASSERT_TRUE((*sch)->submit(std::move(r)).ok());
    std::vector<engine::sequence_result> all;
    while (!(*sch)->idle()) {
        auto done = (*sch)->step();
        ASSERT_TRUE(done.ok());
        for (auto& d : *done) all.push_back(std::move(d));
    }
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].reason, engine::finish_reason::stop);
    EXPECT_EQ(all[0].tokens.size(), 5u);
}

}  // namespace
}  // namespace h2okv
