#include "h2okv/engine/forward_pass.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "h2okv/core/parallel.h"
#include "h2okv/core/phases.h"
#include "h2okv/engine/session.h"

namespace h2okv::engine {
namespace {

// Below this many floats of logits a pass copies them out in one thread.
constexpr int64_t k_copy_min_floats = 65536;

// The logits rows a part wants.
size_t rows_of(const step_part& p) {
    return p.logits == model::logits_mode::all    ? p.tokens.size()
           : p.logits == model::logits_mode::last ? 1
                                                  : 0;
}

}  // namespace

forward_pass::forward_pass(model::model& m, kv::attention_runner::path p) : model_(&m), runner_(p) {}

int64_t forward_pass::work_bytes() const {
    return static_cast<int64_t>(runner_.work_bytes() + logits_.capacity() * sizeof(float));
}

status forward_pass::run(std::span<const step_part> parts) {
    caches_.clear();
    counts_.clear();
    tokens_.clear();
    positions_.clear();
    output_.clear();
    size_t n_out = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
        const step_part& p = parts[i];
        if (p.s == nullptr || &p.s->model() != model_) {
            return invalid_argument("forward pass: part {} has no session of this model", i);
        }
        if (p.tokens.empty()) return invalid_argument("forward pass: part {} has no tokens", i);
        if (static_cast<int>(p.tokens.size()) > p.s->chunk_left() ||
            (p.s->token_by_token() && p.tokens.size() != 1)) {
            return invalid_argument(
                "forward pass: part {} gives {} tokens, but its session has {} left in its open chunk{}", i,
                p.tokens.size(), p.s->chunk_left(),
                p.s->token_by_token() ? " and forwards one per pass" : "");
        }
        if (p.logits != model::logits_mode::none && p.out == nullptr) {
            return invalid_argument("forward pass: part {} wants logits but gives no output", i);
        }
        const kv::kv_cache& cache = p.s->cache();
        caches_.push_back(&p.s->cache());
        counts_.push_back(static_cast<int>(p.tokens.size()));
        for (size_t t = 0; t < p.tokens.size(); ++t) {
            tokens_.push_back(p.tokens[t]);
            positions_.push_back(cache.position_of(cache.chunk_done() + static_cast<int>(t)));
            const bool want = p.logits == model::logits_mode::all ||
                              (p.logits == model::logits_mode::last && t + 1 == p.tokens.size());
            output_.push_back(want ? 1 : 0);
            n_out += want;
        }
    }
    if (parts.empty()) return invalid_argument("forward pass: no parts");
    H2OKV_RETURN_IF_ERROR(runner_.begin_step(caches_, counts_));
    const model::batch b{tokens_, positions_, output_};
    const auto n_vocab = static_cast<size_t>(model_->params().n_vocab);
    // One part writes its logits in place; several share a buffer, then each part's rows are copied out.
    float* dst = parts.size() == 1 ? parts[0].out : nullptr;
    if (dst == nullptr && n_out > 0) {
        try {
            if (logits_.size() < n_out * n_vocab) logits_.resize(n_out * n_vocab);
        } catch (const std::bad_alloc&) {
            return out_of_memory("forward pass: cannot allocate the logits of {} tokens", n_out);
        }
        dst = logits_.data();
    }
    const status st = model_->forward(b, runner_, dst);
    if (!st.ok()) {
        runner_.end_step();
        return st;
    }
    runner_.end_step();
    if (parts.size() > 1 && n_out > 0) {
        // Each part's rows out of the shared buffer; the parts' copies split between the threads when large.
        first_row_.clear();
        size_t row = 0;
        for (const step_part& p : parts) {
            first_row_.push_back(row);
            row += rows_of(p);
        }
        const auto n_parts = static_cast<int64_t>(parts.size());
        const bool fork = core::should_fork(core::parallel_site::tokens,
                                            static_cast<int64_t>(n_out * n_vocab), k_copy_min_floats);
        core::parallel_for(fork, n_parts, [&](int64_t i) {
            const step_part& p = parts[static_cast<size_t>(i)];
            if (const size_t rows = rows_of(p); rows > 0) {
                std::memcpy(p.out, logits_.data() + first_row_[static_cast<size_t>(i)] * n_vocab,
                            rows * n_vocab * sizeof(float));
            }
        });
    }
    // The sessions move past their tokens. Those whose chunk is now complete close it (their evictions) in
    // parallel, as the attention items already work: each closes only its own cache and policy. Their
    // observers run after, in part order.
    const core::phase_scope timed(core::phase::chunks);
    closing_.clear();
    for (const step_part& p : parts) {
        if (p.s->count_forwarded(static_cast<int>(p.tokens.size()))) closing_.push_back(p.s);
    }
    const auto n_closing = static_cast<int64_t>(closing_.size());
    closed_.assign(closing_.size(), ok_status());
    core::parallel_for<true>(n_closing > 1 && core::should_fork(core::parallel_site::close, n_closing, 2),
                             n_closing, [&](int64_t i) {
                                 closed_[static_cast<size_t>(i)] =
                                     closing_[static_cast<size_t>(i)]->close_chunk();
                             });
    for (size_t i = 0; i < closing_.size(); ++i) {
        H2OKV_RETURN_IF_ERROR(closed_[i]);
        closing_[i]->notify_chunk_closed();
    }
    return ok_status();
}

}  // namespace h2okv::engine
