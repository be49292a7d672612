#include "tensor/fingerprint.hpp"

#include <cstring>

namespace mkc {

namespace {

// The round and final mix of the xxHash64 design: four independent lanes
// keep the multiplier pipeline busy, so hashing runs near memory speed.
constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ull;

inline uint64_t rotl(uint64_t v, int r) { return (v << r) | (v >> (64 - r)); }
inline uint64_t round(uint64_t lane, uint64_t word) {
    return rotl(lane + word * kPrime2, 31) * kPrime1;
}
inline uint64_t load(const unsigned char *p) {
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline uint64_t avalanche(uint64_t h) {
    h ^= h >> 33;
    h *= kPrime2;
    h ^= h >> 29;
    h *= kPrime3;
    return h ^ (h >> 32);
}

uint64_t hash_bytes(const unsigned char *p, size_t n, uint64_t seed) {
    uint64_t lane[4] = {seed + kPrime1 + kPrime2, seed + kPrime2, seed, seed - kPrime1};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int l = 0; l < 4; ++l) lane[l] = round(lane[l], load(p + i + 8 * l));
    uint64_t h = rotl(lane[0], 1) + rotl(lane[1], 7) + rotl(lane[2], 12) + rotl(lane[3], 18);
    for (; i + 8 <= n; i += 8) h = rotl(h ^ round(0, load(p + i)), 27) * kPrime1 + kPrime3;
    for (; i < n; ++i) h = rotl(h ^ (p[i] * kPrime1), 11) * kPrime2;
    return avalanche(h + n);
}

} // namespace

uint64_t fingerprint(const Tensor &t) {
    // The arrangement first (the same bytes in another layout are other
    // values), then the data.
    char name[kFormatNameSize];
    const char *end = format_name(t.desc, name);
    uint64_t seed = hash_bytes(reinterpret_cast<const unsigned char *>(name),
                               static_cast<size_t>(end - name), t.dtype);
    seed = hash_bytes(reinterpret_cast<const unsigned char *>(t.dims.data()),
                      t.dims.size() * sizeof(int64_t), seed);
    return hash_bytes(static_cast<const unsigned char *>(t.data), t.desc.get_size(), seed);
}

} // namespace mkc
