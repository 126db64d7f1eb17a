// OpenAI request parsing on the bundled model: defaults, the kv_cache field over the server's flags, token
// prompts, chat prompts, every refusal naming its field; and the response shapes.
#include "h2okv/serve/openai.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_support.h"

namespace h2okv::serve {
namespace {

using json = nlohmann::json;

api_context make_context(const std::string& kv_spec = "full", int64_t kv_memory = int64_t{64} << 20) {
    const auto& m = testing::bundled_stories();
    api_context ctx;
    ctx.model = m.model.get();
    ctx.tok = m.tok.get();
    ctx.chat = chat_template::chatml;
    auto p = policy::params::parse(kv_spec);
    EXPECT_TRUE(p.ok()) << p.error().to_string();
    if (p.ok()) ctx.defaults.session.kv = *p;
    ctx.defaults.session.n_ctx = 256;
    ctx.kv_memory = kv_memory;
    ctx.make_seed = [] { return uint64_t{42}; };
    return ctx;
}

api_request parse_ok(endpoint kind, const std::string& body, const api_context& ctx) {
    parsed_request p = parse_request(kind, body, ctx);
    EXPECT_TRUE(p.request.has_value()) << body << "\n -> " << p.error.message;
    return p.request ? std::move(*p.request) : api_request{};
}

TEST(OpenAiRequest, CompletionDefaults) {
    const api_context ctx = make_context();
    const api_request r = parse_ok(endpoint::completions, R"({"prompt": "Once upon a time"})", ctx);
    EXPECT_EQ(r.engine.prompt, (std::vector<int32_t>{1, 403, 407, 261, 378}));
    // OpenAI's sampling defaults; the rest of the context (-c 256) for max_tokens.
    EXPECT_EQ(r.engine.generation.sampling.temperature, 1.0f);
    EXPECT_EQ(r.engine.generation.sampling.top_p, 1.0f);
    EXPECT_EQ(r.engine.generation.sampling.top_k, 0);
    EXPECT_EQ(r.engine.generation.sampling.seed, 42u);
    EXPECT_EQ(r.engine.generation.n_predict, 256 - 5);
    EXPECT_FALSE(r.stream);
    EXPECT_EQ(r.engine.session.kv.name, "full");
    EXPECT_GT(r.kv_footprint, 0);
}

TEST(OpenAiRequest, FieldsAndUnknownFieldsIgnored) {
    const api_context ctx = make_context();
    const api_request r =
        parse_ok(endpoint::completions,
                 R"({"prompt": [1, 403, 407], "max_tokens": 7, "temperature": 0, "top_p": 0.5,
                                       "top_k": 3, "seed": 18446744073709551615, "stop": ["\n", "The"],
                                       "stream": true, "stream_options": {"include_usage": true}, "echo": true,
                                       "ignore_eos": true, "frequency_penalty": 0.5, "whatever": {"x": [1]}})",
                 ctx);
    EXPECT_EQ(r.engine.prompt, (std::vector<int32_t>{1, 403, 407}));
    EXPECT_EQ(r.engine.generation.n_predict, 7);
    EXPECT_EQ(r.engine.generation.sampling.temperature, 0.0f);
    EXPECT_EQ(r.engine.generation.sampling.top_k, 3);
    EXPECT_EQ(r.engine.generation.sampling.seed, 18446744073709551615u);
    EXPECT_TRUE(r.engine.generation.ignore_eos);
    EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "The"}));
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.include_usage);
    EXPECT_EQ(r.echo, "Once upon");
    // The prefill chunk is capped at the prompt, as the scheduler caps it.
    EXPECT_EQ(r.engine.session.prefill_chunk, 3);
}

TEST(OpenAiRequest, KvCacheOverTheServerFlags) {
    const api_context ctx = make_context("h2o:budget=0.5,recent=4");
    auto kv = [&](const std::string& field) {
        return parse_ok(endpoint::completions,
                        R"({"prompt": "Hi", "max_tokens": 40, "kv_cache": )" + field + "}", ctx)
            .engine.session;
    };
    EXPECT_EQ(kv("null").kv.to_string(), "h2o:budget=0.5,recent=4");
    EXPECT_EQ(kv(R"({"budget": 0.25})").kv.to_string(), "h2o:budget=0.25,recent=4");
    EXPECT_EQ(kv(R"({"budget": 6, "sinks": 1})").kv.to_string(), "h2o:budget=6,recent=4,sinks=1");
    EXPECT_EQ(kv(R"({"budget": "6"})").kv.to_string(), "h2o:budget=6,recent=4");
    // Another policy keeps the budget and granularity but not the flags' h2o parameters.
    EXPECT_EQ(kv(R"({"policy": "window"})").kv.to_string(), "window:budget=0.5");
    EXPECT_EQ(kv(R"({"policy": "tova:budget=5,granularity=layer"})").kv.to_string(),
              "tova:budget=5,granularity=layer");
    EXPECT_EQ(kv(R"({"decay": 0.9, "granularity": "model"})").kv.to_string(),
              "h2o:budget=0.5,recent=4,decay=0.9,granularity=model");
    EXPECT_EQ(kv(R"({"type": "f32"})").kv_type, kv::kv_type::f32);
    EXPECT_EQ(kv(R"({"positions": "rolling"})").kv.to_string(), "h2o:budget=0.5,recent=4,positions=rolling");
}

TEST(OpenAiRequest, ChatPromptIsTheRenderedTemplate) {
    const api_context ctx = make_context();
    const api_request r = parse_ok(endpoint::chat,
                                   R"({"messages": [{"role": "developer", "content": "Be kind."},
                         {"role": "user", "content": [{"type": "text", "text": "Tell "}, {"type": "text", "text": "a story"}]}],
            "max_completion_tokens": 9})",
                                   ctx);
    auto expected = ctx.tok->encode(
        "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nTell a "
        "story<|im_end|>\n<|im_start|>assistant\n",
        true, true);
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ(r.engine.prompt, *expected);
    EXPECT_EQ(r.engine.generation.n_predict, 9);
}

struct refusal {
    endpoint kind;
    std::string body;
    std::string param;  // the error's param
    std::string text;   // a part of the message
    std::string code = {};
};

TEST(OpenAiRequest, RefusalsNameTheField) {
    const api_context ctx = make_context("full", int64_t{1} << 20);
    const auto C = endpoint::completions;
    const std::vector<refusal> cases = {
        {C, "", "", "not valid JSON", "invalid_json"},
        {C, "{\"prompt\": \"a\"", "", "not valid JSON", "invalid_json"},
        {C, "[1, 2]", "", "must be a JSON object, got array", "invalid_json"},
        {C, std::string(100, '[') + std::string(100, ']'), "", "nests deeper than 64 levels"},
        {C, "{\"prompt\": \"\xff\"}", "", "not valid JSON", "invalid_json"},
        {C, R"({"max_tokens": 5})", "prompt", "prompt is required"},
        {C, R"({"prompt": 5})", "prompt", "must be a string or a non-empty array of token ids, got 5"},
        {C, R"({"prompt": []})", "prompt", "non-empty array"},
        {C, R"({"prompt": [1, 512]})", "prompt", "prompt[1] = 512 is not a token id in [0, 512)"},
        {C, R"({"prompt": [1, -3]})", "prompt", "prompt[1] = -3"},
        {C, R"({"prompt": [1, 2.5]})", "prompt", "prompt[1] = 2.5"},
        {C, R"({"prompt": ["a", "b"]})", "prompt", "holds 2 prompts"},
        {C, R"({"prompt": "a", "max_tokens": "10"})", "max_tokens",
         "must be an integer in [0, 2147483647], got \"10\" (a string)"},
        {C, R"({"prompt": "a", "max_tokens": -1})", "max_tokens", "got -1"},
        {C, R"({"prompt": "a", "max_tokens": 1e300})", "max_tokens", "got 1e+300"},
        {C, R"({"prompt": "a", "max_tokens": 2.5})", "max_tokens", "got 2.5"},
        {C, R"({"prompt": "a", "max_tokens": 99999999999999999999999})", "max_tokens", "[0, 2147483647]"},
        {C, R"({"prompt": "a", "temperature": -0.1})", "temperature", "must be a number in [0, 2]"},
        {C, R"({"prompt": "a", "temperature": true})", "temperature", "got true (a boolean)"},
        {C, R"({"prompt": "a", "top_p": 0})", "top_p", "must be a number in (0, 1]"},
        {C, R"({"prompt": "a", "top_k": -1})", "top_k", "got -1"},
        {C, R"({"prompt": "a", "seed": -5})", "seed", "got -5"},
        {C, R"({"prompt": "a", "stop": 3})", "stop", "must be a string or an array of strings"},
        {C, R"({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]})", "stop", "has 5 strings; at most 4"},
        {C, R"({"prompt": "a", "stop": [""]})", "stop", "must not be empty"},
        {C, R"({"prompt": "a", "stream": "yes"})", "stream", "must be true or false"},
        {C, R"({"prompt": "a", "n": 2})", "n", "one choice per request"},
        {C, R"({"prompt": "a", "logprobs": 2})", "logprobs", "not supported", "unsupported_parameter"},
        {C, R"({"prompt": "a", "kv_cache": "h2o"})", "kv_cache", "must be an object"},
        {C, R"({"prompt": "a", "kv_cache": {"policy": "lru"}})", "kv_cache.policy",
         "unknown policy 'lru'; valid:", "invalid_kv_cache"},
        {C, R"({"prompt": "a", "kv_cache": {"policy": "h2o", "budget": 0}})", "kv_cache.budget",
         "must be >= 1"},
        {C, R"({"prompt": "a", "kv_cache": {"policy": "h2o", "budget": 1.5}})", "kv_cache.budget",
         "in (0, 1]"},
        {C, R"({"prompt": "a", "kv_cache": {"policy": "h2o", "budget": 4, "recent": 3, "sinks": 1}})",
         "kv_cache", "kv_cache:", "invalid_kv_cache"},
        {C, R"({"prompt": "a", "kv_cache": {"policy": "h2o"}})", "kv_cache", "budget"},
        {C, R"({"prompt": "a", "kv_cache": {"decay": 0}})", "kv_cache.decay", "(0, 1]"},
        {C, R"({"prompt": "a", "kv_cache": {"granularity": "row"}})", "kv_cache.granularity",
         "unknown granularity"},
        {C, R"({"prompt": "a", "kv_cache": {"type": "int4"}})", "kv_cache.type", "int4"},
        {C, R"({"prompt": "a", "kv_cache": {"positions": "text"}})", "kv_cache.positions",
         "unknown position mode 'text'; valid: original, rolling", "invalid_kv_cache"},
        {C, R"({"prompt": "a", "kv_cache": {"type": "q8_0"}})", "kv_cache", "q8_0"},
        {C, R"({"prompt": "a", "kv_cache": {"budgets": 3}})", "kv_cache.budgets",
         "no field 'budgets'; valid:"},
        {C, R"({"prompt": "a", "max_tokens": 300})", "max_tokens", "under the `full` kv_cache policy",
         "context_length_exceeded"},
        {C, R"({"prompt": "a", "max_tokens": 100000, "kv_cache": {"policy": "h2o", "budget": 0.9}})",
         "kv_cache", "more than the server's whole KV memory pool", "kv_cache_too_large"},
        {endpoint::chat, R"({"messages": []})", "messages", "non-empty array"},
        {endpoint::chat, R"({"messages": [{"content": "x"}]})", "messages[0].role", "required"},
        {endpoint::chat, R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role",
         "'wizard' is not supported"},
        {endpoint::chat, R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content", "got 5"},
        {endpoint::chat, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
         "messages[0].content[0].type", "only \"text\" parts"},
        {endpoint::chat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})", "logprobs",
         "not supported"},
        {endpoint::chat,
         R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", "tools",
         "not supported"},
    };
    for (const auto& c : cases) {
        const parsed_request p = parse_request(c.kind, c.body, ctx);
        ASSERT_FALSE(p.request.has_value()) << c.body;
        EXPECT_EQ(p.error.http_status, 400) << c.body;
        EXPECT_EQ(p.error.param, c.param) << c.body << " -> " << p.error.message;
        EXPECT_NE(p.error.message.find(c.text), std::string::npos) << c.body << " -> " << p.error.message;
        if (!c.code.empty()) {
            EXPECT_EQ(p.error.code, c.code) << c.body;
        }
        const auto j = p.error.to_json();
        EXPECT_EQ(j["error"]["message"], p.error.message);
        EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    }
}

TEST(OpenAiRequest, ChatWithoutTemplate) {
    api_context ctx = make_context();
    ctx.chat.reset();
    ctx.chat_unavailable = "the model has no chat template";
    const parsed_request p =
        parse_request(endpoint::chat, R"({"messages": [{"role": "user", "content": "x"}]})", ctx);
    ASSERT_FALSE(p.request.has_value());
    EXPECT_EQ(p.error.message, "the model has no chat template");
    EXPECT_EQ(p.error.code, "chat_template_missing");
}

engine::sequence_result result_of(engine::finish_reason why) {
    engine::sequence_result res;
    res.reason = why;
    res.tokens = {10, 11, 12};
    res.prompt_tokens = 5;
    res.policy = "h2o:budget=4,recent=2,sinks=0";
    res.kv_capacity = 9;
    res.kv_bytes = 1000;
    res.kv_footprint = 1200;
    res.evictions = 17;
    return res;
}

TEST(OpenAiResponse, Shapes) {
    const api_context ctx = make_context();
    const response_info info{"cmpl-3", 1700000000, "stories260K"};
    api_request r = parse_ok(endpoint::completions, R"({"prompt": "Hi", "max_tokens": 3})", ctx);
    auto j = response_json(r, info, " there", result_of(engine::finish_reason::length));
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["id"], "cmpl-3");
    EXPECT_EQ(j["choices"][0]["text"], " there");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(j["usage"]["total_tokens"], 8);
    EXPECT_EQ(j["kv_cache"]["evictions"], 17);
    EXPECT_EQ(j["kv_cache"]["kv_bytes"], 1000);
    EXPECT_EQ(j.begin().key(), "id") << "OpenAI's field order";

    api_request c = parse_ok(endpoint::chat, R"({"messages": [{"role": "user", "content": "x"}]})", ctx);
    j = response_json(c, info, "yes", result_of(engine::finish_reason::end_of_generation));
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(j["choices"][0]["message"]["content"], "yes");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(role_chunk_json(c, info)["choices"][0]["delta"]["role"], "assistant");
    EXPECT_EQ(text_chunk_json(c, info, "ab")["choices"][0]["delta"]["content"], "ab");
    EXPECT_EQ(text_chunk_json(c, info, "ab")["object"], "chat.completion.chunk");
    const auto last = final_chunk_json(c, info, result_of(engine::finish_reason::stop));
    EXPECT_TRUE(last["choices"][0]["delta"].empty());
    EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(usage_chunk_json(c, info, result_of(engine::finish_reason::stop))["choices"].size(), 0u);
    EXPECT_EQ(sse_event(nlohmann::ordered_json{{"a", 1}}), "data: {\"a\":1}\n\n");
}

}  // namespace
}  // namespace h2okv::serve
