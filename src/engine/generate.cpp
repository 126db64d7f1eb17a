#include "h2okv/engine/generate.h"

namespace h2okv::engine {

status generation_params::validate() const {
    if (n_predict < 0) return invalid_argument("-n {} must be >= 0", n_predict);
    return sampling.validate();
}

result<generation> generate(session& s, std::span<const int32_t> prompt, const generation_params& p,
                            const std::function<bool(int32_t)>& is_end,
                            const std::function<void(int32_t)>& on_token) {
    H2OKV_RETURN_IF_ERROR(p.validate());
    if (prompt.empty()) return invalid_argument("generate: the prompt has no tokens (expected at least BOS)");
    generation g;
    if (p.n_predict == 0) {
        H2OKV_RETURN_IF_ERROR(s.process(prompt, model::logits_mode::none, nullptr));
        return g;
    }
    sampler smp(p.sampling);
    std::vector<float> logits;
    H2OKV_RETURN_IF_ERROR(s.process(prompt, model::logits_mode::last, &logits));
    for (int i = 0; i < p.n_predict; ++i) {
        const int32_t id = smp.sample(logits);
        if (p.keep_tokens) g.tokens.push_back(id);
        ++g.n_generated;
        if (on_token) on_token(id);
        if (!p.ignore_eos && is_end && is_end(id)) {
            g.stopped_at_eos = true;
            break;
        }
        if (i + 1 == p.n_predict) break;
        const int32_t next[1] = {id};
        H2OKV_RETURN_IF_ERROR(s.process(next, model::logits_mode::last, &logits));
    }
    return g;
}

}  // namespace h2okv::engine
