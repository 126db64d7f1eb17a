#include "h2okv/serve/openai.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <utility>

#include "h2okv/kv/memory_pool.h"

namespace h2okv::serve {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;  // responses keep OpenAI's field order
using opt_error = std::optional<api_error>;

constexpr int k_max_depth = 64;           // JSON nesting a request may have
constexpr size_t k_max_stops = 4;         // OpenAI's limit
constexpr size_t k_max_stop_bytes = 256;  // each stop string is held back while it may still match
constexpr int64_t k_max_int = std::numeric_limits<int32_t>::max();

api_error bad(std::string param, std::string message, std::string code = {}) {
    api_error e;
    e.message = std::move(message);
    e.param = std::move(param);
    e.code = std::move(code);
    return e;
}

// A value as the error shows it: short JSON text and, for the unexpected kinds, what kind it is.
std::string shown(const json& v) {
    std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
    if (s.size() > 40) s = s.substr(0, 37) + "...";
    if (v.is_string() || v.is_boolean()) return fmt::format("{} (a {})", s, v.type_name());
    if (v.is_object() || v.is_array()) return fmt::format("{} (an {})", s, v.type_name());
    return s;
}

const json* field(const json& obj, const char* key) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;  // null means "not given", as OpenAI reads it
    return &*it;
}

opt_error read_bool(const json& obj, const char* key, const std::string& param, bool& out) {
    const json* v = field(obj, key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean())
        return bad(param, fmt::format("{} must be true or false, got {}", param, shown(*v)));
    out = v->get<bool>();
    return std::nullopt;
}

opt_error read_string(const json& obj, const char* key, const std::string& param,
                      std::optional<std::string>& out) {
    const json* v = field(obj, key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) return bad(param, fmt::format("{} must be a string, got {}", param, shown(*v)));
    out = v->get<std::string>();
    return std::nullopt;
}

// An integer in [lo, hi]; a float with an integral value counts (JSON has one number type).
opt_error read_int(const json& obj, const char* key, const std::string& param, int64_t lo, int64_t hi,
                   std::optional<int64_t>& out) {
    const json* v = field(obj, key);
    if (v == nullptr) return std::nullopt;
    const auto range_error = [&] {
        return bad(param, fmt::format("{} must be an integer in [{}, {}], got {}", param, lo, hi, shown(*v)));
    };
    if (v->is_number_unsigned()) {
        const auto u = v->get<uint64_t>();
        if (u > static_cast<uint64_t>(hi)) return range_error();
        out = static_cast<int64_t>(u);
    } else if (v->is_number_integer()) {
        out = v->get<int64_t>();
    } else if (v->is_number_float()) {
        const double d = v->get<double>();
        // Outside +-2^62 a double is either out of every range used here or not exact.
        if (!std::isfinite(d) || std::floor(d) != d || std::fabs(d) > 4.6e18) return range_error();
        out = static_cast<int64_t>(d);
    } else {
        return range_error();
    }
    if (*out < lo || *out > hi) return range_error();
    return std::nullopt;
}

opt_error read_number(const json& obj, const char* key, const std::string& param, double lo, double hi,
                      bool lo_open, std::optional<double>& out) {
    const json* v = field(obj, key);
    if (v == nullptr) return std::nullopt;
    const double d = v->is_number() ? v->get<double>() : std::numeric_limits<double>::quiet_NaN();
    if (!std::isfinite(d) || (lo_open ? d <= lo : d < lo) || d > hi) {
        return bad(param, fmt::format("{} must be a number in {}{}, {}], got {}", param, lo_open ? "(" : "[",
                                      lo, hi, shown(*v)));
    }
    out = d;
    return std::nullopt;
}

// Parses with a depth limit: nesting is what a hostile body uses to make a parser work hardest.
struct too_deep {};

opt_error parse_body(std::string_view body, json& out) {
    try {
        out = json::parse(body, [](int depth, json::parse_event_t, json&) {
            if (depth > k_max_depth) throw too_deep{};
            return true;
        });
    } catch (const too_deep&) {
        return bad({}, fmt::format("the request body nests deeper than {} levels", k_max_depth));
    } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers past double's range
        std::string what = e.what();
        if (const size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
        return bad({}, fmt::format("the request body is not valid JSON: {}", what), "invalid_json");
    }
    if (!out.is_object()) {
        return bad({}, fmt::format("the request body must be a JSON object, got {}", out.type_name()),
                   "invalid_json");
    }
    return std::nullopt;
}

opt_error unsupported(const json& obj, const char* key, const std::string& why) {
    const json* v = field(obj, key);
    if (v == nullptr) return std::nullopt;
    return bad(key, fmt::format("{} {} is not supported: {}", key, shown(*v), why), "unsupported_parameter");
}

// A budget as JSON: a string reads as the CLI reads it; a number with a fraction part (JSON's floats, 0.2 or
// 1.0) is a fraction of the run, an integer a token count.
result<policy::budget_spec> budget_of(const json& b) {
    if (b.is_string()) return policy::budget_spec::parse(b.get<std::string>());
    if (b.is_number_integer() || b.is_number_unsigned()) return policy::budget_spec::parse(b.dump());
    if (b.is_number_float()) {
        const double f = b.get<double>();
        if (f > 0.0 && f <= 1.0) return policy::budget_spec::of_length(f);
        return invalid_argument("budget fraction {} must be in (0, 1] (a share of the run's length)",
                                b.dump());
    }
    return invalid_argument("budget must be a token count like 256 or a fraction like 0.2, got {}", shown(b));
}

// kv_cache.shares / recents / decays (clause 11): a non-empty array of numbers, each in (lo, hi] when
// lo_open (shares: > 0; decays: (0, 1]) else in [lo, hi) (recents: [0, 1)). Their count is the session's
// to check (it knows the units), as for the same lists in a policy spec.
opt_error read_unit_list(const json& kv, const char* key, double lo, bool lo_open, double hi,
                         std::vector<double>& out) {
    const json* v = field(kv, key);
    if (v == nullptr) return std::nullopt;
    const std::string param = std::string("kv_cache.") + key;
    if (!v->is_array() || v->empty())
        return bad(param, fmt::format("{} must be a non-empty array of numbers, got {}", param, shown(*v)));
    std::vector<double> values;
    for (size_t i = 0; i < v->size(); ++i) {
        const json& x = (*v)[i];
        const double d = x.is_number() ? x.get<double>() : std::nan("");
        const bool in = std::isfinite(d) && (lo_open ? (d > lo && d <= hi) : (d >= lo && d < hi));
        if (!x.is_number() || !in) {
            const std::string range = std::isinf(hi) ? fmt::format("> {}", lo)
                                                     : fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", lo,
                                                                   hi, lo_open ? "]" : ")");
            return bad(param, fmt::format("{}[{}] must be a number {}, got {}", param, i, range, shown(x)));
        }
        values.push_back(d);
    }
    out = std::move(values);
    return std::nullopt;
}

// kv_cache.KEY: a name that `parse` turns into out (a granularity, position mode, schedule, KV type); its
// refusal becomes the field's 400. Absent: out (a T or a std::optional<T>) is left as it is.
template <typename T, typename Out>
opt_error read_named(const json& kv, const char* key, result<T> (*parse)(std::string_view), Out& out) {
    const std::string param = std::string("kv_cache.") + key;
    std::optional<std::string> name;
    if (auto e = read_string(kv, key, param, name)) return e;
    if (!name) return std::nullopt;
    auto parsed = parse(*name);
    if (!parsed.ok()) return bad(param, parsed.error().message(), "invalid_kv_cache");
    out = *parsed;
    return std::nullopt;
}

// kv_cache: the request's policy over the server's flags (see the header for the inheritance rule).
opt_error read_kv_cache(const json& body, engine::session_params& sp) {
    const json* kvp = field(body, "kv_cache");
    if (kvp == nullptr) return std::nullopt;
    if (!kvp->is_object())
        return bad("kv_cache", fmt::format("kv_cache must be an object, got {}", shown(*kvp)));
    const json& kv = *kvp;
    static constexpr const char* k_keys[] = {"policy",      "budget",    "recent", "sinks",    "decay",
                                             "granularity", "positions", "type",   "schedule", "ratio",
                                             "shares",      "recents",   "decays"};
    for (const auto& [key, value] : kv.items()) {
        bool known = false;
        for (const char* k : k_keys) known = known || key == k;
        if (!known) {
            return bad("kv_cache." + key,
                       fmt::format("kv_cache has no field '{}'; valid: policy, budget, recent, sinks, decay, "
                                   "granularity, positions, type, schedule, ratio, shares, recents, decays",
                                   key));
        }
    }
    policy::params& p = sp.kv;
    std::optional<std::string> name;
    if (auto e = read_string(kv, "policy", "kv_cache.policy", name)) return e;
    if (name) {
        auto parsed = policy::params::parse(*name);
        if (!parsed.ok()) return bad("kv_cache.policy", parsed.error().message(), "invalid_kv_cache");
        if (name->find(':') != std::string::npos) {
            p = *parsed;
        } else if (parsed->name != p.name) {
            p.name = parsed->name;
            p.recent.reset();
            p.sinks.reset();
            p.decay.reset();
        }
    }
    if (const json* b = field(kv, "budget")) {
        auto spec = budget_of(*b);
        if (!spec.ok())
            return bad("kv_cache.budget", "kv_cache." + spec.error().message(), "invalid_kv_cache");
        p.budget = *spec;
    }
    constexpr int64_t k_big = int64_t{1} << 53;
    std::optional<int64_t> recent, sinks;
    if (auto e = read_int(kv, "recent", "kv_cache.recent", 0, k_big, recent)) return e;
    if (auto e = read_int(kv, "sinks", "kv_cache.sinks", 0, k_big, sinks)) return e;
    if (recent) p.recent = recent;
    if (sinks) p.sinks = sinks;
    std::optional<double> decay;
    if (auto e = read_number(kv, "decay", "kv_cache.decay", 0.0, 1.0, true, decay)) return e;
    if (decay) p.decay = decay;
    if (auto e = read_named(kv, "granularity", policy::parse_granularity, p.gran)) return e;
    if (auto e = read_named(kv, "positions", policy::parse_position_mode, p.positions)) return e;
    if (auto e = read_named(kv, "schedule", policy::parse_budget_schedule, p.schedule)) return e;
    std::optional<double> ratio;
    if (auto e = read_number(kv, "ratio", "kv_cache.ratio", 0.0, 1.0, false, ratio)) return e;
    if (ratio) {
        if (*ratio >= 1.0)
            return bad("kv_cache.ratio", fmt::format("kv_cache.ratio must be in [0, 1), got {}", *ratio));
        p.ratio = ratio;
    }
    constexpr double k_inf = std::numeric_limits<double>::infinity();
    if (auto e = read_unit_list(kv, "shares", 0.0, true, k_inf, p.shares)) return e;
    if (auto e = read_unit_list(kv, "recents", 0.0, false, 1.0, p.recents)) return e;
    if (auto e = read_unit_list(kv, "decays", 0.0, true, 1.0, p.decays)) return e;
    if (auto e = read_named(kv, "type", kv::parse_kv_type, sp.kv_type)) return e;
    return std::nullopt;
}

opt_error read_stop(const json& body, std::vector<std::string>& out) {
    const json* v = field(body, "stop");
    if (v == nullptr) return std::nullopt;
    const auto add = [&](const json& s) -> opt_error {
        if (!s.is_string())
            return bad("stop", fmt::format("stop must be a string or an array of strings, got {}", shown(s)));
        const auto& text = s.get_ref<const std::string&>();
        if (text.empty()) return bad("stop", "stop strings must not be empty");
        if (text.size() > k_max_stop_bytes) {
            return bad("stop", fmt::format("a stop string has {} bytes; at most {} are accepted", text.size(),
                                           k_max_stop_bytes));
        }
        out.push_back(text);
        return std::nullopt;
    };
    if (!v->is_array()) return add(*v);
    if (v->size() > k_max_stops)
        return bad("stop",
                   fmt::format("stop has {} strings; at most {} are accepted", v->size(), k_max_stops));
    for (const auto& s : *v) {
        if (auto e = add(s)) return e;
    }
    return std::nullopt;
}

opt_error read_token_ids(const json& arr, const tokenizer::tokenizer& tok, std::vector<int32_t>& out) {
    for (size_t i = 0; i < arr.size(); ++i) {
        const json& t = arr[i];
        const bool integral = t.is_number_integer() || t.is_number_unsigned();
        const int64_t id = integral && t.is_number_integer() ? t.get<int64_t>() : -1;
        if (!integral || id < 0 || id >= tok.n_vocab()) {
            return bad("prompt", fmt::format("prompt[{}] = {} is not a token id in [0, {})", i, shown(t),
                                             tok.n_vocab()));
        }
        out.push_back(static_cast<int32_t>(id));
    }
    return std::nullopt;
}

// The prompt of a completion: a string, token ids, or a one-element array of either.
opt_error read_prompt(const json& body, const api_context& ctx, std::vector<int32_t>& ids,
                      std::string& text) {
    const json* v = field(body, "prompt");
    if (v == nullptr) return bad("prompt", "prompt is required (a string or an array of token ids)");
    const json* p = v;
    if (v->is_array() && v->size() == 1 && ((*v)[0].is_string() || (*v)[0].is_array())) p = &(*v)[0];
    if (p->is_string()) {
        text = p->get<std::string>();
        auto enc = ctx.tok->encode(text, /*add_special=*/true, ctx.defaults.parse_special);
        if (!enc.ok()) return bad("prompt", enc.error().message());
        ids = std::move(enc).value();
        return std::nullopt;
    }
    if (p->is_array() && !p->empty() && !(*p)[0].is_string() && !(*p)[0].is_array()) {
        if (auto e = read_token_ids(*p, *ctx.tok, ids)) return e;
        // For echo: the text as the client would have written it (no BOS, so no dummy-prefix space).
        const size_t from = !ids.empty() && ids[0] == ctx.tok->bos() ? 1 : 0;
        text = ctx.tok->decode(std::span<const int32_t>(ids).subspan(from));
        return std::nullopt;
    }
    if (p->is_array() && p->size() > 1 && ((*p)[0].is_string() || (*p)[0].is_array()))
        return bad("prompt", fmt::format("prompt holds {} prompts; send one prompt per request", p->size()));
    return bad("prompt",
               fmt::format("prompt must be a string or a non-empty array of token ids, got {}", shown(*v)));
}

opt_error read_messages(const json& body, std::vector<chat_message>& out) {
    const json* v = field(body, "messages");
    if (v == nullptr || !v->is_array() || v->empty()) {
        return bad("messages",
                   fmt::format("messages must be a non-empty array of {{\"role\", \"content\"}} objects{}",
                               v == nullptr ? "" : ", got " + shown(*v)));
    }
    for (size_t i = 0; i < v->size(); ++i) {
        const json& m = (*v)[i];
        const std::string at = fmt::format("messages[{}]", i);
        if (!m.is_object()) return bad(at, fmt::format("{} must be an object, got {}", at, shown(m)));
        std::optional<std::string> role;
        if (auto e = read_string(m, "role", at + ".role", role)) return e;
        if (!role) return bad(at + ".role", at + ".role is required");
        if (*role == "developer") role = "system";  // OpenAI's newer name for the system turn
        if (*role != "system" && *role != "user" && *role != "assistant") {
            return bad(at + ".role",
                       fmt::format("{}.role '{}' is not supported; valid: system, developer, user, assistant",
                                   at, *role));
        }
        chat_message msg{*role, {}};
        if (const json* c = field(m, "content")) {
            if (c->is_string()) {
                msg.content = c->get<std::string>();
            } else if (c->is_array()) {
                // Text parts joined in order; other kinds of content cannot reach a text model.
                for (size_t j = 0; j < c->size(); ++j) {
                    const json& part = (*c)[j];
                    const std::string pat = fmt::format("{}.content[{}]", at, j);
                    std::optional<std::string> type, text;
                    if (!part.is_object())
                        return bad(pat, fmt::format("{} must be an object, got {}", pat, shown(part)));
                    if (auto e = read_string(part, "type", pat + ".type", type)) return e;
                    if (type != "text") {
                        return bad(pat + ".type",
                                   fmt::format("{}.type {} is not supported; only \"text\" parts are", pat,
                                               type ? "'" + *type + "'" : "(missing)"));
                    }
                    if (auto e = read_string(part, "text", pat + ".text", text)) return e;
                    msg.content += text.value_or("");
                }
            } else {
                return bad(at + ".content",
                           fmt::format("{}.content must be a string or an array of text parts, got {}", at,
                                       shown(*c)));
            }
        } else if (*role != "assistant") {
            return bad(at + ".content", at + ".content is required");
        }
        out.push_back(std::move(msg));
    }
    return std::nullopt;
}

opt_error parse_into(endpoint kind, const json& body, const api_context& ctx, api_request& r) {
    r.kind = kind;
    // What h2okv cannot do is refused rather than silently not done.
    std::optional<int64_t> n;
    if (auto e = read_int(body, "n", "n", 1, 1, n)) {
        e->message += " (one choice per request)";
        return e;
    }
    if (kind == endpoint::completions) {
        if (auto e = unsupported(body, "logprobs", "h2okv returns no log-probabilities")) return e;
        if (const json* s = field(body, "suffix");
            s != nullptr && !(s->is_string() && s->get<std::string>().empty()))
            return unsupported(body, "suffix", "h2okv does not insert completions");
        std::optional<int64_t> best_of;
        if (auto e = read_int(body, "best_of", "best_of", 1, 1, best_of)) return e;
    } else {
        bool logprobs = false;
        if (auto e = read_bool(body, "logprobs", "logprobs", logprobs)) return e;
        if (logprobs) return unsupported(body, "logprobs", "h2okv returns no log-probabilities");
        if (const json* t = field(body, "tools"); t != nullptr && !(t->is_array() && t->empty()))
            return unsupported(body, "tools", "h2okv does not call tools");
        if (const json* f = field(body, "response_format")) {
            if (!(f->is_object() && f->value("type", json()) == "text"))
                return unsupported(body, "response_format", "h2okv generates free text only");
        }
    }
    std::optional<std::string> model;
    if (auto e = read_string(body, "model", "model", model)) return e;

    if (auto e = read_bool(body, "stream", "stream", r.stream)) return e;
    if (const json* so = field(body, "stream_options")) {
        if (!so->is_object())
            return bad("stream_options", fmt::format("stream_options must be an object, got {}", shown(*so)));
        if (auto e = read_bool(*so, "include_usage", "stream_options.include_usage", r.include_usage))
            return e;
    }
    if (auto e = read_stop(body, r.stop)) return e;

    engine::generation_params& gp = r.engine.generation;
    std::optional<double> temperature, top_p;
    std::optional<int64_t> top_k, max_tokens, max_completion_tokens;
    if (auto e = read_number(body, "temperature", "temperature", 0.0, 2.0, false, temperature)) return e;
    if (auto e = read_number(body, "top_p", "top_p", 0.0, 1.0, true, top_p)) return e;
    if (auto e = read_int(body, "top_k", "top_k", 0, k_max_int, top_k)) return e;
    if (auto e = read_int(body, "max_tokens", "max_tokens", 0, k_max_int, max_tokens)) return e;
    if (kind == endpoint::chat) {
        if (auto e = read_int(body, "max_completion_tokens", "max_completion_tokens", 0, k_max_int,
                              max_completion_tokens))
            return e;
        if (max_completion_tokens) max_tokens = max_completion_tokens;
    }
    // OpenAI's defaults: temperature 1, no top-k, top-p 1.
    gp.sampling.temperature = static_cast<float>(temperature.value_or(1.0));
    gp.sampling.top_p = static_cast<float>(top_p.value_or(1.0));
    gp.sampling.top_k = static_cast<int>(top_k.value_or(0));
    if (const json* s = field(body, "seed")) {
        if (s->is_number_unsigned()) {
            gp.sampling.seed = s->get<uint64_t>();
        } else {
            std::optional<int64_t> seed;
            if (read_int(body, "seed", "seed", 0, std::numeric_limits<int64_t>::max(), seed))
                return bad("seed",
                           fmt::format("seed must be an integer in [0, 2^64 - 1], got {}", shown(*s)));
            gp.sampling.seed = static_cast<uint64_t>(*seed);
        }
    } else {
        gp.sampling.seed = ctx.make_seed ? ctx.make_seed() : 0;
    }
    if (auto e = read_bool(body, "ignore_eos", "ignore_eos", gp.ignore_eos)) return e;

    engine::session_params& sp = r.engine.session;
    sp = ctx.defaults.session;
    if (auto e = read_kv_cache(body, sp)) return e;

    std::vector<int32_t>& ids = r.engine.prompt;
    if (kind == endpoint::completions) {
        std::string text;
        if (auto e = read_prompt(body, ctx, ids, text)) return e;
        bool echo = false;
        if (auto e = read_bool(body, "echo", "echo", echo)) return e;
        if (echo) r.echo = std::move(text);
    } else {
        std::vector<chat_message> messages;
        if (auto e = read_messages(body, messages)) return e;
        if (!ctx.chat) {
            api_error e = bad("messages", ctx.chat_unavailable, "chat_template_missing");
            return e;
        }
        // The template's markers are the model's special tokens; llama.cpp parses them in chat prompts too.
        auto enc =
            ctx.tok->encode(render_chat(*ctx.chat, messages), /*add_special=*/true, /*parse_special=*/true);
        if (!enc.ok()) return bad("messages", enc.error().message());
        ids = std::move(enc).value();
    }
    if (ids.empty())
        return bad("prompt", "the prompt has no tokens (this model adds no BOS to an empty text)");

    const auto n_prompt = static_cast<int64_t>(ids.size());
    const int64_t n_ctx = sp.n_ctx > 0 ? sp.n_ctx : ctx.model->params().n_ctx_train;
    const char* tokens_field = kind == endpoint::chat ? "max_completion_tokens" : "max_tokens";
    if (!max_tokens && ctx.defaults.max_tokens >= 0) max_tokens = ctx.defaults.max_tokens;
    if (!max_tokens) {
        if (n_prompt >= n_ctx) {
            return bad(
                tokens_field,
                fmt::format("the prompt's {} tokens fill the context of {}; give {} (an evicting kv_cache "
                            "policy with \"positions\": \"rolling\" streams past the context)",
                            n_prompt, n_ctx, tokens_field),
                "context_length_exceeded");
        }
        max_tokens = n_ctx - n_prompt;
    }
    gp.n_predict = static_cast<int>(*max_tokens);
    if (!policy::policy_evicts(sp.kv.name) && n_prompt + *max_tokens > n_ctx) {
        return bad(
            tokens_field,
            fmt::format("the prompt ({} tokens) and {} ({}) need {} positions but the context holds {} under "
                        "the `full` kv_cache policy; shorten them, or pick an evicting kv_cache.policy "
                        "with \"positions\": \"rolling\" (it streams past the context)",
                        n_prompt, tokens_field, *max_tokens, n_prompt + *max_tokens, n_ctx),
            "context_length_exceeded");
    }
    if (const status st = gp.validate(); !st.ok()) return bad({}, st.message());
    // The scheduler caps the prefill chunk at the prompt as well; the footprint must be the one it charges.
    sp.prefill_chunk = std::min(sp.prefill_chunk, static_cast<int>(std::min<int64_t>(n_prompt, k_max_int)));
    auto fp = engine::session::plan(*ctx.model, sp, n_prompt + *max_tokens);
    if (!fp.ok()) return bad("kv_cache", "kv_cache: " + fp.error().message(), "invalid_kv_cache");
    r.kv_footprint = fp->total();
    if (ctx.kv_memory > 0 && r.kv_footprint > ctx.kv_memory) {
        return bad(
            "kv_cache",
            fmt::format("the request's KV cache needs {} ({} slots per unit for {} prompt tokens + {} = {}), "
                        "more than the server's whole KV memory pool of {}; lower kv_cache.budget or {}",
                        kv::format_bytes(r.kv_footprint), fp->capacity, n_prompt, *max_tokens,
                        n_prompt + *max_tokens, kv::format_bytes(ctx.kv_memory), tokens_field),
            "kv_cache_too_large");
    }
    return std::nullopt;
}

ojson usage_json(const engine::sequence_result& res) {
    const auto completion = static_cast<int64_t>(res.tokens.size());
    return {{"prompt_tokens", res.prompt_tokens},
            {"completion_tokens", completion},
            {"total_tokens", res.prompt_tokens + completion}};
}

ojson kv_json(const engine::sequence_result& res) {
    return {
        {"policy", res.policy},     {"type", kv::kv_type_name(res.kv_type)}, {"capacity", res.kv_capacity},
        {"kv_bytes", res.kv_bytes}, {"footprint", res.kv_footprint},         {"evictions", res.evictions},
        {"kept", res.kept}};
}

ojson timings_json(const engine::sequence_result& res) {
    const double decoded = res.tokens.size() > 1 ? static_cast<double>(res.tokens.size() - 1) : 0.0;
    return {{"queued_ms", res.queued_seconds * 1e3},
            {"prefill_ms", res.prefill_seconds * 1e3},
            {"decode_ms", res.decode_seconds * 1e3},
            {"decode_tokens_per_second", res.decode_seconds > 0 ? decoded / res.decode_seconds : 0.0}};
}

ojson envelope(const api_request& r, const response_info& info, bool chunk) {
    const char* object =
        r.kind == endpoint::chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    return {{"id", info.id}, {"object", object}, {"created", info.created}, {"model", info.model}};
}

ojson choice(const api_request& r, std::string_view text, const ojson& finish, bool chunk) {
    if (r.kind == endpoint::completions)
        return {{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}};
    ojson c = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish}};
    if (!chunk) {
        c["message"] = {{"role", "assistant"}, {"content", text}};
    } else {
        c["delta"] = text.empty() ? ojson::object() : ojson{{"content", text}};
    }
    return c;
}

}  // namespace

const char* endpoint_name(endpoint e) {
    return e == endpoint::chat ? "chat.completions" : "completions";
}

ojson api_error::to_json() const {
    return {{"error",
             {{"message", message},
              {"type", type},
              {"param", param.empty() ? ojson() : ojson(param)},
              {"code", code.empty() ? ojson() : ojson(code)}}}};
}

parsed_request parse_request(endpoint kind, std::string_view body, const api_context& ctx) {
    parsed_request out;
    json j;
    api_request r;
    opt_error e = parse_body(body, j);
    if (!e) e = parse_into(kind, j, ctx, r);
    if (e) {
        out.error = std::move(*e);
    } else {
        out.request = std::move(r);
    }
    return out;
}

const char* openai_finish_reason(engine::finish_reason r) {
    return r == engine::finish_reason::length ? "length" : "stop";
}

ojson response_json(const api_request& r, const response_info& info, const std::string& text,
                    const engine::sequence_result& res) {
    ojson j = envelope(r, info, false);
    j["choices"] = ojson::array({choice(r, r.echo + text, openai_finish_reason(res.reason), false)});
    j["usage"] = usage_json(res);
    j["kv_cache"] = kv_json(res);
    j["timings"] = timings_json(res);
    j["seed"] = r.engine.generation.sampling.seed;
    return j;
}

ojson role_chunk_json(const api_request& r, const response_info& info) {
    ojson j = envelope(r, info, true);
    j["choices"] = ojson::array({{{"index", 0},
                                  {"delta", {{"role", "assistant"}, {"content", ""}}},
                                  {"logprobs", nullptr},
                                  {"finish_reason", nullptr}}});
    return j;
}

ojson text_chunk_json(const api_request& r, const response_info& info, std::string_view text) {
    ojson j = envelope(r, info, true);
    j["choices"] = ojson::array({choice(r, text, nullptr, true)});
    return j;
}

ojson final_chunk_json(const api_request& r, const response_info& info, const engine::sequence_result& res) {
    ojson j = envelope(r, info, true);
    j["choices"] = ojson::array({choice(r, "", openai_finish_reason(res.reason), true)});
    j["usage"] = usage_json(res);
    j["kv_cache"] = kv_json(res);
    j["timings"] = timings_json(res);
    j["seed"] = r.engine.generation.sampling.seed;
    return j;
}

ojson usage_chunk_json(const api_request& r, const response_info& info, const engine::sequence_result& res) {
    ojson j = envelope(r, info, true);
    j["choices"] = ojson::array();
    j["usage"] = usage_json(res);
    return j;
}

std::string sse_event(const ojson& j) {
    return "data: " + j.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
}

}  // namespace h2okv::serve
