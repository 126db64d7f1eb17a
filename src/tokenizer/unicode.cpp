#include "tokenizer/unicode.h"

#include <algorithm>

namespace h2okv::tokenizer::detail {

size_t utf8_sequence_length(unsigned char lead) {
    static constexpr size_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[lead >> 4];
}

std::vector<utf8_unit> decode_utf8(std::string_view text) {
    std::vector<utf8_unit> units;
    units.reserve(text.size());
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    const size_t n = text.size();
    auto continuation = [&](size_t i) { return i < n && (s[i] & 0xC0) == 0x80; };
    size_t i = 0;
    while (i < n) {
        const unsigned char c = s[i];
        utf8_unit u;
        u.offset = static_cast<uint32_t>(i);
        if (c < 0x80) {
            u.cpt = c;
            u.size = 1;
        } else if ((c & 0xE0) == 0xC0 && continuation(i + 1)) {
            u.cpt = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
            u.size = 2;
        } else if ((c & 0xF0) == 0xE0 && continuation(i + 1) && continuation(i + 2)) {
            u.cpt = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
            u.size = 3;
        } else if ((c & 0xF8) == 0xF0 && continuation(i + 1) && continuation(i + 2) && continuation(i + 3)) {
            u.cpt = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) |
                    (s[i + 3] & 0x3Fu);
            u.size = 4;
        } else {
            u.cpt = 0xFFFD;
            u.size = 1;
        }
        units.push_back(u);
        i += u.size;
    }
    return units;
}

void append_utf8(std::string& out, uint32_t cpt) {
    if (cpt <= 0x7F) {
        out.push_back(static_cast<char>(cpt));
    } else if (cpt <= 0x7FF) {
        out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
        out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    } else if (cpt <= 0xFFFF) {
        out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | ((cpt >> 18) & 0x07)));
        out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    }
}

bool is_white_space(uint32_t cpt) {
    if (cpt < 0x80) return (cpt >= 0x09 && cpt <= 0x0D) || cpt == 0x20;
    switch (cpt) {
        case 0x85:
        case 0xA0:
        case 0x1680:
        case 0x2028:
        case 0x2029:
        case 0x202F:
        case 0x205F:
        case 0x3000: return true;
        default: return cpt >= 0x2000 && cpt <= 0x200A;
    }
}

namespace {

bool maps_to_itself(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct byte_level_tables {
    std::array<uint32_t, 256> code_point{};
    std::array<std::string, 256> utf8;
    byte_level_tables() {
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            code_point[b] = maps_to_itself(b) ? static_cast<uint32_t>(b) : next++;
            append_utf8(utf8[b], code_point[b]);
        }
    }
};

const byte_level_tables& tables() {
    static const byte_level_tables t;
    return t;
}

}  // namespace

uint32_t byte_to_code_point(uint8_t b) {
    return tables().code_point[b];
}

const std::array<std::string, 256>& byte_level_utf8() {
    return tables().utf8;
}

int code_point_to_byte(uint32_t cpt) {
    if (cpt < 256 && maps_to_itself(static_cast<int>(cpt))) return static_cast<int>(cpt);
    if (cpt < 256 || cpt >= 256 + 68) return -1;  // 68 bytes are remapped
    const auto& cp = tables().code_point;
    const auto it = std::find(cp.begin(), cp.end(), cpt);
    return it == cp.end() ? -1 : static_cast<int>(it - cp.begin());
}

}  // namespace h2okv::tokenizer::detail
