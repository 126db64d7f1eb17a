#include "h2okv/model/model.h"

#include <cmath>
#include <utility>
#include <vector>

#include "model/arch/archs.h"

namespace h2okv::model {

status hparams::validate() const {
    if (n_vocab < 1) return invalid_file("{}: vocabulary size {} must be >= 1", arch, n_vocab);
    if (n_embd < 1) return invalid_file("{}.embedding_length is {}, expected >= 1", arch, n_embd);
    if (n_layer < 1) return invalid_file("{}.block_count is {}, expected >= 1", arch, n_layer);
    if (n_head < 1) return invalid_file("{}.attention.head_count is {}, expected >= 1", arch, n_head);
    if (n_kv_head < 1 || n_head % n_kv_head != 0) {
        return invalid_file("{}.attention.head_count_kv is {}, expected a divisor of head_count {}", arch,
                            n_kv_head, n_head);
    }
    if (head_dim < 2 || head_dim % 2 != 0) {
        return invalid_file(
            "{}: head dimension {} (embedding_length {} / head_count {}) must be even and >= 2", arch,
            head_dim, n_embd, n_head);
    }
    if (rope_dim < 2 || rope_dim > head_dim || rope_dim % 2 != 0) {
        return invalid_file("{}.rope.dimension_count is {}, expected an even number in [2, head_dim {}]",
                            arch, rope_dim, head_dim);
    }
    if (n_ff < 1) return invalid_file("{}.feed_forward_length is {}, expected >= 1", arch, n_ff);
    if (!(rope_freq_base > 0.0f)) {
        return invalid_file("{}.rope.freq_base is {}, expected > 0", arch, rope_freq_base);
    }
    if (!(rms_eps > 0.0f)) {
        return invalid_file("{}.attention.layer_norm_rms_epsilon is {}, expected > 0", arch, rms_eps);
    }
    if (layer_rope.size() != static_cast<size_t>(n_layer)) {
        return invalid_argument("{}: {} layers but {} per-layer rope specs", arch, n_layer,
                                layer_rope.size());
    }
    for (int r : layer_rope) {
        if (r < 0 || static_cast<size_t>(r) >= rope_specs.size() ||
            rope_specs[static_cast<size_t>(r)].inv_freq.size() != static_cast<size_t>(rope_dim / 2)) {
            return invalid_argument("{}: a layer's rope spec {} is not one of the {} specs of rope_dim {}",
                                    arch, r, rope_specs.size(), rope_dim);
        }
    }
    if (!layer_sliding.empty()) {
        if (layer_sliding.size() != static_cast<size_t>(n_layer)) {
            return invalid_argument("{}: {} layers but {} sliding-window flags", arch, n_layer,
                                    layer_sliding.size());
        }
        if (n_sliding() > 0 && sliding_window < 1) {
            return invalid_file("{}.attention.sliding_window is {}, expected >= 1", arch, sliding_window);
        }
    }
    for (auto [name, v] :
         {std::pair{"attention scale", attn_scale}, std::pair{"attn_logit_softcapping", attn_softcap},
          std::pair{"final_logit_softcapping", final_softcap}}) {
        if (!(v >= 0.0f) || !std::isfinite(v)) {
            return invalid_file("{}: {} is {}, expected a finite value >= 0 (0: none)", arch, name, v);
        }
    }
    if (!std::isfinite(attn_temp_scale) || (attn_temp_scale != 0.0f && attn_temp_floor < 1)) {
        return invalid_file(
            "{}: attention temperature scale {} over {} positions: expected a finite scale, "
            "and >= 1 positions when it is not 0",
            arch, attn_temp_scale, attn_temp_floor);
    }
    return ok_status();
}

int hparams::n_sliding() const {
    int n = 0;
    for (uint8_t s : layer_sliding) n += s != 0 ? 1 : 0;
    return n;
}

float hparams::query_temperature(int64_t rope_position) const {
    if (attn_temp_scale == 0.0f) return 1.0f;
    // In llama.cpp's types (llm_graph_input_attn_temp): a float quotient, the logarithm in double.
    const float q = std::floor(static_cast<float>(rope_position) / static_cast<float>(attn_temp_floor));
    return static_cast<float>(std::log(static_cast<double>(q) + 1.0) * attn_temp_scale + 1.0);
}

float hparams::attention_scale() const {
    return attn_scale > 0.0f ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

std::string hparams::to_string() const {
    return fmt::format(
               "{}: n_vocab {}, n_embd {}, n_layer {}, n_head {}, n_kv_head {}, head_dim {}, n_ff {}, "
               "rope_dim {}, "
               "rope_base {}, rope_scaling {}, rms_eps {}, n_ctx_train {}, {} output",
               arch, n_vocab, n_embd, n_layer, n_head, n_kv_head, head_dim, n_ff, rope_dim, rope_freq_base,
               rope_scale.to_string(), rms_eps, n_ctx_train, tied_output ? "tied" : "separate") +
           (n_sliding() > 0 ? fmt::format(", {} of {} layers sliding-window ({} positions)", n_sliding(),
                                          n_layer, sliding_window)
                            : "") +
           (attn_softcap > 0.0f ? fmt::format(", attention soft-cap {}", attn_softcap) : "") +
           (final_softcap > 0.0f ? fmt::format(", final soft-cap {}", final_softcap) : "") +
           (attn_temp_scale != 0.0f
                ? fmt::format(", query temperature {} per {} positions", attn_temp_scale, attn_temp_floor)
                : "");
}

std::vector<std::string> architecture_names() {
    return {
#define H2OKV_ARCH(name, loader) #name,
#include "model/arch/archs.def"
#undef H2OKV_ARCH
    };
}

result<std::unique_ptr<model>> model::load(const gguf::file& file) {
    H2OKV_ASSIGN_OR_RETURN(std::string arch, file.get_string("general.architecture"));
#define H2OKV_ARCH(name, loader) \
    if (arch == #name) return loader(file);
#include "model/arch/archs.def"
#undef H2OKV_ARCH
    std::string known;
    for (const auto& n : architecture_names()) known += (known.empty() ? "" : ", ") + n;
    return invalid_file("{}: general.architecture is '{}', expected one of: {}", file.path(), arch, known);
}

}  // namespace h2okv::model
