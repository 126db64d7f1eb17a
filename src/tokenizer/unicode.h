// UTF-8 and byte-level helpers shared by the tokenizer algorithms (internal).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace h2okv::tokenizer::detail {

// Byte length of the UTF-8 sequence a lead byte announces, from its top four bits alone (1 for continuation
// bytes), as llama.cpp's unicode_len_utf8: SPM and BPE split symbols with it.
size_t utf8_sequence_length(unsigned char lead);

// One unit of a decoded byte string: a code point, or one byte that starts no well-formed sequence.
struct utf8_unit {
    uint32_t cpt = 0;     // 0xFFFD for an invalid byte
    uint32_t offset = 0;  // first byte in the string
    uint32_t size = 0;    // bytes
};
// Decodes like llama.cpp's unicode_cpts_from_utf8 (which checks lead and continuation bits only and turns
// each byte it cannot decode into U+FFFD), but keeps where every unit came from so no byte is lost.
std::vector<utf8_unit> decode_utf8(std::string_view text);

void append_utf8(std::string& out, uint32_t cpt);  // cpt <= 0x10FFFF

// The Unicode White_Space property (what llama.cpp's tables call whitespace).
bool is_white_space(uint32_t cpt);

// GPT-2's byte-level alphabet: byte b is written as the UTF-8 of byte_to_code_point(b); printable bytes map
// to themselves, the others to U+0100.. in byte order.
uint32_t byte_to_code_point(uint8_t b);
const std::array<std::string, 256>& byte_level_utf8();  // UTF-8 of byte_to_code_point(b) for each b
// The byte a byte-level code point stands for, or -1 when the code point is not in the alphabet.
int code_point_to_byte(uint32_t cpt);

}  // namespace h2okv::tokenizer::detail
