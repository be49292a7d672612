// The FMA loops that measure a thread's peak: a dozen independent
// accumulators per loop (enough to cover the FMA latency on every core this
// library runs on, two FMA units included), the best of five timed rounds.
#include "common/peak.hpp"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>

#include <immintrin.h>
#include <oneapi/dnnl/dnnl.hpp>

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

double measure() {
    using isa = dnnl::cpu_isa;
    const isa at = dnnl::get_effective_cpu_isa();
    double (*loop)(int64_t, float *) = loop128;
    if (at >= isa::avx512_core)
        loop = loop512;
    else if (at >= isa::avx2)
        loop = loop256;
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

double peak_flops_per_thread() {
    static std::once_flag once;
    static double peak = 0;
    std::call_once(once, [] { peak = measure(); });
    return peak;
}

} // namespace mkc
