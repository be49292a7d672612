/* Real threads against the C ABI, no Python in between: default-mode
 * threads sharing one model and its constant weights, clearing-mode threads
 * each in its own session at capacity, and a thread resetting the whole
 * cache meanwhile; each step runs conv2d + relu, then softmax, layer_norm and
 * a residual add (their remembered calls); and eight threads racing to miss
 * one shared key, which must be built once; then one program run from four
 * threads, and destroyed while they run it. Every result is checked against a
 * direct reference.
 * Built with sanitizers in CI (ASan/UBSan; TSan by hand, see README). */
#define _POSIX_C_SOURCE 200112L /* pthread barriers */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conv_reference.h"
#include "mkcache/mkcache.h"

enum { C = 8, O = 8, K = 3, ITER = 60, DEFAULT_THREADS = 4, CLEARING_THREADS = 3 };

static float weights[O * C * K * K];
static mkc_tensor *shared_w; /* constant, used by every thread */
static int stop_resetting; /* guarded by failures_mutex */
static int failures;
static pthread_mutex_t failures_mutex = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char *what, int thread) {
    pthread_mutex_lock(&failures_mutex);
    ++failures;
    fprintf(stderr, "thread %d: %s (last error: %s)\n", thread, what, mkc_last_error());
    pthread_mutex_unlock(&failures_mutex);
}

/* Softmax over the channels of y (n, O, h, w) and layer_norm of x (n, C, h,
 * w) over its last axis, against direct references. */
static int check_softmax(const float *y, const float *s, int n, int h, int w) {
    for (int in = 0; in < n; ++in)
        for (int i = 0; i < h * w; ++i) {
            double sum = 0;
            for (int o = 0; o < O; ++o) sum += exp(y[(in * O + o) * h * w + i]);
            for (int o = 0; o < O; ++o) {
                const size_t at = (size_t)(in * O + o) * h * w + i;
                if (fabs(s[at] - exp(y[at]) / sum) > 1e-5) return 0;
            }
        }
    return 1;
}

static int check_layer_norm(const float *x, const float *z, int rows, int w) {
    for (int r = 0; r < rows; ++r) {
        double mean = 0, var = 0;
        for (int j = 0; j < w; ++j) mean += x[r * w + j];
        mean /= w;
        for (int j = 0; j < w; ++j) var += (x[r * w + j] - mean) * (x[r * w + j] - mean);
        var /= w;
        for (int j = 0; j < w; ++j)
            if (fabs(z[r * w + j] - (x[r * w + j] - mean) / sqrt(var + 1e-5)) > 1e-4) return 0;
    }
    return 1;
}

static void run_once(int thread, int step, const char *name) {
    int n = 1 + (step + thread) % 2, h = 5 + step % 4, w = 6 + (step * 7 + thread) % 5;
    size_t xs = (size_t)n * C * h * w, ys = (size_t)n * O * h * w;
    float *x = malloc(xs * sizeof(float)), *y = malloc(ys * sizeof(float)),
          *s = malloc(ys * sizeof(float)), *z = malloc(xs * sizeof(float)),
          *r = malloc(ys * sizeof(float));
    for (size_t i = 0; i < xs; ++i) x[i] = (float)((int)((i * 7919 + thread) % 17) - 8) / 8.0f;
    const int64_t dims[4] = {n, C, h, w};
    mkc_tensor *tx = NULL, *ty = NULL, *ts = NULL, *tz = NULL, *tr = NULL;
    mkc_layer_norm_params lp;
    mkc_layer_norm_params_init(&lp);
    lp.name = "norm";
    mkc_conv_params p;
    mkc_conv_params_init(&p);
    p.pad_begin[0] = p.pad_begin[1] = p.pad_end[0] = p.pad_end[1] = 1;
    p.name = name;
    if (mkc_tensor_wrap(MKC_DTYPE_F32, 4, dims, MKC_LAYOUT_NCHW, x, &tx) != MKC_STATUS_OK ||
        mkc_conv2d(&p, tx, shared_w, NULL, &ty) != MKC_STATUS_OK ||
        mkc_activation(MKC_ACTIVATION_RELU, 0.f, 0.f, "relu", ty, &ty) != MKC_STATUS_OK ||
        mkc_tensor_export(ty, MKC_LAYOUT_NCHW, y, ys * sizeof(float)) != MKC_STATUS_OK)
        fail("call failed", thread);
    else if (!conv_relu_matches(x, weights, y, n, C, O, K, h, w))
        fail("wrong result", thread);
    if (mkc_softmax(1, 0, "softmax", ty, &ts) != MKC_STATUS_OK ||
        mkc_tensor_export(ts, MKC_LAYOUT_NCHW, s, ys * sizeof(float)) != MKC_STATUS_OK ||
        mkc_layer_norm(&lp, tx, NULL, NULL, &tz) != MKC_STATUS_OK ||
        mkc_tensor_export(tz, MKC_LAYOUT_NCHW, z, xs * sizeof(float)) != MKC_STATUS_OK)
        fail("softmax / layer_norm call failed", thread);
    else if (!check_softmax(y, s, n, h, w) || !check_layer_norm(x, z, n * C * h, w))
        fail("wrong softmax / layer_norm result", thread);
    /* y + softmax(y): two library outputs in the layout the conv chose. */
    if (mkc_binary(MKC_BINARY_ADD, "residual", ty, ts, &tr) != MKC_STATUS_OK ||
        mkc_tensor_export(tr, MKC_LAYOUT_NCHW, r, ys * sizeof(float)) != MKC_STATUS_OK)
        fail("add call failed", thread);
    else
        for (size_t i = 0; i < ys; ++i)
            if (fabsf(r[i] - (y[i] + s[i])) > 1e-6f * (1.f + fabsf(y[i]))) {
                fail("wrong add result", thread);
                break;
            }
    mkc_tensor_destroy(tr);
    mkc_tensor_destroy(tz);
    mkc_tensor_destroy(ts);
    mkc_tensor_destroy(ty);
    mkc_tensor_destroy(tx);
    free(x);
    free(y);
    free(s);
    free(z);
    free(r);
}

static void *default_mode(void *arg) {
    int id = (int)(size_t)arg;
    for (int i = 0; i < ITER; ++i) run_once(id, i, "conv");
    return NULL;
}

static void *clearing_mode(void *arg) {
    int id = (int)(size_t)arg;
    mkc_cache_set_session(1000 + id);
    mkc_cache_set_capacity(2);
    for (int i = 0; i < ITER; ++i) {
        char shape[32];
        snprintf(shape, sizeof shape, "group%d", i % 5);
        mkc_cache_set_input_shape(shape);
        run_once(id, i, "conv");
        mkc_cache_stats s;
        mkc_cache_stats_init(&s);
        mkc_cache_get_session_stats(1000 + id, &s);
        if (s.groups > 2) fail("clearing mode exceeded its capacity", id);
    }
    return NULL;
}

static int should_stop(void) {
    pthread_mutex_lock(&failures_mutex);
    int stop = stop_resetting;
    pthread_mutex_unlock(&failures_mutex);
    return stop;
}

static void *resetter(void *arg) {
    (void)arg;
    while (!should_stop()) {
        mkc_cache_reset();
        mkc_cache_stats s;
        mkc_cache_stats_init(&s);
        mkc_cache_get_stats(&s);
    }
    return NULL;
}

/* Build once: RACERS threads released together miss one clearing-mode key
 * (keys threads share), in a fresh session per round. The library's test
 * delay (MKCACHE_TEST_BUILD_DELAY_MS, set by main around it) holds every build long
 * enough that all of them miss the key while the first is making it, even
 * on a busy machine. Every round must make each key once (insertions ==
 * entries) and every result must be right. */
enum { RACERS = 8, RACE_ROUNDS = 3 };
static pthread_barrier_t race_barrier;
static int race_channels;
static float *race_weights;
static mkc_tensor *race_w;

static void *racer(void *arg) {
    const int thread = (int)(size_t)arg, c = race_channels, n = 2, h = 17, w = 19;
    const size_t xs = (size_t)n * c * h * w, ys = (size_t)n * O * h * w;
    float *x = malloc(xs * sizeof(float)), *y = malloc(ys * sizeof(float));
    for (size_t i = 0; i < xs; ++i) x[i] = (float)((int)(i * 7919 % 17) - 8) / 8.0f;
    const int64_t dims[4] = {n, c, h, w};
    mkc_tensor *tx = NULL, *ty = NULL;
    mkc_conv_params p;
    mkc_conv_params_init(&p);
    p.pad_begin[0] = p.pad_begin[1] = p.pad_end[0] = p.pad_end[1] = 1;
    p.activation = MKC_ACTIVATION_RELU;
    p.name = "raced";
    if (mkc_cache_set_session(7700 + c) != MKC_STATUS_OK ||
        mkc_cache_set_capacity(4) != MKC_STATUS_OK ||
        mkc_tensor_wrap(MKC_DTYPE_F32, 4, dims, MKC_LAYOUT_NCHW, x, &tx) != MKC_STATUS_OK)
        fail("race set-up failed", thread);
    pthread_barrier_wait(&race_barrier);
    if (mkc_conv2d(&p, tx, race_w, NULL, &ty) != MKC_STATUS_OK ||
        mkc_tensor_export(ty, MKC_LAYOUT_NCHW, y, ys * sizeof(float)) != MKC_STATUS_OK)
        fail("raced call failed", thread);
    else if (!conv_relu_matches(x, race_weights, y, n, c, O, K, h, w))
        fail("raced call: wrong result", thread);
    mkc_tensor_destroy(tx);
    mkc_tensor_destroy(ty);
    free(x);
    free(y);
    return NULL;
}

static void race_one_key(void) {
    for (int round = 0; round < RACE_ROUNDS; ++round) {
        race_channels = 21 + 2 * round;
        const int64_t wd[4] = {O, race_channels, K, K};
        race_weights = malloc(sizeof(float) * O * race_channels * K * K);
        for (int i = 0; i < O * race_channels * K * K; ++i)
            race_weights[i] = (float)((i * 31 % 19) - 9) / 19.0f;
        if (mkc_tensor_wrap(MKC_DTYPE_F32, 4, wd, MKC_LAYOUT_NCHW, race_weights, &race_w) !=
            MKC_STATUS_OK)
            fail("race weights", -1);
        pthread_barrier_init(&race_barrier, NULL, RACERS);
        pthread_t t[RACERS];
        for (int i = 0; i < RACERS; ++i) pthread_create(&t[i], NULL, racer, (void *)(size_t)i);
        for (int i = 0; i < RACERS; ++i) pthread_join(t[i], NULL);
        pthread_barrier_destroy(&race_barrier);
        mkc_cache_stats st;
        mkc_cache_stats_init(&st);
        if (mkc_cache_get_session_stats(7700 + race_channels, &st) != MKC_STATUS_OK ||
            st.misses < RACERS || st.insertions != st.entries) {
            fprintf(stderr, "race round %d: %llu misses, %llu insertions, %llu entries\n",
                    round, (unsigned long long)st.misses, (unsigned long long)st.insertions,
                    (unsigned long long)st.entries);
            fail("a raced key was built more than once", -1);
        }
        mkc_tensor_destroy(race_w);
        free(race_weights);
    }
}

/* One program run by PROGRAM_THREADS threads at once, each on inputs of
 * its own, PROGRAM_RUNS times, every result checked against a loop:
 * relu(x . w^T + b) with x [ROWS, IN]. */
enum { PROGRAM_THREADS = 4, PROGRAM_RUNS = 200, ROWS = 3, IN = 10, OUT = 6 };
static mkc_program *program;
static float program_w[OUT * IN], program_b[OUT];
/* Set while the main thread destroys the program under the runners: each
 * runs until its call is refused. */
static int until_destroyed;

static void *program_runner(void *arg) {
    const int thread = (int)(size_t)arg;
    float x[ROWS * IN], y[ROWS * OUT], want[ROWS * OUT];
    const int64_t xd[2] = {ROWS, IN}, yd[2] = {ROWS, OUT};
    mkc_tensor *tx = NULL, *ty = NULL;
    if (mkc_tensor_wrap(MKC_DTYPE_F32, 2, xd, MKC_LAYOUT_NCHW, x, &tx) != MKC_STATUS_OK ||
        mkc_tensor_wrap(MKC_DTYPE_F32, 2, yd, MKC_LAYOUT_NCHW, y, &ty) != MKC_STATUS_OK) {
        fail("program: wrap", thread);
        return NULL;
    }
    int wrong = 0;
    for (int run = 0; !wrong && (until_destroyed || run < PROGRAM_RUNS); ++run) {
        for (int i = 0; i < ROWS * IN; ++i)
            x[i] = (float)(((i + 7 * thread + run) * 13 % 17) - 8) / 8.0f;
        for (int r = 0; r < ROWS; ++r)
            for (int o = 0; o < OUT; ++o) {
                double acc = program_b[o];
                for (int i = 0; i < IN; ++i) acc += (double)x[r * IN + i] * program_w[o * IN + i];
                want[r * OUT + o] = acc > 0 ? (float)acc : 0.f;
            }
        const mkc_tensor *ins[1] = {tx};
        mkc_tensor *outs[1] = {ty};
        const mkc_status status = mkc_program_run(program, 1, ins, 1, outs);
        if (status == MKC_STATUS_INVALID_HANDLE && until_destroyed)
            break; /* destroyed by the main thread: refused, as it must be */
        if (status != MKC_STATUS_OK) {
            fail("program: run", thread);
            break;
        }
        for (int i = 0; i < ROWS * OUT; ++i)
            if (fabsf(y[i] - want[i]) > 1e-4f * (1.f + fabsf(want[i]))) {
                fail("program: wrong result", thread);
                wrong = 1;
                break;
            }
    }
    mkc_tensor_destroy(tx);
    mkc_tensor_destroy(ty);
    return NULL;
}

/* Compiles the program, then runs it from PROGRAM_THREADS threads: until
 * each has made PROGRAM_RUNS runs, or, with `destroy_under_them`, while
 * the main thread destroys it (the destroy waits for the runs inside it;
 * later runs are refused with MKC_STATUS_INVALID_HANDLE). */
static void run_program_from_threads(int destroy_under_them) {
    for (int i = 0; i < OUT * IN; ++i) program_w[i] = (float)((i * 7 % 11) - 5) / 6.0f;
    for (int i = 0; i < OUT; ++i) program_b[i] = (float)i / 4.0f - 0.5f;
    const int64_t xd[2] = {ROWS, IN}, wd[2] = {OUT, IN}, bd[1] = {OUT};
    mkc_graph *g = NULL;
    mkc_tensor *tw = NULL, *tb = NULL;
    int vx, vw, vb, vy;
    mkc_linear_params lp;
    if (mkc_graph_create(&g) != MKC_STATUS_OK ||
        mkc_graph_input(g, "x", MKC_DTYPE_F32, 2, xd, MKC_LAYOUT_NCHW, &vx) != MKC_STATUS_OK ||
        mkc_tensor_wrap(MKC_DTYPE_F32, 2, wd, MKC_LAYOUT_NCHW, program_w, &tw) != MKC_STATUS_OK ||
        mkc_tensor_wrap(MKC_DTYPE_F32, 1, bd, MKC_LAYOUT_NCHW, program_b, &tb) != MKC_STATUS_OK ||
        mkc_graph_constant(g, tw, "w", &vw) != MKC_STATUS_OK ||
        mkc_graph_constant(g, tb, "b", &vb) != MKC_STATUS_OK ||
        mkc_linear_params_init(&lp) != MKC_STATUS_OK) {
        fail("program: build", -1);
        return;
    }
    lp.activation = MKC_ACTIVATION_RELU;
    const int in[3] = {vx, vw, vb};
    if (mkc_graph_node(g, MKC_OP_LINEAR, &lp, 3, in, &vy) != MKC_STATUS_OK ||
        mkc_graph_output(g, vy, "y") != MKC_STATUS_OK ||
        mkc_program_compile(g, NULL, &program) != MKC_STATUS_OK) {
        fail("program: compile", -1);
        return;
    }
    mkc_graph_destroy(g);
    mkc_tensor_destroy(tw);
    mkc_tensor_destroy(tb);
    until_destroyed = destroy_under_them;
    pthread_t t[PROGRAM_THREADS];
    for (int i = 0; i < PROGRAM_THREADS; ++i)
        pthread_create(&t[i], NULL, program_runner, (void *)(size_t)i);
    if (destroy_under_them) {
        const struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
        if (mkc_program_destroy(program) != MKC_STATUS_OK) fail("program: destroy", -1);
    }
    for (int i = 0; i < PROGRAM_THREADS; ++i) pthread_join(t[i], NULL);
    if (!destroy_under_them) mkc_program_destroy(program);
    until_destroyed = 0;
}

int main(void) {
    for (int i = 0; i < O * C * K * K; ++i) weights[i] = (float)((i * 31 % 19) - 9) / 19.0f;
    const int64_t wd[4] = {O, C, K, K};
    if (mkc_tensor_wrap(MKC_DTYPE_F32, 4, wd, MKC_LAYOUT_NCHW, weights, &shared_w) != MKC_STATUS_OK ||
        mkc_tensor_set_constant(shared_w, 1) != MKC_STATUS_OK) {
        fprintf(stderr, "setup failed: %s\n", mkc_last_error());
        return 1;
    }
    /* Read at each shared build: set while no other thread runs. */
    setenv("MKCACHE_TEST_BUILD_DELAY_MS", "20", 1);
    race_one_key();
    unsetenv("MKCACHE_TEST_BUILD_DELAY_MS");
    pthread_t t[DEFAULT_THREADS + CLEARING_THREADS], r;
    pthread_create(&r, NULL, resetter, NULL);
    for (int i = 0; i < DEFAULT_THREADS; ++i)
        pthread_create(&t[i], NULL, default_mode, (void *)(size_t)i);
    for (int i = 0; i < CLEARING_THREADS; ++i)
        pthread_create(&t[DEFAULT_THREADS + i], NULL, clearing_mode, (void *)(size_t)(10 + i));
    for (int i = 0; i < DEFAULT_THREADS + CLEARING_THREADS; ++i) pthread_join(t[i], NULL);
    pthread_mutex_lock(&failures_mutex);
    stop_resetting = 1;
    pthread_mutex_unlock(&failures_mutex);
    pthread_join(r, NULL);
    run_program_from_threads(0);
    run_program_from_threads(1);
    mkc_tensor_destroy(shared_w);
    mkc_cache_reset();
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("test_threads: all results correct\n");
    return 0;
}
