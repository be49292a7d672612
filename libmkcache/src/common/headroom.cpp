#include "common/headroom.hpp"

#include <sys/mman.h>

#include "common/error.hpp"

namespace mkc {

void require_headroom(const char *what) {
    void *probe = mmap(nullptr, kHeadroomBytes, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (probe == MAP_FAILED)
        fail(MKC_STATUS_OUT_OF_MEMORY, what, ": less than ", kHeadroomBytes >> 20,
             " MiB of address space is left for oneDNN's own allocations (free tensors, close "
             "programs or clear the cache)");
    munmap(probe, kHeadroomBytes);
}

} // namespace mkc
