// Internal error type: every failure inside the library is thrown as an
// mkc::Error and turned into a status + thread-local message at the C ABI.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "mkcache/mkcache.h"

namespace mkc {

class Error : public std::runtime_error {
public:
    Error(mkc_status status, const std::string &message)
        : std::runtime_error(message), status_(status) {}
    mkc_status status() const { return status_; }

private:
    mkc_status status_;
};

namespace detail {
template <typename... Args>
std::string concat(Args &&...args) {
    std::ostringstream out;
    (out << ... << std::forward<Args>(args));
    return out.str();
}
} // namespace detail

// fail(MKC_STATUS_INVALID_ARGUMENT, "conv2d: stride must be >= 1, got ", s);
template <typename... Args>
[[noreturn]] void fail(mkc_status status, Args &&...args) {
    throw Error(status, detail::concat(std::forward<Args>(args)...));
}

// The message arguments are evaluated even when the condition holds: on a
// hot path, write `if (!condition) fail(...)` for messages that format
// (e.g. shape_text).
template <typename... Args>
void require(bool condition, Args &&...args) {
    if (!condition) fail(MKC_STATUS_INVALID_ARGUMENT, std::forward<Args>(args)...);
}

// Inside a catch block: the status and message the C ABI reports for the
// exception being handled (ours, oneDNN's, out of memory, anything else).
// If even the message cannot be stored, OUT_OF_MEMORY and `message` as it
// was.
mkc_status status_of_current_exception(std::string &message) noexcept;

} // namespace mkc
