// The cache scope of an eager call: the calling thread's context, as
// mkc_cache_set_session, _input_shape, _capacity and _executor left it.
#pragma once

#include "common/cache_scope.hpp"
#include "common/thread_state.hpp"

namespace mkc::api {

inline const CacheScope &eager_scope() { return thread_state().scope; }

} // namespace mkc::api
