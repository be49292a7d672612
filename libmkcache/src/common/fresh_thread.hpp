// Primitive creation that one failed kernel cannot poison.
//
// oneDNN generates its kernels with Xbyak, whose error flag is per thread
// and never cleared inside oneDNN: once generating one kernel fails on a
// thread (absurd strides can push an offset past 32 bits), every kernel that
// thread generates afterwards fails too, whatever its arguments. So a thread
// that saw a primitive's creation fail creates its later primitives on a
// short-lived thread of its own, started with the caller's OpenMP thread
// count (oneDNN's kernels and cache depend on it).
#pragma once

#include <exception>
#include <thread>
#include <utility>

#include <oneapi/dnnl/dnnl.hpp>

#include "common/headroom.hpp"
#include "common/serial.hpp"

namespace mkc {

namespace detail {
bool &creation_failed_here(); // this thread's flag
} // namespace detail

// build() on this thread, or on a fresh one after a failure here; never
// without the address-space headroom oneDNN's unchecked allocations need.
template <typename Build>
auto create_isolated(Build &&build) -> decltype(build()) {
    require_headroom("creating a primitive");
    bool &failed = detail::creation_failed_here();
    if (!failed) {
        try {
            return build();
        } catch (const dnnl::error &) {
            failed = true;
            throw;
        }
    }
    decltype(build()) result;
    std::exception_ptr error;
    const int threads = openmp_max_threads();
    std::thread worker([&] {
        try {
            if (threads > 0) set_openmp_max_threads(threads);
            result = build();
        } catch (...) {
            error = std::current_exception();
        }
    });
    worker.join();
    if (error) std::rethrow_exception(error);
    return result;
}

} // namespace mkc
