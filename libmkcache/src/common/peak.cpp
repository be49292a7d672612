// A thread's peak per arithmetic: the loop of peak_loops.cpp for the ISA
// oneDNN runs on, the best of five timed rounds, measured once.
#include "common/peak.hpp"
#include "common/peak_loops.hpp"

#include <chrono>
#include <cstdint>
#include <mutex>

#include <oneapi/dnnl/dnnl.hpp>

#include "mkcache/mkcache.h"

namespace mkc {

namespace {

using namespace peak_loops;

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
