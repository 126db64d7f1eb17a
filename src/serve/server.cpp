#include "h2okv/serve/server.h"

#include <dirent.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netdb.h>
#include <omp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "h2okv/kv/memory_pool.h"
#include "h2okv/serve/text_stream.h"

namespace h2okv::serve {
namespace {

using json = nlohmann::ordered_json;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) {
    return std::chrono::duration<double>(clock_type::now() - t).count();
}

// Why the engine cancelled a request.
enum class cancel_cause { none, disconnect, deadline, shutdown };

// The HTTP status a request ends with; 499 (nginx's "client closed request") is never sent, only logged and
// counted.
constexpr int k_status_client_closed = 499;

// cpp-httplib listens with a backlog of 5 (compiled into Debian's library): a burst of clients would see
// dropped SYNs and one-second retries. listen() again on the bound socket raises it.
class http_server : public httplib::Server {
public:
    void raise_backlog(int n) { ::listen(svr_sock_, n); }
};

// cpp-httplib 0.11 tells a handler nothing about its connection (later versions added
// Request::is_connection_closed). A non-streaming request finds its socket among the process's descriptors by
// the connection's two endpoints, to notice a client that gives up while its request waits or runs; the
// descriptor stays open while the handler runs, since the handler's own thread is the one that closes it.
std::string numeric_host(const sockaddr_storage& a, socklen_t len, int* port) {
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return {};
    *port = std::atoi(serv);
    return host;
}

int find_connection_fd(const httplib::Request& req) {
    DIR* dir = opendir("/proc/self/fd");
    if (dir == nullptr) return -1;
    int found = -1;
    while (dirent* e = readdir(dir)) {
        char* end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
        struct stat st {};
        if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        sockaddr_storage peer{}, local{};
        socklen_t peer_len = sizeof peer, local_len = sizeof local;
        if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
        if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0) continue;
        int peer_port = -1, local_port = -1;
        if (numeric_host(peer, peer_len, &peer_port) == req.remote_addr && peer_port == req.remote_port &&
            numeric_host(local, local_len, &local_port) == req.local_addr && local_port == req.local_port) {
            found = static_cast<int>(fd);
            break;
        }
    }
    closedir(dir);
    return found;
}

// Whether the client has closed its side (a pipelined next request is data, not a close).
bool peer_closed(int fd) {
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return false;
    if ((p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) != 0) return true;
    char c;
    return (p.revents & POLLIN) != 0 && recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

std::string log_escape(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += (c == '\n' || c == '\r') ? ' ' : c;
    }
    return out + "\"";
}

api_error server_error(std::string message, int http_status = 500, std::string type = "server_error",
                       std::string code = {}) {
    api_error e;
    e.http_status = http_status;
    e.message = std::move(message);
    e.type = std::move(type);
    e.code = std::move(code);
    return e;
}

void reply(httplib::Response& res, const api_error& e) {
    res.status = e.http_status;
    res.set_content(e.to_json().dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                    "application/json");
}

// The answer to a request whose body was not read to its end: the connection must close after it, or the
// unread bytes would be parsed as the next request. cpp-httplib 0.11 closes a connection only when writing
// the response fails, so the body goes through a provider that writes it whole and then reports failure.
void reply_and_close(httplib::Response& res, const api_error& e) {
    res.status = e.http_status;
    res.body.clear();
    res.headers.erase("Content-Type");
    res.set_header("Connection", "close");
    auto body =
        std::make_shared<std::string>(e.to_json().dump(-1, ' ', false, json::error_handler_t::replace));
    res.set_content_provider(body->size(), "application/json",
                             [body](size_t offset, size_t length, httplib::DataSink& sink) {
                                 sink.write(body->data() + offset, length);
                                 return false;
                             });
}

}  // namespace

struct request_state {
    uint64_t number = 0;
    response_info info;
    api_request api;
    clock_type::time_point received, deadline;
    std::atomic<bool> disconnected{false};

    // Engine thread only.
    text_stream text;
    bool cancel_sent = false;
    cancel_cause cause = cancel_cause::none;

    // Shared, under m.
    std::mutex m;
    std::condition_variable cv;
    std::string out;  // text the handler has not taken yet
    bool done = false;
    std::optional<api_error> error;  // why it ended without a result to send
    engine::sequence_result result;
};

status server_params::validate() const {
    H2OKV_RETURN_IF_ERROR(engine.validate());
    if (engine.kv_memory <= 0) {
        return invalid_argument(
            "--kv-memory {} must be > 0: the server admits requests against a bounded KV memory pool",
            engine.kv_memory);
    }
    if (port < 0 || port > 65535)
        return invalid_argument("--port {} must be in [0, 65535] (0: any free port)", port);
    if (max_queue < 0) return invalid_argument("--queue {} must be >= 0", max_queue);
    if (!(timeout_seconds > 0)) return invalid_argument("--timeout {} must be > 0 seconds", timeout_seconds);
    if (read_timeout_seconds < 1)
        return invalid_argument("--read-timeout {} must be >= 1 second", read_timeout_seconds);
    if (max_body_bytes < 1024) return invalid_argument("--max-body {} must be >= 1024 bytes", max_body_bytes);
    if (http_threads < 0) return invalid_argument("--http-threads {} must be >= 0", http_threads);
    if (threads < 0) return invalid_argument("--threads {} must be >= 0", threads);
    return defaults.session.validate();
}

struct server::impl {
    impl(model::model& m, const tokenizer::tokenizer& t, server_params p)
        : model(m), tok(t), params(std::move(p)) {}

    model::model& model;
    const tokenizer::tokenizer& tok;
    server_params params;
    api_context ctx;
    std::unique_ptr<engine::scheduler> sch;
    http_server http;
    int bound_port = -1;
    std::thread engine_thread, http_thread;
    std::mutex log_mu;

    // Shared between the connection threads and the engine thread, under mu.
    mutable std::mutex mu;
    std::condition_variable engine_cv;  // new work, shutdown
    std::condition_variable idle_cv;    // a request ended (shutdown waits for none in flight)
    std::vector<std::shared_ptr<request_state>> incoming;
    int in_flight = 0;      // accepted, not ended
    int open_handlers = 0;  // handlers (and streams) still writing a response
    bool draining = false;
    bool stop_engine = false;
    bool stopping = false;  // a shutdown() call owns the teardown
    bool stopped = false;
    clock_type::time_point grace_end;
    std::condition_variable stopped_cv;

    // /metrics, under mu.
    struct snapshot {
        int active = 0, waiting = 0;
        int64_t pool_used = 0, pool_peak = 0, work_bytes = 0;
        engine::scheduler_stats stats;
    } snap;
    std::map<std::pair<std::string, int>, int64_t> requests_total;  // (endpoint, status)
    std::map<std::string, int64_t> cancelled_total;                 // by cause
    int64_t prompt_tokens_total = 0, completion_tokens_total = 0, evictions_total = 0;
    double queued_seconds_total = 0, prefill_seconds_total = 0, decode_seconds_total = 0;
    int64_t finished_total = 0;

    std::atomic<uint64_t> next_number{1};
    std::mt19937_64 seeds{std::random_device{}()};
    std::mutex seeds_mu;

    void log(const std::string& line);
    void count_request(const std::string& endpoint, int status);
    void refuse(const httplib::Request& req, httplib::Response& res, const std::string& endpoint,
                uint64_t number, const api_error& e);
    void routes();
    void handle_completion(const httplib::Request& req, httplib::Response& res,
                           const httplib::ContentReader& reader, endpoint kind);
    bool read_body(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader,
                   std::string& body, api_error& err);
    void wait_result(const httplib::Request& req, request_state& st);
    void respond(httplib::Response& res, request_state& st);
    void stream(httplib::Response& res, std::shared_ptr<request_state> st);
    void end_handler();

    void engine_loop();
    void submit(const std::shared_ptr<request_state>& st,
                std::unordered_map<uint64_t, std::shared_ptr<request_state>>& running);
    void finish(request_state& st, engine::sequence_result r);
    void end_request(request_state& st, std::optional<api_error> error);  // null: 200 with the result
    void publish();
    std::string metrics() const;
};

void server::impl::log(const std::string& line) {
    if (params.log) {
        params.log(line);
        return;
    }
    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm tm{};
    gmtime_r(&t, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    std::lock_guard<std::mutex> lk(log_mu);
    fmt::print(stderr, "{}.{:03d}Z h2okv serve: {}\n", stamp, ms, line);
    std::fflush(stderr);
}

void server::impl::count_request(const std::string& endpoint, int status) {
    std::lock_guard<std::mutex> lk(mu);
    ++requests_total[{endpoint, status}];
}

void server::impl::refuse(const httplib::Request& req, httplib::Response& res, const std::string& endpoint,
                          uint64_t number, const api_error& e) {
    reply(res, e);
    count_request(endpoint, e.http_status);
    log(fmt::format("request id={} endpoint={} status={} remote={} error={}", number, endpoint, e.http_status,
                    req.remote_addr, log_escape(e.message)));
}

void server::impl::end_handler() {
    std::lock_guard<std::mutex> lk(mu);
    --open_handlers;
    idle_cv.notify_all();
}

bool server::impl::read_body(const httplib::Request& req, httplib::Response& res,
                             const httplib::ContentReader& reader, std::string& body, api_error& err) {
    const bool chunked = req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos;
    if (!chunked && !req.has_header("Content-Length")) {
        err = server_error("a request body needs a Content-Length (or chunked transfer encoding)", 411,
                           "invalid_request_error");
        return false;
    }
    const auto limit = static_cast<size_t>(params.max_body_bytes);
    bool too_large = false;
    const bool ok = reader([&](const char* data, size_t n) {
        if (body.size() + n > limit) {
            too_large = true;
            return false;
        }
        body.append(data, n);
        return true;
    });
    if (ok) return true;
    if (too_large || res.status == 413) {
        err =
            server_error(fmt::format("the request body is larger than the server's limit of {} (--max-body)",
                                     kv::format_bytes(params.max_body_bytes)),
                         413, "invalid_request_error", "body_too_large");
    } else {
        err =
            server_error(fmt::format("the request body could not be read: it is shorter than its "
                                     "Content-Length, its chunked encoding is malformed, or the client sent "
                                     "nothing for {} s (--read-timeout)",
                                     params.read_timeout_seconds),
                         400, "invalid_request_error", "incomplete_body");
    }
    res.status = -1;
    return false;
}

void server::impl::handle_completion(const httplib::Request& req, httplib::Response& res,
                                     const httplib::ContentReader& reader, endpoint kind) {
    const std::string name = endpoint_name(kind);
    const uint64_t number = next_number.fetch_add(1);
    const auto received = clock_type::now();
    std::string body;
    api_error err;
    if (!read_body(req, res, reader, body, err)) {
        refuse(req, res, name, number, err);
        return reply_and_close(res, err);
    }
    parsed_request p = parse_request(kind, body, ctx);
    if (!p.request) return refuse(req, res, name, number, p.error);

    auto st = std::make_shared<request_state>();
    st->number = number;
    st->received = received;
    st->deadline = received + std::chrono::duration_cast<clock_type::duration>(
                                  std::chrono::duration<double>(params.timeout_seconds));
    st->info = {fmt::format("{}-{}", kind == endpoint::chat ? "chatcmpl" : "cmpl", number),
                static_cast<int64_t>(std::time(nullptr)), params.model_name};
    st->api = std::move(*p.request);
    st->text = text_stream(st->api.stop);
    std::unique_lock<std::mutex> lk(mu);
    if (draining || in_flight >= params.engine.parallel + params.max_queue) {
        const bool shutting_down = draining;
        lk.unlock();
        res.set_header("Retry-After", "1");
        return refuse(
            req, res, name, number,
            shutting_down
                ? server_error("the server is shutting down", 503, "server_error", "shutting_down")
                : server_error(fmt::format("the server is busy: {} requests run or wait (--parallel {} "
                                           "+ --queue {}); retry later",
                                           params.engine.parallel + params.max_queue, params.engine.parallel,
                                           params.max_queue),
                               503, "server_error", "queue_full"));
    }
    ++in_flight;
    ++open_handlers;
    incoming.push_back(st);
    lk.unlock();
    engine_cv.notify_one();

    if (st->api.stream) {
        stream(res, st);  // the stream's releaser ends the handler
        return;
    }
    wait_result(req, *st);
    respond(res, *st);
    end_handler();
}

void server::impl::wait_result(const httplib::Request& req, request_state& st) {
    const int fd = find_connection_fd(req);
    std::unique_lock<std::mutex> lk(st.m);
    while (!st.done) {
        st.cv.wait_for(lk, std::chrono::milliseconds(100));
        if (!st.done && fd >= 0 && !st.disconnected && peer_closed(fd)) st.disconnected = true;
    }
}

void server::impl::respond(httplib::Response& res, request_state& st) {
    std::lock_guard<std::mutex> lk(st.m);
    if (st.error) return reply(res, *st.error);
    res.status = 200;
    res.set_content(response_json(st.api, st.info, st.out, st.result)
                        .dump(-1, ' ', false, json::error_handler_t::replace),
                    "application/json");
}

void server::impl::stream(httplib::Response& res, std::shared_ptr<request_state> st) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // proxies must not hold the events back
    auto opened = std::make_shared<bool>(false);
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, st, opened](size_t, httplib::DataSink& sink) {
            const auto send = [&](const std::string& event) {
                if (sink.write(event.data(), event.size())) return true;
                st->disconnected = true;
                return false;
            };
            if (!*opened) {
                *opened = true;
                if (st->api.kind == endpoint::chat && !send(sse_event(role_chunk_json(st->api, st->info))))
                    return false;
                if (!st->api.echo.empty() &&
                    !send(sse_event(text_chunk_json(st->api, st->info, st->api.echo))))
                    return false;
            }
            std::string text;
            bool done = false;
            {
                std::unique_lock<std::mutex> lk(st->m);
                st->cv.wait_for(lk, std::chrono::milliseconds(100),
                                [&] { return !st->out.empty() || st->done; });
                text.swap(st->out);
                done = st->done;
            }
            if (!text.empty() && !send(sse_event(text_chunk_json(st->api, st->info, text)))) return false;
            if (!done) {
                // Nothing written for a while: a client that left shows as a socket that reads end-of-file.
                if (text.empty() && !sink.is_writable()) {
                    st->disconnected = true;
                    return false;
                }
                return true;
            }
            std::string tail;
            if (st->error) {
                tail = sse_event(st->error->to_json());
            } else {
                tail = sse_event(final_chunk_json(st->api, st->info, st->result));
                if (st->api.include_usage) tail += sse_event(usage_chunk_json(st->api, st->info, st->result));
            }
            tail += "data: [DONE]\n\n";
            if (!send(tail)) return false;
            sink.done();
            return true;
        },
        [this, st](bool) {
            {
                std::lock_guard<std::mutex> lk(st->m);
                if (!st->done) st->disconnected = true;
            }
            end_handler();
        });
}

void server::impl::routes() {
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (params.api_key.empty() || req.path == "/health")
            return httplib::Server::HandlerResponse::Unhandled;
        const std::string expected = "Bearer " + params.api_key;
        const std::string got = req.get_header_value("Authorization");
        // Compared in time independent of where they differ.
        unsigned diff = got.size() == expected.size() ? 0u : 1u;
        for (size_t i = 0; i < got.size() && i < expected.size(); ++i)
            diff |= static_cast<unsigned char>(got[i] ^ expected[i]);
        if (diff == 0) return httplib::Server::HandlerResponse::Unhandled;
        api_error e =
            server_error("invalid or missing API key: send the header \"Authorization: Bearer <key>\"", 401,
                         "authentication_error", "invalid_api_key");
        reply(res, e);
        count_request("auth", 401);
        return httplib::Server::HandlerResponse::Handled;
    });

    for (const char* prefix : {"/v1", ""}) {
        const std::string p = prefix;
        http.Post(p + "/completions", [this](const httplib::Request& req, httplib::Response& res,
                                             const httplib::ContentReader& reader) {
            handle_completion(req, res, reader, endpoint::completions);
        });
        http.Post(p + "/chat/completions", [this](const httplib::Request& req, httplib::Response& res,
                                                  const httplib::ContentReader& reader) {
            handle_completion(req, res, reader, endpoint::chat);
        });
        http.Get(p + "/models", [this](const httplib::Request&, httplib::Response& res) {
            const auto& hp = model.params();
            json m = {{"id", params.model_name},
                      {"object", "model"},
                      {"created", static_cast<int64_t>(std::time(nullptr))},
                      {"owned_by", "h2okv"},
                      {"meta",
                       {{"architecture", hp.arch},
                        {"n_vocab", hp.n_vocab},
                        {"n_ctx_train", hp.n_ctx_train},
                        {"n_layer", hp.n_layer},
                        {"chat_template", params.chat ? json(chat_template_name(*params.chat)) : json()},
                        {"kv_cache", params.defaults.session.kv.to_string()},
                        {"kv_memory", params.engine.kv_memory},
                        {"parallel", params.engine.parallel}}}};
            res.set_content(json{{"object", "list"}, {"data", json::array({m})}}.dump(), "application/json");
            count_request("models", 200);
        });
    }
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        std::unique_lock<std::mutex> lk(mu);
        json j = {{"status", draining ? "shutting down" : "ok"},
                  {"sequences_active", snap.active},
                  {"requests_waiting", snap.waiting + static_cast<int>(incoming.size())},
                  {"requests_in_flight", in_flight}};
        res.status = draining ? 503 : 200;
        lk.unlock();
        res.set_content(j.dump(), "application/json");
        count_request("health", res.status);
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(metrics(), "text/plain; version=0.0.4");
        count_request("metrics", 200);
    });

    // Every other answer cpp-httplib makes itself (no route, malformed HTTP, URI too long) in OpenAI's shape.
    http.set_error_handler(
        httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
            // Answered already (a body, or a provider that sets the type).
            if (!res.body.empty() || res.has_header("Content-Type"))
                return httplib::Server::HandlerResponse::Unhandled;
            api_error e = server_error({}, res.status, "invalid_request_error");
            const bool known = req.path == "/health" || req.path == "/metrics" ||
                               req.path.ends_with("/completions") || req.path.ends_with("/models");
            if (res.status == 404 && known) {
                e.http_status = 405;
                e.message = fmt::format("{} does not accept {}", req.path, req.method);
            } else if (res.status == 404) {
                e.message = fmt::format(
                    "no endpoint {} {}; endpoints: POST /v1/completions, POST /v1/chat/completions, GET "
                    "/v1/models, "
                    "GET /health, GET /metrics",
                    req.method, req.path);
            } else if (res.status == 413) {
                e.message = fmt::format("the request is larger than the server's limit of {} (--max-body)",
                                        kv::format_bytes(params.max_body_bytes));
            } else if (res.status == 414) {
                e.message = "the request URI is longer than 8192 bytes";
            } else if (res.status >= 500) {
                e.type = "server_error";
                e.message = "internal error";
            } else {
                e.message = fmt::format(
                    "malformed or incomplete HTTP request (a client that sends nothing for {} s is cut off, "
                    "--read-timeout)",
                    params.read_timeout_seconds);
            }
            reply(res, e);
            count_request("other", e.http_status);
            return httplib::Server::HandlerResponse::Handled;
        }));
    http.set_exception_handler(
        [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
            std::string what = "unknown exception";
            try {
                std::rethrow_exception(ep);
            } catch (const std::exception& ex) {
                what = ex.what();
            } catch (...) {
            }
            log(fmt::format("internal error: {}", log_escape(what)));
            reply(res, server_error("internal error: " + what));
        });
}

void server::impl::submit(const std::shared_ptr<request_state>& st,
                          std::unordered_map<uint64_t, std::shared_ptr<request_state>>& running) {
    const tokenizer::tokenizer* t = &tok;
    engine::request r = st->api.engine;  // the response still needs the request's settings
    r.is_end = [t](int32_t id) { return t->is_eog(id); };
    // Runs inside step(): the token's text joins the request's, and a completed stop string stops it.
    // The callback holds the state: it lives as long as the scheduler holds the sequence, whatever the
    // engine thread has given up on.
    r.on_token = [raw = st, t](int32_t id) {
        const bool stop = raw->text.push(t->piece(id));
        std::string delta = raw->text.take();
        if (!delta.empty()) {
            std::lock_guard<std::mutex> lk(raw->m);
            raw->out += delta;
            // Only a stream sends text as it comes; a whole response waits for end_request to wake it.
            if (raw->api.stream) raw->cv.notify_one();
        }
        return !stop;
    };
    result<uint64_t> id = internal_error("not submitted");
    try {
        id = sch->submit(std::move(r));
    } catch (const std::exception& e) {  // std::bad_alloc
        id = out_of_memory("the request could not be queued: {}", e.what());
    }
    if (!id.ok()) {
        const status& s = id.error();
        const bool memory = s.code() == status_code::out_of_memory;
        api_error e;
        e.message = s.message();
        e.param = "kv_cache";
        e.code = memory ? "kv_cache_too_large" : "invalid_kv_cache";
        return end_request(*st, e);
    }
    running.emplace(*id, st);
}

void server::impl::end_request(request_state& st, std::optional<api_error> error) {
    const int http_status = error ? error->http_status : 200;
    const std::string name = endpoint_name(st.api.kind);
    const engine::sequence_result& r = st.result;
    std::string line = fmt::format("request id={} endpoint={} status={} stream={}", st.number, name,
                                   http_status, st.api.stream);
    if (error) {
        line += " error=" + log_escape(error->message);
    }
    if (!error || http_status != 400) {
        line += fmt::format(
            " finish={} prompt_tokens={} completion_tokens={} policy={} kv_type={} kv_bytes={} evictions={} "
            "queued_ms={:.1f} prefill_ms={:.1f} decode_ms={:.1f} total_ms={:.1f}",
            engine::finish_reason_name(r.reason), st.api.engine.prompt.size(), r.tokens.size(),
            r.policy.empty() ? st.api.engine.session.kv.to_string() : r.policy,
            kv::kv_type_name(st.api.engine.session.kv_type), r.kv_bytes, r.evictions, r.queued_seconds * 1e3,
            r.prefill_seconds * 1e3, r.decode_seconds * 1e3, seconds_since(st.received) * 1e3);
    }
    {
        std::lock_guard<std::mutex> lk(mu);
        ++requests_total[{name, http_status}];
        if (st.cause != cancel_cause::none) {
            static constexpr const char* names[] = {"none", "disconnect", "deadline", "shutdown"};
            ++cancelled_total[names[static_cast<int>(st.cause)]];
        }
        prompt_tokens_total += r.prompt_tokens;
        completion_tokens_total += static_cast<int64_t>(r.tokens.size());
        evictions_total += r.evictions;
        queued_seconds_total += r.queued_seconds;
        prefill_seconds_total += r.prefill_seconds;
        decode_seconds_total += r.decode_seconds;
        ++finished_total;
        --in_flight;
        idle_cv.notify_all();
    }
    {
        std::lock_guard<std::mutex> lk(st.m);
        st.out += st.text.finish();
        st.error = std::move(error);
        st.done = true;
        st.cv.notify_all();
    }
    log(line);
}

void server::impl::finish(request_state& st, engine::sequence_result r) {
    st.result = std::move(r);
    const engine::sequence_result& res = st.result;
    if (res.reason == engine::finish_reason::error) {
        return end_request(st, server_error("generation failed: " + res.error.message()));
    }
    if (res.reason == engine::finish_reason::cancelled) {
        if (st.cause == cancel_cause::none) st.cause = cancel_cause::shutdown;  // cancel_waiting()
        switch (st.cause) {
            case cancel_cause::deadline:
                return end_request(
                    st, server_error(fmt::format("the request ran past its deadline of {} s (--timeout) "
                                                 "after {} tokens",
                                                 params.timeout_seconds, res.tokens.size()),
                                     504, "timeout_error", "deadline_exceeded"));
            case cancel_cause::disconnect:
                return end_request(st, server_error("the client disconnected", k_status_client_closed,
                                                    "invalid_request_error", "client_closed"));
            default:
                return end_request(
                    st, server_error("the server is shutting down", 503, "server_error", "shutting_down"));
        }
    }
    end_request(st, std::nullopt);
}

void server::impl::publish() {
    std::lock_guard<std::mutex> lk(mu);
    snap.active = sch->active();
    snap.waiting = sch->waiting();
    snap.pool_used = sch->pool().used();
    snap.pool_peak = sch->pool().peak();
    snap.work_bytes = sch->work_bytes();
    snap.stats = sch->stats();
}

void server::impl::engine_loop() {
    // The thread count is per thread in OpenMP: the passes run here, not where the flags were read.
    if (params.threads > 0) omp_set_num_threads(params.threads);
    std::unordered_map<uint64_t, std::shared_ptr<request_state>> running;
    std::vector<std::shared_ptr<request_state>> batch;
    bool waiting_cancelled = false;
    while (true) {
        bool drain = false;
        clock_type::time_point grace;
        {
            std::unique_lock<std::mutex> lk(mu);
            engine_cv.wait(lk,
                           [&] { return !incoming.empty() || !running.empty() || stop_engine || draining; });
            if (stop_engine && running.empty() && incoming.empty()) break;
            batch.swap(incoming);
            drain = draining;
            grace = grace_end;
        }
        for (auto& st : batch) {
            if (drain) {
                st->cause = cancel_cause::shutdown;
                end_request(
                    *st, server_error("the server is shutting down", 503, "server_error", "shutting_down"));
            } else {
                submit(st, running);
            }
        }
        batch.clear();
        if (drain && !waiting_cancelled) {
            sch->cancel_waiting();
            waiting_cancelled = true;
        }
        const auto now = clock_type::now();
        for (auto& [id, st] : running) {
            if (st->cancel_sent) continue;
            cancel_cause c = cancel_cause::none;
            if (st->disconnected) {
                c = cancel_cause::disconnect;
            } else if (now >= st->deadline) {
                c = cancel_cause::deadline;
            } else if (drain && now >= grace) {
                c = cancel_cause::shutdown;
            }
            if (c == cancel_cause::none) continue;
            st->cause = c;
            st->cancel_sent = true;
            sch->cancel(id);
        }
        if (sch->idle()) {
            publish();
            if (drain && running.empty()) {
                // Nothing left to step: wait for the next request or the end, not for a timeout.
                std::unique_lock<std::mutex> lk(mu);
                engine_cv.wait(lk, [&] { return !incoming.empty() || stop_engine; });
            }
            continue;
        }
        result<std::vector<engine::sequence_result>> done = internal_error("no step");
        try {
            done = sch->step();
        } catch (const std::exception& e) {  // std::bad_alloc
            done = out_of_memory("the step failed: {}", e.what());
        }
        if (!done.ok()) {
            // Everything in flight ends with the error; the scheduler drops the sequences at its next step.
            log("engine step failed: " + done.error().to_string());
            for (auto& [id, st] : running) {
                sch->cancel(id);
                st->result.reason = engine::finish_reason::error;
                st->result.error = done.error();
                finish(*st, st->result);
            }
            running.clear();
            continue;
        }
        for (auto& r : *done) {
            auto it = running.find(r.id);
            if (it == running.end()) continue;
            std::shared_ptr<request_state> st = it->second;
            running.erase(it);
            finish(*st, std::move(r));
        }
        publish();
    }
}

std::string server::impl::metrics() const {
    std::string out;
    const auto metric = [&](const char* name, const char* type, const char* help) {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    };
    const auto value = [&](const char* name, auto v) { out += fmt::format("{} {}\n", name, v); };
    long rss_pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
        long size = 0;
        if (std::fscanf(f, "%ld %ld", &size, &rss_pages) != 2) rss_pages = 0;
        std::fclose(f);
    }
    std::lock_guard<std::mutex> lk(mu);
    metric("h2okv_requests_total", "counter",
           "HTTP requests answered, by endpoint and status (499: client gone)");
    for (const auto& [key, n] : requests_total)
        out += fmt::format("h2okv_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first,
                           key.second, n);
    metric("h2okv_requests_cancelled_total", "counter", "Admitted requests cancelled, by cause");
    for (const char* cause : {"disconnect", "deadline", "shutdown"}) {
        auto it = cancelled_total.find(cause);
        out += fmt::format("h2okv_requests_cancelled_total{{cause=\"{}\"}} {}\n", cause,
                           it == cancelled_total.end() ? 0 : it->second);
    }
    metric("h2okv_requests_in_flight", "gauge", "Requests admitted and not yet answered");
    value("h2okv_requests_in_flight", in_flight);
    metric("h2okv_requests_waiting", "gauge", "Requests waiting for a sequence slot or KV memory");
    value("h2okv_requests_waiting", snap.waiting + static_cast<int>(incoming.size()));
    metric("h2okv_sequences_active", "gauge", "Sequences in the batch");
    value("h2okv_sequences_active", snap.active);
    metric("h2okv_sequences_active_max", "gauge", "The most sequences one step has carried");
    value("h2okv_sequences_active_max", snap.stats.max_active);
    metric("h2okv_sequences_max", "gauge", "The most sequences allowed at once (--parallel)");
    value("h2okv_sequences_max", params.engine.parallel);
    metric("h2okv_kv_pool_used_bytes", "gauge", "KV memory charged to the active sequences");
    value("h2okv_kv_pool_used_bytes", snap.pool_used);
    metric("h2okv_kv_pool_peak_bytes", "gauge", "The most KV memory charged at once");
    value("h2okv_kv_pool_peak_bytes", snap.pool_peak);
    metric("h2okv_kv_pool_capacity_bytes", "gauge", "The KV memory pool (--kv-memory)");
    value("h2okv_kv_pool_capacity_bytes", params.engine.kv_memory);
    metric("h2okv_work_bytes", "gauge", "Work buffers outside the KV pool (model, pass, logits)");
    value("h2okv_work_bytes", snap.work_bytes);
    metric("h2okv_prompt_tokens_total", "counter", "Prompt tokens of finished requests");
    value("h2okv_prompt_tokens_total", prompt_tokens_total);
    metric("h2okv_completion_tokens_total", "counter", "Generated tokens of finished requests");
    value("h2okv_completion_tokens_total", completion_tokens_total);
    metric("h2okv_kv_evictions_total", "counter", "KV positions evicted by finished requests");
    value("h2okv_kv_evictions_total", evictions_total);
    metric("h2okv_engine_steps_total", "counter", "Forward passes of the batch");
    value("h2okv_engine_steps_total", snap.stats.steps);
    metric("h2okv_engine_tokens_total", "counter", "Tokens forwarded, by phase");
    out += fmt::format("h2okv_engine_tokens_total{{phase=\"prefill\"}} {}\n", snap.stats.prefill_tokens);
    out += fmt::format("h2okv_engine_tokens_total{{phase=\"decode\"}} {}\n", snap.stats.decode_tokens);
    metric("h2okv_request_phase_seconds_total", "counter", "Seconds finished requests spent per phase");
    out += fmt::format("h2okv_request_phase_seconds_total{{phase=\"queued\"}} {}\n", queued_seconds_total);
    out += fmt::format("h2okv_request_phase_seconds_total{{phase=\"prefill\"}} {}\n", prefill_seconds_total);
    out += fmt::format("h2okv_request_phase_seconds_total{{phase=\"decode\"}} {}\n", decode_seconds_total);
    metric("h2okv_requests_finished_total", "counter", "Admitted requests that ended");
    value("h2okv_requests_finished_total", finished_total);
    metric("process_resident_memory_bytes", "gauge", "Resident set size");
    value("process_resident_memory_bytes", static_cast<int64_t>(rss_pages) * sysconf(_SC_PAGESIZE));
    return out;
}

result<std::unique_ptr<server>> server::create(model::model& m, const tokenizer::tokenizer& tok,
                                               server_params p) {
    H2OKV_RETURN_IF_ERROR(p.validate());
    auto i = std::make_unique<impl>(m, tok, std::move(p));
    H2OKV_ASSIGN_OR_RETURN(i->sch, engine::scheduler::create(m, i->params.engine));
    impl* raw = i.get();
    i->ctx.model = &m;
    i->ctx.tok = &tok;
    i->ctx.chat = i->params.chat;
    i->ctx.chat_unavailable = i->params.chat_unavailable;
    i->ctx.defaults = i->params.defaults;
    i->ctx.kv_memory = i->params.engine.kv_memory;
    i->ctx.make_seed = [raw] {
        std::lock_guard<std::mutex> lk(raw->seeds_mu);
        return raw->seeds();
    };
    return std::unique_ptr<server>(new server(std::move(i)));
}

server::server(std::unique_ptr<impl> i) : impl_(std::move(i)) {}

server::~server() {
    shutdown(0.0);
}

status server::start() {
    impl& s = *impl_;
    const server_params& p = s.params;
    const int threads = p.http_threads > 0 ? p.http_threads : p.engine.parallel + p.max_queue + 8;
    s.http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    s.http.set_read_timeout(p.read_timeout_seconds, 0);
    s.http.set_write_timeout(p.read_timeout_seconds, 0);
    s.http.set_payload_max_length(static_cast<size_t>(p.max_body_bytes));
    s.http.set_tcp_nodelay(true);  // a stream's small events must leave at once
    s.routes();
    if (p.port == 0) {
        s.bound_port = s.http.bind_to_any_port(p.host);
    } else {
        s.bound_port = s.http.bind_to_port(p.host, p.port) ? p.port : -1;
    }
    if (s.bound_port <= 0) {
        return io_error("cannot listen on {}:{} (address in use, not local, or not permitted)", p.host,
                        p.port);
    }
    s.http.raise_backlog(512);
    s.log(fmt::format(
        "listening on http://{}:{} (model {}, --parallel {}, --kv-memory {}, kv_cache {}, chat "
        "template {})",
        p.host, s.bound_port, p.model_name, p.engine.parallel, kv::format_bytes(p.engine.kv_memory),
        p.defaults.session.kv.to_string(), p.chat ? chat_template_name(*p.chat) : "none"));
    s.engine_thread = std::thread([&s] { s.engine_loop(); });
    s.http_thread = std::thread([&s] { s.http.listen_after_bind(); });
    return ok_status();
}

int server::port() const {
    return impl_->bound_port;
}

std::string server::metrics() const {
    return impl_->metrics();
}

void server::shutdown(double grace_seconds) {
    impl& s = *impl_;
    const auto grace = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                               std::chrono::duration<double>(grace_seconds));
    std::unique_lock<std::mutex> lk(s.mu);
    if (!s.draining || grace < s.grace_end) s.grace_end = grace;
    s.draining = true;
    s.engine_cv.notify_all();
    if (s.stopping) {
        s.stopped_cv.wait(lk, [&] { return s.stopped; });
        return;
    }
    s.stopping = true;
    const bool started = s.engine_thread.joinable();
    if (started) {
        s.log(fmt::format("shutting down: {} requests in flight, {:.0f} s to finish", s.in_flight,
                          grace_seconds));
        s.idle_cv.wait(lk, [&] { return s.in_flight == 0 && s.open_handlers == 0; });
    }
    lk.unlock();
    if (started) {
        s.http.stop();
        s.http_thread.join();
        {
            std::lock_guard<std::mutex> g(s.mu);
            s.stop_engine = true;
        }
        s.engine_cv.notify_all();
        s.engine_thread.join();
        s.log("stopped");
    }
    lk.lock();
    s.stopped = true;
    s.stopped_cv.notify_all();
}

}  // namespace h2okv::serve
