#include "common/fresh_thread.hpp"

#include "common/serial.hpp"

namespace mkc::detail {

bool &creation_failed_here() {
    thread_local bool failed = false;
    return failed;
}

int openmp_threads() { return openmp_max_threads(); }
void set_openmp_threads(int threads) { set_openmp_max_threads(threads); }

} // namespace mkc::detail
