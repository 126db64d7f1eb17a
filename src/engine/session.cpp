#include "h2okv/engine/session.h"

#include <algorithm>
#include <limits>

#include "h2okv/core/phases.h"

namespace h2okv::engine {

status session_params::validate() const {
    if (prefill_chunk < 1) return invalid_argument("prefill chunk {} must be >= 1", prefill_chunk);
    if (n_ctx < 0) return invalid_argument("context length {} must be >= 0 (0 = the model's)", n_ctx);
    if (kv_budget_bytes < 0) return invalid_argument("KV budget of {} bytes must be >= 0", kv_budget_bytes);
    if (kv_budget_bytes > 0 && kv.budget) {
        return invalid_argument("a KV budget in tokens ({}) and one in bytes ({}) given; give one of them",
                                kv.budget->to_string(), kv_budget_bytes);
    }
    if (kv_budget_bytes > 0 && !policy::policy_evicts(kv.name)) {
        return invalid_argument("a KV budget of {} bytes given, but policy {} keeps every token",
                                kv_budget_bytes, kv.name);
    }
    if (kv_budget_bytes > 0 && (kv.schedule != policy::budget_schedule::uniform || !kv.shares.empty())) {
        return invalid_argument(
            "a KV budget of {} bytes given with budgets per unit ({}); the bytes are converted to one "
            "budget for every unit: give the budget in tokens with a schedule or shares",
            kv_budget_bytes, kv.schedule != policy::budget_schedule::uniform ? "schedule=pyramid" : "shares");
    }
    return ok_status();
}

namespace {

// The context and prefill chunk a session of this run takes; refuses what it cannot run.
struct setup {
    int64_t n_ctx;
    int chunk;
    session_params params;  // kv_budget_bytes turned into kv.budget
};

result<setup> resolve(const model::model& m, const session_params& p, int64_t run_length) {
    H2OKV_RETURN_IF_ERROR(p.validate());
    if (run_length < 1) return invalid_argument("run length {} must be >= 1", run_length);
    const int64_t n_ctx = p.n_ctx > 0 ? p.n_ctx : m.params().n_ctx_train;
    if (!policy::policy_evicts(p.kv.name) && run_length > n_ctx) {
        return invalid_argument(
            "the run needs {} tokens but the context holds {} under the `full` policy; shorten the prompt or "
            "-n, raise -c, or use an evicting policy with --kv-positions rolling (its positions stay below "
            "the budget plus the prefill chunk however long the run)",
            run_length, n_ctx);
    }
    setup su{n_ctx, static_cast<int>(std::min<int64_t>(p.prefill_chunk, run_length)), p};
    if (p.kv_budget_bytes > 0) {
        H2OKV_ASSIGN_OR_RETURN(const int64_t budget,
                               kv::kv_cache::budget_for_bytes(m.params(), p.kv, su.chunk, run_length,
                                                              run_length, p.kv_type, p.kv_budget_bytes));
        su.params.kv.budget = policy::budget_spec::count(budget);
        su.params.kv_budget_bytes = 0;
    }
    return su;
}

}  // namespace

// `full` holds the whole run (checked to fit the context); an evicting policy's cache is bounded by its
// budget however long the run, so its slot tables are sized by the budget and its positions by the run.
result<kv::cache_footprint> session::plan(const model::model& m, const session_params& p,
                                          int64_t run_length) {
    H2OKV_ASSIGN_OR_RETURN(const setup su, resolve(m, p, run_length));
    return kv::kv_cache::plan(m.params(), su.params.kv, su.chunk, run_length, run_length, p.kv_type);
}

result<std::string> session::position_warning(const model::model& m, const session_params& p,
                                              int64_t run_length) {
    H2OKV_ASSIGN_OR_RETURN(const kv::cache_footprint fp, plan(m, p, run_length));
    const int64_t trained = m.params().n_ctx_train;
    if (fp.rolling) {
        const int64_t highest = std::min(fp.capacity, run_length);
        if (highest <= trained) return std::string();
        return fmt::format(
            "rolling positions reach {} (the budget plus the prefill chunk), past the model's trained "
            "context "
            "of {} tokens ({}.context_length): the newest queries see distances the model was not trained "
            "on; lower the budget or --kv-prefill-chunk",
            highest - 1, trained, m.params().arch);
    }
    if (run_length <= trained) return std::string();
    if (!policy::policy_evicts(p.kv.name)) {
        return fmt::format(
            "the run is {} tokens, past the model's trained context of {} ({}.context_length): positions "
            "beyond it are outside what the model was trained on and quality usually collapses; an evicting "
            "policy with --kv-positions rolling keeps every position below its budget",
            run_length, trained, m.params().arch);
    }
    return fmt::format(
        "the run is {} tokens, past the model's trained context of {} ({}.context_length): with original "
        "positions the tokens the cache keeps (sinks, heavy hitters) end up further from the query than the "
        "model was trained on, and quality drops once the run passes {} tokens; --kv-positions rolling "
        "renumbers the kept tokens 0..k-1 so positions stay below the budget",
        run_length, trained, m.params().arch, trained);
}

result<std::unique_ptr<session>> session::create(model::model& m, const session_params& p,
                                                 int64_t run_length) {
    H2OKV_ASSIGN_OR_RETURN(const setup su, resolve(m, p, run_length));
    H2OKV_ASSIGN_OR_RETURN(auto cache, kv::kv_cache::create(m.params(), su.params.kv, su.chunk, run_length,
                                                            run_length, p.kv_type));
    return std::unique_ptr<session>(new session(m, su.params, su.n_ctx, run_length, std::move(cache)));
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
    for (size_t i = 0; i < tokens.size();) {
        H2OKV_ASSIGN_OR_RETURN(const int n, next_part(tokens.size() - i, std::numeric_limits<int>::max()));
        step_part part{this, tokens.subspan(i, static_cast<size_t>(n))};
        if (mode == model::logits_mode::all) {
            part.logits = model::logits_mode::all;
            part.out = logits->data() + i * n_vocab;
        } else if (mode == model::logits_mode::last && i + part.tokens.size() == tokens.size()) {
            part.logits = model::logits_mode::last;
            part.out = logits->data();
        }
        H2OKV_RETURN_IF_ERROR(pass_->run({&part, 1}));
        i += part.tokens.size();
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
    const core::phase_scope timed(core::phase::chunks);
    return cache_->begin_chunk(n_past_, n);
}

result<int> session::next_part(size_t remaining, int budget) {
    if (budget <= 0 || remaining == 0) return 0;
    if (chunk_left() == 0) {
        H2OKV_RETURN_IF_ERROR(open_chunk(
            static_cast<int>(std::min<size_t>(static_cast<size_t>(params_.prefill_chunk), remaining))));
    }
    const int most = token_by_token() ? 1 : chunk_left();
    return std::min({most, budget, static_cast<int>(std::min<size_t>(remaining, static_cast<size_t>(most)))});
}

int session::chunk_left() const {
    return cache_->in_chunk() ? cache_->chunk_size() - cache_->chunk_done() : 0;
}

bool session::count_forwarded(int n) {
    n_past_ += n;
    return cache_->chunk_done() >= cache_->chunk_size();
}

status session::close_chunk() {
    return cache_->end_chunk();
}

void session::notify_chunk_closed() {
    if (chunk_observer_) chunk_observer_(n_past_ - 1);
}

}  // namespace h2okv::engine
