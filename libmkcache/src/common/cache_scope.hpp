// Where a call's cache entries live: everything a key and its placement in
// the blob cache depend on besides the operator's own arguments, and the
// calling thread's own state the call works with.
//
// The eager C entry points pass the calling thread's (ThreadState::scope,
// kept up to date by mkc_cache_set_session and friends); a program fills its
// own. Code that builds keys reads only this, never the thread's context, so
// the same operator code serves both.
#pragma once

#include <cstdint>
#include <string>

namespace mkc {

struct ThreadState;

inline const std::string kDefaultShapeGroup; // ""

struct CacheScope {
    int64_t session = 0;                                  // first level
    const std::string *shape_group = &kDefaultShapeGroup; // second level; not owned
    uint64_t executor = 0;        // in every key; reset_executor removes by it
    int64_t capacity = 0;         // > 0: storing a new group evicts the oldest past it
    bool thread_bound = true;     // keys carry `thread_hash`: entries private to one thread
    uint64_t thread_hash = 0;     // the hash thread-bound keys carry
    // Changes whenever any field above does (for this thread): the per-thread
    // memos of recent hits remember them under it.
    uint64_t memo_context = 0;
    // The calling thread's memos, key buffers, stream and scratchpad (part
    // of no key); not owned.
    ThreadState *state = nullptr;
};

// A memo context no other scope has: for a scope a caller fills itself
// (a program's). The eager scopes count theirs up from 0, per thread; these
// come from one process-wide counter, with the top bit set.
uint64_t fresh_memo_context();

// The context a memo of `scope` is remembered and found under now: its
// memo_context with the calling thread's OpenMP thread count, which oneDNN
// bakes into some primitives when it builds them (a convolution built for
// one thread runs on one thread): a call under another count must not take
// an entry remembered under this one. The second form takes the count,
// where the caller has read it already.
uint64_t memo_context_now(const CacheScope &scope);
inline uint64_t memo_context_now(const CacheScope &scope, int threads) {
    return scope.memo_context ^ (static_cast<uint64_t>(threads) * 0x9E3779B97F4A7C15ull);
}

} // namespace mkc
