// The CPU engine and a per-thread stream every primitive runs on.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace mkc {

// One process-wide CPU engine (created on first use, thread-safe).
const dnnl::engine &cpu_engine();

// A stream per thread: oneDNN streams are not meant to be shared between
// threads that submit at the same time.
dnnl::stream &thread_stream();

} // namespace mkc
