#include "common/serial.hpp"

#include <dlfcn.h>

#include <initializer_list>

namespace mkc {

namespace {
struct OpenMp {
    int (*get_max_threads)() = nullptr;
    void (*set_num_threads)(int) = nullptr;
    int (*in_parallel)() = nullptr;
    // Optional (parallel_parts runs serially without them): what a
    // compiler's `#pragma omp parallel` calls, and the team's queries.
    void (*parallel)(void (*)(void *), void *, unsigned, unsigned) = nullptr;
    int (*thread_num)() = nullptr;
    int (*num_threads)() = nullptr;
};

// The runtime oneDNN is linked with is already loaded: look it up rather
// than link one (RTLD_NOLOAD never loads a second runtime).
OpenMp find_openmp() {
    OpenMp omp;
    for (const char *name : {"libiomp5.so", "libgomp.so.1", "libomp.so"}) {
        void *lib = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
        if (lib == nullptr) continue;
        omp.get_max_threads = reinterpret_cast<int (*)()>(dlsym(lib, "omp_get_max_threads"));
        omp.set_num_threads = reinterpret_cast<void (*)(int)>(dlsym(lib, "omp_set_num_threads"));
        omp.in_parallel = reinterpret_cast<int (*)()>(dlsym(lib, "omp_in_parallel"));
        omp.parallel = reinterpret_cast<void (*)(void (*)(void *), void *, unsigned, unsigned)>(
            dlsym(lib, "GOMP_parallel"));
        omp.thread_num = reinterpret_cast<int (*)()>(dlsym(lib, "omp_get_thread_num"));
        omp.num_threads = reinterpret_cast<int (*)()>(dlsym(lib, "omp_get_num_threads"));
        if (!(omp.parallel && omp.thread_num && omp.num_threads))
            omp.parallel = nullptr;
        if (omp.get_max_threads && omp.set_num_threads && omp.in_parallel) return omp;
        omp = OpenMp{};
    }
    return omp;
}

const OpenMp &openmp() {
    static const OpenMp omp = find_openmp();
    return omp;
}
} // namespace

int openmp_max_threads() {
    const OpenMp &omp = openmp();
    return omp.get_max_threads ? omp.get_max_threads() : 0;
}

void set_openmp_max_threads(int threads) {
    if (const OpenMp &omp = openmp(); omp.set_num_threads) omp.set_num_threads(threads);
}

SerialRegion::SerialRegion(int64_t elements) {
    if (elements > kSerialElements) return;
    const OpenMp &omp = openmp();
    if (omp.set_num_threads == nullptr || omp.in_parallel()) return;
    const int threads = omp.get_max_threads();
    if (threads <= 1) return;
    omp.set_num_threads(1);
    previous_ = threads;
}

SerialRegion::~SerialRegion() {
    if (previous_ > 0) openmp().set_num_threads(previous_);
}

namespace {
struct Parts {
    int64_t n;
    void (*body)(void *, int64_t, int64_t);
    void *context;
};

// One thread's part of the team's work.
void run_part(void *data) {
    const auto &p = *static_cast<const Parts *>(data);
    const OpenMp &omp = openmp();
    const int64_t threads = omp.num_threads(), me = omp.thread_num();
    const int64_t begin = p.n * me / threads, end = p.n * (me + 1) / threads;
    if (begin < end) p.body(p.context, begin, end);
}
} // namespace

void parallel_parts(int64_t n, int64_t grain, void (*body)(void *, int64_t, int64_t),
                    void *context) {
    const OpenMp &omp = openmp();
    if (n <= grain || omp.parallel == nullptr || omp.in_parallel() ||
        omp.get_max_threads() <= 1) {
        if (n > 0) body(context, 0, n);
        return;
    }
    Parts parts{n, body, context};
    omp.parallel(run_part, &parts, 0, 0); // 0 threads: the team's usual size
}

} // namespace mkc
