#include "common/thread_state.hpp"

#include <functional>
#include <thread>

namespace mkc {

ThreadState::ThreadState()
    : thread_hash(std::hash<std::thread::id>()(std::this_thread::get_id())) {}

ThreadState &thread_state() {
    thread_local ThreadState state;
    return state;
}

} // namespace mkc
