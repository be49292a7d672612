// The reference kernels of 8-bit quantization: float32 arithmetic as the
// operators define it (one rounding per division or product), so that the
// results are the exact values a conforming implementation gives.
#include <cmath>
#include <cstdint>
#include <limits>

#include "reference/kernels.hpp"

namespace mkc::reference {

namespace {

// The element's index along the quantization axis, for a scale of
// `channels` elements over dims whose elements past the axis number `inner`.
inline int64_t channel_of(int64_t i, int64_t channels, int64_t inner) {
    return channels == 1 ? 0 : (i / inner) % channels;
}

template <typename Q> int32_t zero_of(const void *zero_point, int64_t c) {
    return zero_point ? static_cast<int32_t>(static_cast<const Q *>(zero_point)[c]) : 0;
}

template <typename Q>
void quantize_as(const float *src, const float *scale, const void *zero_point, int64_t channels,
                 int64_t inner, int64_t n, Q *dst) {
    constexpr float lo = static_cast<float>(std::numeric_limits<Q>::min());
    constexpr float hi = static_cast<float>(std::numeric_limits<Q>::max());
    for (int64_t i = 0; i < n; ++i) {
        const int64_t c = channel_of(i, channels, inner);
        const float zero = static_cast<float>(zero_of<Q>(zero_point, c));
        const float q = src[i] / scale[c];
        // nearbyint rounds ties to even in the default rounding mode; the
        // sum with the zero point is exact (both are small integers).
        const float v = std::isnan(q) ? zero : std::nearbyint(q) + zero;
        dst[i] = static_cast<Q>(v < lo ? lo : v > hi ? hi : v);
    }
}

template <typename Q>
void dequantize_as(const Q *src, const float *scale, const void *zero_point, int64_t channels,
                   int64_t inner, int64_t n, float *dst) {
    for (int64_t i = 0; i < n; ++i) {
        const int64_t c = channel_of(i, channels, inner);
        const int64_t shifted = static_cast<int64_t>(src[i]) - zero_of<Q>(zero_point, c);
        dst[i] = static_cast<float>(shifted) * scale[c];
    }
}

} // namespace

void quantize(const float *src, const float *scale, const void *zero_point, int64_t channels,
              int64_t inner, int64_t n, mkc_dtype to, void *dst) {
    if (to == MKC_DTYPE_S8)
        quantize_as(src, scale, zero_point, channels, inner, n, static_cast<int8_t *>(dst));
    else
        quantize_as(src, scale, zero_point, channels, inner, n, static_cast<uint8_t *>(dst));
}

void dequantize(mkc_dtype from, const void *src, const float *scale, const void *zero_point,
                int64_t channels, int64_t inner, int64_t n, float *dst) {
    switch (from) {
    case MKC_DTYPE_S8:
        return dequantize_as(static_cast<const int8_t *>(src), scale, zero_point, channels,
                             inner, n, dst);
    case MKC_DTYPE_S32:
        return dequantize_as(static_cast<const int32_t *>(src), scale, zero_point, channels,
                             inner, n, dst);
    default:
        return dequantize_as(static_cast<const uint8_t *>(src), scale, zero_point, channels,
                             inner, n, dst);
    }
}

} // namespace mkc::reference
