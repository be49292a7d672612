// The two 16-bit float formats, converted in software so that every CPU can
// hold, move and convert them, whether or not its oneDNN kernels compute in
// them: bfloat16 (float32's sign and exponent, 7 mantissa bits) and IEEE
// half (5 exponent bits, 10 mantissa bits). From float32 both round to the
// nearest, ties to even; NaN stays a (quiet) NaN.
#pragma once

#include <cstdint>
#include <cstring>

namespace mkc {

inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

inline float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

inline uint16_t bf16_from_float(float f) {
    const uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep the sign, make it quiet
        return static_cast<uint16_t>((u >> 16) | 0x0040u);
    // Adding 0x7fff plus the kept part's lowest bit rounds to the nearest,
    // ties to even; a carry out of the mantissa steps the exponent (to
    // infinity from the largest finite values, as rounding should).
    const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(rounded >> 16);
}

inline float float_from_bf16(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t f16_from_float(float f) {
    const uint32_t u = float_bits(f);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t magnitude = u & 0x7fffffffu;
    if (magnitude > 0x7f800000u) // NaN
        return static_cast<uint16_t>(sign | 0x7e00u);
    if (magnitude >= 0x477ff000u) // rounds to past 65504: infinity (and infinity itself)
        return static_cast<uint16_t>(sign | 0x7c00u);
    if (magnitude < 0x38800000u) {
        // Below half's smallest normal (2^-14): a subnormal multiple of
        // 2^-24, or zero. Shift the full significand down to that unit and
        // round the bits shifted out to the nearest, ties to even.
        if (magnitude < 0x33000000u) // below 2^-25: rounds to zero
            return sign;
        const uint32_t exponent = magnitude >> 23;
        const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - exponent; // 14..24 for 2^-25 <= |f| < 2^-14
        uint32_t half = significand >> shift;
        const uint32_t rest = significand & ((1u << shift) - 1u);
        const uint32_t midpoint = 1u << (shift - 1u);
        if (rest > midpoint || (rest == midpoint && (half & 1u)))
            ++half; // may carry into the smallest normal, which is its encoding
        return static_cast<uint16_t>(sign | half);
    }
    // Normal: rebias the exponent (127 to 15) and round away 13 mantissa bits.
    const uint32_t rebased = magnitude - (112u << 23);
    const uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
    return static_cast<uint16_t>(sign | (rounded >> 13));
}

inline float float_from_f16(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu;
    const uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1f) // infinity or NaN
        return bits_float(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
        // Zero or subnormal: mantissa * 2^-24, exact in float32.
        const float value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
        return sign ? -value : value;
    }
    return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

} // namespace mkc
