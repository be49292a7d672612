// Live-handle registries: every handle the library gives out is recorded, so
// a destroyed or foreign pointer is reported instead of dereferenced.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <unordered_set>

#include "common/fork.hpp"

namespace mkc {

// Sharded by address, so threads creating and destroying handles (every
// operator output, every blob reference) rarely meet on one lock.
template <typename T>
class HandleRegistry {
public:
    void add(const T *p) {
        Shard &s = shard(p);
        std::unique_lock<std::shared_mutex> lock(s.mutex);
        s.live.insert(p);
    }
    // True if `p` was live and is now removed.
    bool remove(const T *p) {
        Shard &s = shard(p);
        std::unique_lock<std::shared_mutex> lock(s.mutex);
        const bool removed = s.live.erase(p) == 1;
        if (removed) removals_.fetch_add(1, std::memory_order_release);
        return removed;
    }
    // Calls f(p) while `p` is live and cannot be removed (its shard held
    // shared); false, without calling f, if `p` is not live. Lets a caller
    // register its use of an object before a remover can free it.
    template <typename F>
    bool with_live(const T *p, F &&f) const {
        if (p == nullptr) return false;
        const Shard &s = shard(p);
        std::shared_lock<std::shared_mutex> lock(s.mutex);
        if (s.live.count(p) == 0) return false;
        f();
        return true;
    }
    // Every argument of every call is checked, mostly the same few handles
    // again: a thread remembers the last ones it found live, trusted while
    // nothing has been removed since (removals_ unchanged; any removal, even
    // of another handle, forgets them all). Saves the lock and the set.
    bool contains(const T *p) const { return p != nullptr && first_dead(&p, 1) < 0; }
    // The same for a call's handles at once (one thread-local lookup): the
    // index of the first that is not live, or -1; null handles are skipped.
    int first_dead(const T *const *handles, int n) const {
        Recent &recent = recent_checks();
        const uint64_t removals = removals_.load(std::memory_order_acquire);
        if (recent.removals != removals) recent = Recent{removals};
        for (int i = 0; i < n; ++i)
            if (handles[i] != nullptr && !check(recent, handles[i])) return i;
        return -1;
    }

    // For the fork handlers (common/fork.cpp) only. lock_all() takes every
    // shard exclusively, in order; unlock_all() frees them in the process
    // that took them; in a child made while they were held,
    // reset_locks_in_child() gives every shard a fresh, unlocked lock
    // instead (see StripedSharedMutex::reset_in_child).
    void lock_all() {
        for (auto &s : shards_) s.mutex.lock();
    }
    void unlock_all() {
        for (size_t i = kShards; i-- > 0;) shards_[i].mutex.unlock();
    }
    void reset_locks_in_child() {
        for (auto &s : shards_) new (&s.mutex) std::shared_mutex();
    }
    // Calls f(p) for every live handle; only while lock_all() is held.
    template <typename F>
    void for_each_live(F &&f) const {
        for (const auto &s : shards_)
            for (const T *p : s.live) f(p);
    }

private:
    struct Recent {
        static constexpr unsigned kSize = 8;
        uint64_t removals = 0;
        const T *live[kSize] = {};
        unsigned next = 0;
    };
    bool check(Recent &recent, const T *p) const {
        for (const T *q : recent.live)
            if (q == p) return true;
        const Shard &s = shard(p);
        std::shared_lock<std::shared_mutex> lock(s.mutex);
        if (s.live.count(p) == 0) return false;
        recent.live[recent.next++ % Recent::kSize] = p;
        return true;
    }
    static Recent &recent_checks() {
        thread_local Recent recent;
        // GCC would recompute the address at every use in first_dead's loop
        // (a __tls_get_addr call each, in a shared library): the empty asm
        // makes it an opaque value, computed once.
        Recent *address = &recent;
        __asm__("" : "+r"(address));
        return *address;
    }
    std::atomic<uint64_t> removals_{0};
    struct alignas(64) Shard {
        mutable std::shared_mutex mutex;
        std::unordered_set<const T *> live;
    };
    static constexpr size_t kShards = 16;
    Shard shards_[kShards];
    static size_t index(const void *p) {
        // Heap addresses are 16-byte aligned: mix the bits above that.
        const auto v = reinterpret_cast<uintptr_t>(p) >> 4;
        return (v ^ (v >> 7) ^ (v >> 13)) % kShards;
    }
    Shard &shard(const T *p) { return shards_[index(p)]; }
    const Shard &shard(const T *p) const { return shards_[index(p)]; }
};

// Leaked on purpose so handles can be checked during process exit.
template <typename T>
HandleRegistry<T> &registry() {
    static auto *r = (install_fork_handlers(), new HandleRegistry<T>());
    return *r;
}

} // namespace mkc
