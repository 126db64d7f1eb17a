#include "h2okv/engine/session.h"

#include <algorithm>

namespace h2okv::engine {

status session_params::validate() const {
    if (prefill_chunk < 1) return invalid_argument("prefill chunk {} must be >= 1", prefill_chunk);
    if (n_ctx < 0) return invalid_argument("context length {} must be >= 0 (0 = the model's)", n_ctx);
    return ok_status();
}

result<std::unique_ptr<session>> session::create(model::model& m, const session_params& p,
                                                 int64_t run_length) {
    H2OKV_RETURN_IF_ERROR(p.validate());
    if (run_length < 1) return invalid_argument("run length {} must be >= 1", run_length);
    const int64_t n_ctx = p.n_ctx > 0 ? p.n_ctx : m.params().n_ctx_train;
    if (p.kv.name == "full" && run_length > n_ctx) {
        return invalid_argument(
            "the run needs {} tokens but the context holds {} under the `full` policy; shorten the prompt or "
            "-n, "
            "raise -c, or use an evicting policy (which streams past the context)",
            run_length, n_ctx);
    }
    const int chunk = static_cast<int>(std::min<int64_t>(p.prefill_chunk, run_length));
    // `full` holds the whole run (checked above to fit the context); evicting policies stream past the
    // context, so their positions are bounded by the run as well.
    const int64_t max_positions = run_length;
    H2OKV_ASSIGN_OR_RETURN(
        auto cache, kv::kv_cache::create(m.params(), p.kv, chunk, max_positions, run_length, p.kv_type));
    return std::unique_ptr<session>(new session(m, p, n_ctx, run_length, std::move(cache)));
}

session::session(model::model& m, session_params p, int64_t n_ctx, int64_t run_length,
                 std::unique_ptr<kv::kv_cache> c)
    : model_(&m), params_(std::move(p)), n_ctx_(n_ctx), run_length_(run_length), cache_(std::move(c)) {
    params_.prefill_chunk = static_cast<int>(std::min<int64_t>(params_.prefill_chunk, run_length));
}

status session::process(std::span<const int32_t> tokens, model::logits_mode mode,
                        std::vector<float>* logits) {
    if (tokens.empty()) return invalid_argument("process: no tokens given");
    if (n_past_ + static_cast<int64_t>(tokens.size()) > run_length_) {
        return invalid_argument("the session was created for {} tokens; {} processed and {} more given",
                                run_length_, n_past_, tokens.size());
    }
    const auto n_vocab = static_cast<size_t>(model_->params().n_vocab);
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i] < 0 || static_cast<size_t>(tokens[i]) >= n_vocab) {
            return invalid_argument("token id {} (index {}) is outside the vocabulary [0, {})", tokens[i], i,
                                    n_vocab);
        }
    }
    if (mode != model::logits_mode::none && logits == nullptr) {
        return invalid_argument("process: logits requested but no output vector given");
    }
    if (mode == model::logits_mode::all) logits->assign(tokens.size() * n_vocab, 0.0f);
    if (mode == model::logits_mode::last) logits->assign(n_vocab, 0.0f);

    if (!pass_) pass_ = std::make_unique<forward_pass>(*model_);
    const auto start = std::chrono::steady_clock::now();
    const size_t chunk = static_cast<size_t>(params_.prefill_chunk);
    // A chunk goes in one pass, or one pass per token when the policy needs it (kv_cache::token_by_token).
    const size_t per_pass = token_by_token() ? 1 : chunk;
    for (size_t off = 0; off < tokens.size(); off += chunk) {
        const size_t n = std::min(chunk, tokens.size() - off);
        H2OKV_RETURN_IF_ERROR(open_chunk(static_cast<int>(n)));
        for (size_t i = off; i < off + n; i += per_pass) {
            step_part part{this, tokens.subspan(i, std::min(per_pass, off + n - i))};
            if (mode == model::logits_mode::all) {
                part.logits = model::logits_mode::all;
                part.out = logits->data() + i * n_vocab;
            } else if (mode == model::logits_mode::last && i + part.tokens.size() == tokens.size()) {
                part.logits = model::logits_mode::last;
                part.out = logits->data();
            }
            H2OKV_RETURN_IF_ERROR(pass_->run({&part, 1}));
        }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (tokens.size() == 1) {
        stats_.decode_tokens += 1;
        stats_.decode_seconds += seconds;
    } else {
        stats_.prefill_tokens += static_cast<int64_t>(tokens.size());
        stats_.prefill_seconds += seconds;
    }
    return ok_status();
}

status session::open_chunk(int n) {
    if (cache_->in_chunk()) {
        return invalid_argument("open_chunk: the chunk at {} still has {} tokens to forward",
                                cache_->chunk_first(), chunk_left());
    }
    if (n < 1 || n > params_.prefill_chunk) {
        return invalid_argument("open_chunk: {} tokens; expected 1 to the prefill chunk {}", n,
                                params_.prefill_chunk);
    }
    if (n_past_ + n > run_length_) {
        return invalid_argument("the session was created for {} tokens; {} processed and {} more given",
                                run_length_, n_past_, n);
    }
    return cache_->begin_chunk(n_past_, n);
}

int session::chunk_left() const {
    return cache_->in_chunk() ? cache_->chunk_size() - cache_->chunk_done() : 0;
}

status session::advance(int n) {
    n_past_ += n;
    if (cache_->chunk_done() < cache_->chunk_size()) return ok_status();
    H2OKV_RETURN_IF_ERROR(cache_->end_chunk());
    if (chunk_observer_) chunk_observer_(n_past_ - 1);
    return ok_status();
}

}  // namespace h2okv::engine
