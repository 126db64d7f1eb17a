// The attention runner's parallel path against its reference path: sequences with different policies,
// granularities, KV types, chunk sizes and lengths, forwarded alone through the reference path and together
// (random step compositions, chunks spread over several steps, random arrival) through the parallel path
// at 1 and 2 threads, give bit-identical attention outputs, kept sets and scores. The inputs are functions
// of (sequence, position, layer), so they do not depend on how the steps were composed.
#include "h2okv/kv/attention_runner.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "h2okv/core/parallel.h"

namespace h2okv::kv {
namespace {

model::hparams shape() {
    model::hparams hp;
    hp.arch = "llama";
    hp.n_layer = 3;
    hp.n_head = 4;
    hp.n_kv_head = 2;
    hp.head_dim = 32;  // q8_0 needs a multiple of 32
    hp.n_embd = 128;
    hp.n_ff = 256;
    hp.n_vocab = 300;
    hp.rope_dim = 32;
    hp.rope_specs = {kernels::rope_spec::plain(32, hp.rope_freq_base, hp.rope_pairing)};
    hp.layer_rope.assign(3, 0);
    return hp;
}

// A deterministic value in [-2, 2) for (sequence, position, layer, what, index).
float input(int seq, int64_t pos, int layer, int what, int i) {
    uint64_t z =
        (static_cast<uint64_t>(seq) * 1000003u + static_cast<uint64_t>(pos)) * 0x9e3779b97f4a7c15ull +
        static_cast<uint64_t>(layer * 7919 + what * 104729 + i) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-53 * 4.0 - 2.0);
}

struct sequence_spec {
    policy::params p;
    kv_type type;
    int chunk;
    int64_t length;
};

// What a run records: every attention output, keyed by (position, layer), and the kept sets and scores
// after every chunk.
struct record {
    std::map<std::pair<int64_t, int>, std::vector<float>> out;
    std::vector<std::vector<std::vector<int64_t>>> kept;
    std::vector<std::vector<double>> scores;
};

std::vector<sequence_spec> random_specs(int n, std::mt19937& rng) {
    const char* names[] = {"full", "window", "streaming", "h2o", "tova"};
    const policy::granularity grans[] = {policy::granularity::head, policy::granularity::layer,
                                         policy::granularity::model};
    const kv_type types[] = {kv_type::f32, kv_type::f16, kv_type::q8_0, kv_type::q4_0, kv_type::q4_1};
    std::vector<sequence_spec> specs;
    for (int i = 0; i < n; ++i) {
        sequence_spec s;
        s.p.name = names[rng() % 5];
        s.p.gran = grans[rng() % 3];
        s.length = 10 + static_cast<int64_t>(rng() % 70);
        s.chunk = 1 + static_cast<int>(rng() % 12);
        if (s.p.name != "full") s.p.budget = policy::budget_spec::count(6 + static_cast<int64_t>(rng() % 20));
        if (s.p.name == "streaming") s.p.sinks = 2;
        if (s.p.name == "h2o" && rng() % 2 == 0) s.p.decay = 0.9;
        s.type = types[rng() % std::size(types)];
        if (rng() % 2 == 0) s.p.positions = policy::position_mode::rolling;
        specs.push_back(s);
    }
    return specs;
}

class driver {
public:
    // ids: each sequence's identity in the inputs (default: its index).
    driver(const std::vector<sequence_spec>& specs, attention_runner::path path, std::vector<int> ids = {})
        : runner_(path), ids_(std::move(ids)) {
        if (ids_.empty()) {
            for (size_t i = 0; i < specs.size(); ++i) ids_.push_back(static_cast<int>(i));
        }
        for (const auto& s : specs) {
            auto c = kv_cache::create(hp_, s.p, s.chunk, s.length, s.length, s.type);
            EXPECT_TRUE(c.ok()) << c.error().to_string();
            caches_.push_back(std::move(c).value());
        }
        specs_ = specs;
        fed_.assign(specs.size(), 0);
        records_.resize(specs.size());
    }

    bool done(size_t i) const { return fed_[i] == specs_[i].length; }
    bool all_done() const {
        for (size_t i = 0; i < specs_.size(); ++i) {
            if (!done(i)) return false;
        }
        return true;
    }

    // One step over (sequence, tokens) pairs: opens chunks as needed, runs every layer, closes complete
    // chunks.
    void step(const std::vector<std::pair<size_t, int>>& parts) {
        std::vector<kv_cache*> cs;
        std::vector<int> ns;
        std::vector<std::pair<size_t, int64_t>> tokens;  // (sequence, position)
        for (auto [i, n] : parts) {
            kv_cache& c = *caches_[i];
            if (!c.in_chunk()) {
                const int size =
                    static_cast<int>(std::min<int64_t>(specs_[i].chunk, specs_[i].length - fed_[i]));
                ASSERT_TRUE(c.begin_chunk(fed_[i], size).ok());
            }
            n = std::min(n, c.chunk_size() - c.chunk_done());
            if (c.token_by_token()) n = 1;
            cs.push_back(&c);
            ns.push_back(n);
            for (int t = 0; t < n; ++t) tokens.emplace_back(i, fed_[i] + t);
        }
        const size_t q_dim = static_cast<size_t>(hp_.n_head) * hp_.head_dim;
        const size_t kv_dim = static_cast<size_t>(hp_.n_kv_head) * hp_.head_dim;
        std::vector<float> q(tokens.size() * q_dim), k(tokens.size() * kv_dim), v(tokens.size() * kv_dim),
            out(tokens.size() * q_dim);
        ASSERT_TRUE(runner_.begin_step(cs, ns).ok());
        for (int l = 0; l < hp_.n_layer; ++l) {
            for (size_t t = 0; t < tokens.size(); ++t) {
                const auto [i, pos] = tokens[t];
                for (size_t d = 0; d < q_dim; ++d)
                    q[t * q_dim + d] = input(ids_[i], pos, l, 0, static_cast<int>(d));
                for (size_t d = 0; d < kv_dim; ++d) {
                    k[t * kv_dim + d] = input(ids_[i], pos, l, 1, static_cast<int>(d));
                    v[t * kv_dim + d] = input(ids_[i], pos, l, 2, static_cast<int>(d));
                }
            }
            const status st =
                runner_.attend(l, static_cast<int>(tokens.size()), q.data(), k.data(), v.data(), out.data());
            ASSERT_TRUE(st.ok()) << st.to_string();
            for (size_t t = 0; t < tokens.size(); ++t) {
                const auto [i, pos] = tokens[t];
                records_[i].out[{pos, l}].assign(out.begin() + static_cast<std::ptrdiff_t>(t * q_dim),
                                                 out.begin() + static_cast<std::ptrdiff_t>((t + 1) * q_dim));
            }
        }
        runner_.end_step();
        for (size_t p = 0; p < parts.size(); ++p) {
            const size_t i = parts[p].first;
            kv_cache& c = *caches_[i];
            fed_[i] += ns[p];
            if (c.chunk_done() == c.chunk_size()) {
                ASSERT_TRUE(c.end_chunk().ok());
                records_[i].kept.push_back(c.kept_per_head());
                std::vector<double> sc;
                for (int u = 0; u < c.policy().n_units(); ++u) {
                    const auto s = c.policy().slot_scores(u);
                    sc.insert(sc.end(), s.begin(), s.end());
                }
                records_[i].scores.push_back(sc);
            }
        }
    }

    const record& result(size_t i) const { return records_[i]; }
    const kv_cache& cache(size_t i) const { return *caches_[i]; }

private:
    model::hparams hp_ = shape();
    attention_runner runner_;
    std::vector<int> ids_;
    std::vector<sequence_spec> specs_;
    std::vector<std::unique_ptr<kv_cache>> caches_;
    std::vector<int64_t> fed_;
    std::vector<record> records_;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Each sequence alone, whole chunks (one token for token-by-token), through the reference path.
std::vector<record> solo_reference(const std::vector<sequence_spec>& specs) {
    std::vector<record> out;
    for (size_t i = 0; i < specs.size(); ++i) {
        driver d({specs[i]}, attention_runner::path::reference, {static_cast<int>(i)});
        while (!d.done(0)) d.step({{0, specs[i].chunk}});
        out.push_back(d.result(0));
    }
    return out;
}

void expect_same(const record& want, const record& got, const std::string& what) {
    EXPECT_EQ(want.kept, got.kept) << what;
    ASSERT_EQ(want.scores.size(), got.scores.size()) << what;
    for (size_t c = 0; c < want.scores.size(); ++c) {
        EXPECT_EQ(0, std::memcmp(want.scores[c].data(), got.scores[c].data(),
                                 want.scores[c].size() * sizeof(double)))
            << what << " chunk " << c;
    }
    ASSERT_EQ(want.out.size(), got.out.size()) << what;
    size_t mismatches = 0;
    for (const auto& [key, v] : want.out) mismatches += !same_bits(v, got.out.at(key));
    EXPECT_EQ(mismatches, 0u) << what;
}

TEST(AttentionRunner, BatchedParallelEqualsSoloReference) {
    const bool forced = core::force_parallel();
    core::set_force_parallel(true);
    for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        core::reset_fork_counts();
        for (uint32_t seed = 1; seed <= 12; ++seed) {
            std::mt19937 rng(seed);
            const int n = 1 + static_cast<int>(rng() % 16);
            const auto specs = random_specs(n, rng);
            const auto want = solo_reference(specs);
            driver d(specs, attention_runner::path::parallel);
            std::vector<int> arrival(specs.size());
            for (auto& a : arrival) a = static_cast<int>(rng() % 20);
            for (int step = 0; !d.all_done(); ++step) {
                std::vector<std::pair<size_t, int>> parts;
                for (size_t i = 0; i < specs.size(); ++i) {
                    if (d.done(i) || step < arrival[i] || rng() % 4 == 0) continue;
                    parts.emplace_back(i, 1 + static_cast<int>(rng() % 9));
                }
                if (!parts.empty()) d.step(parts);
            }
            for (size_t i = 0; i < specs.size(); ++i) {
                expect_same(want[i], d.result(i),
                            "seed " + std::to_string(seed) + " threads " + std::to_string(threads) +
                                " sequence " + std::to_string(i) + " " + specs[i].p.to_string() + " " +
                                kv_type_name(specs[i].type));
            }
        }
        if (threads == 2) {
            EXPECT_GT(core::fork_count(core::parallel_site::attention), 0)
                << "the parallel attention path ran";
            EXPECT_GT(core::fork_count(core::parallel_site::commit), 0) << "the parallel commit path ran";
        } else {
            EXPECT_EQ(core::fork_count(core::parallel_site::attention), 0) << "one thread never forks";
        }
    }
    omp_set_num_threads(1);
    core::set_force_parallel(forced);
}

TEST(AttentionRunner, RefusesStepsThatDoNotFitTheChunk) {
    const model::hparams hp = shape();
    policy::params p;
    auto c = kv_cache::create(hp, p, 4, 16, 16, kv_type::f16);
    ASSERT_TRUE(c.ok());
    attention_runner r;
    kv_cache* one[] = {c->get()};
    const int two[] = {2};
    EXPECT_FALSE(r.begin_step(one, two).ok()) << "no open chunk";
    ASSERT_TRUE((*c)->begin_chunk(0, 3).ok());
    const int four[] = {4};
    EXPECT_FALSE(r.begin_step(one, four).ok()) << "more tokens than the chunk";
    kv_cache* twice[] = {c->get(), c->get()};
    const int ones[] = {1, 1};
    EXPECT_FALSE(r.begin_step(twice, ones).ok()) << "a cache twice";
    ASSERT_TRUE(r.begin_step(one, two).ok());
    std::vector<float> buf(4 * 128);
    EXPECT_FALSE(r.attend(0, 3, buf.data(), buf.data(), buf.data(), buf.data()).ok()) << "token count";
    EXPECT_FALSE(r.attend(3, 2, buf.data(), buf.data(), buf.data(), buf.data()).ok()) << "layer";
    EXPECT_FALSE((*c)->end_chunk().ok()) << "the chunk is not complete";
}

TEST(AttentionRunner, ModelGranularityForwardsTokenByToken) {
    const model::hparams hp = shape();
    auto p = policy::params::parse("h2o:budget=8,granularity=model");
    ASSERT_TRUE(p.ok());
    auto c = kv_cache::create(hp, *p, 4, 16, 16, kv_type::f16);
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE((*c)->token_by_token());
    ASSERT_TRUE((*c)->begin_chunk(0, 4).ok());
    attention_runner r;
    kv_cache* one[] = {c->get()};
    const int two[] = {2};
    EXPECT_FALSE(r.begin_step(one, two).ok());
    const int single[] = {1};
    EXPECT_TRUE(r.begin_step(one, single).ok());
}

}  // namespace
}  // namespace h2okv::kv
