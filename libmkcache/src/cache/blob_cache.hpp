// The three-level blob cache:
//   session id -> input-shape group -> key -> blob
// Blobs are type-erased shared_ptr<void>, so a blob in use survives its
// eviction. One reader/writer lock guards the maps: a hit holds it shared,
// only for the lookup; deleters never run under it.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/striped.hpp"
#include "mkcache/mkcache.h"

namespace mkc {

// What a blob is, so a key set by a C caller can never be taken for a
// primitive entry (or the other way round).
enum class BlobKind : uint32_t {
    caller = 0,    // set by a C caller (mkc_cache_set_blob)
    primitive = 1, // a PrimitiveEntry
    transfer = 2,  // what a training forward leaves its grad op (Transfer, handler.hpp)
};

struct BlobInfo {
    BlobKind kind = BlobKind::caller;
    size_t bytes = 0;       // counted towards the memory figures
    uint64_t executor = 0;  // for reset_executor
    bool thread_bound = false; // key carries the hash of the thread it is private to
    uint64_t thread = 0;       // that hash (drop_thread removes by it)
};

class BlobCache {
public:
    static BlobCache &instance();

    // What a hit tells a thread's front cache (cache/front_cache.hpp): the
    // generation the maps had and the session whose counters a remembered
    // hit credits (sessions are never freed, so the pointer stays valid).
    struct HitTicket {
        uint64_t generation = 0;
        void *session = nullptr;
    };

    // nullptr on a miss (a blob of another kind under `key` is a miss too).
    // On a hit, fills `ticket` if given. `count` false: the caller judges
    // whether what was found is usable and counts the lookup itself
    // (count_hit / count_miss with the ticket, filled then on a miss too).
    std::shared_ptr<void> get(int64_t session, const std::string &group, const std::string &key,
                              BlobKind kind, HitTicket *ticket = nullptr, bool count = true);
    // Counts a miss of a lookup in `session` that filled `ticket`.
    void count_miss(const HitTicket &ticket, int64_t session);
    // Counts a hit the front cache served (as get() would have); `stripe`:
    // the caller's stripe_index() (ThreadState::stripe).
    void count_hit(const HitTicket &ticket, int stripe);
    // Changes whenever a blob is removed or replaced (eviction, reset, a
    // finished thread's entries, set() over an existing key). A hit
    // remembered at generation g is still in the cache while this is g.
    uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
    // Stores (or replaces) `key`. capacity > 0: a new group added to a
    // session holding `capacity` groups first evicts the oldest ones.
    void set(int64_t session, const std::string &group, int64_t capacity, const std::string &key,
             std::shared_ptr<void> blob, const BlobInfo &info);

    void reset();
    void reset_executor(uint64_t executor);
    // A program's plan dropped by its capacity: one eviction in `session`
    // (and the totals) of the entries of `executor` in input-shape group
    // `group`, which go unless `group_kept` (another plan of the program,
    // for another thread count, still uses them: none are dropped then).
    void evict_plan(uint64_t executor, int64_t session, const std::string &group,
                    bool group_kept);
    void drop_thread(uint64_t thread_hash); // entries a finished thread created
    // The thread-bound entries of every thread but this one: in a child
    // process, those of the threads that did not come along through fork().
    void drop_threads_except(uint64_t thread_hash);

    // For the fork handlers (common/fork.cpp) only: the lock, exclusively
    // (every stripe); reset_lock_in_child(): see StripedSharedMutex.
    void lock_for_fork() { mutex_.lock(); }
    void unlock_for_fork() { mutex_.unlock(); }
    void reset_lock_in_child() { mutex_.reset_in_child(); }

    mkc_cache_stats stats() const;
    mkc_cache_stats session_stats(int64_t session) const;
    // "<group>\t<key>\n" per entry, groups oldest first.
    std::string keys(int64_t session) const;

private:
    struct Entry {
        std::shared_ptr<void> blob;
        BlobInfo info;
        uint64_t thread = 0;
    };
    struct Group {
        std::string shape;
        std::unordered_map<std::string, Entry> entries;
        size_t bytes = 0;
    };
    // totals_ counts every lookup except hits in a session, which only the
    // session counts (stats() adds them up): a hit costs one atomic add.
    struct Counters {
        StripedCounter hits, misses; // every lookup: striped, so threads do not contend
        std::atomic<uint64_t> insertions{0}, evictions{0}, evicted_entries{0}, transfers{0};
    };
    struct Session {
        std::list<Group> groups; // insertion order: front is the oldest
        std::unordered_map<std::string, std::list<Group>::iterator> index;
        Counters counters;
    };

    BlobCache() = default;
    // Removes entries matching `pred(group's shape, entry)` everywhere;
    // returns them for release outside the lock.
    template <typename Pred>
    std::vector<std::shared_ptr<void>> remove_if(Pred pred);
    static void fill(mkc_cache_stats &out, const Counters &c);

    // Readers (lookups) lock only their thread's stripe; writers all.
    mutable StripedSharedMutex mutex_;
    std::atomic<uint64_t> generation_{1}; // bumped under the exclusive lock
    std::unordered_map<int64_t, std::unique_ptr<Session>> sessions_; // never erased
    Counters totals_;
};

// Empties oneDNN's own primitive cache (keeping its capacity). Called when
// clearing mode evicts a group: the evicted primitives would otherwise stay
// alive inside oneDNN's cache and memory would keep growing.
void flush_onednn_primitive_cache();

} // namespace mkc
