// Live-handle registries: every handle the library gives out is recorded, so
// a destroyed or foreign pointer is reported instead of dereferenced.
#pragma once

#include <mutex>
#include <shared_mutex>
#include <unordered_set>

namespace mkc {

template <typename T>
class HandleRegistry {
public:
    void add(const T *p) {
        std::unique_lock<std::shared_mutex> lock(mutex_);
        live_.insert(p);
    }
    // True if `p` was live and is now removed.
    bool remove(const T *p) {
        std::unique_lock<std::shared_mutex> lock(mutex_);
        return live_.erase(p) == 1;
    }
    bool contains(const T *p) const {
        std::shared_lock<std::shared_mutex> lock(mutex_);
        return live_.count(p) == 1;
    }

private:
    mutable std::shared_mutex mutex_;
    std::unordered_set<const T *> live_;
};

// Leaked on purpose so handles can be checked during process exit.
template <typename T>
HandleRegistry<T> &registry() {
    static auto *r = new HandleRegistry<T>();
    return *r;
}

} // namespace mkc
