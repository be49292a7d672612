/* Training through the C ABI: conv2d and max-pool backward against direct
 * loop references, the forward -> backward transfer with the backward run on
 * another thread than the forward, and errors on bad input. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "mkcache/mkcache.h"

enum { N = 2, C = 3, H = 6, W = 5, O = 4, K = 3, PAD = 1 };
/* Pooling: 2x2, stride 2 over the 6x5 conv output input (floor: 3x2). */
enum { PH = H / 2, PW = W / 2 };

static float x[N * C * H * W], w[O * C * K * K], b[O], dy[N * O * H * W];
static float px[N * C * H * W], pdy[N * C * PH * PW];

/* dx, dw, db of a stride-1 "same" convolution, straight from the sums. */
static void conv_backward_ref(double *dx, double *dw, double *db) {
    memset(dx, 0, sizeof(double) * N * C * H * W);
    memset(dw, 0, sizeof(double) * O * C * K * K);
    memset(db, 0, sizeof(double) * O);
    for (int n = 0; n < N; ++n)
        for (int o = 0; o < O; ++o)
            for (int i = 0; i < H; ++i)
                for (int j = 0; j < W; ++j) {
                    const double g = dy[((n * O + o) * H + i) * W + j];
                    db[o] += g;
                    for (int c = 0; c < C; ++c)
                        for (int ki = 0; ki < K; ++ki)
                            for (int kj = 0; kj < K; ++kj) {
                                const int yy = i + ki - PAD, xx = j + kj - PAD;
                                if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                                const int xi = ((n * C + c) * H + yy) * W + xx;
                                const int wi = ((o * C + c) * K + ki) * K + kj;
                                dx[xi] += g * w[wi];
                                dw[wi] += g * x[xi];
                            }
                }
}

static double max_rel_err(const float *got, const double *want, int count) {
    double worst = 0;
    for (int i = 0; i < count; ++i) {
        const double e = fabs(got[i] - want[i]) / (1.0 + fabs(want[i]));
        if (e > worst) worst = e;
    }
    return worst;
}

/* What one backward pass produces, exported plain. */
struct Grads {
    float dx[N * C * H * W], dw[O * C * K * K], db[O], pool_dx[N * C * H * W];
    int status;
};

static mkc_tensor *tx, *tw, *tb, *tdy, *tpx, *tpdy;

static void conv_params(mkc_conv_params *p) {
    mkc_conv_params_init(p);
    p->pad_begin[0] = p->pad_begin[1] = p->pad_end[0] = p->pad_end[1] = PAD;
    p->name = "c_train_conv";
}

static void pool_params(mkc_pool_params *p) {
    mkc_pool_params_init(p);
    p->kernel[0] = p->kernel[1] = 2;
    p->stride[0] = p->stride[1] = 2;
    p->name = "c_train_pool";
}

static void *run_backward(void *arg) {
    struct Grads *g = arg;
    mkc_conv_params cp;
    mkc_pool_params pp;
    conv_params(&cp);
    pool_params(&pp);
    mkc_tensor *dx = NULL, *dw = NULL, *db = NULL, *pdx = NULL;
    g->status = mkc_conv2d_backward(&cp, tx, tw, tdy, &dx, &dw, &db);
    if (g->status == MKC_STATUS_OK) g->status = mkc_pool_backward(&pp, tpx, tpdy, &pdx);
    if (g->status == MKC_STATUS_OK) {
        g->status |= mkc_tensor_export(dx, MKC_LAYOUT_NCHW, g->dx, sizeof g->dx);
        g->status |= mkc_tensor_export(dw, MKC_LAYOUT_NCHW, g->dw, sizeof g->dw);
        g->status |= mkc_tensor_export(db, MKC_LAYOUT_NCHW, g->db, sizeof g->db);
        g->status |= mkc_tensor_export(pdx, MKC_LAYOUT_NCHW, g->pool_dx, sizeof g->pool_dx);
    }
    mkc_tensor_destroy(dx);
    mkc_tensor_destroy(dw);
    mkc_tensor_destroy(db);
    mkc_tensor_destroy(pdx);
    return NULL;
}

static void run_forward(void) {
    mkc_conv_params cp;
    mkc_pool_params pp;
    conv_params(&cp);
    pool_params(&pp);
    cp.training = 1;
    pp.training = 1;
    mkc_tensor *y = NULL, *py = NULL;
    OK(mkc_conv2d(&cp, tx, tw, tb, &y)); /* with bias: the backward computes diff_bias */
    OK(mkc_pool(&pp, tpx, &py));
    OK(mkc_tensor_destroy(y));
    OK(mkc_tensor_destroy(py));
}

int main(void) {
    for (int i = 0; i < N * C * H * W; ++i) x[i] = (float)((i * 37 % 23) - 11) / 7.0f;
    for (int i = 0; i < O * C * K * K; ++i) w[i] = (float)((i * 17 % 13) - 6) / 9.0f;
    for (int i = 0; i < O; ++i) b[i] = 0.1f * (float)i;
    for (int i = 0; i < N * O * H * W; ++i) dy[i] = (float)((i * 29 % 19) - 9) / 5.0f;
    /* Distinct values: every pooling window has one maximum. */
    for (int i = 0; i < N * C * H * W; ++i) px[i] = (float)((i * 53) % 97) - 48.0f;
    for (int i = 0; i < N * C * PH * PW; ++i) pdy[i] = (float)(i % 7) - 3.0f;

    const int64_t xd[4] = {N, C, H, W}, wd[4] = {O, C, K, K}, yd[4] = {N, O, H, W},
                  pyd[4] = {N, C, PH, PW};
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, xd, MKC_LAYOUT_NCHW, x, &tx));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, wd, MKC_LAYOUT_NCHW, w, &tw));
    const int64_t bd[1] = {O};
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, bd, MKC_LAYOUT_NCHW, b, &tb));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, yd, MKC_LAYOUT_NCHW, dy, &tdy));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, xd, MKC_LAYOUT_NCHW, px, &tpx));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, pyd, MKC_LAYOUT_NCHW, pdy, &tpdy));

    static double dx_ref[N * C * H * W], dw_ref[O * C * K * K], db_ref[O];
    conv_backward_ref(dx_ref, dw_ref, db_ref);
    static double pool_ref[N * C * H * W];
    memset(pool_ref, 0, sizeof pool_ref);
    for (int nc = 0; nc < N * C; ++nc)
        for (int i = 0; i < PH; ++i)
            for (int j = 0; j < PW; ++j) {
                int best = -1;
                for (int a = 0; a < 2; ++a)
                    for (int c = 0; c < 2; ++c) {
                        const int idx = (nc * H + 2 * i + a) * W + 2 * j + c;
                        if (best < 0 || px[idx] > px[best]) best = idx;
                    }
                pool_ref[best] += pdy[(nc * PH + i) * PW + j];
            }

    /* Forward here, backward on this thread. */
    run_forward();
    static struct Grads here, there;
    run_backward(&here);
    CHECK(here.status == MKC_STATUS_OK);
    CHECK(max_rel_err(here.dx, dx_ref, N * C * H * W) < 1e-5);
    CHECK(max_rel_err(here.dw, dw_ref, O * C * K * K) < 1e-5);
    CHECK(max_rel_err(here.db, db_ref, O) < 1e-5);
    CHECK(max_rel_err(here.pool_dx, pool_ref, N * C * H * W) < 1e-6);

    /* Forward here again, backward on another thread: same gradients, and
     * what the forward left (keys without a thread field) is what it used. */
    OK(mkc_cache_reset());
    mkc_cache_stats left_before, left_after;
    OK(mkc_cache_stats_init(&left_before));
    OK(mkc_cache_stats_init(&left_after));
    OK(mkc_cache_get_stats(&left_before));
    run_forward();
    OK(mkc_cache_get_stats(&left_after));
    /* The conv and the max pool each left a transfer, counted apart from
     * insertions (which follow misses only). */
    CHECK(left_after.transfers == left_before.transfers + 2);
    CHECK(left_after.insertions - left_before.insertions ==
          left_after.misses - left_before.misses);
    char keys[4096];
    size_t needed = 0;
    OK(mkc_cache_get_keys(0, keys, sizeof keys, &needed));
    CHECK(strstr(keys, "c_train_conv||2x3x6x5|e0|train") != NULL);
    CHECK(strstr(keys, "c_train_pool||2x3x6x5|e0|train") != NULL);
    mkc_cache_stats before, after;
    OK(mkc_cache_stats_init(&before));
    OK(mkc_cache_stats_init(&after));
    OK(mkc_cache_get_stats(&before));
    pthread_t t;
    CHECK(pthread_create(&t, NULL, run_backward, &there) == 0);
    pthread_join(t, NULL);
    CHECK(there.status == MKC_STATUS_OK);
    OK(mkc_cache_get_stats(&after));
    CHECK(after.hits >= before.hits + 2); /* the two transfers were found */
    CHECK(memcmp(here.dx, there.dx, sizeof here.dx) == 0);
    CHECK(memcmp(here.dw, there.dw, sizeof here.dw) == 0);
    CHECK(memcmp(here.db, there.db, sizeof here.db) == 0);
    CHECK(memcmp(here.pool_dx, there.pool_dx, sizeof here.pool_dx) == 0);

    /* Errors: nothing requested, a fused activation, a wrong diff_dst. */
    mkc_conv_params cp;
    conv_params(&cp);
    CHECK(mkc_conv2d_backward(&cp, tx, tw, tdy, NULL, NULL, NULL) ==
          MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "no gradient requested") != NULL);
    mkc_tensor *out = NULL;
    cp.activation = MKC_ACTIVATION_RELU;
    CHECK(mkc_conv2d_backward(&cp, tx, tw, tdy, &out, NULL, NULL) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(out == NULL && strstr(mkc_last_error(), "fused activation") != NULL);
    cp.activation = MKC_ACTIVATION_NONE;
    CHECK(mkc_conv2d_backward(&cp, tx, tw, tpdy, &out, NULL, NULL) ==
          MKC_STATUS_INVALID_ARGUMENT);
    CHECK(out == NULL && strstr(mkc_last_error(), "diff_dst") != NULL);
    out = tdy; /* an input as output */
    CHECK(mkc_conv2d_backward(&cp, tx, tw, tdy, &out, NULL, NULL) ==
          MKC_STATUS_INVALID_ARGUMENT);
    CHECK(mkc_conv2d_backward(NULL, tx, tw, tdy, &out, NULL, NULL) ==
          MKC_STATUS_INVALID_ARGUMENT);

    OK(mkc_tensor_destroy(tx));
    OK(mkc_tensor_destroy(tw));
    OK(mkc_tensor_destroy(tb));
    OK(mkc_tensor_destroy(tdy));
    OK(mkc_tensor_destroy(tpx));
    OK(mkc_tensor_destroy(tpdy));
    return finish("test_training");
}
