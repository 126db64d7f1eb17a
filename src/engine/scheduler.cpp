#include "h2okv/engine/scheduler.h"

#include <algorithm>
#include <new>

namespace h2okv::engine {

const char* finish_reason_name(finish_reason r) {
    switch (r) {
        case finish_reason::length: return "length";
        case finish_reason::end_of_generation: return "end_of_generation";
        case finish_reason::stop: return "stop";
        case finish_reason::cancelled: return "cancelled";
        case finish_reason::error: return "error";
    }
    return "unknown";
}

status scheduler_params::validate() const {
    if (parallel < 1) return invalid_argument("--parallel {} must be >= 1", parallel);
    if (kv_memory < 0) return invalid_argument("--kv-memory {} must be >= 0 (0: no limit)", kv_memory);
    if (step_tokens < parallel) {
        return invalid_argument(
            "--step-tokens {} must be >= --parallel {} (every decoding sequence's token fits a step)",
            step_tokens, parallel);
    }
    return ok_status();
}

struct scheduler::sequence {
    uint64_t id = 0;
    request req;
    int64_t run_length = 0;
    int64_t footprint = 0;
    std::unique_ptr<session> s;
    std::unique_ptr<sampler> smp;
    std::vector<float> logits;
    size_t fed = 0;         // prompt tokens forwarded
    bool decoding = false;  // the prompt is done; `next` is the token to forward
    int32_t next = 0;
    std::vector<int32_t> generated;
    bool cancelled = false;
    bool done = false;
    clock::time_point t_submit, t_admit, t_first;
};

result<std::unique_ptr<scheduler>> scheduler::create(model::model& m, const scheduler_params& p) {
    H2OKV_RETURN_IF_ERROR(p.validate());
    return std::unique_ptr<scheduler>(new scheduler(m, p));
}

scheduler::scheduler(model::model& m, const scheduler_params& p)
    : model_(&m), params_(p), pool_(p.kv_memory), pass_(m) {}

scheduler::~scheduler() = default;

result<uint64_t> scheduler::submit(request r) {
    if (r.prompt.empty()) return invalid_argument("the prompt has no tokens (expected at least BOS)");
    const int64_t n_vocab = model_->params().n_vocab;
    for (size_t i = 0; i < r.prompt.size(); ++i) {
        if (r.prompt[i] < 0 || r.prompt[i] >= n_vocab) {
            return invalid_argument("token id {} (index {}) is outside the vocabulary [0, {})", r.prompt[i],
                                    i, n_vocab);
        }
    }
    H2OKV_RETURN_IF_ERROR(r.generation.validate());
    // The prompt is the only multi-token chunk: slots beyond it would never be used (as `generate`).
    r.session.prefill_chunk = std::min(r.session.prefill_chunk, static_cast<int>(r.prompt.size()));
    auto seq = std::make_unique<sequence>();
    seq->run_length = static_cast<int64_t>(r.prompt.size()) + r.generation.n_predict;
    H2OKV_ASSIGN_OR_RETURN(const kv::cache_footprint fp, session::plan(*model_, r.session, seq->run_length));
    if (!pool_.could_fit(fp.total())) {
        return out_of_memory(
            "the request's KV cache needs {} ({} slots per unit: {} of K/V, {} of slot tables), more than "
            "the whole "
            "KV memory pool of {}; lower its budget or length, or raise --kv-memory",
            kv::format_bytes(fp.total()), fp.capacity, kv::format_bytes(fp.kv_bytes),
            kv::format_bytes(fp.table_bytes), kv::format_bytes(pool_.capacity()));
    }
    seq->footprint = fp.total();
    seq->id = next_id_++;
    seq->req = std::move(r);
    seq->t_submit = clock::now();
    waiting_.push_back(std::move(seq));
    return waiting_.back()->id;
}

void scheduler::cancel(uint64_t id) {
    for (auto* list : {&waiting_, &active_}) {
        for (auto& s : *list) {
            if (s->id == id) s->cancelled = true;
        }
    }
}

void scheduler::cancel_waiting() {
    for (auto& s : waiting_) s->cancelled = true;
}

int64_t scheduler::work_bytes() const {
    int64_t bytes = model_->work_bytes() + pass_.work_bytes();
    for (const auto& s : active_) {
        bytes += static_cast<int64_t>(s->logits.capacity() * sizeof(float));
        if (s->smp) bytes += s->smp->work_bytes();
    }
    return bytes;
}

sequence_result scheduler::finish(sequence& s, finish_reason why, status error) {
    const auto now = clock::now();
    auto seconds = [](clock::time_point a, clock::time_point b) {
        return std::chrono::duration<double>(b - a).count();
    };
    sequence_result r;
    r.id = s.id;
    r.reason = why;
    r.error = std::move(error);
    r.tokens = std::move(s.generated);
    r.prompt_tokens = static_cast<int64_t>(s.req.prompt.size());
    r.kv_type = s.req.session.kv_type;
    r.kv_footprint = s.footprint;
    if (s.s) {
        const bool sampled = !r.tokens.empty();
        r.queued_seconds = seconds(s.t_submit, s.t_admit);
        r.prefill_seconds = seconds(s.t_admit, sampled ? s.t_first : now);
        r.decode_seconds = sampled ? seconds(s.t_first, now) : 0.0;
        const kv::kv_cache& c = s.s->cache();
        r.policy = c.policy().config().to_string();
        r.kv_capacity = c.capacity();
        r.kv_bytes = c.bytes();
        r.evictions = c.policy().total_evictions();
        r.kept = c.kept_total();
        s.s.reset();
        pool_.give(s.footprint);
    } else {
        r.queued_seconds = seconds(s.t_submit, now);
        r.policy = s.req.session.kv.to_string();
    }
    s.done = true;
    return r;
}

status scheduler::admit() {
    const auto n_vocab = static_cast<size_t>(model_->params().n_vocab);
    while (!waiting_.empty() && static_cast<int>(active_.size()) < params_.parallel) {
        sequence& s = *waiting_.front();
        if (!pool_.try_take(s.footprint)) break;  // first in, first out: the head waits for memory
        auto created = session::create(*model_, s.req.session, s.run_length);
        if (created.ok()) {
            s.s = std::move(created).value();
            try {
                s.logits.assign(n_vocab, 0.0f);
                s.smp = std::make_unique<sampler>(s.req.generation.sampling);
            } catch (const std::bad_alloc&) {
                created = out_of_memory("cannot allocate the logits of a sequence");
            }
        }
        s.t_admit = clock::now();
        if (!created.ok()) {
            if (!s.s) pool_.give(s.footprint);
            finished_.push_back(finish(s, finish_reason::error, created.error()));
        } else {
            active_.push_back(std::move(waiting_.front()));
        }
        waiting_.erase(waiting_.begin());
    }
    return ok_status();
}

result<std::vector<sequence_result>> scheduler::step() {
    finished_.clear();
    for (auto& s : waiting_) {
        if (s->cancelled) finished_.push_back(finish(*s, finish_reason::cancelled));
    }
    for (auto& s : active_) {
        if (s->cancelled) finished_.push_back(finish(*s, finish_reason::cancelled));
    }
    auto erase_done = [](std::vector<std::unique_ptr<sequence>>& v) {
        v.erase(std::remove_if(v.begin(), v.end(), [](const auto& s) { return s->done; }), v.end());
    };
    erase_done(waiting_);
    erase_done(active_);
    H2OKV_RETURN_IF_ERROR(admit());

    // Every decoding sequence's next token first, then prompt tokens while the step has room.
    parts_.clear();
    part_seq_.clear();
    int budget = params_.step_tokens;
    for (auto& s : active_) {
        if (!s->decoding) continue;
        if (const status st = s->s->open_chunk(1); !st.ok()) {
            finished_.push_back(finish(*s, finish_reason::error, st));
            continue;
        }
        parts_.push_back({s->s.get(), {&s->next, 1}, model::logits_mode::last, s->logits.data()});
        part_seq_.push_back(s.get());
        --budget;
    }
    for (auto& s : active_) {
        if (s->decoding || s->done || budget == 0) continue;
        const std::span<const int32_t> prompt(s->req.prompt);
        auto n = s->s->next_part(prompt.size() - s->fed, budget);
        if (!n.ok()) {
            finished_.push_back(finish(*s, finish_reason::error, n.error()));
            continue;
        }
        const bool last = s->fed + static_cast<size_t>(*n) == prompt.size();
        const bool want = last && s->req.generation.n_predict > 0;
        parts_.push_back({s->s.get(), prompt.subspan(s->fed, static_cast<size_t>(*n)),
                          want ? model::logits_mode::last : model::logits_mode::none, s->logits.data()});
        part_seq_.push_back(s.get());
        budget -= *n;
    }
    if (!parts_.empty()) {
        const status st = pass_.run(parts_);
        ++stats_.steps;
        stats_.max_active = std::max(stats_.max_active, static_cast<int>(active_.size()));
        for (size_t i = 0; i < parts_.size(); ++i) {
            sequence& s = *part_seq_[i];
            if (!st.ok()) {
                finished_.push_back(finish(s, finish_reason::error, st));
                continue;
            }
            const auto n = parts_[i].tokens.size();
            if (!s.decoding) {
                s.fed += n;
                stats_.prefill_tokens += static_cast<int64_t>(n);
                if (s.fed < s.req.prompt.size()) continue;
                if (s.req.generation.n_predict == 0) {
                    finished_.push_back(finish(s, finish_reason::length));
                    continue;
                }
                s.decoding = true;
            } else {
                ++stats_.decode_tokens;
            }
            const int32_t id = s.smp->sample(s.logits);
            if (s.generated.empty()) s.t_first = clock::now();
            s.generated.push_back(id);
            const bool go_on = !s.req.on_token || s.req.on_token(id);
            if (!s.req.generation.ignore_eos && s.req.is_end && s.req.is_end(id)) {
                finished_.push_back(finish(s, finish_reason::end_of_generation));
            } else if (!go_on) {
                finished_.push_back(finish(s, finish_reason::stop));
            } else if (static_cast<int>(s.generated.size()) == s.req.generation.n_predict) {
                finished_.push_back(finish(s, finish_reason::length));
            } else {
                s.next = id;
            }
        }
    }
    erase_done(active_);
    return std::move(finished_);
}

}  // namespace h2okv::engine
