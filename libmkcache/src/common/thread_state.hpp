// Everything the library keeps per thread, in one place so the hot path
// pays for one thread-local lookup instead of one per concern:
//  - the cache context: session id, input-shape
//    group, capacity (0 = default mode, > 0 = clearing mode), executor id;
//  - the front caches: memos of this thread's recent hits;
//  - the target layout data leaves the library in;
//  - the thread-id hash that default-mode keys carry;
//  - key buffers and the oneDNN stream the thread executes on.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "common/cache_scope.hpp"
#include "common/striped.hpp"
#include "mkcache/mkcache.h"

namespace mkc {

class FrontCache;

struct ThreadState {
    ThreadState();
    ~ThreadState();

    // The cache context. Changed only through the setters, which bump the
    // scope's memo context: the front caches remember hits per context.
    int64_t session() const { return scope.session; }
    const std::string &input_shape() const { return input_shape_; } // "" = the default group
    int64_t capacity() const { return scope.capacity; }
    uint64_t executor() const { return scope.executor; }
    bool clearing_mode() const { return scope.capacity > 0; }
    void set_session(int64_t v) { scope.session = v; changed(); }
    void set_input_shape(const char *v) { input_shape_ = v ? v : ""; changed(); }
    void set_capacity(int64_t v) {
        scope.capacity = v;
        scope.thread_bound = v <= 0; // clearing mode: one thread per session
        changed();
    }
    void set_executor(uint64_t v) { scope.executor = v; changed(); }
    // The scope of this thread's eager calls: the context above.
    CacheScope scope;

    mkc_layout target_layout = MKC_LAYOUT_CHANNELS_FIRST;

    uint64_t thread_hash;
    const int stripe; // stripe_index(), for BlobCache::count_hit

    static constexpr int kKeyDepth = 8; // a handler may run a reorder's inside it
    std::string key_buffers[kKeyDepth];
    int key_depth = 0;

    std::unique_ptr<dnnl::stream> stream; // created on first execution

    // Scratchpad for the primitive this thread executes (one at a time):
    // grows to the largest need, freed with the thread. Primitives are built
    // with scratchpad_mode::user, because oneDNN's default (a scratchpad
    // global to the *creating* thread) breaks when another thread executes
    // or destroys a cached primitive.
    void *scratchpad(size_t nbytes);
    std::shared_ptr<void> scratch;
    size_t scratch_size = 0;

    // This thread's memo of its recent cache hits (created on first use).
    FrontCache &front_cache();
    std::unique_ptr<FrontCache> front;
    // The same keyed by an operator's raw arguments instead of its key: a
    // hit skips everything the operator derives from them (shapes, checks,
    // signature, key), which for a convolution costs more than the lookup.
    FrontCache &argument_cache();
    std::unique_ptr<FrontCache> arguments;

private:
    void changed() { ++scope.memo_context; }
    std::string input_shape_; // scope.shape_group points here
};

// The hash of the calling thread's id that its default-mode keys carry
// (ThreadState::thread_hash holds it once computed).
uint64_t thread_id_hash();

// The calling thread's state. The hot path reads one constant-initialised
// pointer (__thread: no guard or init wrapper, as a thread_local object with
// a constructor needs); the first call of a thread creates the state.
extern __thread ThreadState *current_thread_state;
ThreadState &create_thread_state();
inline ThreadState &thread_state() {
    ThreadState *state = current_thread_state;
    return state ? *state : create_thread_state();
}

} // namespace mkc
