// The machine's arithmetic limit, measured: what one thread's fused
// multiply-adds reach on the vector width oneDNN uses on this CPU, so that
// a step's GFLOP/s can be read as a share of what the core can do.
#pragma once

#include "mkcache/mkcache.h"

namespace mkc {

// Floating-point operations per second (a multiply-add counted as two) of
// one thread on the widest vectors of the ISA oneDNN runs on (so
// ONEDNN_MAX_CPU_ISA=AVX2 measures AVX2's): measured once per process, on
// the first call's thread, in about 20 ms. Thread safe.
double peak_flops_per_thread();

// The same for the arithmetic of `dtype`'s steps: F32 as above; BF16 the
// bfloat16 dot products where oneDNN runs them natively (else float32's);
// S8 / U8 the 8-bit dot products (VNNI's where oneDNN uses it, else the
// 16-bit pairs), counting a multiply-add as two operations.
double peak_ops_per_thread(mkc_dtype dtype);

} // namespace mkc
