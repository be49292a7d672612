// Build once: when several threads miss the same shared key at once, one
// builds the entry and the others wait for it.
//
// Only keys threads share need this (clearing mode today, a program's
// entries next): a default-mode key carries its thread's hash, so no other
// thread ever looks for it. Without it, every thread that missed would make
// its own primitive - the costliest step there is, repeated per thread, the
// last one stored winning. A claim is
// taken after a miss; its owner builds and stores, then releases it, which
// wakes the waiters to look the key up again. A build that fails releases
// the claim just the same and leaves nothing behind: a waiter then finds no
// entry and claims the key itself (a failure on one thread, e.g. a kernel
// the JIT could not generate there, is not handed to the others).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace mkc {

class BuildOnce {
    struct Pending {
        std::mutex mutex;
        std::condition_variable done_signal;
        bool done = false;
    };

public:
    static BuildOnce &instance();

    class Claim {
    public:
        Claim() = default; // owns nothing shared: build without telling anyone
        Claim(Claim &&other) noexcept;
        Claim &operator=(Claim &&other) = delete;
        ~Claim();
        // Whether this caller builds (else another thread is building).
        bool owner() const { return owner_; }
        // Not the owner: returns once the owner has stored its entry or
        // failed. Then look the key up again.
        void wait();
        // The owner, before building: sleeps MKCACHE_TEST_BUILD_DELAY_MS
        // milliseconds if that is set, so a test can have other threads
        // miss the key while it is being built, even on one busy core.
        void before_build() const;

    private:
        friend class BuildOnce;
        std::shared_ptr<Pending> pending_;
        std::string id_;
        bool owner_ = true;
    };

    // The claim on (session, group, key) after a miss of that key.
    Claim claim(int64_t session, const std::string &group, const std::string &key);

    // Builds under way (for tests of the table's cleanup).
    size_t pending() const;

    // For the fork handlers (common/fork.cpp) only.
    void lock_for_fork() { mutex_.lock(); }
    void unlock_for_fork() { mutex_.unlock(); }
    // In a child: the builders did not come along, so nobody would ever
    // release their claims. Dropped unreleased (their mutexes may have been
    // held by a lost thread: left as they are, never destroyed).
    void reset_in_child();

private:
    BuildOnce() = default;
    void release(Claim &claim);

    mutable std::mutex mutex_;
    using Table = std::unordered_map<std::string, std::shared_ptr<Pending>>;
    std::unique_ptr<Table> pending_ = std::make_unique<Table>();
};

} // namespace mkc
