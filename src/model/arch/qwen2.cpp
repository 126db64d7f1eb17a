// Architecture `qwen2` (Qwen2, Qwen2.5 and their coder/math variants): the llama blocks with q/k/v biases and
// NeoX RoPE pairing (dims i and i + rope_dim/2); Qwen2.5's long-context files use yarn rope scaling.
#include "model/arch/archs.h"
#include "model/arch/decoder.h"

namespace h2okv::model {

result<std::unique_ptr<model>> load_qwen2(const gguf::file& f) {
    metadata_use use(f, "qwen2");
    H2OKV_ASSIGN_OR_RETURN(hparams hp,
                           read_decoder_hparams(use, kernels::rope_pairing::neox, /*rope_freqs=*/false));
    return load_decoder(use, std::move(hp), decoder_options{});
}

}  // namespace h2okv::model
