#include "common/heap_trim.hpp"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace mkc {

namespace {

bool enabled() {
    static const bool on = [] {
        const char *v = std::getenv("MKCACHE_HEAP_TRIM");
        return !(v && std::strcmp(v, "0") == 0);
    }();
    return on;
}

} // namespace

void trim_heap() {
#if defined(__GLIBC__)
    if (enabled()) malloc_trim(0);
#endif
}

} // namespace mkc
