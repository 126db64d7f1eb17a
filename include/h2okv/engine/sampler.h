// Picks the next token from logits: greedy (argmax, ties to the lowest id) when temperature is 0, otherwise
// softmax(logits / temperature) restricted by top-k and top-p, drawn with a seeded generator whose sequence
// is the same on every platform.
//
//   engine::sampler s({.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 1});
//   int32_t id = s.sample(logits);
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "h2okv/core/status.h"

namespace h2okv::engine {

struct sampler_params {
    float temperature = 0.0f;  // 0: greedy
    int top_k = 0;             // 0: no limit
    float top_p = 1.0f;        // in (0, 1]; 1: no limit
    uint64_t seed = 0;
    status validate() const;
};

class sampler {
public:
    explicit sampler(const sampler_params& p);
    int32_t sample(std::span<const float> logits);
    static int32_t argmax(std::span<const float> logits);  // ties to the lowest id
    // Bytes of the candidate list sampling keeps (none when greedy).
    int64_t work_bytes() const {
        return static_cast<int64_t>(candidates_.capacity() * sizeof(candidates_[0]) +
                                    probs_.capacity() * sizeof(double));
    }

private:
    double uniform();  // [0, 1), from splitmix64

    sampler_params params_;
    uint64_t state_;
    std::vector<std::pair<float, int32_t>> candidates_;
    std::vector<double> probs_;
};

}  // namespace h2okv::engine
