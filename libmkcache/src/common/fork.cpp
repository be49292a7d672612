#include "common/fork.hpp"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>

#include <initializer_list>
#include <new>
#include <shared_mutex>

#include "api/program_handle.hpp"
#include "cache/blob_cache.hpp"
#include "cache/build_once.hpp"
#include "common/engine.hpp"
#include "common/handles.hpp"
#include "common/thread_state.hpp"
#include "mkcache/mkcache.h"
#include "tensor/tensor.hpp"

namespace mkc {

namespace {

// omp_get_max_threads of each OpenMP runtime already loaded (the one oneDNN
// runs on among them), looked up rather than linked so no runtime is loaded
// that was not there.
constexpr int kRuntimes = 3;
using MaxThreads = int (*)();
MaxThreads omp_max_threads[kRuntimes] = {};

void find_openmp() {
    int n = 0;
    for (const char *name : {"libiomp5.so", "libgomp.so.1", "libomp.so"}) {
        void *lib = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
        if (lib == nullptr) continue;
        // The reference dlopen added is kept: the function stays loaded.
        if (auto f = reinterpret_cast<MaxThreads>(dlsym(lib, "omp_get_max_threads")))
            omp_max_threads[n++] = f;
    }
}

// Starts each runtime on the calling thread (a no-op once started): a
// runtime registers its fork handlers when it starts, and makes the calling
// thread one of its own.
void start_openmp() {
    for (MaxThreads f : omp_max_threads)
        if (f) f();
}

// The CPUs the forking thread may run on, kept from before the fork: Intel's
// runtime, started again in a child, binds the child's thread to the first
// CPU of the set, and every process the child starts (a subprocess, a Ray
// worker) would inherit that one CPU.
cpu_set_t forking_thread_cpus;
bool forking_thread_cpus_known = false;

void lock_tensor(const Tensor *t) { t->mutex.lock(); }
void unlock_tensor(const Tensor *t) { t->mutex.unlock(); }

mkc_program &mutable_program(const mkc_program *p) { return const_cast<mkc_program &>(*p); }
void lock_program(const mkc_program *p) {
    mutable_program(p).p.lock_for_fork();
    p->profile_mutex.lock();
}
void unlock_program(const mkc_program *p) {
    p->profile_mutex.unlock();
    mutable_program(p).p.unlock_for_fork();
}

// Before fork(), on the forking thread: every lock, in the order fork.hpp
// gives. Each wait ends: a thread holding one of these locks is never
// waiting for a lock taken earlier in this order.
void prepare() {
    registry<mkc_program>().lock_all();
    // Under the first lock: a second thread forking waits until this fork
    // is done before it writes these.
    forking_thread_cpus_known = pthread_getaffinity_np(
        pthread_self(), sizeof forking_thread_cpus, &forking_thread_cpus) == 0;
    registry<mkc_program>().for_each_live(lock_program);
    registry<mkc_graph>().lock_all();
    primitive_creation_mutex().lock();
    BlobCache::instance().lock_for_fork();
    BuildOnce::instance().lock_for_fork();
    registry<Tensor>().lock_all();
    registry<mkc_blob>().lock_all();
    registry<Tensor>().for_each_live(lock_tensor);
}

// After fork(), in the parent: the forking thread still owns what it took.
void parent() {
    registry<Tensor>().for_each_live(unlock_tensor);
    registry<mkc_blob>().unlock_all();
    registry<Tensor>().unlock_all();
    BuildOnce::instance().unlock_for_fork();
    BlobCache::instance().unlock_for_fork();
    primitive_creation_mutex().unlock();
    registry<mkc_graph>().unlock_all();
    registry<mkc_program>().for_each_live(unlock_program);
    registry<mkc_program>().unlock_all();
}

// After fork(), in the child, whose only thread is the one that forked.
void child() {
    // A std::mutex (a default pthread mutex) may be unlocked here: glibc
    // does not check who unlocks it. A std::shared_mutex (a pthread rwlock)
    // held exclusively may not (see StripedSharedMutex::reset_in_child): it
    // is replaced by a fresh one, which is what unlocking it would give.
    registry<Tensor>().for_each_live(unlock_tensor);
    registry<mkc_blob>().reset_locks_in_child();
    registry<Tensor>().reset_locks_in_child();
    BlobCache::instance().reset_lock_in_child();
    BuildOnce::instance().reset_in_child();
    new (&primitive_creation_mutex()) std::shared_mutex();
    registry<mkc_graph>().reset_locks_in_child();
    // The calls other threads were making inside programs do not exist
    // here: their uses end with them.
    registry<mkc_program>().for_each_live([](const mkc_program *p) {
        unlock_program(p);
        p->users.store(0, std::memory_order_relaxed);
    });
    registry<mkc_program>().reset_locks_in_child();

    // The OpenMP runtime has just reset itself (its handler runs before
    // this one), but a thread that used it before the fork still carries
    // its old thread number. If a thread started in the child used OpenMP
    // first, the forking thread would later take that number for its own
    // and crash (seen with Intel's runtime). Starting the runtime here, on
    // the forking thread, gives it a number of the new runtime before any
    // other thread exists.
    start_openmp();
    if (forking_thread_cpus_known)
        pthread_setaffinity_np(pthread_self(), sizeof forking_thread_cpus, &forking_thread_cpus);

    // The forking thread's own state (common/thread_state.hpp: its cache
    // context, key hash, stream, front caches) stays as it was: it is the
    // same thread, with the same id, in the child. The front caches notice
    // the removals below by the cache's generation.
    //
    // Default-mode entries carry a hash of their thread's id. The child has
    // none of the parent's other threads, so their entries would never be
    // used or dropped; worse, a thread the child starts may get the id of
    // one of them (the child reuses the lost threads' stacks) and find that
    // thread's entries as its own. Drop them, as their threads' exit would
    // have.
    BlobCache::instance().drop_threads_except(thread_id_hash());
}

bool install() {
    // The OpenMP runtime must have registered its handlers first (see
    // fork.hpp): start it now if it has not started yet.
    find_openmp();
    start_openmp();
    return pthread_atfork(prepare, parent, child) == 0;
}

} // namespace

void install_fork_handlers() {
    static const bool installed = install();
    (void)installed;
}

} // namespace mkc
