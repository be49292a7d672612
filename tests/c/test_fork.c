/* fork() while other threads run operators, from C: the parent's threads
 * run conv2d + relu (default mode, a clearing-mode session at capacity 1,
 * and whole-cache resets) while the main thread forks again and again. Each
 * child first runs conv2d + relu on a thread it starts, then on the forking
 * thread (the order in which a stale OpenMP thread number would crash),
 * checks both against a direct reference and exits with a code. A child
 * that does not finish in time is killed and counted as hung.
 * MKCACHE_FORK_COUNT sets the number of children (default 40). */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conv_reference.h"
#include "mkcache/mkcache.h"

#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define SANITIZED_BY_CLANG 1
#endif
#endif
#ifndef SANITIZED_BY_CLANG
#define SANITIZED_BY_CLANG 0
#endif

enum { C = 4, O = 6, K = 3, BUSY_THREADS = 4, CHILD_TIMEOUT_S = 30 };

static float weights[O * C * K * K];
static mkc_tensor *shared_w; /* constant, used by every thread and child */
static int stop; /* set once by main; guarded by stop_mutex */
static pthread_mutex_t stop_mutex = PTHREAD_MUTEX_INITIALIZER;
static int busy_failures; /* guarded by stop_mutex */

static int stopped(void) {
    pthread_mutex_lock(&stop_mutex);
    int s = stop;
    pthread_mutex_unlock(&stop_mutex);
    return s;
}

/* conv2d + relu on a (1, C, h, w) input; 1 if it ran and is right. */
static int run_conv(int h, int w, int seed) {
    float x[C * 16 * 16], y[O * 16 * 16];
    for (int i = 0; i < C * h * w; ++i) x[i] = (float)((int)((i * 7919 + seed) % 17) - 8) / 8.0f;
    const int64_t dims[4] = {1, C, h, w};
    mkc_tensor *tx = NULL, *ty = NULL;
    mkc_conv_params p;
    mkc_conv_params_init(&p);
    p.pad_begin[0] = p.pad_begin[1] = p.pad_end[0] = p.pad_end[1] = 1;
    p.activation = MKC_ACTIVATION_RELU;
    int ok = mkc_tensor_wrap(MKC_DTYPE_F32, 4, dims, MKC_LAYOUT_NCHW, x, &tx) == MKC_STATUS_OK &&
             mkc_conv2d(&p, tx, shared_w, NULL, &ty) == MKC_STATUS_OK &&
             mkc_tensor_export(ty, MKC_LAYOUT_NCHW, y, sizeof y) == MKC_STATUS_OK &&
             conv_relu_matches(x, weights, y, 1, C, O, K, h, w);
    mkc_tensor_destroy(ty);
    mkc_tensor_destroy(tx);
    return ok;
}

static void *busy(void *arg) {
    const int id = (int)(size_t)arg;
    if (id == 1) { /* clearing mode at capacity 1: every new group evicts */
        mkc_cache_set_session(500);
        mkc_cache_set_capacity(1);
    }
    for (int i = 0; !stopped(); ++i) {
        if (id == 1) mkc_cache_set_input_shape(i % 2 ? "a" : "b");
        if (!run_conv(4 + (i + id) % 6, 5 + i % 4, id)) {
            pthread_mutex_lock(&stop_mutex);
            ++busy_failures;
            pthread_mutex_unlock(&stop_mutex);
        }
        if (id == 0 && i % 4 == 0) mkc_cache_reset();
    }
    return NULL;
}

static int child_thread_ok;

static void *child_thread(void *arg) {
    const int k = (int)(size_t)arg;
    child_thread_ok = run_conv(11 + k % 5, 12, k);
    return NULL;
}

/* The whole life of a child: 0 if both runs are right. */
static int child_main(int k) {
    pthread_t t;
    if (pthread_create(&t, NULL, child_thread, (void *)(size_t)k) != 0) return 3;
    pthread_join(t, NULL);
    if (!child_thread_ok) return 1;
    return run_conv(13 + k % 3, 9, k) ? 0 : 2;
}

/* The child's exit status, or -1 if it hung (it is then killed). */
static int wait_child(pid_t pid) {
    const struct timespec pause = {0, 2000000};
    for (long waited_ms = 0; waited_ms < CHILD_TIMEOUT_S * 1000L; waited_ms += 2) {
        int status = 0;
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        nanosleep(&pause, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

int main(void) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__) || SANITIZED_BY_CLANG
    /* The sanitizer runtimes are not fork-safe themselves: ThreadSanitizer
     * ends a child of a multi-threaded process that starts threads, and
     * AddressSanitizer's allocator (GCC 12's) keeps the locks other threads
     * held at the fork, so a child's malloc can hang in it. 77: skipped. */
    printf("test_fork: skipped under a sanitizer\n");
    return 77;
#endif
    const char *count_text = getenv("MKCACHE_FORK_COUNT");
    const int forks = count_text ? atoi(count_text) : 40;
    for (int i = 0; i < O * C * K * K; ++i) weights[i] = (float)((i * 31 % 19) - 9) / 19.0f;
    const int64_t wd[4] = {O, C, K, K};
    if (mkc_tensor_wrap(MKC_DTYPE_F32, 4, wd, MKC_LAYOUT_NCHW, weights, &shared_w) != MKC_STATUS_OK ||
        mkc_tensor_set_constant(shared_w, 1) != MKC_STATUS_OK || !run_conv(6, 6, 0)) {
        fprintf(stderr, "setup failed: %s\n", mkc_last_error());
        return 1;
    }
    pthread_t t[BUSY_THREADS];
    for (int i = 0; i < BUSY_THREADS; ++i) pthread_create(&t[i], NULL, busy, (void *)(size_t)i);

    int hung = 0, wrong = 0;
    for (int k = 0; k < forks; ++k) {
        fflush(NULL);
        const pid_t pid = fork();
        if (pid == 0) _exit(child_main(k));
        if (pid < 0) {
            perror("fork");
            ++wrong;
            break;
        }
        const int code = wait_child(pid);
        if (code == -1) {
            ++hung;
            fprintf(stderr, "child %d hung\n", k);
        } else if (code != 0) {
            ++wrong;
            fprintf(stderr, "child %d exited with %d\n", k, code);
        }
    }

    pthread_mutex_lock(&stop_mutex);
    stop = 1;
    pthread_mutex_unlock(&stop_mutex);
    for (int i = 0; i < BUSY_THREADS; ++i) pthread_join(t[i], NULL);
    mkc_tensor_destroy(shared_w);
    mkc_cache_reset();
    printf("test_fork: %d forks: %d hung, %d failed, %d wrong results in the parent's threads\n",
           forks, hung, wrong, busy_failures);
    return hung || wrong || busy_failures ? 1 : 0;
}
