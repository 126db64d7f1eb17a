// Architecture `llama` (Llama 1/2/3.x, TinyLlama, SmolLM, Mistral 7B and its fine-tunes): RMSNorm, RoPE with
// normal pairing (Llama 3.1's rope_freqs.weight frequency factors and any rope.scaling.* type applied),
// grouped-query attention with optional q/k/v biases, SwiGLU, a tied or separate output matrix.
//
// Mistral files convert to this architecture; Mistral 7B v0.1's 4096-token sliding window is not in its GGUF
// metadata, and llama.cpp (the yardstick) attends over the whole context too.
#include "model/arch/archs.h"
#include "model/arch/decoder.h"

namespace h2okv::model {

result<std::unique_ptr<model>> load_llama(const gguf::file& f) {
    metadata_use use(f, "llama");
    H2OKV_ASSIGN_OR_RETURN(hparams hp,
                           read_decoder_hparams(use, kernels::rope_pairing::normal, /*rope_freqs=*/true));
    return load_decoder(use, std::move(hp), decoder_options{});
}

}  // namespace h2okv::model
