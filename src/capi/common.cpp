// The version and error functions of include/h2okv.h (in both libh2okv.so and libh2okv_policy.so).
#include <cstring>

#include "capi.h"

namespace h2okv::capi {
namespace {

thread_local std::string last_error;

h2okv_status to_c(status_code c) {
    switch (c) {
        case status_code::ok: return H2OKV_OK;
        case status_code::invalid_argument: return H2OKV_ERR_INVALID_ARGUMENT;
        case status_code::invalid_file: return H2OKV_ERR_INVALID_FILE;
        case status_code::io_error: return H2OKV_ERR_IO;
        case status_code::out_of_range: return H2OKV_ERR_OUT_OF_RANGE;
        case status_code::out_of_memory: return H2OKV_ERR_OUT_OF_MEMORY;
        case status_code::internal: return H2OKV_ERR_INTERNAL;
    }
    return H2OKV_ERR_INTERNAL;
}

}  // namespace

h2okv_status fail(const status& s) {
    try {
        last_error = s.message();
    } catch (...) {
        last_error.clear();  // no memory for the message: the code still says what happened
    }
    return to_c(s.code());
}

h2okv_status copy_text(const std::string& text, char* buf, size_t capacity, size_t* len, const char* where) {
    if (len == nullptr) return fail_invalid("{}: len is NULL", where);
    if (buf == nullptr && capacity > 0)
        return fail_invalid("{}: buf is NULL with capacity {}", where, capacity);
    *len = text.size();
    if (capacity < text.size() + 1) {
        return fail(out_of_range("{}: the text takes {} bytes and a NUL, the buffer has {}", where,
                                 text.size(), capacity));
    }
    std::memcpy(buf, text.data(), text.size());
    buf[text.size()] = '\0';
    return H2OKV_OK;
}

}  // namespace h2okv::capi

#define H2OKV_STR2(x) #x
#define H2OKV_STR(x) H2OKV_STR2(x)

extern "C" {

const char* h2okv_version(void) {
    return H2OKV_STR(H2OKV_VERSION_MAJOR) "." H2OKV_STR(H2OKV_VERSION_MINOR) "." H2OKV_STR(
        H2OKV_VERSION_PATCH);
}

int32_t h2okv_version_number(void) {
    return H2OKV_VERSION_NUMBER;
}

const char* h2okv_status_name(h2okv_status s) {
    switch (s) {
        case H2OKV_OK: return "ok";
        case H2OKV_ERR_INVALID_ARGUMENT: return "invalid_argument";
        case H2OKV_ERR_INVALID_FILE: return "invalid_file";
        case H2OKV_ERR_IO: return "io_error";
        case H2OKV_ERR_OUT_OF_RANGE: return "out_of_range";
        case H2OKV_ERR_OUT_OF_MEMORY: return "out_of_memory";
        case H2OKV_ERR_INTERNAL: return "internal";
    }
    return "unknown";
}

const char* h2okv_last_error(void) {
    return h2okv::capi::last_error.c_str();
}

}  // extern "C"
