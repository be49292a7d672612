// The reference kernels of 8-bit quantization: float32 arithmetic as the
// operators define it (one rounding per division or product), so that the
// results are the exact values a conforming implementation gives.
#include <cmath>
#include <cstdint>
#include <limits>

#include "reference/kernels.hpp"

namespace mkc::reference {

namespace {

template <typename Q> int32_t zero_of(const void *zero_point, int64_t c) {
    return zero_point ? static_cast<int32_t>(static_cast<const Q *>(zero_point)[c]) : 0;
}

// The elements in runs of one channel: `inner` elements past the axis share
// a scale and zero point, `channels` such runs repeat (1 channel: all one
// run), so the innermost loop has no index arithmetic.
template <typename F>
void by_channel(int64_t channels, int64_t inner, int64_t n, F &&run) {
    if (channels == 1) {
        run(0, 0, n);
        return;
    }
    for (int64_t begin = 0, c = 0; begin < n; begin += inner, c = (c + 1) % channels)
        run(c, begin, begin + inner);
}

template <typename Q>
void quantize_as(const float *src, const float *scale, const void *zero_point, int64_t channels,
                 int64_t inner, int64_t n, Q *dst) {
    constexpr float lo = static_cast<float>(std::numeric_limits<Q>::min());
    constexpr float hi = static_cast<float>(std::numeric_limits<Q>::max());
    by_channel(channels, inner, n, [&](int64_t c, int64_t begin, int64_t end) {
        const float s = scale[c];
        const float zero = static_cast<float>(zero_of<Q>(zero_point, c));
        const float below = lo - zero - 1.0f, above = hi - zero + 1.0f; // past the range
        for (int64_t i = begin; i < end; ++i) {
            const float q = src[i] / s;
            // Clamped first (what lies past the range saturates either way),
            // then rounded to the nearest integer, ties to even: adding and
            // subtracting 1.5 * 2^23 leaves a float of magnitude below 2^22
            // rounded in the default rounding mode, with plain arithmetic the
            // compiler vectorizes. The zero point's sum is exact.
            const float clamped = q < below ? below : q > above ? above : q;
            const float rounded = (clamped + 12582912.0f) - 12582912.0f;
            const float v = q != q ? zero : rounded + zero; // NaN: the zero point
            dst[i] = static_cast<Q>(v < lo ? lo : v > hi ? hi : v);
        }
    });
}

template <typename Q>
void dequantize_as(const Q *src, const float *scale, const void *zero_point, int64_t channels,
                   int64_t inner, int64_t n, float *dst) {
    by_channel(channels, inner, n, [&](int64_t c, int64_t begin, int64_t end) {
        const float s = scale[c];
        const int64_t zero = zero_of<Q>(zero_point, c);
        for (int64_t i = begin; i < end; ++i)
            dst[i] = static_cast<float>(static_cast<int64_t>(src[i]) - zero) * s;
    });
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
