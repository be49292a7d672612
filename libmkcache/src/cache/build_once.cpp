#include "cache/build_once.hpp"

#include <chrono>
#include <cstdlib>
#include <new>
#include <thread>

#include "common/fork.hpp"

namespace mkc {

BuildOnce &BuildOnce::instance() {
    // Leaked, as the blob cache is: a thread may still wait at process exit.
    static BuildOnce *once = (install_fork_handlers(), new BuildOnce());
    return *once;
}

BuildOnce::Claim::Claim(Claim &&other) noexcept
    : pending_(std::move(other.pending_)), id_(std::move(other.id_)), owner_(other.owner_) {}

BuildOnce::Claim::~Claim() {
    if (owner_ && pending_) BuildOnce::instance().release(*this);
}

void BuildOnce::Claim::wait() {
    if (owner_ || !pending_) return;
    std::unique_lock<std::mutex> lock(pending_->mutex);
    pending_->done_signal.wait(lock, [this] { return pending_->done; });
}

void BuildOnce::Claim::before_build() const {
    if (!pending_) return; // nobody can be waiting
    // Read at each shared build (rare, and slow anyway), so a test can set
    // it for one part only.
    const char *v = std::getenv("MKCACHE_TEST_BUILD_DELAY_MS");
    const long delay_ms = v ? std::strtol(v, nullptr, 10) : 0;
    if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
}

BuildOnce::Claim BuildOnce::claim(int64_t session, const std::string &group,
                                  const std::string &key) {
    Claim claim;
    // The three fields joined unambiguously: the group's length goes first.
    claim.id_ = std::to_string(session) + ':' + std::to_string(group.size()) + ':' + group + key;
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = pending_->find(claim.id_);
    if (found != pending_->end()) {
        claim.pending_ = found->second;
        claim.owner_ = false;
    } else {
        claim.pending_ = std::make_shared<Pending>();
        pending_->emplace(claim.id_, claim.pending_);
    }
    return claim;
}

void BuildOnce::release(Claim &claim) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto found = pending_->find(claim.id_);
        if (found != pending_->end() && found->second == claim.pending_) pending_->erase(found);
    }
    {
        std::lock_guard<std::mutex> lock(claim.pending_->mutex);
        claim.pending_->done = true;
    }
    claim.pending_->done_signal.notify_all();
}

size_t BuildOnce::pending() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return pending_->size();
}

void BuildOnce::reset_in_child() {
    new (&mutex_) std::mutex();
    (void)pending_.release(); // see the header: dropped, not destroyed
    pending_ = std::make_unique<Table>();
}

} // namespace mkc
