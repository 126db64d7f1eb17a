#include "h2okv/engine/sampler.h"

#include <algorithm>
#include <cmath>

namespace h2okv::engine {

status sampler_params::validate() const {
    if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
        return invalid_argument("temperature {} must be a finite value >= 0", temperature);
    }
    if (top_k < 0) return invalid_argument("top-k {} must be >= 0 (0 = no limit)", top_k);
    if (!(top_p > 0.0f && top_p <= 1.0f)) return invalid_argument("top-p {} must be in (0, 1]", top_p);
    return ok_status();
}

sampler::sampler(const sampler_params& p) : params_(p), state_(p.seed) {}

double sampler::uniform() {
    state_ += 0x9e3779b97f4a7c15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;
}

int32_t sampler::argmax(std::span<const float> logits) {
    int32_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i) {
        if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
    }
    return best;
}

int32_t sampler::sample(std::span<const float> logits) {
    if (params_.temperature == 0.0f) return argmax(logits);
    candidates_.clear();
    for (size_t i = 0; i < logits.size(); ++i) candidates_.emplace_back(logits[i], static_cast<int32_t>(i));
    // Highest logit first; equal logits by ascending id, so the order is total and reproducible.
    auto better = [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    size_t n = candidates_.size();
    if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
        n = static_cast<size_t>(params_.top_k);
        std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(n),
                          candidates_.end(), better);
    } else {
        std::sort(candidates_.begin(), candidates_.end(), better);
    }
    std::vector<double>& probs = probs_;
    probs.assign(n, 0.0);
    const double max_logit = candidates_[0].first;
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
        probs[i] = std::exp((candidates_[i].first - max_logit) / params_.temperature);
        sum += probs[i];
    }
    size_t keep = n;
    double cumulative = 0.0;
    for (size_t i = 0; i < n; ++i) {
        cumulative += probs[i] / sum;
        if (cumulative >= params_.top_p) {
            keep = i + 1;
            break;
        }
    }
    double kept_sum = 0.0;
    for (size_t i = 0; i < keep; ++i) kept_sum += probs[i];
    const double r = uniform() * kept_sum;
    double acc = 0.0;
    for (size_t i = 0; i < keep; ++i) {
        acc += probs[i];
        if (r < acc) return candidates_[i].second;
    }
    return candidates_[keep - 1].second;
}

}  // namespace h2okv::engine
