// Architecture `gemma3` (text): gemma2's blocks with an RMSNorm of every query and key head before RoPE
// and no attention soft-cap (a final soft-cap only when the file gives one). When the file has
// attention.sliding_window, five of every six layers (attention.sliding_window_pattern) attend only that many
// last positions and rotate with their own base (rope.freq_base_swa, 10000) and no scaling; the global
// layers take the file's rope.freq_base and rope.scaling.
#include "model/arch/archs.h"
#include "model/arch/decoder.h"

namespace h2okv::model {

result<std::unique_ptr<model>> load_gemma3(const gguf::file& f) {
    metadata_use use(f, "gemma3");
    H2OKV_ASSIGN_OR_RETURN(hparams hp,
                           read_decoder_hparams(use, kernels::rope_pairing::neox, /*rope_freqs=*/false));
    H2OKV_RETURN_IF_ERROR(read_sliding_hparams(use, hp,
                                               sliding_options{.default_window = 0,
                                                               .default_period = 6,
                                                               .local_base = 10000.0,
                                                               .local_scaled = false,
                                                               .attn_softcap = false,
                                                               .final_softcap = 0.0,
                                                               .big_layers = 62}));
    return load_decoder(
        use, std::move(hp),
        decoder_options{.qk_norm = true, .glu = glu_kind::gelu_tanh, .embd_scale = true, .post_norms = true});
}

}  // namespace h2okv::model
