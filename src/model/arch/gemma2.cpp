// Architecture `gemma2`: embeddings scaled by sqrt(n_embd), NeoX RoPE, GeGLU (tanh GELU), RMSNorm after the
// attention and the FFN as well as before, attention scores and output logits soft-capped (50 and 30 unless
// the file says otherwise), and sliding-window layers: every other layer (0, 2, ...) attends only the last
// attention.sliding_window positions (4096 by default), with the same rope as the global layers unless
// rope.freq_base_swa is given. The output is tied to the embedding.
#include "model/arch/archs.h"
#include "model/arch/decoder.h"

namespace h2okv::model {

result<std::unique_ptr<model>> load_gemma2(const gguf::file& f) {
    metadata_use use(f, "gemma2");
    H2OKV_ASSIGN_OR_RETURN(hparams hp,
                           read_decoder_hparams(use, kernels::rope_pairing::neox, /*rope_freqs=*/false));
    H2OKV_RETURN_IF_ERROR(read_sliding_hparams(use, hp,
                                               sliding_options{.default_window = 4096,
                                                               .default_period = 2,
                                                               .local_base = std::nullopt,
                                                               .local_scaled = true,
                                                               .attn_softcap = true,
                                                               .final_softcap = 30.0,
                                                               .big_layers = 46}));
    return load_decoder(use, std::move(hp),
                        decoder_options{.glu = glu_kind::gelu_tanh, .embd_scale = true, .post_norms = true});
}

}  // namespace h2okv::model
