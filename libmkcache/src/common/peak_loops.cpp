// The loops that measure a thread's peak: a dozen independent
// accumulators per loop (enough to cover the latency on every core this
// library runs on, two vector units included). One loop per arithmetic the
// library's steps compute in: float32 fused multiply-adds, bfloat16 dot
// products where the CPU has them, and 8-bit dot products as oneDNN computes
// them (VNNI's vpdpbusd, else the vpmaddubsw / vpmaddwd / vpaddd triple).
//
// This file is compiled optimized and without sanitizers in every build
// (CMakeLists.txt): what is timed must be the arithmetic units, not a debug
// build's loads and stores of the accumulators or a sanitizer's checks.
#include "common/peak_loops.hpp"
#include <cstring>
#include <immintrin.h>

namespace mkc {
namespace peak_loops {
namespace {

constexpr int kAccumulators = 12;

// SSE has no fused multiply-add: a multiply and an add.
inline __m128 madd128(__m128 x, __m128 a, __m128 b) { return _mm_add_ps(_mm_mul_ps(x, a), b); }

} // namespace

// One loop per vector width, each compiled for its ISA (a shared template
// would pass vectors across functions of different targets).
#define MKC_FMA_LOOP(Vec, set1, fma, lanes)                                                    \
    Vec acc[kAccumulators];                                                                   \
    for (int i = 0; i < kAccumulators; ++i) acc[i] = set1(1.0f + 1e-7f * i);                  \
    const Vec a = set1(0.999999f), b = set1(1e-7f);                                           \
    for (int64_t it = 0; it < iterations; ++it) {                                             \
        _Pragma("GCC unroll 12") for (int i = 0; i < kAccumulators; ++i) acc[i] =             \
            fma(acc[i], a, b);                                                                \
    }                                                                                         \
    float lanes_out[lanes];                                                                   \
    float out = 0;                                                                            \
    for (int i = 0; i < kAccumulators; ++i) {                                                 \
        std::memcpy(lanes_out, &acc[i], sizeof lanes_out);                                    \
        out += lanes_out[0];                                                                  \
    }                                                                                         \
    *sink = out; /* keeps the loop from being removed */                                      \
    return 2.0 * kAccumulators * (lanes) * static_cast<double>(iterations)

__attribute__((target("avx512f"))) double loop512(int64_t iterations, float *sink) {
    MKC_FMA_LOOP(__m512, _mm512_set1_ps, _mm512_fmadd_ps, 16);
}
__attribute__((target("avx2,fma"))) double loop256(int64_t iterations, float *sink) {
    MKC_FMA_LOOP(__m256, _mm256_set1_ps, _mm256_fmadd_ps, 8);
}
double loop128(int64_t iterations, float *sink) {
    MKC_FMA_LOOP(__m128, _mm_set1_ps, madd128, 4);
}
#undef MKC_FMA_LOOP

// bfloat16 pairs into float32 lanes: two multiply-adds per lane.
__attribute__((target("avx512f,avx512bf16"))) double loop_bf16(int64_t iterations, float *sink) {
    __m512 acc[kAccumulators];
    for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(1.0f + 1e-7f * i);
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);
    for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
        for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    }
    float lanes_out[16], out = 0;
    for (int i = 0; i < kAccumulators; ++i) {
        std::memcpy(lanes_out, &acc[i], sizeof lanes_out);
        out += lanes_out[0];
    }
    *sink = out;
    return 2.0 * 2 * kAccumulators * 16 * static_cast<double>(iterations);
}

// uint8 x int8 groups of four into int32 lanes.
__attribute__((target("avx512f,avx512vnni"))) double loop_vnni(int64_t iterations, float *sink) {
    __m512i acc[kAccumulators];
    for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_epi32(i);
    const __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(-1);
    for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
        for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
    }
    int32_t lanes_out[16];
    int64_t out = 0;
    for (int i = 0; i < kAccumulators; ++i) {
        std::memcpy(lanes_out, &acc[i], sizeof lanes_out);
        out += lanes_out[0];
    }
    *sink = static_cast<float>(out);
    return 2.0 * 4 * kAccumulators * 16 * static_cast<double>(iterations);
}

// Without VNNI: pairs of uint8 x int8 products into int16, pairs of those
// into int32, then added.
#define MKC_INT8_LOOP(Vec, set1_8, set1_16, set1_32, maddubs, madd, add, lanes)                 \
    Vec acc[kAccumulators];                                                                   \
    for (int i = 0; i < kAccumulators; ++i) acc[i] = set1_32(i);                              \
    const Vec a = set1_8(1), b = set1_8(-1), ones = set1_16(1);                               \
    for (int64_t it = 0; it < iterations; ++it) {                                             \
        _Pragma("GCC unroll 12") for (int i = 0; i < kAccumulators; ++i) acc[i] =             \
            add(acc[i], madd(maddubs(a, b), ones));                                           \
    }                                                                                         \
    int32_t lanes_out[lanes];                                                                 \
    int64_t out = 0;                                                                          \
    for (int i = 0; i < kAccumulators; ++i) {                                                 \
        std::memcpy(lanes_out, &acc[i], sizeof lanes_out);                                    \
        out += lanes_out[0];                                                                  \
    }                                                                                         \
    *sink = static_cast<float>(out);                                                          \
    return 2.0 * 4 * kAccumulators * (lanes) * static_cast<double>(iterations)

__attribute__((target("avx512bw"))) double loop_int8_512(int64_t iterations, float *sink) {
    MKC_INT8_LOOP(__m512i, _mm512_set1_epi8, _mm512_set1_epi16, _mm512_set1_epi32,
                  _mm512_maddubs_epi16, _mm512_madd_epi16, _mm512_add_epi32, 16);
}
__attribute__((target("avx2"))) double loop_int8_256(int64_t iterations, float *sink) {
    MKC_INT8_LOOP(__m256i, _mm256_set1_epi8, _mm256_set1_epi16, _mm256_set1_epi32,
                  _mm256_maddubs_epi16, _mm256_madd_epi16, _mm256_add_epi32, 8);
}
#undef MKC_INT8_LOOP

} // namespace peak_loops
} // namespace mkc
