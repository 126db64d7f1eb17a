// Architecture `mistral3` (Ministral 3 and Mistral's other mistral3 text files): llama's blocks, with the
// file's yarn betas and log multiplier applied (llama.cpp reads them for this architecture) and, when
// attention.temperature_scale is set, Llama 4's query temperature over the yarn original context
// (hparams::query_temperature). Mixture-of-experts files are refused with the expert count.
#include "model/arch/archs.h"
#include "model/arch/decoder.h"

namespace h2okv::model {

result<std::unique_ptr<model>> load_mistral3(const gguf::file& f) {
    metadata_use use(f, "mistral3");
    H2OKV_ASSIGN_OR_RETURN(hparams hp, read_decoder_hparams(use, kernels::rope_pairing::normal,
                                                            /*rope_freqs=*/true, /*yarn_keys=*/true));
    H2OKV_ASSIGN_OR_RETURN(double temp, use.real("attention.temperature_scale", 0.0));
    hp.attn_temp_scale = static_cast<float>(temp);
    hp.attn_temp_floor = hp.rope_scale.orig_ctx;
    return load_decoder(use, std::move(hp), decoder_options{});
}

}  // namespace h2okv::model
