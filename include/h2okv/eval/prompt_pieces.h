// Pieces of synthetic prompts that the retrieval harnesses (passkey, ruler) join as token sequences, so that
// a prompt's length in tokens is exact whatever the tokenizer does at the joins.
//
//   H2OKV_ASSIGN_OR_RETURN(auto needle, eval::encode_piece(tok, "The pass key is 12345."));
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "h2okv/core/status.h"
#include "h2okv/tokenizer/tokenizer.h"

namespace h2okv::eval {

// `text` tokenized on its own (no BOS), preceded by a space where the tokenizer adds none, so that it starts
// a word whatever comes before it.
result<std::vector<int32_t>> encode_piece(const tokenizer::tokenizer& tok, std::string_view text);

}  // namespace h2okv::eval
