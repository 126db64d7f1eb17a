#include "h2okv/eval/prompt_pieces.h"

#include <string>

namespace h2okv::eval {

result<std::vector<int32_t>> encode_piece(const tokenizer::tokenizer& tok, std::string_view text) {
    std::string s = tok.add_space_prefix() ? std::string(text) : " " + std::string(text);
    return tok.encode(s, /*add_special=*/false, /*parse_special=*/false);
}

}  // namespace h2okv::eval
