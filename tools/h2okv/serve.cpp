// h2okv serve: an OpenAI-compatible HTTP server with continuous batching, a per-request KV policy and a
// bounded KV memory pool (docs/SERVER.md).
//
//   h2okv serve -m model.gguf --port 8080 --kv-memory 1GiB --parallel 16 --kv-policy h2o --kv-budget 0.2
//
// SIGINT or SIGTERM: stop admitting, let running requests finish for --shutdown-grace seconds, cancel the
// rest, exit 0; a second signal cancels at once.
#include <fmt/format.h>
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "commands.h"
#include "h2okv/kv/memory_pool.h"
#include "h2okv/serve/chat_template.h"
#include "h2okv/serve/server.h"
#include "h2okv/tokenizer/tokenizer.h"
#include "kv_options.h"

namespace h2okv::cli {
namespace {

struct serve_options {
    model_options model;
    kv_options kv;
    batching_options batching;
    std::string host = "127.0.0.1";
    int port = 8080;
    int queue = 64;
    double timeout = 600.0;
    int read_timeout = 30;
    std::string max_body = "4MiB";
    std::string chat_template;
    std::string alias;
    std::string api_key;
    int n_predict = -1;
    bool special = false;
    int http_threads = 0;
    double shutdown_grace = 30.0;
};

// The signals end the server; they are blocked in every thread (the mask is inherited) and taken by sigwait
// in the main thread, so no handler runs in the middle of a step.
sigset_t stop_signals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    return set;
}

int run_serve(const serve_options& o) {
    const sigset_t signals = stop_signals();
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a client that leaves mid-write is an error return, not a signal

    o.model.apply_threads();
    auto lm = load_model(o.model.model_path);
    if (!lm.ok()) return fail(lm.error());
    auto tok = tokenizer::tokenizer::from_gguf(*lm->file);
    if (!tok.ok()) return fail(tok.error());

    serve::server_params p;
    p.host = o.host;
    p.port = o.port;
    auto bp = o.batching.to_params();
    if (!bp.ok()) return fail(bp.error());
    p.engine = *bp;
    auto sp = o.kv.to_session_params(o.model.n_ctx);
    if (!sp.ok()) return fail(sp.error());
    p.defaults.session = *sp;
    // KV flags that no request could run with are refused now rather than in every response.
    const int64_t n_ctx = sp->n_ctx > 0 ? sp->n_ctx : lm->model->params().n_ctx_train;
    if (auto fp = engine::session::plan(*lm->model, *sp, n_ctx); !fp.ok()) return fail(fp.error());
    p.defaults.max_tokens = o.n_predict;
    p.defaults.parse_special = o.special;
    if (o.n_predict < -1)
        return fail(invalid_argument("-n {} must be >= 0, or -1 for the rest of the context", o.n_predict));
    if (!o.chat_template.empty()) {
        auto t = serve::parse_chat_template(o.chat_template);
        if (!t.ok()) return fail(t.error().with_context("--chat-template"));
        p.chat = *t;
    } else {
        auto t = serve::model_chat_template(*lm->file);
        if (!t.ok()) {
            p.chat_unavailable = t.error().message();
            fmt::print(stderr, "h2okv serve: warning: {}; chat completions are refused\n",
                       p.chat_unavailable);
        } else if (!*t) {
            p.chat_unavailable = fmt::format(
                "the model has no chat template (tokenizer.chat_template); start the server with "
                "--chat-template NAME ({}) to serve chat completions",
                serve::chat_template_names());
        } else {
            p.chat = **t;
        }
    }
    p.model_name = o.alias.empty() ? std::filesystem::path(o.model.model_path).stem().string() : o.alias;
    p.max_queue = o.queue;
    p.timeout_seconds = o.timeout;
    p.read_timeout_seconds = o.read_timeout;
    auto body = kv::parse_bytes(o.max_body);
    if (!body.ok()) return fail(body.error().with_context("--max-body"));
    p.max_body_bytes = *body;
    p.http_threads = o.http_threads;
    p.threads = o.model.threads;
    p.api_key = o.api_key;
    if (!(o.shutdown_grace >= 0))
        return fail(invalid_argument("--shutdown-grace {} must be >= 0", o.shutdown_grace));

    auto srv = serve::server::create(*lm->model, *tok, std::move(p));
    if (!srv.ok()) return fail(srv.error());
    if (const status st = (*srv)->start(); !st.ok()) return fail(st);

    int sig = 0;
    sigwait(&signals, &sig);
    fmt::print(stderr, "h2okv serve: {}: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    std::atomic<bool> stopped{false};
    std::thread stopper([&] {
        (*srv)->shutdown(o.shutdown_grace);
        stopped = true;
    });
    const timespec tick{0, 100'000'000};
    while (!stopped) {
        if (sigtimedwait(&signals, nullptr, &tick) > 0) {
            fmt::print(stderr, "h2okv serve: second signal: cancelling what runs\n");
            (*srv)->shutdown(0.0);
        }
    }
    stopper.join();
    return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, int* exit_code) {
    auto o = std::make_shared<serve_options>();
    o->batching.kv_memory = "1GiB";
    o->batching.unlimited_memory = false;
    CLI::App* cmd = app.add_subcommand(
        "serve",
        "OpenAI-compatible HTTP server (POST /v1/completions, /v1/chat/completions; GET /v1/models, /health, "
        "/metrics) with continuous batching: each request may pick its own KV policy (the \"kv_cache\" "
        "field), "
        "and requests start while their caches fit --kv-memory. SIGINT/SIGTERM stop it gracefully");
    o->model.add_to(*cmd);
    cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
    cmd->add_option("--port", o->port, "Port to listen on (0: any free port; the log names it)")
        ->capture_default_str();
    o->batching.add_to(*cmd);
    cmd->add_option("--queue", o->queue,
                    "Requests that may wait beyond --parallel; more get 503 + Retry-After")
        ->capture_default_str();
    cmd->add_option("--timeout", o->timeout,
                    "Seconds a request may take from arrival to its last token (504)")
        ->capture_default_str();
    cmd->add_option("--read-timeout", o->read_timeout,
                    "Seconds a client may stay silent while sending (400) or not read (disconnect)")
        ->capture_default_str();
    cmd->add_option("--max-body", o->max_body, "Largest request body (413 beyond it)")->capture_default_str();
    cmd->add_option("-n,--n-predict", o->n_predict,
                    "max_tokens of requests that give none (-1: the rest of the context)")
        ->capture_default_str();
    cmd->add_option("--chat-template", o->chat_template,
                    "Chat template instead of the model's: " + serve::chat_template_names() +
                        " (or a Jinja template text of one of them)");
    cmd->add_option("--alias", o->alias,
                    "The model's id in responses (default: the file name without .gguf)");
    cmd->add_option("--api-key", o->api_key,
                    "Require \"Authorization: Bearer KEY\" on every endpoint but /health");
    cmd->add_flag(
        "--special", o->special,
        "Parse special-token text (</s>, <|endoftext|>) in completion prompts (chat prompts always are)");
    cmd->add_option(
           "--http-threads", o->http_threads,
           "Connection threads (0: --parallel + --queue + 8; a waiting or streaming request holds one)")
        ->capture_default_str();
    cmd->add_option("--shutdown-grace", o->shutdown_grace,
                    "Seconds running requests may finish after SIGINT/SIGTERM before they are cancelled")
        ->capture_default_str();
    o->kv.add_to(*cmd);
    cmd->callback([o, exit_code] { *exit_code = run_serve(*o); });
}

}  // namespace h2okv::cli
