// What every C entry point of include/h2okv.h shares: the thread's last error and the guard that turns a
// status or an exception into an h2okv_status, so nothing is thrown across the C boundary.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "h2okv.h"
#include "h2okv/core/status.h"
#include "h2okv/policy/policy.h"

namespace h2okv::capi {

// Records `s` as this thread's last error and returns its code.
h2okv_status fail(const status& s);

template <typename... Args>
h2okv_status fail_invalid(fmt::format_string<Args...> f, Args&&... args) {
    return fail(invalid_argument(f, std::forward<Args>(args)...));
}

// Runs `body` (returning h2okv_status); an exception becomes H2OKV_ERR_OUT_OF_MEMORY or H2OKV_ERR_INTERNAL
// with its message, prefixed by the entry point's name.
template <typename F>
h2okv_status guard(const char* where, F&& body) noexcept {
    try {
        return body();
    } catch (const std::bad_alloc&) {
        return fail(out_of_memory("{}: out of memory", where));
    } catch (const std::exception& e) {
        return fail(internal_error("{}: {}", where, e.what()));
    } catch (...) {
        return fail(internal_error("{}: an unknown exception", where));
    }
}

// The copy-out rule of h2okv_detokenize / h2okv_token_piece: text and a NUL into buf when it fits.
h2okv_status copy_text(const std::string& text, char* buf, size_t capacity, size_t* len, const char* where);

// The copy-out rule of h2okv_policy_kept_positions / h2okv_session_kept_positions.
h2okv_status copy_kept(const policy::kv_policy& p, int32_t unit, int64_t* out, size_t capacity, size_t* n,
                       const char* where);

}  // namespace h2okv::capi
