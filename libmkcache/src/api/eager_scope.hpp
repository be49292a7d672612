// The cache scope of an eager call: the calling thread's context, as
// mkc_cache_set_session, _input_shape, _capacity and _executor left it.
#pragma once

#include "common/thread_state.hpp"
#include "handler/cache_scope.hpp"

namespace mkc::api {

inline CacheScope eager_scope(const ThreadState &state = thread_state()) {
    CacheScope scope;
    scope.session = state.session();
    scope.shape_group = &state.input_shape();
    scope.executor = state.executor();
    scope.capacity = state.capacity();
    scope.thread_bound = !state.clearing_mode(); // clearing mode: one thread per session
    scope.thread = state.thread_hash;
    scope.memo_context = state.context_version;
    return scope;
}

} // namespace mkc::api
