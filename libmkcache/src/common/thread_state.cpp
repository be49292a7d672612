#include "common/thread_state.hpp"

#include "cache/front_cache.hpp"
#include "common/serial.hpp"

#include <atomic>
#include <cstdlib>
#include <functional>
#include <new>
#include <thread>

namespace mkc {

uint64_t fresh_memo_context() {
    static std::atomic<uint64_t> next{uint64_t(1) << 63};
    return next.fetch_add(1, std::memory_order_relaxed);
}

uint64_t memo_context_now(const CacheScope &scope) {
    return memo_context_now(scope, openmp_max_threads());
}

uint64_t thread_id_hash() { return std::hash<std::thread::id>()(std::this_thread::get_id()); }

ThreadState::ThreadState() : thread_hash(thread_id_hash()), stripe(stripe_index()) {
    scope.shape_group = &input_shape_;
    scope.thread_hash = thread_hash;
    scope.state = this;
}

ThreadState::~ThreadState() {
    if (current_thread_state == this) current_thread_state = nullptr;
}

FrontCache &ThreadState::front_cache() {
    if (!front) front = std::make_unique<FrontCache>();
    return *front;
}

FrontCache &ThreadState::argument_cache() {
    if (!arguments) arguments = std::make_unique<FrontCache>();
    return *arguments;
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

__thread ThreadState *current_thread_state = nullptr;

ThreadState &create_thread_state() {
    thread_local ThreadState state;
    current_thread_state = &state;
    return state;
}

} // namespace mkc
