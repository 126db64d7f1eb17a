// The HTTP server of `h2okv serve`: OpenAI's completion endpoints over one batch scheduler, so requests with
// different KV policies share every forward pass and the KV memory pool decides how many run at once.
//
// Endpoints: POST /v1/completions and /v1/chat/completions (also without /v1; JSON or, with "stream": true,
// server-sent events ending in `data: [DONE]`), GET /v1/models, GET /health (503 while shutting down) and
// GET /metrics (Prometheus text). Request and response fields: h2okv/serve/openai.h.
//
// Threads: one engine thread owns the scheduler (which is not thread-safe) and steps it while it has work.
// Connection threads (cpp-httplib's pool) read and check a request, then hand it to the engine thread through
// a queue under a mutex, and wait on the request's own condition variable for its text and result. The
// engine thread writes a request's text as its tokens are sampled (stop strings are cut there, and stop the
// sequence); a stream sends what has arrived at each wake-up.
//
// Limits: at most `parallel` sequences run and their caches fit `kv_memory`; up to `max_queue` more wait; the
// next gets 503 with Retry-After. A request runs for at most `timeout_seconds` from its arrival (then 504,
// or an error event in a stream); a client that disconnects has its sequence cancelled at the next step;
// bodies over `max_body_bytes` get 413; a client slower than `read_timeout_seconds` between bytes gets 400.
//
//   serve::server_params p;
//   p.port = 0;  // any free port
//   p.engine = {.parallel = 16, .kv_memory = int64_t{1} << 30};
//   H2OKV_ASSIGN_OR_RETURN(auto srv, serve::server::create(*model, tok, p));
//   H2OKV_RETURN_IF_ERROR(srv->start());  // binds, then serves on its own threads
//   ... srv->port() ...
//   srv->shutdown(30.0);  // stop admitting; finish what runs, cancelling what is left after 30 s
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "h2okv/core/status.h"
#include "h2okv/engine/scheduler.h"
#include "h2okv/model/model.h"
#include "h2okv/serve/chat_template.h"
#include "h2okv/serve/openai.h"
#include "h2okv/tokenizer/tokenizer.h"

namespace h2okv::serve {

struct server_params {
    std::string host = "127.0.0.1";
    int port = 8080;                  // 0: any free port (port() tells which)
    engine::scheduler_params engine;  // --parallel, --kv-memory (> 0: memory must be bounded), --step-tokens
    request_defaults defaults;        // what requests inherit: the KV flags, -c, -n, --special
    std::optional<chat_template> chat;
    std::string chat_unavailable;  // the 400 message of chat requests when `chat` is null
    std::string model_name;        // the model's id in responses and /v1/models
    int max_queue = 64;            // requests that may wait beyond `parallel`
    double timeout_seconds = 600.0;
    int read_timeout_seconds = 30;  // also the write timeout
    int64_t max_body_bytes = int64_t{4} << 20;
    int http_threads = 0;  // 0: parallel + max_queue + 8 (a waiting or streaming request holds one)
    int threads = 0;       // OpenMP threads of the forward passes (0: OpenMP's default, every core)
    std::string api_key;   // non-empty: every endpoint but /health needs "Authorization: Bearer KEY"
    // One line per call (requests, start, shutdown); null: stderr, with a UTC timestamp.
    std::function<void(const std::string&)> log;
    status validate() const;
};

class server {
public:
    // The model and tokenizer must outlive the server.
    static result<std::unique_ptr<server>> create(model::model& m, const tokenizer::tokenizer& tok,
                                                  server_params p);
    ~server();  // shutdown(0) if still running
    server(const server&) = delete;
    server& operator=(const server&) = delete;

    // Binds host:port and starts the engine and connection threads.
    status start();
    int port() const;

    // Stops admitting (503), cancels what waits, lets running requests finish for up to `grace_seconds`,
    // cancels the rest, then stops listening. Returns when every thread has ended. Thread-safe; later calls
    // only shorten the grace.
    void shutdown(double grace_seconds);

    // The /metrics text.
    std::string metrics() const;

    struct impl;

private:
    explicit server(std::unique_ptr<impl> i);
    std::unique_ptr<impl> impl_;
};

}  // namespace h2okv::serve
