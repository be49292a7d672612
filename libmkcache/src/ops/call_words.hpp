// An operator call's raw arguments as the words its thread's argument cache
// knows the call by (see ThreadState::argument_cache).
#pragma once

#include <cstdint>
#include <cstring>

#include "cache/front_cache.hpp"

namespace mkc {

// An operator call's raw arguments as words for its thread's argument cache
// (ThreadState::argument_cache), on the stack: built on every call, so
// nothing here allocates. The hash covers the words added before seal():
// those that tell a model's calls apart (a collision only costs a miss).
// Operators share the cache: the first word carries the operator's id (as
// in its Handler signature) from bit 40 up, so two operators' calls differ.
template <int kMaxWords>
class CallWords {
public:
    void add(int64_t word) {
        if (size_ < kMaxWords) words_[size_++] = word;
        else fits_ = false;
    }
    // Count, then values (element by element: cheaper than a memcpy call
    // for a few words).
    template <typename Dims>
    void add_dims(const Dims &dims) {
        const int n = static_cast<int>(dims.size());
        if (size_ + 1 + n > kMaxWords) {
            fits_ = false;
            return;
        }
        words_[size_++] = n;
        for (int i = 0; i < n; ++i) words_[size_ + i] = dims[i];
        size_ += n;
    }
    // Room for `n` more words, checked once: the unchecked adds below may
    // then write them. False (and the call unfit) if there is none.
    bool reserve(int n) {
        if (size_ + n <= kMaxWords) return true;
        fits_ = false;
        return false;
    }
    void add_unchecked(int64_t word) { words_[size_++] = word; }
    // Three values as they are (a spatial attribute's slots: those past the
    // operator's rank included, which only make a call with other garbage
    // there miss this cache).
    void add_three_unchecked(const int64_t *values) {
        std::memcpy(words_ + size_, values, 3 * sizeof(int64_t));
        size_ += 3;
    }
    // `name`'s text goes into the hash too, and `seed`: any other function
    // of the arguments worth spreading.
    void seal(const char *name, uint64_t seed = 0) {
        hash_ = FrontCache::hash_words(FrontCache::hash_text(name) ^ seed, words_, size_);
    }
    // False when the arguments are too absurd to keep (the full path then
    // reports what is wrong).
    bool fits() const { return fits_; }
    FrontCache::Call call(const char *name) const { return {name, nullptr, words_, size_, hash_}; }

private:
    int64_t words_[kMaxWords];
    int size_ = 0;
    uint64_t hash_ = 0;
    bool fits_ = true;
};

} // namespace mkc
