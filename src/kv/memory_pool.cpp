#include "h2okv/kv/memory_pool.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

namespace h2okv::kv {

bool memory_pool::try_take(int64_t bytes) {
    if (bytes < 0) return false;
    if (capacity_ > 0 && bytes > capacity_ - used_) return false;
    used_ += bytes;
    peak_ = std::max(peak_, used_);
    return true;
}

void memory_pool::give(int64_t bytes) {
    used_ = std::max<int64_t>(0, used_ - bytes);
}

result<int64_t> parse_bytes(std::string_view text) {
    auto bad = [&] {
        return invalid_argument(
            "'{}' is not a byte size; expected a number of bytes with an optional unit K, M, G or T (powers "
            "of "
            "1024, also written KiB, MB, ...), e.g. 512MiB or 1.5G",
            text);
    };
    size_t i = 0;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
    if (i == 0) return bad();
    double value = 0.0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + i, value);
    if (ec != std::errc() || end != text.data() + i) return bad();
    std::string unit(text.substr(i));
    for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    double scale = 1.0;
    if (!unit.empty() && unit != "B") {
        const char* units = "KMGT";
        const char* p = std::find(units, units + 4, unit[0]);
        if (p == units + 4) return bad();
        const std::string rest = unit.substr(1);
        if (!rest.empty() && rest != "B" && rest != "IB") return bad();
        scale = std::pow(1024.0, static_cast<double>(p - units + 1));
    }
    const double bytes = value * scale;
    if (!std::isfinite(bytes) || bytes >= 9.0e18) {
        return invalid_argument("byte size '{}' is too large (the most is 8 EiB)", text);
    }
    return static_cast<int64_t>(bytes);
}

std::string format_bytes(int64_t bytes) {
    const double b = static_cast<double>(bytes);
    if (bytes >= int64_t{1} << 30) return fmt::format("{:.2f} GiB", b / (1 << 30));
    if (bytes >= int64_t{1} << 20) return fmt::format("{:.1f} MiB", b / (1 << 20));
    if (bytes >= int64_t{1} << 10) return fmt::format("{:.1f} KiB", b / (1 << 10));
    return fmt::format("{} B", bytes);
}

}  // namespace h2okv::kv
