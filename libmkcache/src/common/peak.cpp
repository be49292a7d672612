// The loops that measure a thread's peak: a dozen independent
// accumulators per loop (enough to cover the latency on every core this
// library runs on, two vector units included), the best of five timed
// rounds. One loop per arithmetic the library's steps compute in: float32
// fused multiply-adds, bfloat16 dot products where the CPU has them, and
// 8-bit dot products as oneDNN computes them (VNNI's vpdpbusd, else the
// vpmaddubsw / vpmaddwd / vpaddd triple).
#include "common/peak.hpp"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>

#include <immintrin.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "mkcache/mkcache.h"

namespace mkc {

namespace {

constexpr int kAccumulators = 12;

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
inline __m128 madd128(__m128 x, __m128 a, __m128 b) { return _mm_add_ps(_mm_mul_ps(x, a), b); }
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

using Loop = double (*)(int64_t, float *);

// The loop of `dtype`'s arithmetic on the ISA oneDNN runs on (null: none
// of its own; float32's serves).
Loop loop_of(mkc_dtype dtype) {
    using isa = dnnl::cpu_isa;
    const isa at = dnnl::get_effective_cpu_isa();
    if (dtype == MKC_DTYPE_BF16)
        return at >= isa::avx512_core_bf16 ? loop_bf16 : nullptr;
    if (dtype == MKC_DTYPE_S8 || dtype == MKC_DTYPE_U8) {
        if (at >= isa::avx512_core_vnni)
            return loop_vnni;
        if (at >= isa::avx512_core)
            return loop_int8_512;
        return at >= isa::avx2 ? loop_int8_256 : nullptr;
    }
    if (at >= isa::avx512_core)
        return loop512;
    return at >= isa::avx2 ? loop256 : loop128;
}

double measure(Loop loop) {
    float sink = 0;
    loop(20000, &sink); // warm-up: clocks up, the vector units powered
    using clock = std::chrono::steady_clock;
    double best = 0;
    for (int round = 0; round < 5; ++round) {
        const auto t0 = clock::now();
        const double flops = loop(200000, &sink);
        const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
        if (seconds > 0 && flops / seconds > best) best = flops / seconds;
    }
    return best;
}

} // namespace

double peak_flops_per_thread() { return peak_ops_per_thread(MKC_DTYPE_F32); }

double peak_ops_per_thread(mkc_dtype dtype) {
    // float32, bfloat16, 8-bit: each measured once.
    static std::once_flag once[3];
    static double peak[3] = {0, 0, 0};
    const int kind = dtype == MKC_DTYPE_BF16                         ? 1
                     : dtype == MKC_DTYPE_S8 || dtype == MKC_DTYPE_U8 ? 2
                                                                      : 0;
    std::call_once(once[kind], [&] {
        const Loop loop = loop_of(dtype);
        peak[kind] = loop ? measure(loop) : peak_ops_per_thread(MKC_DTYPE_F32);
    });
    return peak[kind];
}

} // namespace mkc
