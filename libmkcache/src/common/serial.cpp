#include "common/serial.hpp"

#include <dlfcn.h>

#include <initializer_list>

namespace mkc {

namespace {
struct OpenMp {
    int (*get_max_threads)() = nullptr;
    void (*set_num_threads)(int) = nullptr;
    int (*in_parallel)() = nullptr;
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

} // namespace mkc
