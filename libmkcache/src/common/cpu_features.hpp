// What the CPU oneDNN runs on offers, as oneDNN sees it (its effective ISA:
// ONEDNN_MAX_CPU_ISA lowers it).
#pragma once

#include <cstdint>

namespace mkc {

// oneDNN's name of the ISA its kernels use ("avx2", "avx512_core_bf16", ...).
const char *cpu_isa_name();

// Whether oneDNN has bfloat16 kernels here: AVX-512 (arithmetic emulated
// through float32 below avx512_core_bf16) or AVX2-VNNI-2. Below that oneDNN
// 3.2 creates no bfloat16 primitive at all.
bool cpu_has_bf16_kernels();
// Whether the CPU converts and multiplies bfloat16 natively
// (avx512_core_bf16 and up, AVX2-VNNI-2): where bfloat16 is faster than
// float32 rather than only smaller.
bool cpu_has_native_bf16();

// Whether the CPU adds 8-bit products into 32 bits in one instruction
// (VNNI: avx512_core_vnni and up, AVX2-VNNI). Without it oneDNN's int8
// kernels add pairs of products in 16 bits, with saturation.
bool cpu_has_int8_dot_product();

// The bytes of one core's L2 cache as the system reports it (1 MiB where it
// does not): how much a thread can keep close while it works.
int64_t l2_cache_bytes();

// Throws UNSUPPORTED naming `op` and the ISA when bfloat16 has no kernels.
void require_bf16_kernels(const char *op);

} // namespace mkc
