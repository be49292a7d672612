// The C ABI boundary: every exported function runs its body inside guard(),
// which turns any exception into a status and a thread-local message, so
// nothing thrown inside the library ever crosses into a C caller.
#pragma once

#include <initializer_list>
#include <string>

#include "common/error.hpp"
#include "common/handles.hpp"
#include "mkcache/mkcache.h"
#include "tensor/tensor.hpp"

namespace mkc::api {

void set_last_error(const std::string &message);
mkc_status fail_from_current_exception() noexcept;

template <typename F>
mkc_status guard(F &&body) noexcept {
    try {
        body();
        return MKC_STATUS_OK;
    } catch (...) {
        return fail_from_current_exception();
    }
}

// The live tensor behind a handle, or INVALID_HANDLE naming the argument
// ("op: arg"; op may be null). Two parts, so the name is only put together
// for the message: this runs for every argument of every call.
const Tensor &tensor_arg(const mkc_tensor *handle, const char *op, const char *arg);
inline const Tensor &tensor_arg(const mkc_tensor *handle, const char *what) {
    return tensor_arg(handle, nullptr, what);
}
Tensor &mutable_tensor_arg(mkc_tensor *handle, const char *what);

// tensor_arg for several arguments of one call at once (one thread-local
// memo lookup for all): each must be live; null is an error unless the
// argument is optional. `op` may be null, as for tensor_arg.
struct TensorArg {
    const mkc_tensor *handle;
    const char *name;
    bool optional = false;
};
void check_tensor_args(const char *op, std::initializer_list<TensorArg> args);

template <typename T>
void require_out(T *out, const char *what) {
    if (out == nullptr) fail(MKC_STATUS_INVALID_ARGUMENT, what, " (out-parameter) is NULL");
}

// Copies `text` into a caller buffer with the mkc_key_make conventions.
void copy_out(const std::string &text, char *buf, size_t size, size_t *needed);

} // namespace mkc::api
