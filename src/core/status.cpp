#include "h2okv/core/status.h"

namespace h2okv {

const char* status_code_name(status_code c) {
    switch (c) {
        case status_code::ok: return "ok";
        case status_code::invalid_argument: return "invalid argument";
        case status_code::invalid_file: return "invalid file";
        case status_code::io_error: return "i/o error";
        case status_code::out_of_range: return "out of range";
        case status_code::out_of_memory: return "out of memory";
        case status_code::internal: return "internal error";
    }
    return "unknown";
}

std::string status::to_string() const {
    if (ok()) return "ok";
    return fmt::format("{}: {}", status_code_name(code_), message_);
}

status status::with_context(const std::string& context) const {
    if (ok()) return *this;
    return status(code_, fmt::format("{}: {}", context, message_));
}

}  // namespace h2okv
