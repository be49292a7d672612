// C ABI: status strings, errors, version, build info, thread-local context.
#include <dlfcn.h>

#include <shared_mutex>
#include <string>
#include <thread>

#include <oneapi/dnnl/dnnl.hpp>

#include "api/guard.hpp"
#include "common/cpu_features.hpp"
#include "common/engine.hpp"
#include "common/peak.hpp"
#include "common/serial.hpp"
#include "common/thread_state.hpp"
#include "layout/layout.hpp"

namespace mkc::api {
const char *last_error_text();
}

using namespace mkc;
using mkc::api::guard;
using mkc::api::require_out;

namespace {

// OpenMP's thread count, read from the OpenMP runtime oneDNN loaded
// (libmkcache itself does not link one); the cores without one.
int omp_max_threads() {
    const int threads = openmp_max_threads();
    return threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
}

const char *runtime_name(unsigned runtime) {
    switch (runtime) {
    case DNNL_RUNTIME_OMP: return "OMP";
    case DNNL_RUNTIME_TBB: return "TBB";
    case DNNL_RUNTIME_SEQ: return "SEQ";
    case DNNL_RUNTIME_THREADPOOL: return "THREADPOOL";
    default: return "unknown";
    }
}

} // namespace

extern "C" {

MKC_API const char *mkc_status_string(mkc_status status) {
    switch (status) {
    case MKC_STATUS_OK: return "MKC_STATUS_OK";
    case MKC_STATUS_INVALID_ARGUMENT: return "MKC_STATUS_INVALID_ARGUMENT";
    case MKC_STATUS_INVALID_HANDLE: return "MKC_STATUS_INVALID_HANDLE";
    case MKC_STATUS_UNSUPPORTED: return "MKC_STATUS_UNSUPPORTED";
    case MKC_STATUS_OUT_OF_MEMORY: return "MKC_STATUS_OUT_OF_MEMORY";
    case MKC_STATUS_BUFFER_TOO_SMALL: return "MKC_STATUS_BUFFER_TOO_SMALL";
    case MKC_STATUS_ONEDNN_ERROR: return "MKC_STATUS_ONEDNN_ERROR";
    case MKC_STATUS_INTERNAL_ERROR: return "MKC_STATUS_INTERNAL_ERROR";
    default: break;
    }
    return "MKC_STATUS_UNKNOWN";
}

MKC_API const char *mkc_last_error(void) { return mkc::api::last_error_text(); }

MKC_API mkc_status mkc_get_version(int *major, int *minor, int *patch) {
    return guard([&] {
        require_out(major, "major");
        require_out(minor, "minor");
        require_out(patch, "patch");
        *major = MKC_VERSION_MAJOR;
        *minor = MKC_VERSION_MINOR;
        *patch = MKC_VERSION_PATCH;
    });
}

MKC_API mkc_status mkc_set_num_threads(int threads) {
    return guard([&] {
        require(threads >= 1, "set_num_threads: threads must be >= 1, got ", threads);
        if (openmp_max_threads() == 0)
            fail(MKC_STATUS_UNSUPPORTED, "set_num_threads: oneDNN runs without OpenMP here");
        set_openmp_max_threads(threads);
    });
}

MKC_API mkc_status mkc_get_num_threads(int *threads) {
    return guard([&] {
        require_out(threads, "threads");
        *threads = omp_max_threads();
    });
}

MKC_API mkc_status mkc_get_peak_flops(double *flops_per_thread) {
    return guard([&] {
        require_out(flops_per_thread, "flops_per_thread");
        *flops_per_thread = peak_flops_per_thread();
    });
}

MKC_API mkc_status mkc_get_peak_ops(mkc_dtype dtype, double *ops_per_thread) {
    return guard([&] {
        require_out(ops_per_thread, "ops_per_thread");
        require(dtype == MKC_DTYPE_F32 || dtype == MKC_DTYPE_BF16 || dtype == MKC_DTYPE_S8 ||
                    dtype == MKC_DTYPE_U8,
                "get_peak_ops: dtype must be F32, BF16, S8 or U8, got ", dtype_name(dtype));
        *ops_per_thread = peak_ops_per_thread(dtype);
    });
}

MKC_API mkc_status mkc_get_build_info(const char **json) {
    return guard([&] {
        require_out(json, "json");
        thread_local std::string text;
        const dnnl_version_t *v = dnnl_version();
        int capacity = -1;
        {
            // oneDNN's cache lock is taken inside: under the creation lock,
            // as every other entry into that cache, so fork() waits for it.
            std::shared_lock<std::shared_mutex> no_fork(primitive_creation_mutex());
            dnnl_get_primitive_cache_capacity(&capacity);
        }
        text = std::string("{\"version\": \"") + MKC_VERSION_STRING +
               "\", \"onednn_version\": \"" + std::to_string(v->major) + "." +
               std::to_string(v->minor) + "." + std::to_string(v->patch) +
               "\", \"onednn_git_hash\": \"" + v->hash + "\", \"onednn_cpu_runtime\": \"" +
               runtime_name(v->cpu_runtime) + "\", \"isa\": \"" +
               cpu_isa_name() + "\", \"bf16\": \"" +
               (cpu_has_native_bf16() ? "native" : cpu_has_bf16_kernels() ? "emulated" : "none") +
               "\", \"max_threads\": " + std::to_string(omp_max_threads()) +
               ", \"l2_cache_bytes\": " + std::to_string(l2_cache_bytes()) +
               ", \"onednn_cache_capacity\": " + std::to_string(capacity) +
               ", \"compiler\": \"" +
#if defined(__clang__)
               "clang " __clang_version__
#elif defined(__GNUC__)
               "gcc " __VERSION__
#else
               "unknown"
#endif
               + "\", \"build_type\": \"" +
#ifdef NDEBUG
               "release"
#else
               "debug"
#endif
               + "\"}";
        *json = text.c_str();
    });
}

MKC_API mkc_status mkc_set_target_layout(mkc_layout layout) {
    return guard([&] { layout::set_target(layout); });
}

MKC_API mkc_status mkc_get_target_layout(mkc_layout *layout) {
    return guard([&] {
        require_out(layout, "layout");
        *layout = layout::target();
    });
}

MKC_API mkc_status mkc_set_executor(uint64_t executor_id) {
    return guard([&] { thread_state().set_executor(executor_id); });
}

MKC_API mkc_status mkc_get_executor(uint64_t *executor_id) {
    return guard([&] {
        require_out(executor_id, "executor_id");
        *executor_id = thread_state().executor();
    });
}

MKC_API mkc_status mkc_cache_set_session(int64_t session_id) {
    return guard([&] { thread_state().set_session(session_id); });
}

MKC_API mkc_status mkc_cache_get_session(int64_t *session_id) {
    return guard([&] {
        require_out(session_id, "session_id");
        *session_id = thread_state().session();
    });
}

MKC_API mkc_status mkc_cache_set_input_shape(const char *shape) {
    return guard([&] { thread_state().set_input_shape(shape); });
}

MKC_API mkc_status mkc_cache_get_input_shape(const char **shape) {
    return guard([&] {
        require_out(shape, "shape");
        *shape = thread_state().input_shape().c_str();
    });
}

MKC_API mkc_status mkc_cache_set_capacity(int64_t capacity) {
    return guard([&] {
        require(capacity >= 0, "capacity must be >= 0 (0 = default mode), got ", capacity);
        thread_state().set_capacity(capacity);
    });
}

MKC_API mkc_status mkc_cache_get_capacity(int64_t *capacity) {
    return guard([&] {
        require_out(capacity, "capacity");
        *capacity = thread_state().capacity();
    });
}

} // extern "C"
