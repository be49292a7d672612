#include "common/cpu_features.hpp"

#include <unistd.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "common/error.hpp"

namespace mkc {

namespace {

// oneDNN's ISA values are bit sets: each includes the bits of the ISAs
// below it in its family.
bool at_least(dnnl_cpu_isa_t isa) {
    const unsigned at = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    const unsigned want = static_cast<unsigned>(isa);
    return (at & want) == want;
}

} // namespace

const char *cpu_isa_name() {
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx2_vnni_2: return "avx2_vnni_2";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_fp16: return "avx512_core_fp16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_amx_fp16: return "avx512_core_amx_fp16";
    default: return "default";
    }
}

bool cpu_has_bf16_kernels() {
    static const bool has = at_least(dnnl_cpu_isa_avx512_core) || at_least(dnnl_cpu_isa_avx2_vnni_2);
    return has;
}

bool cpu_has_native_bf16() {
    static const bool has =
        at_least(dnnl_cpu_isa_avx512_core_bf16) || at_least(dnnl_cpu_isa_avx2_vnni_2);
    return has;
}

bool cpu_has_int8_dot_product() {
    static const bool has =
        at_least(dnnl_cpu_isa_avx512_core_vnni) || at_least(dnnl_cpu_isa_avx2_vnni);
    return has;
}

void require_bf16_kernels(const char *op) {
    if (!cpu_has_bf16_kernels())
        fail(MKC_STATUS_UNSUPPORTED, op, ": bfloat16 needs a CPU with AVX-512 or AVX2-VNNI-2 "
             "(oneDNN has no bfloat16 kernels for ", cpu_isa_name(), ")");
}

int64_t l2_cache_bytes() {
    static const int64_t bytes = [] {
        const long n = sysconf(_SC_LEVEL2_CACHE_SIZE);
        return n > 0 ? static_cast<int64_t>(n) : int64_t(1) << 20;
    }();
    return bytes;
}

} // namespace mkc
