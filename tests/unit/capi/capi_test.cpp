// The C API (include/h2okv.h, libh2okv.so) against the C++ library it wraps: the same kept sets, victims and
// logits, and every misuse answered with a status and a message instead of a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "h2okv.h"
#include "h2okv/engine/sampler.h"
#include "h2okv/engine/session.h"
#include "h2okv/policy/policy.h"
#include "test_support.h"

namespace h2okv {
namespace {

const std::string model_path = std::string(H2OKV_SOURCE_DIR) + "/models/stories260K.gguf";

struct policy_deleter {
    void operator()(h2okv_policy* p) const { h2okv_policy_free(p); }
};
using policy_ptr = std::unique_ptr<h2okv_policy, policy_deleter>;

policy_ptr make_policy(const char* spec, const h2okv_policy_layout& l, int64_t run_length) {
    h2okv_policy* p = nullptr;
    EXPECT_EQ(h2okv_policy_create(spec, &l, run_length, &p), H2OKV_OK) << h2okv_last_error();
    return policy_ptr(p);
}

std::vector<int64_t> kept_of(const h2okv_policy* p, int unit) {
    std::vector<int64_t> out(static_cast<size_t>(h2okv_policy_capacity(p)));
    size_t n = 0;
    EXPECT_EQ(h2okv_policy_kept_positions(p, unit, out.data(), out.size(), &n), H2OKV_OK)
        << h2okv_last_error();
    out.resize(n);
    return out;
}

TEST(CapiVersion, MatchesTheHeader) {
    EXPECT_STREQ(h2okv_version(), "0.1.0");
    EXPECT_EQ(h2okv_version_number(), H2OKV_VERSION_NUMBER);
    EXPECT_EQ(H2OKV_VERSION_NUMBER,
              H2OKV_VERSION_MAJOR * 10000 + H2OKV_VERSION_MINOR * 100 + H2OKV_VERSION_PATCH);
    EXPECT_STREQ(h2okv_status_name(H2OKV_ERR_OUT_OF_RANGE), "out_of_range");
    EXPECT_STREQ(h2okv_status_name(static_cast<h2okv_status>(99)), "unknown");
}

// Random rows through the C API and the C++ policy, side by side: the same kept sets and victims after every
// chunk, at every granularity, with prefill chunks and decode steps.
TEST(CapiPolicy, SameKeptSetsAndVictimsAsTheCppPolicy) {
    const h2okv_policy_layout cl{
        .n_layer = 3, .n_kv_head = 2, .n_head = 4, .head_dim = 8, .max_chunk = 6, .max_positions = 80};
    const policy::layout l{.n_layer = 3, .n_kv_head = 2, .n_head = 4, .max_chunk = 6, .max_positions = 80};
    for (const char* spec : {"h2o:budget=16,recent=4,decay=0.95", "h2o:budget=0.2,granularity=layer",
                             "tova:budget=12,sinks=2,granularity=model", "streaming:budget=10,sinks=2"}) {
        SCOPED_TRACE(spec);
        auto c = make_policy(spec, cl, 80);
        ASSERT_TRUE(c);
        auto cpp = policy::kv_policy::create(*policy::params::parse(spec), l, 80);
        ASSERT_TRUE(cpp.ok()) << cpp.error().to_string();
        auto& p = **cpp;
        EXPECT_EQ(h2okv_policy_config(c.get()), p.config().to_string());
        ASSERT_EQ(h2okv_policy_n_units(c.get()), p.n_units());
        ASSERT_EQ(h2okv_policy_capacity(c.get()), p.capacity());
        std::mt19937 rng(7);
        std::uniform_real_distribution<double> w(0.0, 1.0);
        std::vector<double> row(static_cast<size_t>(p.capacity()));
        int64_t evictions = 0;
        for (int64_t first = 0; first < 80;) {
            const int n = first == 0 ? 6 : 1;
            ASSERT_EQ(h2okv_policy_begin_chunk(c.get(), first, n), H2OKV_OK) << h2okv_last_error();
            ASSERT_TRUE(p.begin_chunk(first, n).ok());
            for (int i = 0; i < n; ++i) {
                for (int u = 0; u < p.n_units(); ++u) {
                    std::fill(row.begin(), row.end(), 0.0);
                    for (int32_t s : p.kept_slots(u)) row[static_cast<size_t>(s)] = w(rng);
                    for (int k = 0; k <= i; ++k) row[static_cast<size_t>(p.chunk_slots(u)[k])] = w(rng);
                    ASSERT_EQ(h2okv_policy_add_row(c.get(), u, i, row.data()), H2OKV_OK)
                        << h2okv_last_error();
                    p.add_row(u, i, row.data());
                }
            }
            ASSERT_EQ(h2okv_policy_end_chunk(c.get()), H2OKV_OK);
            ASSERT_TRUE(p.end_chunk().ok());
            first += n;
            for (int u = 0; u < p.n_units(); ++u) {
                ASSERT_EQ(kept_of(c.get(), u), p.kept_positions(u)) << "unit " << u << " after " << first;
                const int64_t* vp = nullptr;
                const int32_t* vs = nullptr;
                size_t nv = 0;
                ASSERT_EQ(h2okv_policy_victims(c.get(), u, &vp, &vs, &nv), H2OKV_OK);
                ASSERT_EQ(std::vector<int64_t>(vp, vp + nv),
                          std::vector<int64_t>(p.victims(u).begin(), p.victims(u).end()));
                ASSERT_EQ(std::vector<int32_t>(vs, vs + nv),
                          std::vector<int32_t>(p.victim_slots(u).begin(), p.victim_slots(u).end()));
                evictions += static_cast<int64_t>(nv);
            }
        }
        EXPECT_GT(evictions, 0);
        EXPECT_EQ(h2okv_policy_total_evictions(c.get()), p.total_evictions());
        EXPECT_EQ(h2okv_policy_next_position(c.get()), 80);
    }
}

TEST(CapiPolicy, MisuseIsRefusedWithAMessage) {
    const h2okv_policy_layout l{
        .n_layer = 2, .n_kv_head = 1, .n_head = 2, .head_dim = 4, .max_chunk = 4, .max_positions = 32};
    h2okv_policy* raw = nullptr;
    EXPECT_EQ(h2okv_policy_create("h2:budget=4", &l, 32, &raw), H2OKV_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(raw, nullptr);
    EXPECT_NE(std::string(h2okv_last_error()).find("h2o"), std::string::npos) << h2okv_last_error();
    EXPECT_EQ(h2okv_policy_create("h2o:budget=4,recent=4", &l, 32, &raw), H2OKV_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(h2okv_last_error()).find("recent"), std::string::npos) << h2okv_last_error();
    EXPECT_EQ(h2okv_policy_create(nullptr, &l, 32, &raw), H2OKV_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(h2okv_policy_create("h2o:budget=4", &l, 33, &raw), H2OKV_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(h2okv_last_error()).find("run_length 33"), std::string::npos) << h2okv_last_error();
    h2okv_policy_layout bad = l;
    bad.n_head = 3;
    bad.n_kv_head = 2;
    EXPECT_EQ(h2okv_policy_create("h2o:budget=4", &bad, 32, &raw), H2OKV_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(h2okv_last_error()).find("layout"), std::string::npos) << h2okv_last_error();

    auto p = make_policy("h2o:budget=4,recent=2", l, 32);
    ASSERT_TRUE(p);
    std::vector<double> row(static_cast<size_t>(h2okv_policy_capacity(p.get())), 0.1);
    EXPECT_EQ(h2okv_policy_add_row(p.get(), 0, 0, row.data()), H2OKV_ERR_INVALID_ARGUMENT);  // no chunk open
    EXPECT_EQ(h2okv_policy_end_chunk(p.get()), H2OKV_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(h2okv_policy_begin_chunk(p.get(), 1, 2), H2OKV_ERR_INVALID_ARGUMENT);  // must start at 0
    EXPECT_NE(std::string(h2okv_last_error()).find("expected 0"), std::string::npos) << h2okv_last_error();
    EXPECT_EQ(h2okv_policy_begin_chunk(p.get(), 0, 5), H2OKV_ERR_INVALID_ARGUMENT);  // > max_chunk
    ASSERT_EQ(h2okv_policy_begin_chunk(p.get(), 0, 3), H2OKV_OK);
    EXPECT_EQ(h2okv_policy_add_row(p.get(), 2, 0, row.data()), H2OKV_ERR_INVALID_ARGUMENT);  // unit 2 of 2
    EXPECT_NE(std::string(h2okv_last_error()).find("unit 2"), std::string::npos) << h2okv_last_error();
    EXPECT_EQ(h2okv_policy_add_row(p.get(), 0, 3, row.data()), H2OKV_ERR_INVALID_ARGUMENT);  // query 3 of 3
    EXPECT_EQ(h2okv_policy_add_row(p.get(), 0, 1, row.data()), H2OKV_OK);
    EXPECT_EQ(h2okv_policy_add_row(p.get(), 0, 0, row.data()), H2OKV_ERR_INVALID_ARGUMENT);  // out of order
    EXPECT_NE(std::string(h2okv_last_error()).find("increasing"), std::string::npos) << h2okv_last_error();
    EXPECT_EQ(h2okv_policy_add_row(p.get(), 0, 2, nullptr), H2OKV_ERR_INVALID_ARGUMENT);
    const float key[4] = {1, 2, 3, 4};
    EXPECT_EQ(h2okv_policy_add_key(p.get(), 0, 5, 0, key, 4), H2OKV_ERR_INVALID_ARGUMENT);  // layer 5 of 2
    EXPECT_EQ(h2okv_policy_add_key(p.get(), 0, 0, 0, key, 3), H2OKV_ERR_INVALID_ARGUMENT);  // head_dim 4
    EXPECT_EQ(h2okv_policy_begin_chunk(p.get(), 3, 1), H2OKV_ERR_INVALID_ARGUMENT);  // the chunk is open
    ASSERT_EQ(h2okv_policy_end_chunk(p.get()), H2OKV_OK);
    int64_t one[1];
    size_t n = 0;
    EXPECT_EQ(h2okv_policy_kept_positions(p.get(), 0, one, 1, &n), H2OKV_ERR_OUT_OF_RANGE);
    EXPECT_EQ(n, 3u);  // the room needed
    EXPECT_EQ(h2okv_policy_kept_positions(p.get(), 0, nullptr, 0, nullptr), H2OKV_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(h2okv_policy_unit_of(p.get(), 2, 0), -1);
    EXPECT_EQ(h2okv_policy_unit_of(p.get(), 1, 0), 1);
    EXPECT_EQ(h2okv_policy_n_units(nullptr), 0);
    h2okv_policy_free(nullptr);
    EXPECT_NE(std::string(h2okv_policy_catalog()).find("h2o: "), std::string::npos);
}

struct engine_handles {
    h2okv_model* model = nullptr;
    h2okv_session* session = nullptr;
    ~engine_handles() {
        h2okv_session_free(session);
        h2okv_model_free(model);
    }
};

// The C session's logits and statistics are the C++ session's, bit for bit, under an evicting policy.
TEST(CapiEngine, SessionMatchesTheCppSession) {
    engine_handles h;
    ASSERT_EQ(h2okv_model_load(model_path.c_str(), &h.model), H2OKV_OK) << h2okv_last_error();
    EXPECT_EQ(h2okv_model_n_vocab(h.model), 512);
    EXPECT_EQ(h2okv_model_n_layer(h.model), 5);
    EXPECT_EQ(h2okv_model_n_head(h.model), 8);
    EXPECT_EQ(h2okv_model_n_kv_head(h.model), 4);
    EXPECT_STREQ(h2okv_model_arch(h.model), "llama");
    const std::string text = "Once upon a time, there was a little girl named Lily.";
    std::vector<int32_t> ids(256);
    size_t n_ids = 0;
    ASSERT_EQ(h2okv_tokenize(h.model, text.data(), text.size(), 1, 0, ids.data(), ids.size(), &n_ids),
              H2OKV_OK);
    ids.resize(n_ids);
    EXPECT_EQ(ids[0], h2okv_token_bos(h.model));
    const auto& lm = testing::bundled_stories();
    auto cpp_ids = lm.tok->encode(text, true);
    ASSERT_TRUE(cpp_ids.ok());
    EXPECT_EQ(ids, *cpp_ids);

    const char* spec = "h2o:budget=8,decay=0.9";
    h2okv_session_params sp = h2okv_session_default_params();
    sp.kv = spec;
    sp.prefill_chunk = 5;
    const int64_t run_length = static_cast<int64_t>(ids.size()) + 6;
    ASSERT_EQ(h2okv_session_open(h.model, &sp, run_length, &h.session), H2OKV_OK) << h2okv_last_error();
    EXPECT_EQ(h2okv_session_logits(h.session), nullptr);
    engine::session_params csp;
    csp.kv = *policy::params::parse(spec);
    csp.prefill_chunk = 5;
    auto cs = engine::session::create(*lm.model, csp, run_length);
    ASSERT_TRUE(cs.ok()) << cs.error().to_string();
    std::vector<float> logits;
    ASSERT_TRUE((*cs)->process(ids, model::logits_mode::last, &logits).ok());
    ASSERT_EQ(h2okv_session_process(h.session, ids.data(), ids.size()), H2OKV_OK) << h2okv_last_error();
    for (int step = 0; step < 6; ++step) {
        const float* c = h2okv_session_logits(h.session);
        ASSERT_NE(c, nullptr);
        ASSERT_EQ(std::vector<float>(c, c + 512), logits) << "step " << step;
        int32_t next = h2okv_sample_greedy(c, 512);
        ASSERT_EQ(next, engine::sampler::argmax(logits));
        if (step == 5) break;
        ASSERT_EQ(h2okv_session_process(h.session, &next, 1), H2OKV_OK);
        ASSERT_TRUE(
            (*cs)->process(std::span<const int32_t>(&next, 1), model::logits_mode::last, &logits).ok());
    }
    h2okv_kv_stats st{};
    ASSERT_EQ(h2okv_session_kv_stats(h.session, &st), H2OKV_OK);
    const auto& cache = (*cs)->cache();
    EXPECT_EQ(st.n_past, (*cs)->n_past());
    EXPECT_EQ(st.n_units, 20);
    EXPECT_EQ(st.kept, cache.kept_total());
    EXPECT_EQ(st.kept, 20 * 8);
    EXPECT_EQ(st.evicted, cache.policy().total_evictions());
    EXPECT_GT(st.evicted, 0);
    EXPECT_EQ(st.kv_bytes, cache.bytes());
    EXPECT_GT(st.full_kv_bytes, st.kv_bytes);
    EXPECT_EQ(h2okv_session_kv_config(h.session), cache.policy().config().to_string());
    for (int u = 0; u < 20; ++u) {
        std::vector<int64_t> kept(64);
        size_t n = 0;
        ASSERT_EQ(h2okv_session_kept_positions(h.session, u, kept.data(), kept.size(), &n), H2OKV_OK);
        kept.resize(n);
        EXPECT_EQ(kept, cache.policy().kept_positions(u)) << "unit " << u;
    }
    // The run length bounds the session: its last token is accepted, one more is refused.
    const int32_t one = 1;
    EXPECT_EQ(h2okv_session_process(h.session, &one, 1), H2OKV_OK) << h2okv_last_error();
    EXPECT_EQ(h2okv_session_process(h.session, &one, 1), H2OKV_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(h2okv_last_error()).find(std::to_string(run_length)), std::string::npos)
        << h2okv_last_error();
    EXPECT_EQ(h2okv_session_n_past(h.session), run_length);
}

TEST(CapiEngine, TokensRoundTripAndBuffersTooSmall) {
    engine_handles h;
    ASSERT_EQ(h2okv_model_load(model_path.c_str(), &h.model), H2OKV_OK) << h2okv_last_error();
    const std::string text = "Once upon a time";
    size_t n = 0;
    EXPECT_EQ(h2okv_tokenize(h.model, text.data(), text.size(), 1, 0, nullptr, 0, &n),
              H2OKV_ERR_OUT_OF_RANGE);
    ASSERT_GT(n, 1u);
    std::vector<int32_t> ids(n);
    ASSERT_EQ(h2okv_tokenize(h.model, text.data(), text.size(), 1, 0, ids.data(), ids.size(), &n), H2OKV_OK);
    std::string buf(64, '\0');
    size_t len = 0;
    ASSERT_EQ(h2okv_detokenize(h.model, ids.data() + 1, n - 1, buf.data(), buf.size(), &len), H2OKV_OK);
    EXPECT_EQ(buf.substr(0, len), text);
    EXPECT_EQ(buf[len], '\0');
    EXPECT_EQ(h2okv_detokenize(h.model, ids.data() + 1, n - 1, buf.data(), len, &len),
              H2OKV_ERR_OUT_OF_RANGE);
    std::string pieces;
    for (size_t i = 1; i < n; ++i) {
        ASSERT_EQ(h2okv_token_piece(h.model, ids[i], 0, buf.data(), buf.size(), &len), H2OKV_OK);
        pieces += buf.substr(0, len);
    }
    EXPECT_EQ(pieces, " " + text);  // SentencePiece's dummy prefix, as `h2okv generate` prints pieces
    EXPECT_EQ(h2okv_token_piece(h.model, 512, 0, buf.data(), buf.size(), &len), H2OKV_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(h2okv_token_is_eog(h.model, h2okv_token_eos(h.model)));
    EXPECT_FALSE(h2okv_token_is_eog(h.model, ids[1]));
}

TEST(CapiEngine, BadInputIsRefusedWithAMessage) {
    h2okv_model* m = nullptr;
    EXPECT_EQ(h2okv_model_load("/nonexistent/model.gguf", &m), H2OKV_ERR_IO);
    EXPECT_EQ(m, nullptr);
    EXPECT_NE(std::string(h2okv_last_error()).find("/nonexistent/model.gguf"), std::string::npos)
        << h2okv_last_error();
    const std::string not_gguf = std::string(H2OKV_SOURCE_DIR) + "/models/LICENSE.stories260K";
    EXPECT_EQ(h2okv_model_load(not_gguf.c_str(), &m), H2OKV_ERR_INVALID_FILE) << h2okv_last_error();

    engine_handles h;
    ASSERT_EQ(h2okv_model_load(model_path.c_str(), &h.model), H2OKV_OK);
    h2okv_session_params sp = h2okv_session_default_params();
    sp.kv = "h2o:budget=0";
    EXPECT_EQ(h2okv_session_open(h.model, &sp, 16, &h.session), H2OKV_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(h2okv_last_error()).find("budget"), std::string::npos) << h2okv_last_error();
    sp.kv = "h2o:budget=4";
    sp.kv_type = "f8";
    EXPECT_EQ(h2okv_session_open(h.model, &sp, 16, &h.session), H2OKV_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(h2okv_last_error()).find("f16"), std::string::npos) << h2okv_last_error();
    sp.kv_type = nullptr;
    sp.prefill_chunk = 0;
    EXPECT_EQ(h2okv_session_open(h.model, &sp, 16, &h.session), H2OKV_ERR_INVALID_ARGUMENT);
    sp.prefill_chunk = 4;
    ASSERT_EQ(h2okv_session_open(h.model, &sp, 16, &h.session), H2OKV_OK) << h2okv_last_error();
    const int32_t bad[2] = {1, 9999};
    EXPECT_EQ(h2okv_session_process(h.session, bad, 2), H2OKV_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(h2okv_last_error()).find("tokens[1] = 9999"), std::string::npos)
        << h2okv_last_error();
    EXPECT_EQ(h2okv_session_process(h.session, bad, 0), H2OKV_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(h2okv_session_n_past(h.session), 0);

    h2okv_sampler_params spp = h2okv_sampler_default_params();
    EXPECT_EQ(spp.temperature, 0.0f);
    spp.top_p = 0.0f;
    h2okv_sampler* s = nullptr;
    EXPECT_EQ(h2okv_sampler_create(&spp, &s), H2OKV_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(s, nullptr);
    EXPECT_EQ(h2okv_sample_greedy(nullptr, 4), -1);
}

TEST(CapiEngine, SamplerIsTheEngineSampler) {
    h2okv_sampler_params p = h2okv_sampler_default_params();
    p.temperature = 0.8f;
    p.top_k = 5;
    p.seed = 3;
    h2okv_sampler* s = nullptr;
    ASSERT_EQ(h2okv_sampler_create(&p, &s), H2OKV_OK);
    engine::sampler ref({.temperature = 0.8f, .top_k = 5, .top_p = 1.0f, .seed = 3});
    std::vector<float> logits(32);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
    for (int i = 0; i < 20; ++i) {
        int32_t id = -1;
        ASSERT_EQ(h2okv_sampler_sample(s, logits.data(), logits.size(), &id), H2OKV_OK);
        EXPECT_EQ(id, ref.sample(logits));
    }
    h2okv_sampler_free(s);
}

}  // namespace
}  // namespace h2okv
