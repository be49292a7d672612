// Tiny problems on the calling thread alone.
//
// oneDNN's element-wise and binary kernels split their work over every
// OpenMP thread at execution time, so even a 16-element relu wakes the
// thread team, which on small problems costs more than the work itself. A
// SerialRegion makes this thread's next parallel regions single-threaded
// for its scope, as frameworks do below a grain size. Only for primitives
// whose threading is decided at execution (oneDNN's parallel(0, ...)); a
// primitive is built and executed under the same setting, and oneDNN's own
// cache keys primitives by thread count.
#pragma once

#include <cstdint>

namespace mkc {

// Element counts up to this run serially: below where waking the team
// starts to pay even for the costliest activations (gelu), as measured by
// the benchmark suite's small cases.
constexpr int64_t kSerialElements = 1024;

// The calling thread's OpenMP thread count (0 when the runtime oneDNN uses
// was not found), and setting it.
int openmp_max_threads();
void set_openmp_max_threads(int threads);

// Runs body(begin, end) over [0, n) split in contiguous parts, one per
// thread of the OpenMP team oneDNN's kernels use (its GOMP entry point,
// which every runtime oneDNN ships with provides), so our own kernels use
// the threads oneDNN's would and no other. On the calling thread alone when
// n is at most `grain`, inside a parallel region, or without the runtime.
// body must not throw.
void parallel_parts(int64_t n, int64_t grain, void (*body)(void *context, int64_t, int64_t),
                    void *context);

class SerialRegion {
public:
    // Active only if `elements` <= kSerialElements and the OpenMP runtime
    // oneDNN uses was found.
    explicit SerialRegion(int64_t elements);
    ~SerialRegion();
    SerialRegion(const SerialRegion &) = delete;
    SerialRegion &operator=(const SerialRegion &) = delete;

private:
    int previous_ = 0; // this thread's thread count to restore; 0 = inactive
};

} // namespace mkc
