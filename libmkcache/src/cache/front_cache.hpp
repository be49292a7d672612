// A thread's memo of its recent cache hits (the per-thread front cache).
//
// A cached operator call normally formats its key (name, suffix, dims,
// executor, thread) and looks it up in the shared maps under a lock: about
// half of what the library adds to a small primitive. A call whose name,
// suffix and dims match a remembered hit of the same thread, in the same
// cache context (ThreadState::context_version), skips both. The memo is only
// trusted while the cache has removed or replaced nothing since the hit was
// remembered (BlobCache::generation), so it never hands out a blob the
// shared cache no longer holds. Slots keep weak references: an evicted blob
// is freed as before, the memo does not keep it alive.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cache/blob_cache.hpp"

namespace mkc {

class FrontCache {
public:
    // Identifies a call: a name and a suffix (text) and integer words - the
    // handler's key dims, or an operator's raw arguments (see
    // ThreadState::argument_cache).
    struct Call {
        // Hashes everything (the handler's calls).
        Call(const char *name, const char *suffix, const int64_t *words, int nwords);
        // With the caller's own hash: any function of these arguments that
        // is equal for equal calls (an operator hashes the words that tell
        // its calls apart, not all of them: a collision only costs a miss).
        Call(const char *name, const char *suffix, const int64_t *words, int nwords,
             uint64_t hash);
        const char *name;   // null = ""
        const char *suffix; // null = ""
        const int64_t *words;
        int nwords;
        uint64_t hash;
    };
    // Hashes `words` onto `seed`: one multiply per word (an operator's
    // arguments are ~30 words), then a fold that spreads the high bits into
    // the slot index.
    static uint64_t hash_words(uint64_t seed, const int64_t *words, int nwords);

    // The blob remembered for `call` in context `context`, if the cache
    // still holds it; fills `ticket` for BlobCache::count_hit and, if given,
    // `key` with the full key it was remembered with. Null otherwise.
    std::shared_ptr<void> find(const Call &call, uint64_t context, BlobCache::HitTicket &ticket,
                               std::string *key = nullptr);
    // Remembers a hit get() returned with `ticket` for `key`, the key made
    // for a call with this hash and these words (name and suffix are read
    // back from the key: the call's own may be gone by now).
    void remember(uint64_t hash, const int64_t *words, int nwords, uint64_t context,
                  const std::string &key, const std::shared_ptr<void> &blob,
                  const BlobCache::HitTicket &ticket);
    // Remembers a hit for `call` itself (no key).
    void remember(const Call &call, uint64_t context, const std::shared_ptr<void> &blob,
                  const BlobCache::HitTicket &ticket);

private:
    static constexpr int kSlots = 256; // direct-mapped by hash
    struct Slot {
        uint64_t hash = 0;
        uint64_t context = 0;
        BlobCache::HitTicket ticket; // generation 0: empty
        std::vector<int64_t> words;  // capacity kept: refilling allocates rarely
        std::string name, suffix;    // the call's, unescaped
        std::string key;             // the full key, if remembered with one
        std::weak_ptr<void> blob;
    };
    Slot &fill(uint64_t hash, const int64_t *words, int nwords, uint64_t context,
               const std::shared_ptr<void> &blob, const BlobCache::HitTicket &ticket);
    Slot slots_[kSlots];
};

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
    // Raw bytes of a struct without padding (indeterminate bytes would make
    // equal calls differ): nbytes a multiple of 8.
    void add_bytes(const void *data, size_t nbytes) {
        const int n = static_cast<int>(nbytes / 8);
        if (size_ + n > kMaxWords) {
            fits_ = false;
            return;
        }
        std::memcpy(words_ + size_, data, nbytes);
        size_ += n;
    }
    // A float argument's bits, for a word (equal bits: the same call).
    static int64_t bits(float v) {
        uint32_t b;
        std::memcpy(&b, &v, 4);
        return b;
    }
    void seal(uint64_t seed) { hash_ = FrontCache::hash_words(seed, words_, size_); }
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
