// Address space kept free for oneDNN's own small allocations. oneDNN 3.2
// does not check many of them (a memory descriptor's, a kernel's): when the
// process is at its address-space limit (RLIMIT_AS, a container's), one
// fails and is written through - a segfault inside oneDNN. So the library
// builds no primitive, and allocates no large buffer, unless this much can
// still be mapped: at the limit its calls fail with OUT_OF_MEMORY instead,
// and the calls that need no new primitive keep working.
#pragma once

#include <cstddef>

namespace mkc {

constexpr size_t kHeadroomBytes = size_t(64) << 20;

// Buffers from this size up keep the headroom free too (smaller ones cost
// less than the check).
constexpr size_t kHeadroomCheckedAllocation = size_t(1) << 20;

// Throws OUT_OF_MEMORY naming `what` when kHeadroomBytes of address space
// cannot be mapped now (mapped and unmapped at once, never touched).
void require_headroom(const char *what);

} // namespace mkc
