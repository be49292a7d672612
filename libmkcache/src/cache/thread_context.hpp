// Per-thread cache state (seed "Data Caching"): session id, input-shape
// group, capacity (0 = default mode, > 0 = clearing mode) and executor id.
#pragma once

#include <cstdint>
#include <string>

namespace mkc {

struct ThreadContext {
    int64_t session = 0;
    std::string input_shape;   // "" = the default group
    int64_t capacity = 0;
    uint64_t executor = 0;

    bool clearing_mode() const { return capacity > 0; }
};

inline ThreadContext &thread_context() {
    thread_local ThreadContext context;
    return context;
}

} // namespace mkc
