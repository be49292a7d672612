// A thread's memo of its recent cache hits (issue 5: per-thread front cache).
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
#include <memory>
#include <string>

#include "cache/blob_cache.hpp"

namespace mkc {

class FrontCache {
public:
    static constexpr int kMaxDims = 8; // calls with more dims are not remembered

    // Identifies a call: its key's name and suffix fields and dims.
    struct Call {
        Call(const char *name, const char *suffix, const int64_t *dims, int ndims);
        const char *name; // null = ""
        size_t name_size;
        const char *suffix; // null = ""
        size_t suffix_size;
        const int64_t *dims;
        int ndims;
        uint64_t hash; // of all of the above
    };

    // The blob remembered for `call` in context `context`, if the cache
    // still holds it; fills `key` with its full key and `ticket` for
    // BlobCache::count_hit. Null otherwise.
    std::shared_ptr<void> find(const Call &call, uint64_t context, std::string &key,
                               BlobCache::HitTicket &ticket);
    // Remembers a hit get() returned with `ticket` for `key`, the key made
    // for a call with this hash and these dims.
    void remember(uint64_t hash, const int64_t *dims, int ndims, uint64_t context,
                  const std::string &key, const std::shared_ptr<void> &blob,
                  const BlobCache::HitTicket &ticket);

private:
    static constexpr int kSlots = 256; // direct-mapped by hash
    struct Slot {
        uint64_t hash = 0;
        uint64_t context = 0;
        BlobCache::HitTicket ticket; // generation 0: empty
        int ndims = 0;
        int64_t dims[kMaxDims];
        std::string name, suffix; // the call's, unescaped
        std::string key;          // the full key
        std::weak_ptr<void> blob;
    };
    Slot slots_[kSlots];
};

} // namespace mkc
