// Shared pieces of libmkcache_bench (the benchmark suite's timing helper).
#pragma once

#include <cstdlib>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "mkcache/mkcache.h"

namespace mkcb {

// BARE_USER_SCRATCHPAD: BARE built as mkcache builds its primitives (the
// scratchpad is the caller's, passed at execution) - conv2d only.
enum Mode { BARE = 0, CACHED = 1, CACHED_NEW = 2, RECREATE = 3, BARE_USER_SCRATCHPAD = 4 };

inline const dnnl::engine &engine() {
    static dnnl::engine e(dnnl::engine::kind::cpu, 0);
    return e;
}

inline void check(mkc_status s) {
    if (s != MKC_STATUS_OK) throw std::runtime_error(mkc_last_error());
}

// 64-byte aligned float buffers, like oneDNN's own allocations: the bare and
// the cached paths then read equally aligned data.
struct AlignedBuffer {
    float *data = nullptr;
    explicit AlignedBuffer(size_t n, float value) {
        void *p = nullptr;
        if (posix_memalign(&p, 64, n * sizeof(float) + 64) != 0) throw std::bad_alloc();
        data = static_cast<float *>(p);
        for (size_t i = 0; i < n; ++i) data[i] = value;
    }
    ~AlignedBuffer() { free(data); }
    AlignedBuffer(const AlignedBuffer &) = delete;
    AlignedBuffer &operator=(const AlignedBuffer &) = delete;
};

struct Bench {
    virtual ~Bench() = default;
    virtual void call() = 0;
    uint64_t reorders_before = 0;
};

// The cases of bench_ops.cpp (everything but conv2d and relu).
std::unique_ptr<Bench> make_op_bench(const std::string &op, int mode,
                                     const std::vector<int64_t> &params);

} // namespace mkcb
