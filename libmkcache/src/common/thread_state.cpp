#include "common/thread_state.hpp"

#include "cache/front_cache.hpp"

#include <cstdlib>
#include <functional>
#include <new>
#include <thread>

namespace mkc {

ThreadState::ThreadState()
    : thread_hash(std::hash<std::thread::id>()(std::this_thread::get_id())) {}

ThreadState::~ThreadState() = default;

FrontCache &ThreadState::front_cache() {
    if (!front) front = std::make_unique<FrontCache>();
    return *front;
}

void *ThreadState::scratchpad(size_t nbytes) {
    if (nbytes > scratch_size) {
        void *p = nullptr;
        if (posix_memalign(&p, 4096, nbytes) != 0 || p == nullptr) throw std::bad_alloc();
        scratch.reset(p, std::free);
        scratch_size = nbytes;
    }
    return scratch.get();
}

ThreadState &thread_state() {
    thread_local ThreadState state;
    return state;
}

} // namespace mkc
