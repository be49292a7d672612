// The CPU engine and a per-thread stream every primitive runs on.
#pragma once

#include <shared_mutex>

#include <oneapi/dnnl/dnnl.hpp>

namespace mkc {

// One process-wide CPU engine (created on first use, thread-safe).
const dnnl::engine &cpu_engine();

// Held shared while a primitive is created and exclusively while oneDNN's
// primitive cache is flushed: oneDNN v3.2 crashes when its cache capacity is
// changed while another thread creates a primitive through it. The fork
// handlers (common/fork.hpp) hold it exclusively to keep every thread out of
// oneDNN's primitive cache at the fork, so every oneDNN primitive and
// primitive descriptor must be made under its shared side.
std::shared_mutex &primitive_creation_mutex();

struct ThreadState;
// A stream per thread (`state` is the calling thread's, made on first use):
// oneDNN streams are not meant to be shared between threads that submit at
// the same time.
dnnl::stream &thread_stream(ThreadState &state);

} // namespace mkc
