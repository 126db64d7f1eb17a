// The server in-process on a loopback port, driven by cpp-httplib's client: greedy completions equal a lone
// session's generation, streams concatenate to the same text, concurrent requests with different policies
// each get their solo text, and a client that leaves, a full queue, a deadline and a shutdown each end as
// they should, with the sequence's memory back in the pool. (tests/serve/serve_test.py runs the CLI's server
// with curl and Python clients.)
#include "h2okv/serve/server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "h2okv/engine/generate.h"
#include "test_support.h"

namespace h2okv::serve {
namespace {

using json = nlohmann::json;

// What `h2okv generate` prints after the prompt: a lone session, greedy.
std::string solo_text(const std::string& prompt, const std::string& spec, int n, bool ignore_eos = false) {
    const auto& m = testing::bundled_stories();
    auto ids = m.tok->encode(prompt, true, false);
    EXPECT_TRUE(ids.ok());
    engine::session_params sp;
    sp.kv = *policy::params::parse(spec);
    sp.prefill_chunk = static_cast<int>(ids->size());
    auto s = engine::session::create(*m.model, sp, static_cast<int64_t>(ids->size()) + n);
    EXPECT_TRUE(s.ok()) << s.error().to_string();
    engine::generation_params gp;
    gp.n_predict = n;
    gp.ignore_eos = ignore_eos;
    std::string text;
    auto g = engine::generate(
        **s, *ids, gp, [&](int32_t id) { return m.tok->is_eog(id); },
        [&](int32_t id) { text += m.tok->piece(id); });
    EXPECT_TRUE(g.ok());
    return text;
}

struct test_server {
    std::mutex log_mu;
    std::vector<std::string> log;
    std::unique_ptr<server> srv;  // last: it logs while it shuts down

    explicit test_server(server_params p) {
        const auto& m = testing::bundled_stories();
        p.host = "127.0.0.1";
        p.port = 0;
        p.model_name = "stories260K";
        p.chat = chat_template::chatml;
        p.log = [this](const std::string& line) {
            std::lock_guard<std::mutex> lk(log_mu);
            log.push_back(line);
        };
        auto s = server::create(*m.model, *m.tok, std::move(p));
        EXPECT_TRUE(s.ok()) << s.error().to_string();
        if (!s.ok()) return;
        srv = std::move(s).value();
        const status st = srv->start();
        EXPECT_TRUE(st.ok()) << st.to_string();
    }
    httplib::Client client() const {
        httplib::Client c("127.0.0.1", srv->port());
        c.set_read_timeout(60, 0);
        return c;
    }
    std::map<std::string, double> metrics() const {
        std::map<std::string, double> out;
        std::istringstream in(srv->metrics());
        std::string name;
        double v = 0;
        for (std::string line; std::getline(in, line);) {
            if (line.empty() || line[0] == '#') continue;
            std::istringstream ls(line);
            if (ls >> name >> v) out[name] = v;
        }
        return out;
    }
    // Waits until the metric reaches `v` (the engine publishes after its step).
    bool wait_metric(const std::string& name, double v) const {
        for (int i = 0; i < 500; ++i) {
            if (metrics()[name] == v) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return false;
    }
};

server_params small_params(int parallel = 4, int queue = 16) {
    server_params p;
    p.engine.parallel = parallel;
    p.engine.kv_memory = int64_t{64} << 20;
    p.max_queue = queue;
    return p;
}

std::string completion_body(const std::string& prompt, int n, const std::string& kv = "null",
                            bool stream = false, bool ignore_eos = false) {
    return fmt::format(R"({{"prompt": {}, "max_tokens": {}, "temperature": 0, "kv_cache": {}, "stream": {},
                           "ignore_eos": {}}})",
                       json(prompt).dump(), n, kv, stream ? "true" : "false", ignore_eos ? "true" : "false");
}

// The text of a stream's events; *done tells whether it ended with [DONE].
std::string stream_text(const std::string& sse, bool* done, json* last = nullptr) {
    std::string text;
    *done = false;
    std::istringstream in(sse);
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("data: ", 0) != 0) continue;
        const std::string data = line.substr(6);
        if (data == "[DONE]") {
            *done = true;
            continue;
        }
        const json j = json::parse(data);
        if (last != nullptr) *last = j;
        if (j.contains("choices") && !j["choices"].empty()) text += j["choices"][0].value("text", "");
    }
    return text;
}

TEST(Server, GreedyCompletionEqualsALoneSession) {
    const std::string expected = solo_text("Once upon a time", "h2o:budget=16,recent=4", 60);
    test_server s(small_params());
    ASSERT_NE(s.srv, nullptr);
    auto c = s.client();
    auto res =
        c.Post("/v1/completions",
               completion_body("Once upon a time", 60, R"({"policy": "h2o", "budget": 16, "recent": 4})"),
               "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const json j = json::parse(res->body);
    EXPECT_EQ(j["choices"][0]["text"], expected);
    EXPECT_EQ(j["kv_cache"]["policy"], "h2o:budget=16,recent=4,sinks=0");
    EXPECT_GT(j["kv_cache"]["evictions"].get<int64_t>(), 0);
    EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
}

// kv_cache's per-unit budget fields (clause 11) reach the session: the bundled model has 5 layers x 4 KV
// heads, so 20 shares; the unit with share 3 gets a larger store than any uniform unit (capacity), the
// footprint follows the per-unit stores, and the resolved policy names them.
TEST(Server, KvCacheTakesBudgetsPerUnit) {
    test_server s(small_params());
    ASSERT_NE(s.srv, nullptr);
    auto c = s.client();
    auto post = [&](const std::string& kv) {
        auto res = c.Post("/v1/completions", completion_body("Once upon a time", 30, kv), "application/json");
        EXPECT_TRUE(res);
        return res ? std::make_pair(res->status, json::parse(res->body)) : std::make_pair(0, json());
    };
    const auto [st_uniform, uniform] = post(R"({"policy": "h2o", "budget": 12})");
    ASSERT_EQ(st_uniform, 200) << uniform.dump();
    const std::string shares = "[1, 2, 0.5, 1.5, 1, 1, 1, 1, 3, 0.2, 0.3, 1, 1, 1, 2, 2, 0.5, 0.5, 1, 1]";
    const auto [st_shared, shared] = post(R"({"policy": "h2o", "budget": 12, "shares": )" + shares + "}");
    ASSERT_EQ(st_shared, 200) << shared.dump();
    EXPECT_GT(shared["kv_cache"]["capacity"].get<int64_t>(), uniform["kv_cache"]["capacity"].get<int64_t>());
    EXPECT_NE(shared["kv_cache"]["footprint"], uniform["kv_cache"]["footprint"]);
    EXPECT_NE(shared["kv_cache"]["policy"].get<std::string>().find("shares=1/2/0.5/1.5/"), std::string::npos)
        << shared.dump();
    const auto [st_pyr, pyr] =
        post(R"({"policy": "h2o", "budget": 12, "schedule": "pyramid", "ratio": 0.6, "recents": [0.5, 0.4, )"
             R"(0.3, 0.2, 0.1], "decays": [1, 0.99, 0.98, 0.97, 0.96]})");
    ASSERT_EQ(st_pyr, 200) << pyr.dump();
    EXPECT_GT(pyr["kv_cache"]["capacity"].get<int64_t>(), uniform["kv_cache"]["capacity"].get<int64_t>());
    EXPECT_NE(pyr["kv_cache"]["policy"].get<std::string>().find("schedule=pyramid,ratio=0.6"),
              std::string::npos);

    const std::vector<std::pair<std::string, std::string>> refused = {
        {R"({"policy": "h2o", "budget": 12, "shares": [1, 2]})", "20 units"},
        {R"({"policy": "h2o", "budget": 12, "shares": "1/2"})", "non-empty array of numbers"},
        {R"({"policy": "h2o", "budget": 12, "shares": [1, "2"]})", "kv_cache.shares[1]"},
        {R"({"policy": "h2o", "budget": 12, "shares": [1, -2]})", "kv_cache.shares[1] must be a number > 0"},
        {R"({"policy": "h2o", "budget": 12, "recents": [0.5, 1.5, 0, 0, 0]})", "kv_cache.recents[1]"},
        {R"({"policy": "h2o", "budget": 12, "decays": [1, 1, 0, 1, 1]})", "kv_cache.decays[2]"},
        {R"({"policy": "h2o", "budget": 12, "recents": [0.5]})", "recents"},
        {R"({"policy": "h2o", "budget": 12, "schedule": "cone"})", "cone"},
        {R"({"policy": "h2o", "budget": 12, "ratio": -0.1})", "kv_cache.ratio"},
        {R"({"policy": "h2o", "budget": 12, "ratio": 1})", "kv_cache.ratio must be in [0, 1)"},
    };
    for (const auto& [kv, says] : refused) {
        const auto [status, body] = post(kv);
        EXPECT_EQ(status, 400) << kv << ": " << body.dump();
        EXPECT_NE(body["error"]["message"].get<std::string>().find(says), std::string::npos)
            << kv << ": " << body.dump();
        EXPECT_EQ(body["error"]["type"], "invalid_request_error") << kv;
    }
}

TEST(Server, StreamConcatenatesToTheSameText) {
    const std::string expected = solo_text("Once upon a time", "full", 50);
    test_server s(small_params());
    ASSERT_NE(s.srv, nullptr);
    auto c = s.client();
    auto res =
        c.Post("/v1/completions", completion_body("Once upon a time", 50, "null", true), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200);
    EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
    bool done = false;
    json last;
    EXPECT_EQ(stream_text(res->body, &done, &last), expected);
    EXPECT_TRUE(done);
    EXPECT_FALSE(last["choices"][0]["finish_reason"].is_null());
    EXPECT_TRUE(last.contains("usage"));
}

TEST(Server, ConcurrentRequestsWithTheirOwnPoliciesGetTheirSoloText) {
    const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "Tom and Sue", "One day"};
    const std::vector<std::pair<std::string, std::string>> kvs = {
        {"full", R"({"policy": "full"})"},
        {"h2o:budget=12,recent=4", R"({"policy": "h2o", "budget": 12, "recent": 4})"},
        {"window:budget=10", R"({"policy": "window", "budget": 10})"},
        {"streaming:budget=12,sinks=2", R"({"policy": "streaming", "budget": 12, "sinks": 2})"},
        {"tova:budget=14", R"({"policy": "tova", "budget": 14})"},
        {"h2o:budget=0.3,decay=0.95,granularity=layer",
         R"({"policy": "h2o:budget=0.3,decay=0.95,granularity=layer"})"},
    };
    struct job {
        std::string body, expected, got;
        int status = 0;
    };
    std::vector<job> jobs;
    for (size_t i = 0; i < 12; ++i) {
        const auto& kv = kvs[i % kvs.size()];
        const std::string& prompt = prompts[i % prompts.size()];
        const int n = 30 + static_cast<int>(i) * 3;
        jobs.push_back(
            {completion_body(prompt, n, kv.second, i % 2 == 1), solo_text(prompt, kv.first, n), {}, 0});
    }
    test_server s(small_params(5, 16));
    ASSERT_NE(s.srv, nullptr);
    std::vector<std::thread> threads;
    for (auto& jb : jobs) {
        threads.emplace_back([&s, &jb] {
            auto c = s.client();
            auto res = c.Post("/v1/completions", jb.body, "application/json");
            if (!res) return;
            jb.status = res->status;
            if (res->get_header_value("Content-Type") == "text/event-stream") {
                bool done = false;
                jb.got = stream_text(res->body, &done);
            } else {
                jb.got = json::parse(res->body)["choices"][0]["text"];
            }
        });
    }
    for (auto& t : threads) t.join();
    for (const auto& jb : jobs) {
        EXPECT_EQ(jb.status, 200) << jb.body;
        EXPECT_EQ(jb.got, jb.expected) << jb.body;
    }
    EXPECT_TRUE(s.wait_metric("h2okv_kv_pool_used_bytes", 0));  // published after the step that freed it
    EXPECT_GT(s.metrics().at("h2okv_kv_pool_peak_bytes"), 0);
    EXPECT_GE(s.metrics().at("h2okv_sequences_active_max"), 2);
}

TEST(Server, DisconnectCancelsTheSequenceAndFreesItsMemory) {
    test_server s(small_params());
    ASSERT_NE(s.srv, nullptr);
    auto c = s.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = completion_body("Once upon a time", 1000000, R"({"policy": "h2o", "budget": 32})", true, true);
    req.set_header("Content-Type", "application/json");
    int chunks = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    c.send(req, res, err);
    EXPECT_EQ(chunks, 3);
    EXPECT_TRUE(s.wait_metric("h2okv_requests_cancelled_total{cause=\"disconnect\"}", 1));
    EXPECT_TRUE(s.wait_metric("h2okv_sequences_active", 0));
    EXPECT_TRUE(s.wait_metric("h2okv_kv_pool_used_bytes", 0));
    EXPECT_TRUE(s.wait_metric("h2okv_requests_in_flight", 0));
}

TEST(Server, NonStreamingClientThatLeavesIsCancelledToo) {
    test_server s(small_params());
    ASSERT_NE(s.srv, nullptr);
    {
        auto c = s.client();
        c.set_read_timeout(0, 300000);  // gives up after 0.3 s and closes its socket
        auto res = c.Post("/v1/completions",
                          completion_body("Once upon a time", 1000000,
                                          R"({"policy": "window", "budget": 32})", false, true),
                          "application/json");
        EXPECT_FALSE(res);
    }
    EXPECT_TRUE(s.wait_metric("h2okv_requests_cancelled_total{cause=\"disconnect\"}", 1));
    EXPECT_TRUE(s.wait_metric("h2okv_kv_pool_used_bytes", 0));
}

TEST(Server, FullQueueAnswers503WithRetryAfter) {
    test_server s(small_params(1, 0));
    ASSERT_NE(s.srv, nullptr);
    std::atomic<bool> stop{false};
    std::thread runner([&] {
        auto c = s.client();
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/completions";
        req.body =
            completion_body("Once upon a time", 1000000, R"({"policy": "window", "budget": 16})", true, true);
        req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return !stop; };
        httplib::Response res;
        httplib::Error err = httplib::Error::Success;
        c.send(req, res, err);
    });
    ASSERT_TRUE(s.wait_metric("h2okv_sequences_active", 1));
    auto c = s.client();
    auto res = c.Post("/v1/completions", completion_body("Hi", 5), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 503);
    EXPECT_EQ(res->get_header_value("Retry-After"), "1");
    EXPECT_EQ(json::parse(res->body)["error"]["code"], "queue_full");
    stop = true;
    runner.join();
    EXPECT_TRUE(s.wait_metric("h2okv_requests_in_flight", 0));
}

TEST(Server, DeadlineAnswers504) {
    server_params p = small_params();
    p.timeout_seconds = 0.3;
    test_server s(std::move(p));
    ASSERT_NE(s.srv, nullptr);
    auto c = s.client();
    auto res = c.Post(
        "/v1/completions",
        completion_body("Once upon a time", 1000000, R"({"policy": "window", "budget": 16})", false, true),
        "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 504);
    EXPECT_EQ(json::parse(res->body)["error"]["code"], "deadline_exceeded");
    EXPECT_TRUE(s.wait_metric("h2okv_requests_cancelled_total{cause=\"deadline\"}", 1));
    EXPECT_TRUE(s.wait_metric("h2okv_kv_pool_used_bytes", 0));
}

TEST(Server, ShutdownFinishesWhatRunsThenRefuses) {
    const int n = 20000;  // long enough to be seen running
    const std::string expected = solo_text("Once upon a time", "window:budget=32", n, true);
    test_server s(small_params());
    ASSERT_NE(s.srv, nullptr);
    std::string got;
    int status = 0;
    std::thread client([&] {
        auto c = s.client();
        auto res = c.Post(
            "/v1/completions",
            completion_body("Once upon a time", n, R"({"policy": "window", "budget": 32})", false, true),
            "application/json");
        if (!res) return;
        status = res->status;
        got = json::parse(res->body)["choices"][0]["text"];
    });
    ASSERT_TRUE(s.wait_metric("h2okv_sequences_active", 1));
    s.srv->shutdown(600.0);
    client.join();
    EXPECT_EQ(status, 200);
    EXPECT_EQ(got, expected);
    auto c = s.client();
    EXPECT_FALSE(c.Get("/health")) << "no longer listening";
    std::lock_guard<std::mutex> lk(s.log_mu);
    EXPECT_EQ(s.log.back(), "stopped");
}

TEST(Server, ShutdownCancelsWhatOutlivesTheGrace) {
    test_server s(small_params());
    ASSERT_NE(s.srv, nullptr);
    int status = 0;
    std::thread client([&] {
        auto c = s.client();
        auto res = c.Post("/v1/completions",
                          completion_body("Once upon a time", 1000000,
                                          R"({"policy": "window", "budget": 16})", false, true),
                          "application/json");
        if (res) status = res->status;
    });
    ASSERT_TRUE(s.wait_metric("h2okv_sequences_active", 1));
    s.srv->shutdown(0.2);
    client.join();
    EXPECT_EQ(status, 503);
}

TEST(Server, RefusesUnboundedMemory) {
    server_params p = small_params();
    p.engine.kv_memory = 0;
    const auto& m = testing::bundled_stories();
    auto s = server::create(*m.model, *m.tok, std::move(p));
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message().find("--kv-memory 0 must be > 0"), std::string::npos);
}

}  // namespace
}  // namespace h2okv::serve
