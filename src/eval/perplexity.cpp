#include "h2okv/eval/perplexity.h"

#include <chrono>
#include <cmath>
#include <vector>

namespace h2okv::eval {

double token_nll(std::span<const float> logits, int32_t target) {
    double max = logits[0];
    for (float x : logits) max = std::max(max, static_cast<double>(x));
    double sum = 0.0;
    for (float x : logits) sum += std::exp(static_cast<double>(x) - max);
    return std::log(sum) + max - static_cast<double>(logits[static_cast<size_t>(target)]);
}

result<perplexity_result> perplexity(model::model& m, std::span<const int32_t> tokens,
                                     engine::session_params sp, int chunk, const progress_fn& progress,
                                     int window) {
    if (tokens.size() < 2) {
        return invalid_argument("perplexity needs at least 2 tokens (BOS and one to predict), got {}",
                                tokens.size());
    }
    if (chunk < 1) return invalid_argument("perplexity chunk {} must be >= 1", chunk);
    if (window < 0) return invalid_argument("perplexity NLL window {} must be >= 0 (0: none)", window);
    sp.prefill_chunk = chunk;
    const auto n = static_cast<int64_t>(tokens.size());
    H2OKV_ASSIGN_OR_RETURN(auto s, engine::session::create(m, sp, n));
    const auto n_vocab = static_cast<size_t>(m.params().n_vocab);
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> logits;
    double nll = 0.0;
    perplexity_result r;
    double window_sum = 0.0;
    int64_t window_n = 0;
    for (int64_t off = 0; off < n; off += chunk) {
        const int64_t len = std::min<int64_t>(chunk, n - off);
        auto piece = tokens.subspan(static_cast<size_t>(off), static_cast<size_t>(len));
        H2OKV_RETURN_IF_ERROR(s->process(piece, model::logits_mode::all, &logits));
        for (int64_t i = 0; i < len; ++i) {
            const int64_t target = off + i + 1;
            if (target >= n) break;
            const double x =
                token_nll(std::span<const float>(logits).subspan(static_cast<size_t>(i) * n_vocab, n_vocab),
                          tokens[static_cast<size_t>(target)]);
            nll += x;
            if (window > 0) {
                window_sum += x;
                if (++window_n == window || target == n - 1) {
                    r.window_nll.push_back(window_sum / static_cast<double>(window_n));
                    window_sum = 0.0;
                    window_n = 0;
                }
            }
        }
        if (progress) progress(off + len, n);
    }
    r.n_tokens = n;
    r.n_predicted = n - 1;
    r.mean_nll = nll / static_cast<double>(n - 1);
    r.perplexity = std::exp(r.mean_nll);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.evictions = s->cache().policy().total_evictions();
    r.kv_bytes = s->cache().bytes();
    r.config = s->cache().policy().config();
    r.run_nll = {r.mean_nll};
    return r;
}

result<perplexity_result> perplexity(model::model& m, std::span<const std::vector<int32_t>> runs,
                                     const engine::session_params& sp, int chunk,
                                     const progress_fn& progress) {
    if (runs.empty()) return invalid_argument("perplexity over runs needs at least one run");
    int64_t total = 0;
    for (const auto& run : runs) total += static_cast<int64_t>(run.size());
    perplexity_result pooled;
    double nll = 0.0;
    for (const auto& run : runs) {
        const int64_t done = pooled.n_tokens;
        H2OKV_ASSIGN_OR_RETURN(perplexity_result one,
                               perplexity(m, run, sp, chunk, [&progress, done, total](int64_t d, int64_t) {
                                   if (progress) progress(done + d, total);
                               }));
        if (pooled.run_nll.empty()) {
            pooled.kv_bytes = one.kv_bytes;
            pooled.config = one.config;
        }
        pooled.n_tokens += one.n_tokens;
        pooled.n_predicted += one.n_predicted;
        pooled.seconds += one.seconds;
        pooled.evictions += one.evictions;
        pooled.run_nll.push_back(one.mean_nll);
        nll += one.mean_nll * static_cast<double>(one.n_predicted);
    }
    pooled.mean_nll = nll / static_cast<double>(pooled.n_predicted);
    pooled.perplexity = std::exp(pooled.mean_nll);
    return pooled;
}

}  // namespace h2okv::eval
