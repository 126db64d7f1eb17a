// Architecture `qwen3` (dense Qwen3): qwen2's blocks without biases, plus an RMSNorm of every query and key
// head (attn_q_norm / attn_k_norm) before RoPE; the head dimension (attention.key_length, 128) need not be
// n_embd / n_head.
#include "model/arch/archs.h"
#include "model/arch/decoder.h"

namespace h2okv::model {

result<std::unique_ptr<model>> load_qwen3(const gguf::file& f) {
    metadata_use use(f, "qwen3");
    H2OKV_ASSIGN_OR_RETURN(hparams hp,
                           read_decoder_hparams(use, kernels::rope_pairing::neox, /*rope_freqs=*/false));
    return load_decoder(use, std::move(hp), decoder_options{.qk_norm = true});
}

}  // namespace h2okv::model
