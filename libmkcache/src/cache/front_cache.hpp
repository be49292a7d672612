// A thread's memo of its recent cache hits (the per-thread front cache).
//
// A cached operator call normally formats its key (name, suffix, dims,
// executor, thread) and looks it up in the shared maps under a lock: about
// half of what the library adds to a small primitive. A call whose name,
// suffix and dims match a remembered hit of the same thread, in the same
// cache scope (CacheScope::memo_context), skips both. The memo is only
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
    // A hash of a name's bytes (null hashes as ""): calls are told apart by
    // their names' text, wherever the caller keeps it.
    static uint64_t hash_text(const char *text);

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

} // namespace mkc
