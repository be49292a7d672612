// Shared state that many threads touch on every call, split into per-thread
// stripes on separate cache lines so concurrent readers do not contend:
// a reader-writer lock whose readers scale, and a counter.
#pragma once

#include <atomic>
#include <cstdint>
#include <new>
#include <shared_mutex>

namespace mkc {

constexpr int kStripes = 8;

// This thread's stripe, assigned round-robin on first use (two threads get
// different stripes until there are more threads than stripes). Stored plus
// one in a constant-initialised __thread int: one thread-local lookup, no
// guard variable (a thread_local with a dynamic initialiser needs both).
inline int stripe_index() {
    static std::atomic<unsigned> next{0};
    static __thread int index_plus_one = 0;
    if (index_plus_one == 0) index_plus_one = static_cast<int>(next.fetch_add(1) % kStripes) + 1;
    return index_plus_one - 1;
}

// Readers lock only their stripe; a writer locks every stripe (in order).
// Usable with std::shared_lock and std::unique_lock. A thread must unlock
// the shared side on the thread that locked it (as std::shared_mutex).
class StripedSharedMutex {
public:
    void lock() {
        for (auto &s : stripes_) s.mutex.lock();
    }
    void unlock() {
        for (int i = kStripes - 1; i >= 0; --i) stripes_[i].mutex.unlock();
    }
    void lock_shared() { stripes_[stripe_index()].mutex.lock_shared(); }
    void unlock_shared() { stripes_[stripe_index()].mutex.unlock_shared(); }

    // For a child process made by fork() while this thread held lock():
    // gives every stripe a fresh, unlocked lock. unlock() would not do there:
    // glibc tells a writer's unlock from a reader's by the kernel thread id
    // that locked it, and the child's thread has a new one, so unlock()
    // would be taken for a reader's and corrupt the lock. Only while no
    // other thread can use the lock (the child has one thread).
    void reset_in_child() {
        for (auto &s : stripes_) new (&s.mutex) std::shared_mutex();
    }

private:
    struct alignas(64) Stripe {
        std::shared_mutex mutex;
    };
    Stripe stripes_[kStripes];
};

// A relaxed event counter: add() touches only this thread's stripe; load()
// sums them (a snapshot, as any relaxed counter read).
class StripedCounter {
public:
    void add(uint64_t n = 1) { add_at(stripe_index(), n); }
    // The same with the caller's stripe_index() (saves a thread-local lookup).
    void add_at(int stripe, uint64_t n = 1) {
        slots_[stripe].value.fetch_add(n, std::memory_order_relaxed);
    }
    uint64_t load() const {
        uint64_t sum = 0;
        for (const auto &s : slots_) sum += s.value.load(std::memory_order_relaxed);
        return sum;
    }

private:
    struct alignas(64) Slot {
        std::atomic<uint64_t> value{0};
    };
    Slot slots_[kStripes];
};

} // namespace mkc
