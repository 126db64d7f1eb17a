// status and result<T>: how every library function reports failure (no exceptions cross the library
// boundary). A status is either ok or carries a code and a message that says where, what was observed and
// what was expected.
//
//   h2okv::result<model> load(const std::string& path);
//   H2OKV_ASSIGN_OR_RETURN(auto m, load(path));
//   if (x < 0) return h2okv::invalid_argument("budget {} must be >= 1", x);
#pragma once

#include <fmt/format.h>

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace h2okv {

enum class status_code {
    ok,
    invalid_argument,
    invalid_file,
    io_error,
    out_of_range,
    out_of_memory,
    internal
};

const char* status_code_name(status_code c);

class [[nodiscard]] status {
public:
    status() = default;
    status(status_code code, std::string message) : code_(code), message_(std::move(message)) {}

    bool ok() const { return code_ == status_code::ok; }
    status_code code() const { return code_; }
    const std::string& message() const { return message_; }
    // "invalid_argument: budget 0 must be >= 1"
    std::string to_string() const;
    // Prefixes the message with context ("loading 'x.gguf': ...").
    status with_context(const std::string& context) const;

private:
    status_code code_ = status_code::ok;
    std::string message_;
};

inline status ok_status() {
    return {};
}

template <typename... Args>
status make_error(status_code code, fmt::format_string<Args...> f, Args&&... args) {
    return status(code, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
status invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
    return make_error(status_code::invalid_argument, f, std::forward<Args>(args)...);
}
template <typename... Args>
status invalid_file(fmt::format_string<Args...> f, Args&&... args) {
    return make_error(status_code::invalid_file, f, std::forward<Args>(args)...);
}
template <typename... Args>
status io_error(fmt::format_string<Args...> f, Args&&... args) {
    return make_error(status_code::io_error, f, std::forward<Args>(args)...);
}
template <typename... Args>
status out_of_range(fmt::format_string<Args...> f, Args&&... args) {
    return make_error(status_code::out_of_range, f, std::forward<Args>(args)...);
}
template <typename... Args>
status out_of_memory(fmt::format_string<Args...> f, Args&&... args) {
    return make_error(status_code::out_of_memory, f, std::forward<Args>(args)...);
}
template <typename... Args>
status internal_error(fmt::format_string<Args...> f, Args&&... args) {
    return make_error(status_code::internal, f, std::forward<Args>(args)...);
}

// A value or the status explaining why there is none.
template <typename T>
class [[nodiscard]] result {
public:
    result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
    result(status s) : status_(std::move(s)) {     // NOLINT(google-explicit-constructor)
        assert(!status_.ok() && "result<T> built from an ok status carries no value");
    }

    bool ok() const { return status_.ok(); }
    const status& error() const { return status_; }
    T& value() & {
        assert(ok());
        return *value_;
    }
    const T& value() const& {
        assert(ok());
        return *value_;
    }
    T&& value() && {
        assert(ok());
        return std::move(*value_);
    }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }

private:
    status status_;
    std::optional<T> value_;
};

namespace detail {
inline const status& status_of(const status& s) {
    return s;
}
template <typename T>
const status& status_of(const result<T>& r) {
    return r.error();
}
}  // namespace detail

}  // namespace h2okv

#define H2OKV_CONCAT_INNER(a, b) a##b
#define H2OKV_CONCAT(a, b) H2OKV_CONCAT_INNER(a, b)

// Returns the status of `expr` (a status or a result<T>) from the enclosing function when it is an error.
#define H2OKV_RETURN_IF_ERROR(expr)                                                      \
    do {                                                                                 \
        auto&& h2okv_status_or_ = (expr);                                                \
        if (!h2okv_status_or_.ok()) return ::h2okv::detail::status_of(h2okv_status_or_); \
    } while (0)

// Declares `lhs` from the value of the result<T> `rexpr`, or returns its status.
#define H2OKV_ASSIGN_OR_RETURN(lhs, rexpr) \
    H2OKV_ASSIGN_OR_RETURN_IMPL(H2OKV_CONCAT(h2okv_result_, __LINE__), lhs, rexpr)
#define H2OKV_ASSIGN_OR_RETURN_IMPL(tmp, lhs, rexpr) \
    auto tmp = (rexpr);                              \
    if (!tmp.ok()) return tmp.error();               \
    lhs = std::move(tmp).value()
