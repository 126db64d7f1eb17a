// OpenAI's completion API over the batch scheduler: a request body becomes an engine::request, every field
// checked where it enters (type, range, the KV policy's rules, the context, the KV memory pool), and a
// sequence's result becomes the response (whole, or as server-sent-event chunks). Errors take OpenAI's
// shape {"error": {"message", "type", "param", "code"}} and name the field, the value seen and what was
// expected. Fields OpenAI defines that h2okv cannot honour (n > 1, logprobs, tools) are refused; unknown
// fields are ignored, as OpenAI does.
//
//   serve::parsed_request p = serve::parse_request(serve::endpoint::chat, body, ctx);
//   if (!p.request) return reply(p.error.http_status, p.error.to_json());
//   ... submit p.request->engine to the scheduler, collect the text through a serve::text_stream ...
//   reply(200, serve::response_json(*p.request, info, text, result));
//
// Extension fields: `kv_cache` {"policy", "budget", "recent", "sinks", "decay", "granularity", "positions",
// "type", and clause 11's "schedule", "ratio", "shares", "recents", "decays" (arrays of numbers)} picks
// the request's KV cache (the server's --kv-* flags fill what it leaves out; naming another policy drops the
// flags' recent, sinks and decay, which belong to the flags' policy; "policy" may also be a whole spec such
// as "h2o:budget=0.2,recent=8"); `ignore_eos` keeps generating past end-of-generation tokens. Responses add
// `kv_cache` (the resolved policy, slots, bytes, evictions), `timings` and `seed` next to `usage`.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "h2okv/engine/scheduler.h"
#include "h2okv/engine/session.h"
#include "h2okv/model/model.h"
#include "h2okv/serve/chat_template.h"
#include "h2okv/tokenizer/tokenizer.h"

namespace h2okv::serve {

enum class endpoint { completions, chat };
const char* endpoint_name(endpoint e);  // "completions", "chat.completions"

struct api_error {
    int http_status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // the field at fault ("kv_cache.budget"); empty: null
    std::string code;   // a stable identifier ("context_length_exceeded"); empty: null
    nlohmann::ordered_json to_json() const;
};

// What a request takes where it says nothing: the server's flags.
struct request_defaults {
    engine::session_params session;  // --kv-* flags and -c
    int max_tokens = -1;             // -n; -1: the rest of the context
    bool parse_special = false;      // --special: control-token text in completion prompts becomes tokens
};

// What parsing needs to know about the server; every pointer outlives the parse.
struct api_context {
    const model::model* model = nullptr;
    const tokenizer::tokenizer* tok = nullptr;
    std::optional<chat_template> chat;
    std::string chat_unavailable;  // why there is no template (chat requests are refused with it)
    request_defaults defaults;
    int64_t kv_memory = 0;                // the pool's bytes; a request whose cache needs more is refused
    std::function<uint64_t()> make_seed;  // the seed of a request that gives none (null: 0)
};

struct api_request {
    endpoint kind = endpoint::completions;
    engine::request engine;  // prompt (BOS included), session, generation; is_end and on_token left null
    std::vector<std::string> stop;
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
    std::string echo;            // completions with `echo`: the prompt's text, sent before the completion
    int64_t kv_footprint = 0;    // what the KV memory pool will charge
};

struct parsed_request {
    std::optional<api_request> request;
    api_error error;  // when there is no request
};
parsed_request parse_request(endpoint kind, std::string_view body, const api_context& ctx);

// What names a response: "cmpl-7" or "chatcmpl-7", its Unix time and the served model's name.
struct response_info {
    std::string id;
    int64_t created = 0;
    std::string model;
};

// OpenAI's finish_reason: "length" when max_tokens ran out, "stop" at an end-of-generation token or a stop
// string.
const char* openai_finish_reason(engine::finish_reason r);

// The whole response of a finished request; `text` is the completion (echo not included).
nlohmann::ordered_json response_json(const api_request& r, const response_info& info, const std::string& text,
                                     const engine::sequence_result& res);
// Streaming: the chunk that opens a chat stream (the assistant's role), one per piece of text, the last one
// (finish_reason, usage, kv_cache, timings) and, with include_usage, OpenAI's usage-only chunk.
nlohmann::ordered_json role_chunk_json(const api_request& r, const response_info& info);
nlohmann::ordered_json text_chunk_json(const api_request& r, const response_info& info,
                                       std::string_view text);
nlohmann::ordered_json final_chunk_json(const api_request& r, const response_info& info,
                                        const engine::sequence_result& res);
nlohmann::ordered_json usage_chunk_json(const api_request& r, const response_info& info,
                                        const engine::sequence_result& res);
// "data: <json>\n\n"
std::string sse_event(const nlohmann::ordered_json& j);

}  // namespace h2okv::serve
