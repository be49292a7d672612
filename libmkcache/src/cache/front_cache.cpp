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

bool same_text(const std::string &s, const char *text, size_t size) {
    return s.size() == size && std::memcmp(s.data(), text, size) == 0;
}
} // namespace

FrontCache::Call::Call(const char *name_, const char *suffix_, const int64_t *dims_, int ndims_)
    : name(name_ ? name_ : ""), name_size(std::strlen(name)), suffix(suffix_ ? suffix_ : ""),
      suffix_size(std::strlen(suffix)), dims(dims_), ndims(ndims_) {
    uint64_t h = mix_bytes(0, name, name_size);
    h = mix_bytes(h, suffix, suffix_size);
    for (int i = 0; i < ndims; ++i) h = mix(h, static_cast<uint64_t>(dims[i]));
    hash = h;
}

std::shared_ptr<void> FrontCache::find(const Call &call, uint64_t context, std::string &key,
                                       BlobCache::HitTicket &ticket) {
    if (call.ndims > kMaxDims) return nullptr;
    Slot &s = slots_[call.hash % kSlots];
    if (s.hash != call.hash || s.context != context || s.ndims != call.ndims ||
        s.ticket.generation != BlobCache::instance().generation())
        return nullptr;
    if (!std::equal(call.dims, call.dims + call.ndims, s.dims) ||
        !same_text(s.name, call.name, call.name_size) ||
        !same_text(s.suffix, call.suffix, call.suffix_size))
        return nullptr;
    auto blob = s.blob.lock();
    if (!blob) return nullptr;
    key = s.key;
    ticket = s.ticket;
    return blob;
}

void FrontCache::remember(uint64_t hash, const int64_t *dims, int ndims, uint64_t context,
                          const std::string &key, const std::shared_ptr<void> &blob,
                          const BlobCache::HitTicket &ticket) {
    if (ndims > kMaxDims) return;
    Slot &s = slots_[hash % kSlots];
    s.hash = hash;
    s.context = context;
    s.ticket = ticket;
    s.ndims = ndims;
    std::copy(dims, dims + ndims, s.dims);
    keys::parse_fields(key, s.name, s.suffix);
    s.key = key;
    s.blob = blob;
}

} // namespace mkc
