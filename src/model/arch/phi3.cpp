// Architecture `phi3` (Phi-3 / Phi-3.5 mini and medium with 4k context): one fused attn_qkv matrix, one fused
// ffn_up holding gate then up rows, NeoX RoPE pairing. Files with longrope scaling (the 128k variants) are
// refused by the rope.scaling.type check.
//
// phi3.attention.sliding_window is accepted and not applied: llama.cpp disables Phi-3's window too (its
// converted files do not describe the pattern correctly), and these models are compared against it.
#include "model/arch/archs.h"
#include "model/arch/decoder.h"

namespace h2okv::model {

result<std::unique_ptr<model>> load_phi3(const gguf::file& f) {
    metadata_use use(f, "phi3");
    H2OKV_ASSIGN_OR_RETURN(hparams hp,
                           read_decoder_hparams(use, kernels::rope_pairing::neox, /*rope_freqs=*/false));
    use.accept("attention.sliding_window");
    return load_decoder(use, std::move(hp), decoder_options{.fused_gate_up = true});
}

}  // namespace h2okv::model
