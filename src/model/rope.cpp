#include "h2okv/model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace h2okv::model {

const char* rope_scaling_type_name(rope_scaling_type t) {
    switch (t) {
        case rope_scaling_type::none: return "none";
        case rope_scaling_type::linear: return "linear";
        case rope_scaling_type::yarn: return "yarn";
    }
    return "?";
}

status rope_scaling::validate() const {
    if (!(factor > 0.0) || !std::isfinite(factor)) {
        return invalid_file("rope.scaling.factor is {}, expected a finite value > 0", factor);
    }
    if (!(attn_factor > 0.0) || !std::isfinite(attn_factor)) {
        return invalid_file("rope.scaling.attn_factor is {}, expected a finite value > 0", attn_factor);
    }
    if (type == rope_scaling_type::yarn) {
        if (orig_ctx < 1) {
            return invalid_file("rope.scaling.original_context_length is {}, expected >= 1 for yarn",
                                orig_ctx);
        }
        if (!(beta_fast > beta_slow && beta_slow > 0.0)) {
            return invalid_file("yarn betas fast {} and slow {}: expected fast > slow > 0", beta_fast,
                                beta_slow);
        }
        if (!std::isfinite(log_mul) || 1.0 + 0.1 * log_mul * std::log(std::max(factor, 1.0)) <= 0.0) {
            return invalid_file(
                "rope.scaling.yarn_log_multiplier is {}, expected a finite value with 1 + 0.1 * it * "
                "ln(factor) > 0",
                log_mul);
        }
    }
    return ok_status();
}

std::string rope_scaling::to_string() const {
    switch (type) {
        case rope_scaling_type::none: return "none";
        case rope_scaling_type::linear: return fmt::format("linear x{}", factor);
        case rope_scaling_type::yarn:
            return fmt::format("yarn x{} of {} (beta {}/{}{})", factor, orig_ctx, beta_fast, beta_slow,
                               log_mul != 0.0 ? fmt::format(", log multiplier {}", log_mul) : "");
    }
    return "?";
}

namespace {

// ggml's yarn correction dim: the pair index whose wavelength fits `n_rot` turns into the original context
// (float, as ggml computes it, so that the floor/ceil below pick the same pairs).
float yarn_corr_dim(int rope_dim, int64_t orig_ctx, double n_rot, float base) {
    return static_cast<float>(rope_dim) *
           std::log(static_cast<float>(orig_ctx) /
                    (static_cast<float>(n_rot) * 2.0f * std::numbers::pi_v<float>)) /
           (2.0f * std::log(base));
}

}  // namespace

kernels::rope_spec make_rope_spec(int rope_dim, float freq_base, kernels::rope_pairing pairing,
                                  std::span<const float> freq_factors, const rope_scaling& scaling) {
    kernels::rope_spec s = kernels::rope_spec::plain(rope_dim, freq_base, pairing);
    for (size_t i = 0; i < freq_factors.size() && i < s.inv_freq.size(); ++i)
        s.inv_freq[i] /= static_cast<double>(freq_factors[i]);
    const double freq_scale = 1.0 / scaling.factor;
    switch (scaling.type) {
        case rope_scaling_type::none: break;
        case rope_scaling_type::linear:
            for (double& f : s.inv_freq) f *= freq_scale;
            break;
        case rope_scaling_type::yarn: {
            const float low = std::max(
                0.0f, std::floor(yarn_corr_dim(rope_dim, scaling.orig_ctx, scaling.beta_fast, freq_base)));
            const float high =
                std::min(static_cast<float>(rope_dim - 1),
                         std::ceil(yarn_corr_dim(rope_dim, scaling.orig_ctx, scaling.beta_slow, freq_base)));
            for (size_t i = 0; i < s.inv_freq.size(); ++i) {
                const float y = (static_cast<float>(i) - low) / std::max(0.001f, high - low);
                const double ramp = 1.0 - std::min(1.0f, std::max(0.0f, y));
                const double mix = ramp * scaling.ext_factor;
                s.inv_freq[i] *= freq_scale * (1.0 - mix) + mix;
            }
            if (scaling.factor > 1.0) {
                const double ln = std::log(scaling.factor);
                s.magnitude =
                    (1.0 + 0.1 * ln) / (scaling.log_mul != 0.0 ? 1.0 + 0.1 * scaling.log_mul * ln : 1.0);
            }
            break;
        }
    }
    s.magnitude *= scaling.attn_factor;
    return s;
}

void rope_turn_table(const kernels::rope_spec& s, int64_t delta, float* turn_table) {
    kernels::rope_spec turn = s;
    turn.magnitude = 1.0;  // a pure rotation
    const int dim = s.rope_dim;
    std::vector<float> cs(static_cast<size_t>(dim));
    kernels::rope_rotation(turn, delta, cs.data());  // (cos, sin) per pair
    const int half = dim / 2;
    const bool normal = s.pairing == kernels::rope_pairing::normal;
    for (int i = 0; i < half; ++i) {
        const int a = normal ? 2 * i : i;  // the pair's dims
        const int b = normal ? 2 * i + 1 : half + i;
        const float c = cs[static_cast<size_t>(2 * i)];
        const float sn = cs[static_cast<size_t>(2 * i + 1)];
        turn_table[a] = c;
        turn_table[b] = c;
        turn_table[dim + a] = -sn;
        turn_table[dim + b] = sn;
    }
}

}  // namespace h2okv::model
