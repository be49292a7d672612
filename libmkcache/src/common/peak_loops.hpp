// The timed loops behind peak.cpp's measurements, each compiled for its own
// ISA: run `iterations` rounds, store a result in *sink (so that the loop
// is not removed) and return the operations done (a multiply-add counts two).
#pragma once

#include <cstdint>

namespace mkc {
namespace peak_loops {

// The declarations carry the definitions' targets (a declaration without
// them would be another version of the function to GCC).
__attribute__((target("avx512f"))) double loop512(int64_t iterations, float *sink);
__attribute__((target("avx2,fma"))) double loop256(int64_t iterations, float *sink);
double loop128(int64_t iterations, float *sink); // SSE's multiply and add
__attribute__((target("avx512f,avx512bf16"))) double loop_bf16(int64_t iterations, float *sink);
__attribute__((target("avx512f,avx512vnni"))) double loop_vnni(int64_t iterations, float *sink);
__attribute__((target("avx512bw"))) double loop_int8_512(int64_t iterations, float *sink);
__attribute__((target("avx2"))) double loop_int8_256(int64_t iterations, float *sink);

} // namespace peak_loops
} // namespace mkc
