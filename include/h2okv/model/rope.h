// RoPE scaling as GGUF files describe it, turned into the per-layer kernels::rope_spec the forward pass (and
// a cache that rotates keys itself) applies. The math is llama.cpp's (ggml's rope with frequency factors and
// YaRN), computed once at load in double:
//   theta_extrap_i = base^(-2i / rope_dim) / freq_factor_i          (freq_factor: rope_freqs.weight, else 1)
//   linear:  inv_freq_i = theta_extrap_i / factor
//   yarn:    inv_freq_i = theta_extrap_i * ((1 - r_i) / factor + r_i), r_i = ext_factor * ramp_i, ramp_i
//            falling from 1 to 0 between the correction dims of beta_fast and beta_slow for the original
//            context; magnitude = attn_factor * (1 + 0.1 ln factor) for factor > 1
//   none:    inv_freq_i = theta_extrap_i
// and every type multiplies the magnitude by rope.scaling.attn_factor.
//
//   model::rope_scaling sc{.type = model::rope_scaling_type::yarn, .factor = 4, .orig_ctx = 32768};
//   kernels::rope_spec s = model::make_rope_spec(128, 1e6f, kernels::rope_pairing::neox, {}, sc);
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "h2okv/core/status.h"
#include "h2okv/kernels/kernels.h"

namespace h2okv::model {

// The values of `<arch>.rope.scaling.type` h2okv applies ("longrope" is refused by the loaders).
enum class rope_scaling_type { none, linear, yarn };
const char* rope_scaling_type_name(rope_scaling_type t);

struct rope_scaling {
    rope_scaling_type type = rope_scaling_type::none;
    double factor = 1.0;      // rope.scaling.factor: how many times the trained context is stretched
    int64_t orig_ctx = 0;     // yarn: rope.scaling.original_context_length (the trained context)
    double ext_factor = 1.0;  // yarn: weight of the extrapolated angle in the ramp
    double beta_fast = 32.0;  // yarn: correction dims' rotation counts (llama.cpp's defaults)
    double beta_slow = 1.0;
    double attn_factor = 1.0;  // rope.scaling.attn_factor: multiplies the magnitude of every type
    double log_mul = 0.0;      // yarn: rope.scaling.yarn_log_multiplier (HF's mscale_all_dim); 0: none. The
                               // magnitude becomes (1 + 0.1 ln factor) / (1 + 0.1 log_mul ln factor)
    // Refuses a factor <= 0, a yarn context < 1, or betas out of order, naming the values.
    status validate() const;
    std::string to_string() const;
};

// The spec of a layer rotating rope_dim dims with `freq_base`; freq_factors: empty or [rope_dim / 2]
// divisors of the frequencies (Llama 3.1's rope_freqs.weight).
kernels::rope_spec make_rope_spec(int rope_dim, float freq_base, kernels::rope_pairing pairing,
                                  std::span<const float> freq_factors, const rope_scaling& scaling);

// Turning a key already rotated at one position to another (rolling positions, h2okv/kv/kv_cache.h).
// Rotations compose: a key rotated at p and turned by d is the key rotated at p + d, up to float rounding;
// the magnitude (yarn's) was applied once, when the key was rotated, and a turn does not apply it again.
// rope_turn_table writes the turn by `delta` positions (any sign) of spec s in the form kernels::turn_rows
// reads: [2 * rope_dim] floats, each dim's pair's cosine, then each dim's pair's sine, negated for the pair's
// first dim (angles from kernels::rope_rotation).
void rope_turn_table(const kernels::rope_spec& s, int64_t delta, float* turn_table);

}  // namespace h2okv::model
