#include "h2okv/serve/text_stream.h"

#include <algorithm>

namespace h2okv::serve {
namespace {

// The length of the well-formed UTF-8 character at s[0] (Unicode's table 3-7: no overlong forms, no
// surrogates, nothing past U+10FFFF), 0 when it is malformed, -1 when s ends before it could be decided.
int char_length(std::string_view s) {
    const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned char c = b(0);
    if (c < 0x80) return 1;
    int n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    for (int i = 1; i < n; ++i) {
        if (static_cast<size_t>(i) >= s.size()) return -1;
        const unsigned char lower = i == 1 ? lo : 0x80, upper = i == 1 ? hi : 0xBF;
        if (b(i) < lower || b(i) > upper) return 0;
    }
    return n;
}

// Where the unfinished character at the end of s starts (s.size() when s ends on a character boundary).
size_t complete_prefix(std::string_view s) {
    const size_t from = s.size() > 3 ? s.size() - 3 : 0;
    for (size_t i = from; i < s.size(); ++i) {
        if (char_length(s.substr(i)) == -1) return i;
    }
    return s.size();
}

constexpr std::string_view k_replacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

std::string sanitize_utf8(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    for (size_t i = 0; i < bytes.size();) {
        const int n = char_length(bytes.substr(i));
        if (n > 0) {
            out.append(bytes.substr(i, static_cast<size_t>(n)));
            i += static_cast<size_t>(n);
        } else {
            out.append(k_replacement);
            ++i;
        }
    }
    return out;
}

text_stream::text_stream(std::vector<std::string> stops) : stops_(std::move(stops)) {
    std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

bool text_stream::push(std::string_view bytes) {
    if (stopped_) return true;
    const size_t before = pending_.size();
    pending_.append(bytes);
    // A stop string can only end in the new bytes: earlier ones were searched already.
    size_t cut = std::string::npos;
    for (const auto& s : stops_) {
        const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
        cut = std::min(cut, pending_.find(s, from));
    }
    if (cut != std::string::npos) {
        pending_.resize(cut);
        stopped_ = true;
    }
    return stopped_;
}

std::string text_stream::take() {
    if (stopped_) return finish();
    // Hold back the longest tail that could still grow into a stop string, then an unfinished character.
    size_t hold = 0;
    for (const auto& s : stops_) {
        for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
            if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
        }
    }
    const size_t end = complete_prefix(std::string_view(pending_).substr(0, pending_.size() - hold));
    std::string out = sanitize_utf8(std::string_view(pending_).substr(0, end));
    pending_.erase(0, end);
    return out;
}

std::string text_stream::finish() {
    std::string out = sanitize_utf8(pending_);
    pending_.clear();
    return out;
}

}  // namespace h2okv::serve
