// Multiple-choice scoring: one fresh session per (context, choice) sequence, log-likelihood of the choice.
#include "h2okv/eval/tasks.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace h2okv::eval {
namespace {

uint64_t splitmix64(uint64_t& state) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// Uniform in [0, n) by rejection (no modulo bias).
uint64_t uniform_below(uint64_t& state, uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
        const uint64_t x = splitmix64(state);
        if (x < limit) return x % n;
    }
}

double binomial_stderr(double p, int64_t n) {
    return n > 1 ? std::sqrt(p * (1.0 - p) / static_cast<double>(n - 1)) : 0.0;
}

}  // namespace

result<encoded_choice> encode_choice(const tokenizer::tokenizer& tok, const task_choice& c) {
    std::string_view context = c.context;
    std::string continuation = c.continuation;
    while (!context.empty() && context.back() == ' ') {
        context.remove_suffix(1);
        continuation.insert(continuation.begin(), ' ');
    }
    if (continuation.empty()) return invalid_argument("the choice's continuation is empty");
    H2OKV_ASSIGN_OR_RETURN(auto whole, tok.encode(std::string(context) + continuation, false, false));
    H2OKV_ASSIGN_OR_RETURN(auto ctx, tok.encode(context, false, false));
    encoded_choice e;
    const bool bos = tok.add_bos() && tok.bos() >= 0;
    if (bos) e.tokens.push_back(tok.bos());
    e.tokens.insert(e.tokens.end(), whole.begin(), whole.end());
    e.n_context = (bos ? 1 : 0) + ctx.size();
    e.n_bytes = static_cast<int64_t>(continuation.size());
    if (e.n_context == 0) {
        return invalid_argument("nothing precedes the continuation '{}' (no BOS, empty context)",
                                continuation);
    }
    if (e.tokens.size() <= e.n_context) {
        return invalid_argument("continuation '{}' adds no token to context '{}' ({} tokens either way)",
                                continuation, context, ctx.size());
    }
    return e;
}

result<sequence_score> continuation_loglik(model::model& m, std::span<const int32_t> tokens, size_t n_context,
                                           const engine::session_params& sp) {
    if (n_context < 1 || n_context >= tokens.size()) {
        return invalid_argument("n_context {} must be in [1, {}) for a sequence of {} tokens", n_context,
                                tokens.size(), tokens.size());
    }
    if (sp.prefill_chunk < 1) return invalid_argument("prefill_chunk {} must be >= 1", sp.prefill_chunk);
    const auto n = static_cast<int64_t>(tokens.size());
    H2OKV_ASSIGN_OR_RETURN(auto s, engine::session::create(m, sp, n));
    const auto n_vocab = static_cast<size_t>(m.params().n_vocab);
    const int64_t first_pred =
        static_cast<int64_t>(n_context) - 1;  // the position predicting the first scored
    const int64_t chunk = sp.prefill_chunk;
    std::vector<float> logits;
    sequence_score r;
    // The last token predicts nothing: it is left out (what it would evict cannot change any scored
    // logit). run_length still counts it, so fractional budgets are fractions of the whole sequence.
    for (int64_t off = 0; off < n - 1; off += chunk) {
        const int64_t len = std::min(chunk, n - 1 - off);
        auto piece = tokens.subspan(static_cast<size_t>(off), static_cast<size_t>(len));
        const bool needed = off + len - 1 >= first_pred;
        H2OKV_RETURN_IF_ERROR(
            s->process(piece, needed ? model::logits_mode::all : model::logits_mode::none, &logits));
        if (!needed) continue;
        for (int64_t i = std::max<int64_t>(0, first_pred - off); i < len; ++i) {
            r.loglik -=
                token_nll(std::span<const float>(logits).subspan(static_cast<size_t>(i) * n_vocab, n_vocab),
                          tokens[static_cast<size_t>(off + i + 1)]);
        }
    }
    r.n_scored = n - static_cast<int64_t>(n_context);
    r.evictions = s->cache().policy().total_evictions();
    r.budget = s->cache().policy().config().budget;
    return r;
}

int best_choice(std::span<const choice_score> scores, bool normalized) {
    int best = 0;
    double best_value = 0.0;
    for (size_t i = 0; i < scores.size(); ++i) {
        const double v =
            normalized ? scores[i].loglik / static_cast<double>(scores[i].n_bytes) : scores[i].loglik;
        if (i == 0 || v > best_value) {
            best = static_cast<int>(i);
            best_value = v;
        }
    }
    return best;
}

result<std::vector<size_t>> few_shot_indices(size_t pool_size, size_t exclude, int shots, uint64_t seed) {
    if (shots < 0) return invalid_argument("shots {} must be >= 0", shots);
    const size_t others = pool_size - (exclude < pool_size ? 1 : 0);
    if (static_cast<size_t>(shots) > others) {
        return invalid_argument("{} shots requested but the file has only {} other items", shots, others);
    }
    // One stream per (seed, item): an item's examples do not depend on which other items are evaluated.
    uint64_t state = seed;
    state = splitmix64(state) ^ (static_cast<uint64_t>(exclude) * 0xD1B54A32D192ED03ULL);
    std::vector<size_t> picked;
    while (picked.size() < static_cast<size_t>(shots)) {
        const auto i = static_cast<size_t>(uniform_below(state, pool_size));
        if (i == exclude || std::find(picked.begin(), picked.end(), i) != picked.end()) continue;
        picked.push_back(i);
    }
    return picked;
}

result<task_item> with_few_shot(const task_set& set, size_t item, int shots, uint64_t seed) {
    if (item >= set.items.size()) {
        return out_of_range("item {} of a task with {} items", item, set.items.size());
    }
    task_item it = set.items[item];
    if (shots == 0) return it;
    H2OKV_ASSIGN_OR_RETURN(auto picked, few_shot_indices(set.items.size(), item, shots, seed));
    std::string prefix;
    for (size_t i : picked) {
        const task_item& ex = set.items[i];
        const task_choice& g = ex.choices[static_cast<size_t>(ex.gold)];
        prefix += g.context + g.continuation + "\n\n";
    }
    for (auto& c : it.choices) c.context = prefix + c.context;
    return it;
}

result<task_result> evaluate_task(model::model& m, const tokenizer::tokenizer& tok, const task_set& set,
                                  const task_options& o, const progress_fn& progress) {
    if (o.limit < 0) return invalid_argument("limit {} must be >= 0", o.limit);
    H2OKV_RETURN_IF_ERROR(o.session.validate());
    {
        // The policy's own checks (a missing budget, ...) once here rather than at the first item; budgets
        // that only fail against a short sequence still fail at that item.
        const auto& hp = m.params();
        policy::layout l;
        l.n_layer = hp.n_layer;
        l.n_kv_head = hp.n_kv_head;
        l.n_head = hp.n_head;
        l.max_chunk = o.session.prefill_chunk;
        l.max_positions = o.session.n_ctx > 0 ? o.session.n_ctx : hp.n_ctx_train;
        H2OKV_RETURN_IF_ERROR(policy::kv_policy::create(o.session.kv, l, l.max_positions));
    }
    const size_t n_items =
        o.limit > 0 ? std::min(set.eval.size(), static_cast<size_t>(o.limit)) : set.eval.size();
    const auto start = std::chrono::steady_clock::now();
    task_result r;
    double budget_sum = 0.0;
    for (size_t k = 0; k < n_items; ++k) {
        const size_t index = set.eval[k];
        auto in_item = [&](const status& s) {
            return s.with_context(fmt::format("{} item {} (id {})", set.path, index, set.items[index].id));
        };
        auto item = with_few_shot(set, index, o.shots, o.seed);
        if (!item.ok()) return in_item(item.error());
        if (item->choices.size() < 2 || item->gold < 0 ||
            static_cast<size_t>(item->gold) >= item->choices.size()) {
            return in_item(
                invalid_argument("{} choices with gold {}, expected >= 2 choices and a gold among them",
                                 item->choices.size(), item->gold));
        }
        item_result ir;
        ir.index = index;
        ir.gold = item->gold;
        for (const auto& c : item->choices) {
            auto e = encode_choice(tok, c);
            if (!e.ok()) return in_item(e.error());
            auto s = continuation_loglik(m, e->tokens, e->n_context, o.session);
            if (!s.ok()) return in_item(s.error());
            ir.scores.push_back({s->loglik, e->n_bytes});
            ++r.n_sequences;
            r.n_tokens += static_cast<int64_t>(e->tokens.size());
            r.evictions += s->evictions;
            budget_sum += static_cast<double>(s->budget);
        }
        ir.pred = best_choice(ir.scores, false);
        ir.pred_norm = best_choice(ir.scores, true);
        r.correct += ir.pred == ir.gold;
        r.correct_norm += ir.pred_norm == ir.gold;
        r.items.push_back(std::move(ir));
        if (progress) progress(static_cast<int64_t>(k + 1), static_cast<int64_t>(n_items));
    }
    r.n_items = static_cast<int64_t>(n_items);
    if (r.n_items > 0) {
        r.acc = static_cast<double>(r.correct) / static_cast<double>(r.n_items);
        r.acc_norm = static_cast<double>(r.correct_norm) / static_cast<double>(r.n_items);
    }
    r.acc_stderr = binomial_stderr(r.acc, r.n_items);
    r.acc_norm_stderr = binomial_stderr(r.acc_norm, r.n_items);
    if (r.n_sequences > 0) r.mean_budget = budget_sum / static_cast<double>(r.n_sequences);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
}

}  // namespace h2okv::eval
