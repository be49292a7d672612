#include "cache/front_cache.hpp"

#include <algorithm>
#include <cstring>

#include "keys/keys.hpp"

namespace mkc {

namespace {
constexpr uint64_t kMultiplier = 0x9e3779b97f4a7c15ull;

uint64_t mix(uint64_t h, uint64_t v) {
    h = (h ^ v) * kMultiplier;
    return h ^ (h >> 32);
}

uint64_t load(const char *p, size_t n) {
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    return v;
}

// Every byte, eight at a time, the tail read as one overlapping word (as
// wyhash does): names are short and this runs on every call.
uint64_t mix_bytes(uint64_t h, const char *text, size_t size) {
    h = mix(h, size);
    if (size >= 8) {
        size_t i = 0;
        for (; i + 8 <= size; i += 8) h = mix(h, load(text + i, 8));
        return i == size ? h : mix(h, load(text + size - 8, 8));
    }
    if (size >= 4) return mix(h, load(text, 4) << 32 | load(text + size - 4, 4));
    if (size > 0) {
        const auto byte = [text](size_t i) {
            return static_cast<uint64_t>(static_cast<unsigned char>(text[i]));
        };
        return mix(h, byte(0) << 16 | byte(size / 2) << 8 | byte(size - 1));
    }
    return h;
}

// `text` (NUL-terminated) equals `s`. Most suffixes (and unnamed calls'
// names) are empty: that case needs no strcmp call.
bool same_text(const std::string &s, const char *text) {
    if (s.empty() || text[0] == '\0') return s.empty() && text[0] == '\0';
    return std::strcmp(s.c_str(), text) == 0;
}
} // namespace

FrontCache::Call::Call(const char *name_, const char *suffix_, const int64_t *words_,
                       int nwords_)
    : Call(name_, suffix_, words_, nwords_, 0) {
    const uint64_t h = mix_bytes(0, name, std::strlen(name));
    hash = hash_words(mix_bytes(h, suffix, std::strlen(suffix)), words, nwords);
}

uint64_t FrontCache::hash_words(uint64_t seed, const int64_t *words, int nwords) {
    uint64_t h = seed;
    for (int i = 0; i < nwords; ++i) h = (h ^ static_cast<uint64_t>(words[i])) * kMultiplier;
    return h ^ (h >> 32);
}

uint64_t FrontCache::hash_text(const char *text) {
    return text ? mix_bytes(0, text, std::strlen(text)) : mix_bytes(0, "", 0);
}

FrontCache::Call::Call(const char *name_, const char *suffix_, const int64_t *words_,
                       int nwords_, uint64_t hash_)
    : name(name_ ? name_ : ""), suffix(suffix_ ? suffix_ : ""), words(words_), nwords(nwords_),
      hash(hash_) {}

std::shared_ptr<void> FrontCache::find(const Call &call, uint64_t context,
                                       BlobCache::HitTicket &ticket, std::string *key) {
    Slot &s = slots_[call.hash % kSlots];
    if (s.hash != call.hash || s.context != context ||
        s.words.size() != static_cast<size_t>(call.nwords) ||
        s.ticket.generation != BlobCache::instance().generation())
        return nullptr;
    if ((call.nwords > 0 &&
         std::memcmp(call.words, s.words.data(), sizeof(int64_t) * call.nwords) != 0) ||
        !same_text(s.name, call.name) || !same_text(s.suffix, call.suffix))
        return nullptr;
    auto blob = s.blob.lock();
    if (!blob) return nullptr;
    if (key) *key = s.key;
    ticket = s.ticket;
    return blob;
}

FrontCache::Slot &FrontCache::fill(uint64_t hash, const int64_t *words, int nwords,
                                   uint64_t context, const std::shared_ptr<void> &blob,
                                   const BlobCache::HitTicket &ticket) {
    Slot &s = slots_[hash % kSlots];
    s.hash = hash;
    s.context = context;
    s.ticket = ticket;
    s.words.assign(words, words + nwords);
    s.blob = blob;
    return s;
}

void FrontCache::remember(uint64_t hash, const int64_t *words, int nwords, uint64_t context,
                          const std::string &key, const std::shared_ptr<void> &blob,
                          const BlobCache::HitTicket &ticket) {
    Slot &s = fill(hash, words, nwords, context, blob, ticket);
    keys::parse_fields(key, s.name, s.suffix);
    s.key = key;
}

void FrontCache::remember(const Call &call, uint64_t context, const std::shared_ptr<void> &blob,
                          const BlobCache::HitTicket &ticket) {
    Slot &s = fill(call.hash, call.words, call.nwords, context, blob, ticket);
    s.name = call.name;
    s.suffix = call.suffix;
    s.key.clear();
}

} // namespace mkc
