#include "h2okv/eval/agreement.h"

#include <chrono>
#include <cstdint>
#include <vector>

#include "h2okv/engine/sampler.h"

namespace h2okv::eval {

result<agreement_result> agreement(model::model& m, std::span<const int32_t> prompt, int64_t n_steps,
                                   const engine::session_params& sp, const agreement_progress_fn& progress,
                                   std::optional<kv::kv_type> reference_kv_type) {
    if (prompt.empty())
        return invalid_argument("agreement: the prompt has no tokens (expected at least BOS)");
    if (n_steps < 1) return invalid_argument("agreement: {} steps, expected at least 1", n_steps);
    const auto p = static_cast<int64_t>(prompt.size());
    const int64_t run_length = p + n_steps;
    engine::session_params full_sp = sp;
    full_sp.kv = policy::params{};
    full_sp.kv_budget_bytes = 0;
    if (reference_kv_type) full_sp.kv_type = *reference_kv_type;
    H2OKV_ASSIGN_OR_RETURN(auto full, engine::session::create(m, full_sp, run_length));
    H2OKV_ASSIGN_OR_RETURN(auto evicting, engine::session::create(m, sp, run_length));

    const auto start = std::chrono::steady_clock::now();
    if (p > 1) {
        auto head = prompt.first(static_cast<size_t>(p - 1));
        H2OKV_RETURN_IF_ERROR(full->process(head, model::logits_mode::none, nullptr));
        H2OKV_RETURN_IF_ERROR(evicting->process(head, model::logits_mode::none, nullptr));
    }

    const model::hparams& hp = m.params();
    const int group = hp.gqa_group();
    // masks[layer * n_kv_head + kv_head][pos]: whether the evicting session attends `pos` at this step.
    std::vector<std::vector<uint8_t>> masks(static_cast<size_t>(hp.n_layer) * hp.n_kv_head);
    double step_sum = 0.0;
    int64_t step_rows = 0;
    full->cache().set_weights_observer([&](int layer, int head, int64_t, std::span<const int64_t> positions,
                                           std::span<const float> weights) {
        const auto& mask =
            masks[static_cast<size_t>(layer) * hp.n_kv_head + static_cast<size_t>(head / group)];
        double total = 0.0, kept = 0.0;
        for (size_t j = 0; j < positions.size(); ++j) {
            const auto w = static_cast<double>(weights[j]);
            total += w;
            const auto pos = static_cast<size_t>(positions[j]);
            if (pos < mask.size() && mask[pos] != 0) kept += w;
        }
        step_sum += total > 0.0 ? kept / total : 0.0;
        ++step_rows;
    });

    agreement_result r;
    r.prompt_tokens = p;
    r.n_steps = n_steps;
    r.run_length = run_length;
    std::vector<float> full_logits, logits;
    const int64_t rows_per_step = static_cast<int64_t>(hp.n_layer) * hp.n_head;
    for (int64_t step = 0; step < n_steps; ++step) {
        const int64_t pos = p - 1 + step;
        const int32_t token[1] = {step == 0 ? prompt.back() : r.reference.back()};
        const auto kept = evicting->cache().kept_per_head();
        for (size_t i = 0; i < masks.size(); ++i) {
            masks[i].assign(static_cast<size_t>(pos) + 1, 0);
            for (int64_t k : kept[i]) masks[i][static_cast<size_t>(k)] = 1;
            masks[i][static_cast<size_t>(pos)] = 1;
        }
        step_sum = 0.0;
        step_rows = 0;
        H2OKV_RETURN_IF_ERROR(full->process(token, model::logits_mode::last, &full_logits));
        if (step_rows != rows_per_step) {
            return internal_error(
                "agreement: step {} observed {} attention rows, expected {} ({} layers x {} heads)", step,
                step_rows, rows_per_step, hp.n_layer, hp.n_head);
        }
        H2OKV_RETURN_IF_ERROR(evicting->process(token, model::logits_mode::last, &logits));
        r.reference.push_back(engine::sampler::argmax(full_logits));
        r.predicted.push_back(engine::sampler::argmax(logits));
        r.mass_per_step.push_back(step_sum / static_cast<double>(rows_per_step));
        if (r.predicted.back() == r.reference.back()) {
            ++r.matches;
        } else if (r.first_divergence < 0) {
            r.first_divergence = step;
        }
        if (progress) progress(step + 1, n_steps);
    }
    full->cache().set_weights_observer(nullptr);
    double mass = 0.0;
    for (double x : r.mass_per_step) mass += x;
    r.retained_mass = mass / static_cast<double>(n_steps);
    r.match_rate = static_cast<double>(r.matches) / static_cast<double>(n_steps);
    r.evictions = evicting->cache().policy().total_evictions();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.config = evicting->cache().policy().config();
    return r;
}

agreement_summary summarize(std::span<const agreement_result> runs) {
    agreement_summary s;
    s.n_prompts = static_cast<int64_t>(runs.size());
    if (runs.empty()) return s;
    double divergence = 0.0;
    for (const auto& r : runs) {
        s.match_rate += r.match_rate;
        s.retained_mass += r.retained_mass;
        s.seconds += r.seconds;
        if (r.first_divergence >= 0) {
            ++s.n_diverged;
            divergence += static_cast<double>(r.first_divergence);
        }
    }
    s.match_rate /= static_cast<double>(runs.size());
    s.retained_mass /= static_cast<double>(runs.size());
    if (s.n_diverged > 0) s.mean_first_divergence = divergence / static_cast<double>(s.n_diverged);
    return s;
}

}  // namespace h2okv::eval
