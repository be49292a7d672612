// The machine's arithmetic limit, measured: what one thread's fused
// multiply-adds reach on the vector width oneDNN uses on this CPU, so that
// a step's GFLOP/s can be read as a share of what the core can do.
#pragma once

namespace mkc {

// Floating-point operations per second (a multiply-add counted as two) of
// one thread on the widest vectors of the ISA oneDNN runs on (so
// ONEDNN_MAX_CPU_ISA=AVX2 measures AVX2's): measured once per process, on
// the first call's thread, in about 20 ms. Thread safe.
double peak_flops_per_thread();

} // namespace mkc
