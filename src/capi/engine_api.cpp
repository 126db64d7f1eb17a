// The engine's C functions (include/h2okv.h): models, tokens, sessions and sampling over the C++ engine
// (gguf::file + model::model + tokenizer::tokenizer per model handle, engine::session per session handle).
#include <omp.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "capi.h"
#include "h2okv/engine/sampler.h"
#include "h2okv/engine/session.h"
#include "h2okv/gguf/gguf.h"
#include "h2okv/kv/kv_cache.h"
#include "h2okv/model/model.h"
#include "h2okv/tokenizer/tokenizer.h"

struct h2okv_model {
    std::unique_ptr<h2okv::gguf::file> file;  // the weights point into its mapping
    std::unique_ptr<h2okv::model::model> model;
    std::unique_ptr<h2okv::tokenizer::tokenizer> tok;
};

struct h2okv_session {
    h2okv_model* model = nullptr;
    std::unique_ptr<h2okv::engine::session> impl;
    std::string config;
    std::vector<float> logits;  // the last processed token's; empty before the first process
    int64_t full_kv_bytes = 0;
};

struct h2okv_sampler {
    h2okv::engine::sampler impl;
};

using h2okv::capi::fail;
using h2okv::capi::fail_invalid;
using h2okv::capi::guard;

extern "C" {

void h2okv_set_threads(int32_t n_threads) {
    omp_set_num_threads(n_threads > 0 ? n_threads : omp_get_num_procs());
}

h2okv_status h2okv_model_load(const char* path, h2okv_model** out) {
    return guard("h2okv_model_load", [&]() -> h2okv_status {
        if (path == nullptr || out == nullptr)
            return fail_invalid("h2okv_model_load: path and out must not be NULL");
        auto m = std::make_unique<h2okv_model>();
        auto file = h2okv::gguf::file::open(path);
        if (!file.ok()) return fail(file.error());
        m->file = std::move(*file);
        auto model = h2okv::model::model::load(*m->file);
        if (!model.ok()) return fail(model.error().with_context(std::string("loading '") + path + "'"));
        m->model = std::move(*model);
        auto tok = h2okv::tokenizer::tokenizer::from_gguf(*m->file);
        if (!tok.ok()) return fail(tok.error().with_context(std::string("loading '") + path + "'"));
        m->tok = std::make_unique<h2okv::tokenizer::tokenizer>(std::move(*tok));
        *out = m.release();
        return H2OKV_OK;
    });
}

void h2okv_model_free(h2okv_model* model) {
    delete model;
}

int32_t h2okv_model_n_vocab(const h2okv_model* model) {
    return model != nullptr ? static_cast<int32_t>(model->model->params().n_vocab) : 0;
}

int32_t h2okv_model_n_layer(const h2okv_model* model) {
    return model != nullptr ? model->model->params().n_layer : 0;
}

int32_t h2okv_model_n_head(const h2okv_model* model) {
    return model != nullptr ? model->model->params().n_head : 0;
}

int32_t h2okv_model_n_kv_head(const h2okv_model* model) {
    return model != nullptr ? model->model->params().n_kv_head : 0;
}

int64_t h2okv_model_n_ctx_train(const h2okv_model* model) {
    return model != nullptr ? model->model->params().n_ctx_train : 0;
}

const char* h2okv_model_arch(const h2okv_model* model) {
    return model != nullptr ? model->model->params().arch.c_str() : "";
}

int32_t h2okv_token_bos(const h2okv_model* model) {
    return model != nullptr ? model->tok->bos() : -1;
}

int32_t h2okv_token_eos(const h2okv_model* model) {
    return model != nullptr ? model->tok->eos() : -1;
}

int h2okv_token_is_eog(const h2okv_model* model, int32_t token) {
    return model != nullptr && model->tok->is_eog(token) ? 1 : 0;
}

h2okv_status h2okv_tokenize(const h2okv_model* model, const char* text, size_t len, int add_special,
                            int parse_special, int32_t* tokens, size_t capacity, size_t* n_tokens) {
    return guard("h2okv_tokenize", [&]() -> h2okv_status {
        if (model == nullptr || n_tokens == nullptr)
            return fail_invalid("h2okv_tokenize: model and n_tokens must not be NULL");
        if (text == nullptr && len > 0) return fail_invalid("h2okv_tokenize: text is NULL with len {}", len);
        if (tokens == nullptr && capacity > 0)
            return fail_invalid("h2okv_tokenize: tokens is NULL with capacity {}", capacity);
        auto ids = model->tok->encode(std::string_view(text != nullptr ? text : "", len), add_special != 0,
                                      parse_special != 0);
        if (!ids.ok()) return fail(ids.error());
        *n_tokens = ids->size();
        if (capacity < ids->size()) {
            return fail(
                h2okv::out_of_range("h2okv_tokenize: the text takes {} tokens, the buffer has room for {}",
                                    ids->size(), capacity));
        }
        std::copy(ids->begin(), ids->end(), tokens);
        return H2OKV_OK;
    });
}

h2okv_status h2okv_detokenize(const h2okv_model* model, const int32_t* tokens, size_t n, char* buf,
                              size_t capacity, size_t* len) {
    return guard("h2okv_detokenize", [&]() -> h2okv_status {
        if (model == nullptr) return fail_invalid("h2okv_detokenize: model is NULL");
        if (tokens == nullptr && n > 0) return fail_invalid("h2okv_detokenize: tokens is NULL with n {}", n);
        const std::string text = model->tok->decode(std::span<const int32_t>(tokens, n));
        return h2okv::capi::copy_text(text, buf, capacity, len, "h2okv_detokenize");
    });
}

h2okv_status h2okv_token_piece(const h2okv_model* model, int32_t token, int special, char* buf,
                               size_t capacity, size_t* len) {
    return guard("h2okv_token_piece", [&]() -> h2okv_status {
        if (model == nullptr) return fail_invalid("h2okv_token_piece: model is NULL");
        if (!model->tok->is_valid(token)) {
            return fail_invalid("h2okv_token_piece: token {} is outside the vocabulary [0, {})", token,
                                model->tok->n_vocab());
        }
        return h2okv::capi::copy_text(model->tok->piece(token, special != 0), buf, capacity, len,
                                      "h2okv_token_piece");
    });
}

h2okv_session_params h2okv_session_default_params(void) {
    const h2okv::engine::session_params d;
    return {.kv = nullptr, .kv_type = nullptr, .prefill_chunk = d.prefill_chunk, .n_ctx = d.n_ctx};
}

h2okv_status h2okv_session_open(h2okv_model* model, const h2okv_session_params* params, int64_t run_length,
                                h2okv_session** out) {
    return guard("h2okv_session_open", [&]() -> h2okv_status {
        if (model == nullptr || params == nullptr || out == nullptr) {
            return fail_invalid("h2okv_session_open: model, params and out must not be NULL");
        }
        h2okv::engine::session_params sp;
        if (params->kv != nullptr && params->kv[0] != '\0') {
            auto kv = h2okv::policy::params::parse(params->kv);
            if (!kv.ok()) return fail(kv.error().with_context("kv spec"));
            sp.kv = std::move(*kv);
        }
        if (params->kv_type != nullptr) {
            auto type = h2okv::kv::parse_kv_type(params->kv_type);
            if (!type.ok()) return fail(type.error().with_context("kv_type"));
            sp.kv_type = *type;
        }
        sp.prefill_chunk = params->prefill_chunk;
        sp.n_ctx = params->n_ctx;
        if (auto st = sp.validate(); !st.ok()) return fail(st);
        if (run_length < 1) return fail_invalid("h2okv_session_open: run_length {} must be >= 1", run_length);
        auto impl = h2okv::engine::session::create(*model->model, sp, run_length);
        if (!impl.ok()) return fail(impl.error());
        auto s = std::make_unique<h2okv_session>();
        s->model = model;
        s->impl = std::move(*impl);
        s->config = s->impl->cache().policy().config().to_string();
        const auto full = h2okv::kv::kv_cache::plan(model->model->params(), h2okv::policy::params{},
                                                    sp.prefill_chunk, run_length, run_length, sp.kv_type);
        s->full_kv_bytes = full.ok() ? full->kv_bytes : 0;
        *out = s.release();
        return H2OKV_OK;
    });
}

void h2okv_session_free(h2okv_session* session) {
    delete session;
}

h2okv_status h2okv_session_process(h2okv_session* session, const int32_t* tokens, size_t n) {
    return guard("h2okv_session_process", [&]() -> h2okv_status {
        if (session == nullptr || tokens == nullptr)
            return fail_invalid("h2okv_session_process: session and tokens must not be NULL");
        if (n == 0) return fail_invalid("h2okv_session_process: no tokens (n is 0)");
        const int32_t n_vocab = session->model->tok->n_vocab();
        for (size_t i = 0; i < n; ++i) {
            if (tokens[i] < 0 || tokens[i] >= n_vocab) {
                return fail_invalid(
                    "h2okv_session_process: tokens[{}] = {} is outside the vocabulary [0, {})", i, tokens[i],
                    n_vocab);
            }
        }
        auto st = session->impl->process(std::span<const int32_t>(tokens, n), h2okv::model::logits_mode::last,
                                         &session->logits);
        if (!st.ok()) {
            session->logits.clear();
            return fail(st);
        }
        return H2OKV_OK;
    });
}

const float* h2okv_session_logits(const h2okv_session* session) {
    return session != nullptr && !session->logits.empty() ? session->logits.data() : nullptr;
}

int64_t h2okv_session_n_past(const h2okv_session* session) {
    return session != nullptr ? session->impl->n_past() : 0;
}

const char* h2okv_session_kv_config(const h2okv_session* session) {
    return session != nullptr ? session->config.c_str() : "";
}

h2okv_status h2okv_session_kv_stats(const h2okv_session* session, h2okv_kv_stats* out) {
    return guard("h2okv_session_kv_stats", [&]() -> h2okv_status {
        if (session == nullptr || out == nullptr)
            return fail_invalid("h2okv_session_kv_stats: session and out must not be NULL");
        const auto& cache = session->impl->cache();
        const auto& pol = cache.policy();
        *out = {.n_past = session->impl->n_past(),
                .n_units = pol.n_units(),
                .slots_per_unit = cache.capacity(),
                .kept = cache.kept_total(),
                .evicted = pol.total_evictions(),
                .kv_bytes = cache.bytes(),
                .full_kv_bytes = session->full_kv_bytes};
        return H2OKV_OK;
    });
}

h2okv_status h2okv_session_kept_positions(const h2okv_session* session, int32_t unit, int64_t* out,
                                          size_t capacity, size_t* n) {
    return guard("h2okv_session_kept_positions", [&]() -> h2okv_status {
        if (session == nullptr) return fail_invalid("h2okv_session_kept_positions: session is NULL");
        const auto& pol = session->impl->cache().policy();
        if (unit < 0 || unit >= pol.n_units()) {
            return fail_invalid(
                "h2okv_session_kept_positions: unit {} is out of range; the policy has units 0 to {}", unit,
                pol.n_units() - 1);
        }
        return h2okv::capi::copy_kept(pol, unit, out, capacity, n, "h2okv_session_kept_positions");
    });
}

h2okv_sampler_params h2okv_sampler_default_params(void) {
    const h2okv::engine::sampler_params d;
    return {.temperature = d.temperature, .top_k = d.top_k, .top_p = d.top_p, .seed = d.seed};
}

h2okv_status h2okv_sampler_create(const h2okv_sampler_params* params, h2okv_sampler** out) {
    return guard("h2okv_sampler_create", [&]() -> h2okv_status {
        if (params == nullptr || out == nullptr)
            return fail_invalid("h2okv_sampler_create: params and out must not be NULL");
        const h2okv::engine::sampler_params sp{.temperature = params->temperature,
                                               .top_k = params->top_k,
                                               .top_p = params->top_p,
                                               .seed = params->seed};
        if (auto st = sp.validate(); !st.ok()) return fail(st);
        *out = new h2okv_sampler{h2okv::engine::sampler(sp)};
        return H2OKV_OK;
    });
}

void h2okv_sampler_free(h2okv_sampler* sampler) {
    delete sampler;
}

h2okv_status h2okv_sampler_sample(h2okv_sampler* sampler, const float* logits, size_t n_vocab,
                                  int32_t* token) {
    return guard("h2okv_sampler_sample", [&]() -> h2okv_status {
        if (sampler == nullptr || logits == nullptr || token == nullptr) {
            return fail_invalid("h2okv_sampler_sample: sampler, logits and token must not be NULL");
        }
        if (n_vocab == 0) return fail_invalid("h2okv_sampler_sample: n_vocab is 0");
        *token = sampler->impl.sample(std::span<const float>(logits, n_vocab));
        return H2OKV_OK;
    });
}

int32_t h2okv_sample_greedy(const float* logits, size_t n_vocab) {
    if (logits == nullptr || n_vocab == 0) return -1;
    return h2okv::engine::sampler::argmax(std::span<const float>(logits, n_vocab));
}

}  // extern "C"
