#include "api/guard.hpp"

#include <cstring>

namespace mkc::api {

namespace {
thread_local std::string last_error;
}

void set_last_error(const std::string &message) { last_error = message; }

const char *last_error_text() { return last_error.c_str(); }

mkc_status fail_from_current_exception() noexcept {
    return status_of_current_exception(last_error);
}

namespace {
// The error of a tensor argument that is null or not live (out of line: the
// checks below run for every argument of every call).
[[noreturn]] void fail_tensor_arg(const mkc_tensor *handle, const char *op, const char *arg) {
    const char *sep = op ? ": " : "";
    if (op == nullptr) op = "";
    if (handle == nullptr) fail(MKC_STATUS_INVALID_HANDLE, op, sep, arg, " is NULL");
    fail(MKC_STATUS_INVALID_HANDLE, op, sep, arg,
         " is not a live tensor (destroyed or foreign handle)");
}
} // namespace

const Tensor &tensor_arg(const mkc_tensor *handle, const char *op, const char *arg) {
    if (handle == nullptr || !registry<Tensor>().contains(handle))
        fail_tensor_arg(handle, op, arg);
    return *handle;
}

void check_tensor_args(const char *op, std::initializer_list<TensorArg> args) {
    constexpr int kMax = 8;
    const mkc_tensor *handles[kMax];
    int n = 0;
    for (const TensorArg &a : args) {
        if (a.handle == nullptr && !a.optional) fail_tensor_arg(nullptr, op, a.name);
        if (n == kMax) fail(MKC_STATUS_INTERNAL_ERROR, "too many tensor arguments");
        handles[n++] = a.handle;
    }
    const int dead = registry<Tensor>().first_dead(handles, n);
    if (dead >= 0) fail_tensor_arg(handles[dead], op, args.begin()[dead].name);
}

Tensor &mutable_tensor_arg(mkc_tensor *handle, const char *what) {
    tensor_arg(handle, what);
    return *handle;
}

void copy_out(const std::string &text, char *buf, size_t size, size_t *needed) {
    require_out(needed, "needed");
    if (size > 0 && buf == nullptr) fail(MKC_STATUS_INVALID_ARGUMENT, "buffer is NULL but size > 0");
    const size_t full = text.size() + 1;
    if (size < full) {
        *needed = full;
        fail(MKC_STATUS_BUFFER_TOO_SMALL, "buffer holds ", size, " bytes, need ", full);
    }
    std::memcpy(buf, text.c_str(), full);
    *needed = full;
}

} // namespace mkc::api
