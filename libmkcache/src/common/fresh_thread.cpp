#include "common/fresh_thread.hpp"

namespace mkc::detail {

bool &creation_failed_here() {
    thread_local bool failed = false;
    return failed;
}

} // namespace mkc::detail
