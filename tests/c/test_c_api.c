/* A plain C99 program driving the libmkcache ABI: version, tensors, conv2d
 * against a direct loop reference, relu, the blob cache with a deleter,
 * keys, and errors on bad input. Exits non-zero on the first failure. */
#define _POSIX_C_SOURCE 200809L /* dlopen */
#include <dlfcn.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "mkcache/mkcache.h"

static void test_version(void) {
    int major = -1, minor = -1, patch = -1;
    const char *info = NULL;
    OK(mkc_get_version(&major, &minor, &patch));
    CHECK(major == MKC_VERSION_MAJOR && minor == MKC_VERSION_MINOR && patch == MKC_VERSION_PATCH);
    OK(mkc_get_build_info(&info));
    CHECK(info != NULL && strstr(info, "\"onednn_version\": \"3.2") != NULL);
    CHECK(strcmp(mkc_status_string(MKC_STATUS_INVALID_HANDLE), "MKC_STATUS_INVALID_HANDLE") == 0);
    CHECK(mkc_get_version(NULL, &minor, &patch) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strlen(mkc_last_error()) > 0);
    /* The calling thread's OpenMP thread count: set, read back, restored. */
    int threads = 0, now = 0;
    OK(mkc_get_num_threads(&threads));
    CHECK(threads >= 1);
    OK(mkc_set_num_threads(1));
    OK(mkc_get_num_threads(&now));
    CHECK(now == 1);
    CHECK(mkc_set_num_threads(0) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "threads must be >= 1") != NULL);
    CHECK(mkc_get_num_threads(NULL) == MKC_STATUS_INVALID_ARGUMENT);
    OK(mkc_set_num_threads(threads));
}

/* Direct NCHW convolution with padding, stride 1, no groups. */
static void conv_ref(const float *x, const float *w, const float *b, float *y, int n, int c,
                     int h, int wd, int o, int k, int pad) {
    int oh = h + 2 * pad - k + 1, ow = wd + 2 * pad - k + 1;
    for (int in = 0; in < n; ++in)
        for (int io = 0; io < o; ++io)
            for (int i = 0; i < oh; ++i)
                for (int j = 0; j < ow; ++j) {
                    double acc = b ? b[io] : 0.0;
                    for (int ic = 0; ic < c; ++ic)
                        for (int ki = 0; ki < k; ++ki)
                            for (int kj = 0; kj < k; ++kj) {
                                int yy = i + ki - pad, xx = j + kj - pad;
                                if (yy < 0 || yy >= h || xx < 0 || xx >= wd) continue;
                                acc += (double)x[((in * c + ic) * h + yy) * wd + xx] *
                                       w[((io * c + ic) * k + ki) * k + kj];
                            }
                    y[((in * o + io) * oh + i) * ow + j] = (float)acc;
                }
}

static void test_conv_and_relu(void) {
    enum { N = 2, C = 3, H = 7, W = 5, O = 17, K = 3, PAD = 1 };
    float x[N * C * H * W], w[O * C * K * K], b[O], ref[N * O * H * W], out[N * O * H * W];
    for (int i = 0; i < N * C * H * W; ++i) x[i] = (float)((i * 37 % 23) - 11) / 7.0f;
    for (int i = 0; i < O * C * K * K; ++i) w[i] = (float)((i * 17 % 13) - 6) / 9.0f;
    for (int i = 0; i < O; ++i) b[i] = (float)i / 10.0f - 0.8f;
    conv_ref(x, w, b, ref, N, C, H, W, O, K, PAD);

    const int64_t xd[4] = {N, C, H, W}, wd[4] = {O, C, K, K}, bd[1] = {O};
    mkc_tensor *tx = NULL, *tw = NULL, *tb = NULL, *ty = NULL, *tr = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, xd, MKC_LAYOUT_NCHW, x, &tx));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, wd, MKC_LAYOUT_NCHW, w, &tw));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, bd, MKC_LAYOUT_NCHW, b, &tb));

    mkc_conv_params p;
    OK(mkc_conv_params_init(&p));
    p.pad_begin[0] = p.pad_begin[1] = p.pad_end[0] = p.pad_end[1] = PAD;
    p.name = "c_test_conv";
    OK(mkc_conv2d(&p, tx, tw, tb, &ty));
    CHECK(ty != NULL);

    int ndims = 0;
    int64_t dims[MKC_MAX_NDIMS];
    OK(mkc_tensor_get_shape(ty, &ndims, dims));
    CHECK(ndims == 4 && dims[0] == N && dims[1] == O && dims[2] == H && dims[3] == W);
    const char *format = NULL;
    OK(mkc_tensor_get_format(ty, &format));
    CHECK(format != NULL && strlen(format) >= 4);

    OK(mkc_tensor_export(ty, MKC_LAYOUT_NCHW, out, sizeof out));
    double max_err = 0;
    for (int i = 0; i < N * O * H * W; ++i) {
        double e = fabs(out[i] - ref[i]) / (1.0 + fabs(ref[i]));
        if (e > max_err) max_err = e;
    }
    CHECK(max_err < 1e-5);

    /* relu in place on the conv output, then compare. */
    tr = ty;
    OK(mkc_activation(MKC_ACTIVATION_RELU, 0.f, 0.f, "c_test_relu", ty, &tr));
    CHECK(tr == ty);
    OK(mkc_tensor_export(ty, MKC_LAYOUT_NCHW, out, sizeof out));
    int relu_ok = 1;
    for (int i = 0; i < N * O * H * W; ++i) {
        float want = ref[i] > 0 ? ref[i] : 0.f;
        if (fabsf(out[i] - want) > 1e-4f * (1.f + fabsf(want))) relu_ok = 0;
    }
    CHECK(relu_ok);

    /* A second call hits the cache. */
    mkc_cache_stats before, after;
    OK(mkc_cache_stats_init(&before));
    OK(mkc_cache_stats_init(&after));
    OK(mkc_cache_get_stats(&before));
    mkc_tensor *ty2 = NULL;
    OK(mkc_conv2d(&p, tx, tw, tb, &ty2));
    OK(mkc_cache_get_stats(&after));
    CHECK(after.hits > before.hits);
    CHECK(after.insertions == before.insertions);

    /* Errors: channel mismatch, NULL handle, destroyed handle, tiny buffer. */
    const int64_t bad_wd[4] = {O, C + 1, K, K};
    mkc_tensor *tbad = NULL;
    float wbad[O * (C + 1) * K * K];
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, bad_wd, MKC_LAYOUT_NCHW, wbad, &tbad));
    mkc_tensor *none = NULL;
    CHECK(mkc_conv2d(&p, tx, tbad, tb, &none) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "channels") != NULL);
    CHECK(none == NULL);
    CHECK(mkc_conv2d(&p, NULL, tw, tb, &none) == MKC_STATUS_INVALID_HANDLE);
    CHECK(mkc_tensor_export(ty, MKC_LAYOUT_NCHW, out, 8) == MKC_STATUS_BUFFER_TOO_SMALL);
    OK(mkc_tensor_destroy(tbad));
    CHECK(mkc_tensor_destroy(tbad) == MKC_STATUS_INVALID_HANDLE);
    CHECK(mkc_conv2d(&p, tx, tbad, tb, &none) == MKC_STATUS_INVALID_HANDLE);
    const int64_t zero_d[2] = {0, 4};
    CHECK(mkc_tensor_create(MKC_DTYPE_F32, 2, zero_d, MKC_LAYOUT_NCHW, &none) ==
          MKC_STATUS_INVALID_ARGUMENT);
    CHECK(mkc_tensor_create((mkc_dtype)99, 2, bd, MKC_LAYOUT_NCHW, &none) != MKC_STATUS_OK);
    OK(mkc_tensor_destroy(NULL));

    OK(mkc_tensor_destroy(ty2));
    OK(mkc_tensor_destroy(ty));
    OK(mkc_tensor_destroy(tb));
    OK(mkc_tensor_destroy(tw));
    OK(mkc_tensor_destroy(tx));
}

static int deleted = 0;
static void count_delete(void *p) {
    ++deleted;
    free(p);
}

static void test_cache(void) {
    OK(mkc_cache_set_session(77));
    OK(mkc_cache_set_input_shape("1x3"));
    int *v = (int *)malloc(sizeof(int));
    *v = 42;
    OK(mkc_cache_set_blob("c_blob", v, sizeof(int), count_delete));
    mkc_blob *blob = NULL;
    OK(mkc_cache_get_blob("c_blob", &blob));
    CHECK(blob != NULL);
    void *data = NULL;
    OK(mkc_blob_get_data(blob, &data));
    CHECK(data == v && *(int *)data == 42);
    mkc_blob *missing = (mkc_blob *)1;
    OK(mkc_cache_get_blob("nothing here", &missing));
    CHECK(missing == NULL);

    /* Reset drops the cache's reference; ours keeps the blob alive. */
    OK(mkc_cache_reset());
    CHECK(deleted == 0);
    OK(mkc_blob_release(blob));
    CHECK(deleted == 1);
    CHECK(mkc_blob_release(blob) == MKC_STATUS_INVALID_HANDLE);

    /* Keys: separators keep {1,64,56,56} and {16,4,56,56} apart. */
    char k1[128], k2[128];
    size_t needed = 0;
    const int64_t a[4] = {1, 64, 56, 56}, b[4] = {16, 4, 56, 56};
    OK(mkc_cache_set_capacity(2));
    OK(mkc_key_make("conv1", NULL, 4, a, k1, sizeof k1, &needed));
    OK(mkc_key_make("conv1", NULL, 4, b, k2, sizeof k2, &needed));
    CHECK(strcmp(k1, "conv1||1x64x56x56|e0") == 0);
    CHECK(strcmp(k1, k2) != 0);
    CHECK(mkc_key_make("conv1", NULL, 4, a, k1, 4, &needed) == MKC_STATUS_BUFFER_TOO_SMALL);
    CHECK(needed == strlen("conv1||1x64x56x56|e0") + 1);

    /* Clearing mode: capacity 2, three groups -> the oldest is gone. */
    const char *groups[3] = {"g1", "g2", "g3"};
    for (int i = 0; i < 3; ++i) {
        OK(mkc_cache_set_input_shape(groups[i]));
        int *p = (int *)malloc(sizeof(int));
        OK(mkc_cache_set_blob("k", p, sizeof(int), count_delete));
    }
    mkc_cache_stats s;
    OK(mkc_cache_stats_init(&s));
    OK(mkc_cache_get_session_stats(77, &s));
    CHECK(s.groups == 2 && s.evictions == 1);
    CHECK(deleted == 2);
    OK(mkc_cache_set_input_shape("g1"));
    mkc_blob *gone = NULL;
    OK(mkc_cache_get_blob("k", &gone));
    CHECK(gone == NULL);
    OK(mkc_cache_reset());
    CHECK(deleted == 4);
    OK(mkc_cache_set_capacity(0));
    OK(mkc_cache_set_input_shape(NULL));
    OK(mkc_cache_set_session(0));
}

/* The rest of the core API: thread-local context, tensor queries, keys
 * listing, executor reset, and a few operators with known answers. */
/* Operators of the table called eagerly through mkc_op_run: erf and round
 * (reference kernels) and a mean over one axis (oneDNN's reduction), each
 * against double math; bad calls refused with the operator named. */
static void test_op_run(void) {
    const int64_t d[2] = {3, 5};
    float x[15], out[15], mean[3];
    for (int i = 0; i < 15; ++i) x[i] = (float)(i - 7) * 0.37f;
    mkc_tensor *tx = NULL, *y = NULL, *m = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, d, MKC_LAYOUT_NCHW, x, &tx));
    const mkc_tensor *in[1] = {tx};
    OK(mkc_op_run(MKC_OP_ERF, NULL, 1, in, &y));
    OK(mkc_tensor_export(y, MKC_LAYOUT_NCHW, out, sizeof out));
    for (int i = 0; i < 15; ++i) CHECK(fabs(out[i] - erf((double)x[i])) <= 1.2e-7 * fabs(erf((double)x[i])));
    mkc_tensor *r = NULL;
    OK(mkc_op_run(MKC_OP_ROUND, NULL, 1, in, &r));
    OK(mkc_tensor_export(r, MKC_LAYOUT_NCHW, out, sizeof out));
    for (int i = 0; i < 15; ++i) CHECK(out[i] == rint(x[i])); /* ties to even, as rint */
    OK(mkc_tensor_destroy(r));

    mkc_reduce_params rp;
    OK(mkc_reduce_params_init(&rp));
    CHECK(rp.kind == MKC_REDUCE_SUM && rp.naxes == 0 && rp.keepdims == 0 && rp.name == NULL);
    rp.kind = MKC_REDUCE_MEAN;
    rp.naxes = 1;
    rp.axes[0] = -1;
    OK(mkc_op_run(MKC_OP_REDUCE, &rp, 1, in, &m));
    OK(mkc_tensor_export(m, MKC_LAYOUT_NCHW, mean, sizeof mean));
    for (int r = 0; r < 3; ++r) {
        double s = 0;
        for (int c = 0; c < 5; ++c) s += x[r * 5 + c];
        CHECK(fabs(mean[r] - s / 5) <= 1e-6);
    }
    /* Into an existing tensor (its own buffer). */
    float again[3] = {0, 0, 0};
    const int64_t d3[1] = {3};
    mkc_tensor *ta = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, d3, MKC_LAYOUT_NCHW, again, &ta));
    OK(mkc_op_run(MKC_OP_REDUCE, &rp, 1, in, &ta));
    for (int r = 0; r < 3; ++r) CHECK(again[r] == mean[r]);

    /* An embedding lookup: int64 indices into float32 rows. */
    int64_t ids[2] = {2, -3};
    const int64_t d_ids[1] = {2};
    float rows[10];
    mkc_tensor *tids = NULL, *picked = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_S64, 1, d_ids, MKC_LAYOUT_NCHW, ids, &tids));
    mkc_gather_params gp;
    OK(mkc_gather_params_init(&gp));
    CHECK(gp.axis == 0);
    const mkc_tensor *gin[2] = {tx, tids};
    OK(mkc_op_run(MKC_OP_GATHER, &gp, 2, gin, &picked));
    OK(mkc_tensor_export(picked, MKC_LAYOUT_NCHW, rows, sizeof rows));
    for (int c = 0; c < 5; ++c) CHECK(rows[c] == x[2 * 5 + c] && rows[5 + c] == x[0 * 5 + c]);
    ids[0] = 3;
    mkc_tensor *none = NULL;
    CHECK(mkc_op_run(MKC_OP_GATHER, &gp, 2, gin, &none) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "gather: index 3 is out of range") != NULL && none == NULL);
    OK(mkc_tensor_destroy(picked));
    /* The ids cast to float32. */
    mkc_cast_params cp;
    OK(mkc_cast_params_init(&cp));
    CHECK(cp.to == MKC_DTYPE_F32);
    mkc_tensor *as_float = NULL;
    const mkc_tensor *cin[1] = {tids};
    OK(mkc_op_run(MKC_OP_CAST, &cp, 1, cin, &as_float));
    float back[2];
    OK(mkc_tensor_export(as_float, MKC_LAYOUT_NCHW, back, sizeof back));
    CHECK(back[0] == 3.0f && back[1] == -3.0f);
    OK(mkc_tensor_destroy(as_float));
    OK(mkc_tensor_destroy(tids));
    /* Every other column, reversed: x[:, 4::-2]. */
    mkc_slice_params sp;
    OK(mkc_slice_params_init(&sp));
    CHECK(sp.naxes == 0 && sp.steps[0] == 1 && sp.steps[MKC_MAX_NDIMS - 1] == 1);
    sp.naxes = 1;
    sp.axes[0] = 1;
    sp.starts[0] = 4;
    sp.ends[0] = INT64_MIN;
    sp.steps[0] = -2;
    mkc_tensor *sliced = NULL;
    OK(mkc_op_run(MKC_OP_SLICE, &sp, 1, in, &sliced));
    float cols[9];
    OK(mkc_tensor_export(sliced, MKC_LAYOUT_NCHW, cols, sizeof cols));
    for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 3; ++c) CHECK(cols[r * 3 + c] == x[r * 5 + 4 - 2 * c]);
    OK(mkc_tensor_destroy(sliced));
    /* x > 0 (broadcast against one value), then expanded to [2, 3, 5]. */
    mkc_compare_params kp;
    OK(mkc_compare_params_init(&kp));
    CHECK(kp.kind == MKC_COMPARE_EQUAL);
    kp.kind = MKC_COMPARE_GREATER;
    float zero = 0.0f;
    const int64_t d1[1] = {1};
    mkc_tensor *tzero = NULL, *positive = NULL, *wide = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, d1, MKC_LAYOUT_NCHW, &zero, &tzero));
    const mkc_tensor *kin[2] = {tx, tzero};
    OK(mkc_op_run(MKC_OP_COMPARE, &kp, 2, kin, &positive));
    mkc_expand_params ep;
    OK(mkc_expand_params_init(&ep));
    ep.ndims = 3;
    ep.dims[0] = 2, ep.dims[1] = 1, ep.dims[2] = 1;
    const mkc_tensor *ein[1] = {positive};
    OK(mkc_op_run(MKC_OP_EXPAND, &ep, 1, ein, &wide));
    unsigned char flags[30];
    OK(mkc_tensor_export(wide, MKC_LAYOUT_NCHW, flags, sizeof flags));
    for (int i = 0; i < 30; ++i) CHECK(flags[i] == (x[i % 15] > 0.0f));
    /* Not, then xor with the flags themselves: every element true. */
    mkc_logical_params lg;
    OK(mkc_logical_params_init(&lg));
    CHECK(lg.kind == MKC_LOGICAL_AND);
    lg.kind = MKC_LOGICAL_NOT;
    mkc_tensor *negated = NULL, *either = NULL;
    const mkc_tensor *lin[2] = {wide, NULL};
    OK(mkc_op_run(MKC_OP_LOGICAL, &lg, 1, lin, &negated));
    lg.kind = MKC_LOGICAL_XOR;
    lin[1] = negated;
    OK(mkc_op_run(MKC_OP_LOGICAL, &lg, 2, lin, &either));
    OK(mkc_tensor_export(either, MKC_LAYOUT_NCHW, flags, sizeof flags));
    for (int i = 0; i < 30; ++i) CHECK(flags[i] == 1);
    CHECK(mkc_op_run(MKC_OP_LOGICAL, &lg, 1, lin, &either) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "take two inputs") != NULL);
    OK(mkc_tensor_destroy(either));
    OK(mkc_tensor_destroy(negated));
    /* A range as long as wide's last dim (5) less 1, 10, 8, 6, 4; its
     * values picking wide's elements along the last axis (gather_elements
     * by the range broadcast to [2, 3, 4] through gather_nd's rows), then
     * integer arithmetic on the range. */
    mkc_range_params rgp;
    OK(mkc_range_params_init(&rgp));
    CHECK(rgp.delta == 1.0 && rgp.dtype == MKC_DTYPE_S64);
    rgp.axis = -1, rgp.start = 10, rgp.delta = -2, rgp.limit_offset = -3; /* 10 down to 2 */
    const mkc_tensor *rin[1] = {wide};
    mkc_tensor *seq = NULL;
    OK(mkc_op_run(MKC_OP_RANGE, &rgp, 1, rin, &seq));
    int64_t sv[4];
    OK(mkc_tensor_export(seq, MKC_LAYOUT_NCHW, sv, sizeof sv));
    CHECK(sv[0] == 10 && sv[1] == 8 && sv[2] == 6 && sv[3] == 4);
    mkc_binary_params ib;
    OK(mkc_binary_params_init(&ib));
    ib.kind = MKC_BINARY_DIV;
    int64_t two = 2;
    mkc_tensor *ttwo = NULL, *halves = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_S64, 1, d1, MKC_LAYOUT_NCHW, &two, &ttwo));
    const mkc_tensor *iin[2] = {seq, ttwo};
    OK(mkc_op_run(MKC_OP_INTEGER_BINARY, &ib, 2, iin, &halves)); /* 5 4 3 2 */
    OK(mkc_tensor_export(halves, MKC_LAYOUT_NCHW, sv, sizeof sv));
    CHECK(sv[0] == 5 && sv[1] == 4 && sv[2] == 3 && sv[3] == 2);
    int64_t idx[6] = {4, 0, -1, 2, 1, 3}; /* [2, 3, 1] rows into wide's [2, 3, 5]... */
    const int64_t id3[3] = {2, 3, 1};
    mkc_tensor *tidx = NULL, *elems = NULL, *nd_rows = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_S64, 3, id3, MKC_LAYOUT_NCHW, idx, &tidx));
    mkc_gather_params gep;
    OK(mkc_gather_params_init(&gep));
    gep.axis = 2;
    const mkc_tensor *gein[2] = {wide, tidx};
    OK(mkc_op_run(MKC_OP_GATHER_ELEMENTS, &gep, 2, gein, &elems)); /* [2, 3, 1] */
    OK(mkc_tensor_export(elems, MKC_LAYOUT_NCHW, flags, 6));
    for (int i = 0; i < 6; ++i)
        CHECK(flags[i] == (x[(i % 3) * 5 + (idx[i] < 0 ? idx[i] + 5 : idx[i])] > 0.0f));
    /* ... and as gather_nd's rows (one coordinate each, batch_dims 2). */
    mkc_gather_nd_params np_;
    OK(mkc_gather_nd_params_init(&np_));
    CHECK(np_.batch_dims == 0);
    np_.batch_dims = 2;
    OK(mkc_op_run(MKC_OP_GATHER_ND, &np_, 2, gein, &nd_rows)); /* [2, 3] */
    unsigned char same[6];
    OK(mkc_tensor_export(nd_rows, MKC_LAYOUT_NCHW, same, 6));
    for (int i = 0; i < 6; ++i) CHECK(same[i] == flags[i]);
    idx[0] = 5; /* out of range: refused, nothing written */
    CHECK(mkc_op_run(MKC_OP_GATHER_ND, &np_, 2, gein, &nd_rows) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "gather_nd: index 5 is out of range") != NULL);
    OK(mkc_tensor_destroy(nd_rows));
    OK(mkc_tensor_destroy(elems));
    OK(mkc_tensor_destroy(tidx));
    OK(mkc_tensor_destroy(halves));
    OK(mkc_tensor_destroy(ttwo));
    OK(mkc_tensor_destroy(seq));
    OK(mkc_tensor_destroy(wide));
    OK(mkc_tensor_destroy(positive));
    OK(mkc_tensor_destroy(tzero));
    /* x's rows reflected by one on each side, its first column removed:
     * np.pad(x[:, 1:], ((1, 1), (0, 0)), "reflect"). */
    mkc_pad_params pp;
    OK(mkc_pad_params_init(&pp));
    CHECK(pp.mode == MKC_PAD_CONSTANT && pp.value == 0.0 && pp.naxes == 0 && pp.axes[0] == 0 &&
          pp.axes[1] == 1 && pp.axes[MKC_MAX_NDIMS - 1] == MKC_MAX_NDIMS - 1);
    pp.mode = MKC_PAD_REFLECT;
    pp.naxes = 2;
    pp.begin[0] = 1, pp.end[0] = 1;
    pp.begin[1] = -1, pp.end[1] = 0;
    mkc_tensor *padded = NULL;
    OK(mkc_op_run(MKC_OP_PAD, &pp, 1, in, &padded));
    float grown[20];
    OK(mkc_tensor_export(padded, MKC_LAYOUT_NCHW, grown, sizeof grown));
    const int from_row[5] = {1, 0, 1, 2, 1};
    for (int r = 0; r < 5; ++r)
        for (int c = 0; c < 4; ++c) CHECK(grown[r * 4 + c] == x[from_row[r] * 5 + 1 + c]);
    OK(mkc_tensor_destroy(padded));
    pp.end[1] = -4; /* nothing left of the columns */
    CHECK(mkc_op_run(MKC_OP_PAD, &pp, 1, in, &none) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "pad: axis 1 removes 1 before and 4 after of its 5") != NULL);
    CHECK(none == NULL);
    /* A [1, 1, 3, 5] view of x doubled in W by linear interpolation
     * (half-pixel: each new pair 1/4 and 3/4 of the way between), then
     * sizes and scales both given: refused. */
    const int64_t d4[4] = {1, 1, 3, 5};
    mkc_tensor *x4 = NULL, *wider = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, d4, MKC_LAYOUT_NCHW, x, &x4));
    mkc_resize_params zp;
    OK(mkc_resize_params_init(&zp));
    CHECK(zp.mode == MKC_RESIZE_NEAREST && zp.coordinates == MKC_COORDINATES_HALF_PIXEL &&
          zp.nearest == MKC_NEAREST_ROUND_PREFER_FLOOR && zp.nsizes == 0 && zp.nscales == 0);
    zp.mode = MKC_RESIZE_LINEAR;
    zp.nscales = 4;
    zp.scales[0] = zp.scales[1] = zp.scales[2] = 1.0f;
    zp.scales[3] = 2.0f;
    const mkc_tensor *zin[1] = {x4};
    OK(mkc_op_run(MKC_OP_RESIZE, &zp, 1, zin, &wider));
    float w10[30];
    OK(mkc_tensor_export(wider, MKC_LAYOUT_NCHW, w10, sizeof w10));
    for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 10; ++c) {
            const double at = (c + 0.5) / 2.0 - 0.5;
            const int lo = at < 0 ? 0 : (int)at, hi = lo + 1 > 4 ? 4 : lo + 1;
            const double w = at < 0 ? 0.0 : at - lo;
            const double want = (1 - w) * x[r * 5 + lo] + w * x[r * 5 + hi];
            CHECK(fabs(w10[r * 10 + c] - want) <= 1e-6);
        }
    OK(mkc_tensor_destroy(wider));
    wider = NULL;
    /* Cubic (the defaults: a = -0.75, border elements read past the edge)
     * doubling W asymmetrically: the even columns are src's own (a whole
     * coordinate), the odd ones halfway, where the weights are
     * W(1.5), W(0.5), W(0.5), W(1.5) = -0.09375, 0.59375, 0.59375, -0.09375. */
    CHECK(zp.cubic_coeff_a == -0.75 && zp.exclude_outside == 0 && zp.antialias == 0);
    zp.mode = MKC_RESIZE_CUBIC;
    zp.coordinates = MKC_COORDINATES_ASYMMETRIC;
    OK(mkc_op_run(MKC_OP_RESIZE, &zp, 1, zin, &wider));
    OK(mkc_tensor_export(wider, MKC_LAYOUT_NCHW, w10, sizeof w10));
    for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 10; ++c) {
            const float *row = x + r * 5;
            const int i = c / 2;
            const int ia = i - 1 < 0 ? 0 : i - 1, ib = i + 1 > 4 ? 4 : i + 1,
                      ic = i + 2 > 4 ? 4 : i + 2;
            const double want = c % 2 == 0 ? row[i]
                                           : -0.09375 * row[ia] + 0.59375 * row[i] +
                                                 0.59375 * row[ib] - 0.09375 * row[ic];
            CHECK(fabs(w10[r * 10 + c] - want) <= 1e-5);
        }
    OK(mkc_tensor_destroy(wider));
    wider = NULL;
    /* A struct of the header before cubic's fields (it ends at name) reads
     * them as their defaults; a = NaN is refused. */
    mkc_resize_params older = zp;
    older.struct_size = offsetof(mkc_resize_params, name) + sizeof older.name;
    older.cubic_coeff_a = 3.0; /* past its size: not read */
    OK(mkc_op_run(MKC_OP_RESIZE, &older, 1, zin, &wider));
    float o10[30];
    OK(mkc_tensor_export(wider, MKC_LAYOUT_NCHW, o10, sizeof o10));
    CHECK(memcmp(o10, w10, sizeof o10) == 0);
    OK(mkc_tensor_destroy(wider));
    zp.cubic_coeff_a = NAN;
    CHECK(mkc_op_run(MKC_OP_RESIZE, &zp, 1, zin, &none) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "resize: cubic_coeff_a is nan") != NULL && none == NULL);
    zp.cubic_coeff_a = -0.75;
    zp.mode = MKC_RESIZE_LINEAR;
    zp.coordinates = MKC_COORDINATES_HALF_PIXEL;
    zp.nsizes = 4;
    CHECK(mkc_op_run(MKC_OP_RESIZE, &zp, 1, zin, &none) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "resize: sizes and scales are both given") != NULL);
    CHECK(none == NULL);
    OK(mkc_tensor_destroy(x4));
    CHECK(mkc_op_run((mkc_op)999, NULL, 1, in, &none) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "unknown operator 999") != NULL && none == NULL);
    CHECK(mkc_op_run(MKC_OP_ERF, &rp, 1, in, &none) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "op_run (erf): takes no params") != NULL && none == NULL);
    CHECK(mkc_op_run(MKC_OP_REDUCE, NULL, 1, in, &none) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(mkc_op_run(MKC_OP_ERF, NULL, 1, NULL, &none) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(mkc_op_run(MKC_OP_ERF, NULL, 1, in, NULL) == MKC_STATUS_INVALID_ARGUMENT);
    rp.axes[0] = 2;
    CHECK(mkc_op_run(MKC_OP_REDUCE, &rp, 1, in, &none) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "reduce: axis 2 is out of range for rank 2") != NULL);
    CHECK(none == NULL);
    OK(mkc_tensor_destroy(ta));
    OK(mkc_tensor_destroy(m));
    OK(mkc_tensor_destroy(y));
    OK(mkc_tensor_destroy(tx));
}

/* Typed tensors and graph values: int32, int64 and bool data keep their
 * dtype; a node that takes float32 refuses them at compile, naming the
 * node, the port and the dtype; int64 is never rearranged. */
static void test_typed_values(void) {
    int64_t ids[6] = {0, 1, 2, 3, 4, 1ll << 40};
    int64_t back[6] = {0};
    const int64_t d[2] = {2, 3};
    mkc_tensor *t = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_S64, 2, d, MKC_LAYOUT_NCHW, ids, &t));
    mkc_dtype dt = MKC_DTYPE_F32;
    OK(mkc_tensor_get_dtype(t, &dt));
    CHECK(dt == MKC_DTYPE_S64);
    size_t nbytes = 0;
    OK(mkc_tensor_get_nbytes(t, &nbytes));
    CHECK(nbytes == sizeof ids);
    OK(mkc_tensor_export(t, MKC_LAYOUT_NCHW, back, sizeof back));
    CHECK(memcmp(ids, back, sizeof ids) == 0);
    const int64_t d4[4] = {1, 2, 3, 1};
    mkc_tensor *t4 = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_S64, 4, d4, MKC_LAYOUT_NCHW, ids, &t4));
    CHECK(mkc_tensor_export(t4, MKC_LAYOUT_NHWC, back, sizeof back) == MKC_STATUS_UNSUPPORTED);
    CHECK(strstr(mkc_last_error(), "int64 data cannot be rearranged") != NULL);
    mkc_tensor *b = NULL;
    unsigned char mask[6] = {1, 0, 1, 1, 0, 0};
    OK(mkc_tensor_wrap(MKC_DTYPE_BOOL, 2, d, MKC_LAYOUT_NCHW, mask, &b));
    OK(mkc_tensor_get_nbytes(b, &nbytes));
    CHECK(nbytes == 6);
    CHECK(mkc_tensor_wrap((mkc_dtype)99, 2, d, MKC_LAYOUT_NCHW, mask, &b) != MKC_STATUS_OK);

    mkc_graph *g = NULL;
    OK(mkc_graph_create(&g));
    int x = -1, i = -1, y = -1;
    OK(mkc_graph_input(g, "x", MKC_DTYPE_F32, 2, d, MKC_LAYOUT_NCHW, &x));
    OK(mkc_graph_input(g, "ids", MKC_DTYPE_S64, 2, d, MKC_LAYOUT_NCHW, &i));
    CHECK(mkc_graph_input(g, "bad", (mkc_dtype)99, 2, d, MKC_LAYOUT_NCHW, &y) ==
          MKC_STATUS_INVALID_ARGUMENT);
    mkc_binary_params bp;
    OK(mkc_binary_params_init(&bp));
    const int in[2] = {x, i};
    OK(mkc_graph_node(g, MKC_OP_BINARY, &bp, 2, in, &y));
    OK(mkc_graph_output(g, y, "y"));
    mkc_program *p = NULL;
    CHECK(mkc_program_compile(g, NULL, &p) == MKC_STATUS_INVALID_ARGUMENT && p == NULL);
    CHECK(strstr(mkc_last_error(), "node 0 (binary): input 1 (b) is int64; binary takes float32") !=
          NULL);
    /* A program's output keeps its dtype: ids > 2, a BOOL output. */
    mkc_graph *g2 = NULL;
    OK(mkc_graph_create(&g2));
    int ids_in = -1, two = -1, gt = -1;
    OK(mkc_graph_input(g2, "ids", MKC_DTYPE_S64, 2, d, MKC_LAYOUT_NCHW, &ids_in));
    int64_t two_value = 2;
    const int64_t d1[1] = {1};
    mkc_tensor *t2 = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_S64, 1, d1, MKC_LAYOUT_NCHW, &two_value, &t2));
    OK(mkc_graph_constant(g2, t2, "two", &two));
    mkc_compare_params kp;
    OK(mkc_compare_params_init(&kp));
    kp.kind = MKC_COMPARE_GREATER;
    const int gin[2] = {ids_in, two};
    OK(mkc_graph_node(g2, MKC_OP_COMPARE, &kp, 2, gin, &gt));
    OK(mkc_graph_output(g2, gt, "big"));
    mkc_program *p2 = NULL;
    OK(mkc_program_compile(g2, NULL, &p2));
    mkc_dtype out_dtype = MKC_DTYPE_F32;
    OK(mkc_program_output_dtype(p2, d, 0, &out_dtype));
    CHECK(out_dtype == MKC_DTYPE_BOOL);
    CHECK(mkc_program_output_dtype(p2, d, 1, &out_dtype) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(mkc_program_output_dtype(p2, d, 0, NULL) == MKC_STATUS_INVALID_ARGUMENT);
    unsigned char big[6];
    const void *ins2[1] = {ids};
    void *outs2[1] = {big};
    OK(mkc_program_run_plain(p2, d, ins2, outs2));
    for (int k = 0; k < 6; ++k) CHECK(big[k] == (ids[k] > 2));
    OK(mkc_program_destroy(p2));
    OK(mkc_graph_destroy(g2));
    OK(mkc_tensor_destroy(t2));
    OK(mkc_graph_destroy(g));
    OK(mkc_tensor_destroy(b));
    OK(mkc_tensor_destroy(t4));
    OK(mkc_tensor_destroy(t));
}

/* The low-precision dtypes through cast: float32 to bfloat16 and float16
 * (rounded to the nearest, ties to even) and back exactly, to int8 and
 * uint8 (truncated, saturated); a bfloat16 tensor exported in another
 * plain layout. */
static void test_low_precision_dtypes(void) {
    const float x[6] = {1.0f, -2.5f, 1.00390625f /* bf16 tie: to even, 1 */, 300.0f, -7.9f,
                        65520.0f /* past half's largest: infinity */};
    const int64_t d[2] = {2, 3};
    mkc_tensor *tx = NULL, *tb = NULL, *th = NULL, *ts = NULL, *tu = NULL, *back = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, d, MKC_LAYOUT_NCHW, (void *)x, &tx));
    const mkc_tensor *in[1] = {tx};
    mkc_cast_params cp;
    OK(mkc_cast_params_init(&cp));
    cp.to = MKC_DTYPE_BF16;
    OK(mkc_op_run(MKC_OP_CAST, &cp, 1, in, &tb));
    cp.to = MKC_DTYPE_F16;
    OK(mkc_op_run(MKC_OP_CAST, &cp, 1, in, &th));
    cp.to = MKC_DTYPE_S8;
    OK(mkc_op_run(MKC_OP_CAST, &cp, 1, in, &ts));
    cp.to = MKC_DTYPE_U8;
    OK(mkc_op_run(MKC_OP_CAST, &cp, 1, in, &tu));
    mkc_dtype dt = MKC_DTYPE_F32;
    OK(mkc_tensor_get_dtype(tb, &dt));
    CHECK(dt == MKC_DTYPE_BF16);
    uint16_t bits[6];
    OK(mkc_tensor_export(tb, MKC_LAYOUT_NCHW, bits, sizeof bits));
    CHECK(bits[0] == 0x3f80 && bits[1] == 0xc020 && bits[2] == 0x3f80 && bits[3] == 0x4396);
    OK(mkc_tensor_export(th, MKC_LAYOUT_NCHW, bits, sizeof bits));
    CHECK(bits[0] == 0x3c00 && bits[1] == 0xc100 && bits[5] == 0x7c00);
    int8_t s8[6];
    uint8_t u8[6];
    OK(mkc_tensor_export(ts, MKC_LAYOUT_NCHW, s8, sizeof s8));
    OK(mkc_tensor_export(tu, MKC_LAYOUT_NCHW, u8, sizeof u8));
    CHECK(s8[1] == -2 && s8[3] == 127 && s8[4] == -7 && s8[5] == 127);
    CHECK(u8[1] == 0 && u8[3] == 255 && u8[4] == 0);
    /* Back to float32: exact. */
    const mkc_tensor *bin[1] = {tb};
    cp.to = MKC_DTYPE_F32;
    OK(mkc_op_run(MKC_OP_CAST, &cp, 1, bin, &back));
    float f[6];
    OK(mkc_tensor_export(back, MKC_LAYOUT_NCHW, f, sizeof f));
    CHECK(f[0] == 1.0f && f[1] == -2.5f && f[2] == 1.0f && f[3] == 300.0f);
    /* A 4-D bfloat16 tensor exported channels-last. */
    uint16_t nchw[6] = {1, 2, 3, 4, 5, 6}, nhwc[6] = {0};
    const int64_t d4[4] = {1, 2, 3, 1};
    mkc_tensor *t4 = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_BF16, 4, d4, MKC_LAYOUT_NCHW, nchw, &t4));
    OK(mkc_tensor_export(t4, MKC_LAYOUT_NHWC, nhwc, sizeof nhwc));
    CHECK(nhwc[0] == 1 && nhwc[1] == 4 && nhwc[2] == 2 && nhwc[5] == 6);
    int32_t id = -1;
    OK(mkc_enum_value("mkc_dtype", "bf16", &id));
    CHECK(id == MKC_DTYPE_BF16);
    /* quantize and dequantize: per-tensor scale 0.5, zero point 10 (U8). */
    float scale = 0.5f;
    uint8_t zero = 10, q[6];
    const int64_t d1[1] = {1};
    mkc_tensor *ts_scale = NULL, *tzero = NULL, *tq = NULL, *tdq = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, d1, MKC_LAYOUT_NCHW, &scale, &ts_scale));
    OK(mkc_tensor_wrap(MKC_DTYPE_U8, 1, d1, MKC_LAYOUT_NCHW, &zero, &tzero));
    mkc_quantize_params qp;
    OK(mkc_quantize_params_init(&qp));
    CHECK(qp.axis == 1 && qp.to == MKC_DTYPE_U8);
    const mkc_tensor *qin[3] = {tx, ts_scale, tzero};
    OK(mkc_op_run(MKC_OP_QUANTIZE, &qp, 3, qin, &tq));
    OK(mkc_tensor_export(tq, MKC_LAYOUT_NCHW, q, sizeof q));
    /* 1/0.5 = 2, -2.5/0.5 = -5, 1.00390625/0.5 rounds to 2, 300/0.5 saturates */
    CHECK(q[0] == 12 && q[1] == 5 && q[2] == 12 && q[3] == 255 && q[4] == 0);
    const mkc_tensor *dqin[3] = {tq, ts_scale, tzero};
    OK(mkc_op_run(MKC_OP_DEQUANTIZE, &qp, 3, dqin, &tdq));
    OK(mkc_tensor_export(tdq, MKC_LAYOUT_NCHW, f, sizeof f));
    CHECK(f[0] == 1.0f && f[1] == -2.5f && f[3] == 122.5f && f[4] == -5.0f);
    {
        /* fast: oneDNN's reorder; the same bytes away from half steps. */
        mkc_quantize_params fq = qp;
        CHECK(fq.fast == 0);
        fq.fast = 1;
        uint8_t q2[6];
        mkc_tensor *tq2 = NULL;
        OK(mkc_op_run(MKC_OP_QUANTIZE, &fq, 3, qin, &tq2));
        OK(mkc_tensor_export(tq2, MKC_LAYOUT_NCHW, q2, sizeof q2));
        CHECK(q2[0] == 12 && q2[1] == 5 && q2[2] == 12 && q2[3] == 255 && q2[4] == 0);
        OK(mkc_tensor_destroy(tq2));
    }
    scale = -1.0f; /* a scale that is not > 0 is refused, naming it */
    mkc_tensor *bad = NULL;
    CHECK(mkc_op_run(MKC_OP_QUANTIZE, &qp, 3, qin, &bad) == MKC_STATUS_INVALID_ARGUMENT &&
          bad == NULL);
    CHECK(strstr(mkc_last_error(), "scale[0] is -1") != NULL);
    /* quantized_linear: u8 [2, 3] (zero point 10) x s8 [2, 3] weights, per-row
     * weight scales, a float32 result: exact integer sums, then scaled. */
    uint8_t qx[6] = {10, 11, 12, 20, 0, 255};
    int8_t qw[6] = {1, 2, 3, -4, 5, -6};
    float src_scale = 0.5f, wscale[2] = {0.25f, 2.0f}, lin[4];
    int32_t src_zero = 10;
    const int64_t d23[2] = {2, 3}, d2[1] = {2};
    mkc_tensor *tqx = NULL, *tqw = NULL, *tss = NULL, *tws = NULL, *tsz = NULL, *tlin = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_U8, 2, d23, MKC_LAYOUT_NCHW, qx, &tqx));
    OK(mkc_tensor_wrap(MKC_DTYPE_S8, 2, d23, MKC_LAYOUT_NCHW, qw, &tqw));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, d1, MKC_LAYOUT_NCHW, &src_scale, &tss));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, d2, MKC_LAYOUT_NCHW, wscale, &tws));
    OK(mkc_tensor_wrap(MKC_DTYPE_S32, 1, d1, MKC_LAYOUT_NCHW, &src_zero, &tsz));
    mkc_quantized_linear_params lp;
    OK(mkc_quantized_linear_params_init(&lp));
    CHECK(lp.dst_dtype == MKC_DTYPE_F32 && lp.activation == MKC_ACTIVATION_NONE);
    const mkc_tensor *lin_in[6] = {tqx, tqw, tss, tws, NULL, tsz};
    OK(mkc_op_run(MKC_OP_QUANTIZED_LINEAR, &lp, 6, lin_in, &tlin));
    OK(mkc_tensor_export(tlin, MKC_LAYOUT_NCHW, lin, sizeof lin));
    /* rows (0, 1, 2) and (10, -10, 245) */
    CHECK(lin[0] == 0.5f * 0.25f * 8 && lin[1] == 0.5f * 2.0f * -7);
    CHECK(lin[2] == 0.5f * 0.25f * (10 - 20 + 735) && lin[3] == 0.5f * 2.0f * (-40 - 50 - 1470));
    mkc_quantized_conv_params cq;
    OK(mkc_quantized_conv_params_init(&cq));
    CHECK(cq.conv.struct_size == sizeof(mkc_conv_params) && cq.conv.groups == 1 &&
          cq.dst_dtype == MKC_DTYPE_F32 && cq.sum_scale == 1.0f && cq.sum_zero_point == 0);
    {
        /* A 1x1 convolution of one u8 channel, weight 2, adding a u8 residual
         * (scale 0.25, zero point 4) before the relu, requantized to u8 with
         * dst_scale 0.5: y = relu(0.5 * 1 * 2 * (x - 10) + 0.25 * (r - 4)). */
        uint8_t cx[4] = {10, 12, 14, 0}, cr[4] = {4, 8, 0, 4}, cy[4] = {0};
        int8_t cw = 2;
        float cws = 1.0f, cds = 0.5f;
        const int64_t dx[4] = {1, 1, 2, 2}, dw[4] = {1, 1, 1, 1};
        mkc_tensor *tcx = NULL, *tcw = NULL, *tcws = NULL, *tcds = NULL, *tcr = NULL,
                   *tcy = NULL;
        OK(mkc_tensor_wrap(MKC_DTYPE_U8, 4, dx, MKC_LAYOUT_NCHW, cx, &tcx));
        OK(mkc_tensor_wrap(MKC_DTYPE_S8, 4, dw, MKC_LAYOUT_NCHW, &cw, &tcw));
        OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, d1, MKC_LAYOUT_NCHW, &cws, &tcws));
        OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, d1, MKC_LAYOUT_NCHW, &cds, &tcds));
        OK(mkc_tensor_wrap(MKC_DTYPE_U8, 4, dx, MKC_LAYOUT_NCHW, cr, &tcr));
        cq.conv.sum = 1;
        cq.conv.activation = MKC_ACTIVATION_RELU;
        cq.dst_dtype = MKC_DTYPE_U8;
        cq.sum_scale = 0.25f;
        cq.sum_zero_point = 4;
        const mkc_tensor *conv_in[9] = {tcx, tcw, tss, tcws, NULL, tsz, tcds, NULL, tcr};
        OK(mkc_op_run(MKC_OP_QUANTIZED_CONV2D, &cq, 9, conv_in, &tcy));
        OK(mkc_tensor_export(tcy, MKC_LAYOUT_NCHW, cy, sizeof cy));
        /* y = 0 + 0, 2 + 1, 4 - 1, relu(-10 + 0) -> /0.5 */
        CHECK(cy[0] == 0 && cy[1] == 6 && cy[2] == 6 && cy[3] == 0);
        cq.sum_scale = 0.0f; /* refused, naming it */
        mkc_tensor *none = NULL;
        CHECK(mkc_op_run(MKC_OP_QUANTIZED_CONV2D, &cq, 9, conv_in, &none) ==
              MKC_STATUS_INVALID_ARGUMENT && none == NULL);
        CHECK(strstr(mkc_last_error(), "sum_scale") != NULL);
        OK(mkc_tensor_destroy(tcy));
        OK(mkc_tensor_destroy(tcr));
        OK(mkc_tensor_destroy(tcds));
        OK(mkc_tensor_destroy(tcws));
        OK(mkc_tensor_destroy(tcw));
        OK(mkc_tensor_destroy(tcx));
    }
    {
        /* quantized_matmul: u8 a [2, 3] (zero point 10) @ s8 b [3, 2], b read
         * transposed from the [2, 3] weights above, plus an addend row
         * broadcast over the result: y = 0.5 * b_scale[n] * sums + addend[n]. */
        mkc_quantized_matmul_params mp;
        OK(mkc_quantized_matmul_params_init(&mp));
        CHECK(mp.dst_dtype == MKC_DTYPE_F32 && mp.transpose_b == 0);
        mp.transpose_b = 1;
        float addend[2] = {1.0f, -1.0f}, mm[4];
        mkc_tensor *tadd = NULL, *tmm = NULL;
        OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, d2, MKC_LAYOUT_NCHW, addend, &tadd));
        const mkc_tensor *mm_in[9] = {tqx, tqw, tss, tws, NULL, tsz, NULL, NULL, tadd};
        OK(mkc_op_run(MKC_OP_QUANTIZED_MATMUL, &mp, 9, mm_in, &tmm));
        OK(mkc_tensor_export(tmm, MKC_LAYOUT_NCHW, mm, sizeof mm));
        CHECK(mm[0] == 0.5f * 0.25f * 8 + 1.0f && mm[1] == 0.5f * 2.0f * -7 - 1.0f);
        CHECK(mm[2] == 0.5f * 0.25f * (10 - 20 + 735) + 1.0f &&
              mm[3] == 0.5f * 2.0f * (-40 - 50 - 1470) - 1.0f);
        const mkc_tensor *mm_bad[4] = {tqx, tqx, tss, tws}; /* uint8 b */
        mkc_tensor *none = NULL;
        CHECK(mkc_op_run(MKC_OP_QUANTIZED_MATMUL, &mp, 4, mm_bad, &none) ==
                  MKC_STATUS_INVALID_ARGUMENT && none == NULL);
        CHECK(strstr(mkc_last_error(), "b must be int8, got uint8") != NULL);
        OK(mkc_tensor_destroy(tmm));
        OK(mkc_tensor_destroy(tadd));
    }
    const mkc_tensor *bad_in[6] = {tss, tqw, tss, tws, NULL, tsz}; /* float32 src */
    CHECK(mkc_op_run(MKC_OP_QUANTIZED_LINEAR, &lp, 6, bad_in, &bad) ==
          MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "src must be uint8 or int8, got float32") != NULL);
    OK(mkc_tensor_destroy(tlin));
    OK(mkc_tensor_destroy(tsz));
    OK(mkc_tensor_destroy(tws));
    OK(mkc_tensor_destroy(tss));
    OK(mkc_tensor_destroy(tqw));
    OK(mkc_tensor_destroy(tqx));
    OK(mkc_tensor_destroy(tdq));
    OK(mkc_tensor_destroy(tq));
    OK(mkc_tensor_destroy(tzero));
    OK(mkc_tensor_destroy(ts_scale));
    OK(mkc_tensor_destroy(t4));
    OK(mkc_tensor_destroy(back));
    OK(mkc_tensor_destroy(tu));
    OK(mkc_tensor_destroy(ts));
    OK(mkc_tensor_destroy(th));
    OK(mkc_tensor_destroy(tb));
    OK(mkc_tensor_destroy(tx));
}

static void test_core_api(void) {
    mkc_layout layout = MKC_LAYOUT_TARGET;
    OK(mkc_get_target_layout(&layout));
    CHECK(layout == MKC_LAYOUT_NCHW);
    OK(mkc_set_target_layout(MKC_LAYOUT_NHWC));
    OK(mkc_get_target_layout(&layout));
    CHECK(layout == MKC_LAYOUT_NHWC);
    CHECK(mkc_set_target_layout(MKC_LAYOUT_TARGET) == MKC_STATUS_INVALID_ARGUMENT);
    OK(mkc_set_target_layout(MKC_LAYOUT_NCHW));

    uint64_t executor = 1;
    int64_t value = -1;
    const char *shape = NULL;
    OK(mkc_set_executor(42));
    OK(mkc_get_executor(&executor));
    CHECK(executor == 42);
    OK(mkc_cache_set_session(5));
    OK(mkc_cache_get_session(&value));
    CHECK(value == 5);
    OK(mkc_cache_set_input_shape("2x3"));
    OK(mkc_cache_get_input_shape(&shape));
    CHECK(strcmp(shape, "2x3") == 0);
    OK(mkc_cache_get_capacity(&value));
    CHECK(value == 0);

    /* An NHWC tensor reports its shape in NHWC order. */
    float data[2 * 4 * 5 * 3];
    for (int i = 0; i < 2 * 4 * 5 * 3; ++i) data[i] = (float)i - 50.f;
    const int64_t d[4] = {2, 4, 5, 3};
    mkc_tensor *t = NULL, *y = NULL, *z = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, d, MKC_LAYOUT_NHWC, data, &t));
    mkc_dtype dtype;
    size_t nbytes = 0, plain = 0;
    OK(mkc_tensor_get_dtype(t, &dtype));
    OK(mkc_tensor_get_layout(t, &layout));
    OK(mkc_tensor_get_nbytes(t, &nbytes));
    OK(mkc_tensor_get_plain_nbytes(t, &plain));
    CHECK(dtype == MKC_DTYPE_F32 && layout == MKC_LAYOUT_NHWC);
    CHECK(nbytes == sizeof data && plain == sizeof data);
    const char *format = NULL;
    OK(mkc_tensor_get_format(t, &format));
    CHECK(strcmp(format, "acdb") == 0);
    OK(mkc_tensor_set_constant(t, 1));

    /* softmax over C (axis -1 in NHWC): every pixel's values sum to 1. */
    OK(mkc_softmax(-1, 0, "c_softmax", t, &y));
    float out[2 * 4 * 5 * 3];
    OK(mkc_tensor_export(y, MKC_LAYOUT_NHWC, out, sizeof out));
    int sums_ok = 1;
    for (int px = 0; px < 2 * 4 * 5; ++px) {
        float sum = out[px * 3] + out[px * 3 + 1] + out[px * 3 + 2];
        if (fabsf(sum - 1.f) > 1e-5f) sums_ok = 0;
    }
    CHECK(sums_ok);

    /* y - y = 0 with broadcasting of a [3] vector of zeros: y again. */
    float zeros[3] = {0.f, 0.f, 0.f};
    const int64_t c3[1] = {3};
    mkc_tensor *tz = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, c3, MKC_LAYOUT_NCHW, zeros, &tz));
    OK(mkc_binary(MKC_BINARY_SUB, "c_sub", y, tz, &z));
    float out2[2 * 4 * 5 * 3];
    OK(mkc_tensor_export(z, MKC_LAYOUT_NHWC, out2, sizeof out2));
    CHECK(memcmp(out, out2, sizeof out) == 0);

    /* Keys of this session: the entries above, under group "2x3". */
    char keys[4096];
    size_t needed = 0;
    OK(mkc_cache_get_keys(5, keys, sizeof keys, &needed));
    CHECK(strstr(keys, "2x3\tc_softmax|3|2x3x4x5|e2a") != NULL); /* axis -1 -> 3 */
    CHECK(strstr(keys, "|e2a|") != NULL);
    OK(mkc_cache_reset_executor(42));
    mkc_cache_stats s;
    OK(mkc_cache_stats_init(&s));
    OK(mkc_cache_get_session_stats(5, &s));
    CHECK(s.entries == 0);
    uint64_t before = 0, after = 0;
    OK(mkc_get_reorder_count(&before));
    OK(mkc_tensor_export(z, MKC_LAYOUT_NCHW, out2, sizeof out2)); /* NHWC -> NCHW */
    OK(mkc_get_reorder_count(&after));
    CHECK(after == before + 1);
    CHECK(out2[1] == out[3]); /* NCHW [0,0,0,1] is NHWC [0,0,1,0] */

    OK(mkc_tensor_destroy(z));
    OK(mkc_tensor_destroy(tz));
    OK(mkc_tensor_destroy(y));
    OK(mkc_tensor_destroy(t));
    OK(mkc_set_executor(0));
    OK(mkc_cache_set_session(0));
    OK(mkc_cache_set_input_shape(NULL));
}

/* mkc_activation_plain on caller buffers against a loop, in place and not,
 * and its bad calls; a small activation runs on one OpenMP thread and gives
 * the caller's thread count back, also when it fails. */
static void test_activation_plain(void) {
    float x[21], y[21];
    mkc_activation_call call;
    int i;
    for (i = 0; i < 21; ++i) x[i] = (float)(i % 5) - 2.f;
    memset(&call, 0, sizeof call);
    call.struct_size = sizeof call;
    call.kind = MKC_ACTIVATION_RELU;
    call.ndims = 2;
    call.dims[0] = 3;
    call.dims[1] = 7;
    OK(mkc_activation_plain(&call, x, y));
    for (i = 0; i < 21; ++i) CHECK(y[i] == (x[i] > 0.f ? x[i] : 0.f));
    call.alpha = 0.5f; /* leaky relu */
    OK(mkc_activation_plain(&call, x, x)); /* in place */
    for (i = 0; i < 21; ++i) {
        const float v = (float)(i % 5) - 2.f;
        CHECK(x[i] == (v > 0.f ? v : 0.5f * v));
    }
    CHECK(mkc_activation_plain(NULL, x, y) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(mkc_activation_plain(&call, NULL, y) == MKC_STATUS_INVALID_ARGUMENT);
    call.ndims = 0;
    CHECK(mkc_activation_plain(&call, x, y) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "ndims") != NULL);
    call.ndims = 2;
    call.dims[1] = -7;
    CHECK(mkc_activation_plain(&call, x, y) == MKC_STATUS_INVALID_ARGUMENT);

    { /* the _ref variant reads the buffers from where their addresses are kept */
        const float *src_ref = x;
        float *dst_ref = y;
        call.dims[1] = 7;
        call.alpha = 0.f;
        for (i = 0; i < 21; ++i) x[i] = (float)(i % 7) - 3.f;
        OK(mkc_activation_plain_ref(&call, &src_ref, &dst_ref));
        for (i = 0; i < 21; ++i) CHECK(y[i] == (x[i] > 0.f ? x[i] : 0.f));
        src_ref = y; /* same call, other buffers: in place on y, negated first */
        for (i = 0; i < 21; ++i) y[i] = -x[i];
        OK(mkc_activation_plain_ref(&call, &src_ref, &dst_ref));
        for (i = 0; i < 21; ++i) CHECK(y[i] == (x[i] < 0.f ? -x[i] : 0.f));
        CHECK(mkc_activation_plain_ref(&call, NULL, &dst_ref) == MKC_STATUS_INVALID_ARGUMENT);
        CHECK(strstr(mkc_last_error(), "src_ref") != NULL);
        dst_ref = NULL;
        CHECK(mkc_activation_plain_ref(&call, &src_ref, &dst_ref) ==
              MKC_STATUS_INVALID_ARGUMENT);
        CHECK(strstr(mkc_last_error(), "activation_plain_ref") != NULL);
        CHECK(mkc_activation_plain_ref(NULL, &src_ref, &dst_ref) == MKC_STATUS_INVALID_ARGUMENT);
    }

    {
        void *omp = dlopen("libiomp5.so", RTLD_LAZY); /* loaded already, by libdnnl */
        int (*max_threads)(void) = NULL;
        void (*set_threads)(int) = NULL;
        if (omp) {
            *(void **)(&max_threads) = dlsym(omp, "omp_get_max_threads");
            *(void **)(&set_threads) = dlsym(omp, "omp_set_num_threads");
        }
        CHECK(max_threads != NULL && set_threads != NULL);
        if (max_threads && set_threads) {
            const int64_t small[2] = {3, 7}, other[2] = {7, 3};
            mkc_tensor *t = NULL, *wrong = NULL;
            float out[21];
            set_threads(2);
            OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, small, MKC_LAYOUT_NCHW, y, &t));
            OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, other, MKC_LAYOUT_NCHW, out, &wrong));
            OK(mkc_activation(MKC_ACTIVATION_RELU, 0.f, 0.f, "c_small", t, &t));
            CHECK(max_threads() == 2);
            CHECK(mkc_activation(MKC_ACTIVATION_RELU, 0.f, 0.f, "c_small", t, &wrong) ==
                  MKC_STATUS_INVALID_ARGUMENT); /* fails inside the single-thread scope */
            CHECK(max_threads() == 2);
            OK(mkc_tensor_destroy(t));
            OK(mkc_tensor_destroy(wrong));
        }
        if (omp) dlclose(omp);
    }
}

/* Handles checked on one call and destroyed before the next are rejected
 * (the library remembers handles it found live until any is destroyed), and
 * a cached op fed other buffers each call reads and writes those buffers
 * (it skips re-binding only a buffer that is bound already). */
static void test_handles_and_buffers_across_calls(void) {
    enum { N = 24 };
    const int64_t d[2] = {2, N / 2};
    float xa[N], xb[N], ya[N], yb[N];
    for (int i = 0; i < N; ++i) {
        xa[i] = (float)(i - 10);
        xb[i] = (float)(7 - i);
    }
    mkc_tensor *a = NULL, *b = NULL, *da = NULL, *db = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, d, MKC_LAYOUT_NCHW, xa, &a));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, d, MKC_LAYOUT_NCHW, xb, &b));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, d, MKC_LAYOUT_NCHW, ya, &da));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, d, MKC_LAYOUT_NCHW, yb, &db));
    for (int round = 0; round < 3; ++round) { /* a, b, a, ... into da, db, da, ... */
        memset(ya, 0xff, sizeof ya);
        memset(yb, 0xff, sizeof yb);
        OK(mkc_activation(MKC_ACTIVATION_RELU, 0.f, 0.f, "buffers", a, &da));
        OK(mkc_activation(MKC_ACTIVATION_RELU, 0.f, 0.f, "buffers", b, &db));
        for (int i = 0; i < N; ++i) {
            CHECK(ya[i] == (xa[i] > 0.f ? xa[i] : 0.f));
            CHECK(yb[i] == (xb[i] > 0.f ? xb[i] : 0.f));
        }
    }
    /* Destroying b forgets what this thread remembered: b is rejected, a
     * (still live) is accepted, again and again. */
    OK(mkc_tensor_destroy(b));
    for (int round = 0; round < 2; ++round) {
        CHECK(mkc_activation(MKC_ACTIVATION_RELU, 0.f, 0.f, "buffers", b, &db) ==
              MKC_STATUS_INVALID_HANDLE);
        CHECK(strstr(mkc_last_error(), "src is not a live tensor") != NULL);
        OK(mkc_activation(MKC_ACTIVATION_RELU, 0.f, 0.f, "buffers", a, &da));
    }
    /* The same for a convolution's named arguments. */
    mkc_conv_params p;
    OK(mkc_conv_params_init(&p));
    const int64_t xd[4] = {1, 2, 3, 3}, wd[4] = {1, 2, 1, 1};
    float x[18], w[2] = {1.f, -1.f};
    for (int i = 0; i < 18; ++i) x[i] = (float)i;
    mkc_tensor *tx = NULL, *tw = NULL, *ty = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, xd, MKC_LAYOUT_NCHW, x, &tx));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, wd, MKC_LAYOUT_NCHW, w, &tw));
    OK(mkc_conv2d(&p, tx, tw, NULL, &ty));
    OK(mkc_tensor_destroy(ty));
    ty = NULL;
    OK(mkc_tensor_destroy(tw));
    CHECK(mkc_conv2d(&p, tx, tw, NULL, &ty) == MKC_STATUS_INVALID_HANDLE);
    CHECK(strstr(mkc_last_error(), "conv2d: weights is not a live tensor") != NULL);
    CHECK(mkc_conv2d(&p, NULL, tw, NULL, &ty) == MKC_STATUS_INVALID_HANDLE);
    CHECK(strstr(mkc_last_error(), "conv2d: src is NULL") != NULL);
    CHECK(ty == NULL);
    OK(mkc_tensor_destroy(tx));
    OK(mkc_tensor_destroy(a));
    OK(mkc_tensor_destroy(da));
    OK(mkc_tensor_destroy(db));
}

/* Naive NCHW convolution with groups, stride and dilation, no padding (the
 * check for test_conv_arguments_remembered). */
static void reference_conv(const float *x, const float *w, int c, int hw, int oc, int groups,
                           int k, int stride, int dilation, float *y, int ohw) {
    const int icg = c / groups, ocg = oc / groups;
    for (int o = 0; o < oc; ++o)
        for (int i = 0; i < ohw; ++i)
            for (int j = 0; j < ohw; ++j) {
                float acc = 0.f;
                const int g = o / ocg;
                for (int ci = 0; ci < icg; ++ci)
                    for (int a = 0; a < k; ++a)
                        for (int b = 0; b < k; ++b)
                            acc += x[((g * icg + ci) * hw + i * stride + a * dilation) * hw +
                                     j * stride + b * dilation] *
                                   w[((o * icg + ci) * k + a) * k + b];
                y[(o * ohw + i) * ohw + j] = acc;
            }
}

/* Runs conv2d with `p` into a new tensor and compares with the reference. */
static void check_conv(const mkc_conv_params *p, mkc_tensor *tx, mkc_tensor *tw, const float *x,
                       const float *w, int c, int hw, int oc, int k) {
    enum { MAX = 64 };
    const int dilation = (int)p->dilation[0];
    const int ohw = (hw - (k - 1) * dilation - 1) / (int)p->stride[0] + 1;
    float want[MAX], got[MAX];
    reference_conv(x, w, c, hw, oc, (int)p->groups, k, (int)p->stride[0], dilation, want, ohw);
    mkc_tensor *ty = NULL;
    OK(mkc_conv2d(p, tx, tw, NULL, &ty));
    int nd = 0;
    int64_t dims[8];
    OK(mkc_tensor_get_shape(ty, &nd, dims));
    CHECK(nd == 4 && dims[1] == oc && dims[2] == ohw && dims[3] == ohw);
    OK(mkc_tensor_export(ty, MKC_LAYOUT_NCHW, got, sizeof(float) * oc * ohw * ohw));
    for (int i = 0; i < oc * ohw * ohw; ++i) CHECK(fabsf(got[i] - want[i]) <= 1e-4f);
    OK(mkc_tensor_destroy(ty));
}

/* A thread remembers each convolution's arguments (the argument cache): a
 * call that differs in anything - a parameter changed in the same struct,
 * the name's text changed in the same buffer, the weights' layout - must
 * not run what the remembered one ran. */
static void test_conv_arguments_remembered(void) {
    enum { C = 4, HW = 5, OC = 4, K = 3 };
    float x[C * HW * HW], w[OC * (C / 2) * K * K], w_full[OC * C * K * K];
    for (int i = 0; i < C * HW * HW; ++i) x[i] = (float)((i * 7) % 11) - 5.f;
    for (int i = 0; i < OC * (C / 2) * K * K; ++i) w[i] = (float)((i * 5) % 7) - 3.f;
    for (int i = 0; i < OC * C * K * K; ++i) w_full[i] = (float)((i * 3) % 5) - 2.f;
    const int64_t xd[4] = {1, C, HW, HW}, wd[4] = {OC, C / 2, K, K}, wfd[4] = {OC, C, K, K};
    const int64_t wd_nhwc[4] = {OC, K, K, C / 2}; /* the same dims, channels last */
    mkc_tensor *tx = NULL, *tw = NULL, *tw_full = NULL, *tw_nhwc = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, xd, MKC_LAYOUT_NCHW, x, &tx));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, wd, MKC_LAYOUT_NCHW, w, &tw));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, wfd, MKC_LAYOUT_NCHW, w_full, &tw_full));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, wd_nhwc, MKC_LAYOUT_NHWC, w, &tw_nhwc));

    char name[16] = "memo_a";
    mkc_conv_params p;
    OK(mkc_conv_params_init(&p));
    p.name = name;
    for (int round = 0; round < 3; ++round) { /* changed in one struct, back and forth */
        p.stride[0] = p.stride[1] = 1;
        p.dilation[0] = p.dilation[1] = 1;
        check_conv(&p, tx, tw_full, x, w_full, C, HW, OC, K);
        check_conv(&p, tx, tw_full, x, w_full, C, HW, OC, K);
        p.stride[0] = p.stride[1] = 2;
        check_conv(&p, tx, tw_full, x, w_full, C, HW, OC, K);
        p.stride[0] = p.stride[1] = 1;
        p.dilation[0] = p.dilation[1] = 2;
        check_conv(&p, tx, tw_full, x, w_full, C, HW, OC, K);
        check_conv(&p, tx, tw_full, x, w_full, C, HW, OC, K);
    }
    p.dilation[0] = p.dilation[1] = 1;
    /* Another name in the same buffer, then other groups and weights. */
    mkc_cache_stats before, after;
    OK(mkc_cache_stats_init(&before));
    OK(mkc_cache_stats_init(&after));
    OK(mkc_cache_get_stats(&before));
    strcpy(name, "memo_b");
    check_conv(&p, tx, tw_full, x, w_full, C, HW, OC, K);
    OK(mkc_cache_get_stats(&after));
    CHECK(after.misses == before.misses + 1); /* a new entry, not memo_a's */
    p.groups = 2;
    for (int i = 0; i < 3; ++i) check_conv(&p, tx, tw, x, w, C, HW, OC, K);
    OK(mkc_cache_get_stats(&before));
    check_conv(&p, tx, tw, x, w, C, HW, OC, K);
    OK(mkc_cache_get_stats(&after));
    CHECK(after.hits == before.hits + 1 && after.misses == before.misses); /* counted */
    /* Grouped weights must be plain, also when the call is remembered. */
    mkc_tensor *ty = NULL;
    CHECK(mkc_conv2d(&p, tx, tw_nhwc, NULL, &ty) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "grouped convolution weights must be plain") != NULL);
    CHECK(ty == NULL);
    p.name = "memo_fresh"; /* the same on a call nothing remembers */
    CHECK(mkc_conv2d(&p, tx, tw_nhwc, NULL, &ty) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "grouped convolution weights must be plain") != NULL);
    CHECK(ty == NULL);
    p.name = name;
    check_conv(&p, tx, tw, x, w, C, HW, OC, K);
    /* After a reset nothing remembered is used. */
    OK(mkc_cache_reset());
    OK(mkc_cache_get_stats(&before));
    check_conv(&p, tx, tw, x, w, C, HW, OC, K);
    OK(mkc_cache_get_stats(&after));
    CHECK(after.misses == before.misses + 1);
    OK(mkc_tensor_destroy(tx));
    OK(mkc_tensor_destroy(tw));
    OK(mkc_tensor_destroy(tw_full));
    OK(mkc_tensor_destroy(tw_nhwc));
}

/* Runs a named leaky relu on `t` (caller dims 1xCxHxW holding x in NCHW
 * order) and compares with the reference. */
static void check_leaky(const char *name, float alpha, mkc_tensor *t, const float *x, int n) {
    enum { MAX = 128 };
    float got[MAX];
    mkc_tensor *ty = NULL;
    OK(mkc_activation(MKC_ACTIVATION_RELU, alpha, 0.f, name, t, &ty));
    OK(mkc_tensor_export(ty, MKC_LAYOUT_NCHW, got, sizeof(float) * n));
    for (int i = 0; i < n; ++i) CHECK(got[i] == (x[i] > 0.f ? x[i] : alpha * x[i]));
    OK(mkc_tensor_destroy(ty));
}

/* Activations are remembered by their arguments too: alpha changed, the
 * name's text changed in the same buffer, and src in another layout with
 * the same dims must each run what a fresh call would. */
static void test_activation_arguments_remembered(void) {
    enum { C = 3, HW = 4, N = C * HW * HW };
    float x[N], x_nhwc[N];
    for (int i = 0; i < N; ++i) x[i] = (float)((i * 7) % 11) - 5.f;
    for (int c = 0; c < C; ++c) /* the same values, channels last */
        for (int i = 0; i < HW * HW; ++i) x_nhwc[i * C + c] = x[c * HW * HW + i];
    const int64_t nchw[4] = {1, C, HW, HW}, nhwc[4] = {1, HW, HW, C};
    mkc_tensor *tx = NULL, *tx_nhwc = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, nchw, MKC_LAYOUT_NCHW, x, &tx));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, nhwc, MKC_LAYOUT_NHWC, x_nhwc, &tx_nhwc));
    char name[16] = "act_a";
    for (int round = 0; round < 3; ++round) { /* alpha changed back and forth */
        check_leaky(name, 0.25f, tx, x, N);
        check_leaky(name, 0.25f, tx, x, N);
        check_leaky(name, 0.5f, tx, x, N);
        check_leaky(name, 0.f, tx, x, N);
        check_leaky(name, 0.f, tx_nhwc, x, N); /* src laid out otherwise */
        check_leaky(name, 0.f, tx, x, N);
    }
    mkc_cache_stats before, after;
    OK(mkc_cache_stats_init(&before));
    OK(mkc_cache_stats_init(&after));
    OK(mkc_cache_get_stats(&before));
    check_leaky(name, 0.5f, tx, x, N); /* replaces the alpha-0 entry under the key */
    OK(mkc_cache_get_stats(&after));
    CHECK(after.misses == before.misses + 1 && after.insertions == before.insertions + 1);
    OK(mkc_cache_get_stats(&before));
    check_leaky(name, 0.5f, tx, x, N);
    OK(mkc_cache_get_stats(&after));
    CHECK(after.hits == before.hits + 1 && after.misses == before.misses); /* counted */
    strcpy(name, "act_b"); /* another name in the same buffer: a new entry */
    check_leaky(name, 0.5f, tx, x, N);
    OK(mkc_cache_get_stats(&before));
    CHECK(before.misses == after.misses + 1);
    char same_text[16]; /* the same name in another buffer: the same call */
    strcpy(same_text, "act_b");
    OK(mkc_cache_get_stats(&before));
    check_leaky(same_text, 0.5f, tx, x, N);
    OK(mkc_cache_get_stats(&after));
    CHECK(after.misses == before.misses && after.hits == before.hits + 1);
    OK(mkc_cache_reset()); /* nothing remembered is used after a reset */
    OK(mkc_cache_get_stats(&before));
    check_leaky(name, 0.5f, tx, x, N);
    OK(mkc_cache_get_stats(&after));
    CHECK(after.misses == before.misses + 1 && after.hits == before.hits);
    OK(mkc_tensor_destroy(tx));
    OK(mkc_tensor_destroy(tx_nhwc));
}

/* Layer norm over rows of `cols` values with scale 1 / shift 0 and the given
 * epsilon, computed in double. */
static double layer_norm_ref(const float *row, int cols, double epsilon, int j) {
    double mean = 0, var = 0;
    for (int i = 0; i < cols; ++i) mean += row[i];
    mean /= cols;
    for (int i = 0; i < cols; ++i) var += (row[i] - mean) * (row[i] - mean);
    var /= cols;
    return (row[j] - mean) / sqrt(var + epsilon);
}

/* One params struct of each op changed in place between repeated calls (as
 * a C caller reuses its struct): every remembered call follows the change. */
static void test_norm_arguments_remembered(void) {
    enum { ROWS = 3, COLS = 8, N = ROWS * COLS };
    float x[N], y[N], ones[COLS], zeros[COLS];
    for (int i = 0; i < N; ++i) x[i] = (float)((i * 5) % 13) - 6.f;
    for (int i = 0; i < COLS; ++i) ones[i] = 1.f, zeros[i] = 0.f;
    const int64_t dims[2] = {ROWS, COLS}, vec[1] = {COLS};
    mkc_tensor *tx = NULL, *ty = NULL, *ts = NULL, *tb = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, dims, MKC_LAYOUT_NCHW, x, &tx));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, dims, MKC_LAYOUT_NCHW, y, &ty));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, vec, MKC_LAYOUT_NCHW, ones, &ts));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, vec, MKC_LAYOUT_NCHW, zeros, &tb));
    mkc_layer_norm_params p;
    OK(mkc_layer_norm_params_init(&p));
    p.name = "ln_remembered";
    const float epsilons[] = {1e-5f, 1e-5f, 1e-5f, 2.f, 2.f, 2.f, 1e-5f, 1e-5f};
    for (int k = 0; k < 8; ++k) {
        p.epsilon = epsilons[k];
        const int affine = k >= 6; /* scale 1 and shift 0 change nothing */
        OK(mkc_layer_norm(&p, tx, affine ? ts : NULL, affine ? tb : NULL, &ty));
        double worst = 0;
        for (int r = 0; r < ROWS; ++r)
            for (int j = 0; j < COLS; ++j)
                worst = fmax(worst, fabs(y[r * COLS + j] -
                                         layer_norm_ref(x + r * COLS, COLS, p.epsilon, j)));
        CHECK(worst < 1e-5);
    }

    /* Softmax: the axis changed in place (rows, then columns). */
    for (int k = 0; k < 6; ++k) {
        const int axis = k < 3 ? 1 : 0;
        OK(mkc_softmax(axis, 0, "softmax_remembered", tx, &ty));
        double worst = 0;
        for (int r = 0; r < ROWS; ++r)
            for (int j = 0; j < COLS; ++j) {
                double sum = 0;
                for (int i = 0; i < (axis ? COLS : ROWS); ++i)
                    sum += exp(axis ? x[r * COLS + i] : x[i * COLS + j]);
                worst = fmax(worst, fabs(y[r * COLS + j] - exp(x[r * COLS + j]) / sum));
            }
        CHECK(worst < 1e-5);
    }

    /* Batch norm (channels = the columns) and LRN: epsilon and k changed in
     * place; the batch norm of a constant-statistics input is checked in
     * closed form, the LRN by its dependence on k. */
    mkc_batch_norm_params bp;
    OK(mkc_batch_norm_params_init(&bp));
    bp.name = "bn_remembered";
    float mean[COLS], var[COLS];
    for (int i = 0; i < COLS; ++i) mean[i] = 1.f, var[i] = 3.f;
    mkc_tensor *tm = NULL, *tv = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, vec, MKC_LAYOUT_NCHW, mean, &tm));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, vec, MKC_LAYOUT_NCHW, var, &tv));
    for (int k = 0; k < 8; ++k) {
        bp.epsilon = epsilons[k];
        OK(mkc_batch_norm(&bp, tx, tm, tv, NULL, NULL, NULL, NULL, &ty));
        double worst = 0;
        for (int i = 0; i < N; ++i)
            worst = fmax(worst, fabs(y[i] - (x[i] - 1.0) / sqrt(3.0 + bp.epsilon)));
        CHECK(worst < 1e-5);
    }
    enum { C = 4, HW = 3, M = C * HW * HW };
    float a[M], b[M];
    for (int i = 0; i < M; ++i) a[i] = (float)((i * 3) % 7) - 3.f;
    const int64_t d4[4] = {1, C, HW, HW};
    mkc_tensor *ta = NULL, *tb4 = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, d4, MKC_LAYOUT_NCHW, a, &ta));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, d4, MKC_LAYOUT_NCHW, b, &tb4));
    mkc_lrn_params lp;
    OK(mkc_lrn_params_init(&lp));
    lp.name = "lrn_remembered";
    lp.size = 1; /* a window of one channel: b = a / (k + alpha * a^2)^beta */
    lp.alpha = 0.5f;
    const float ks[] = {1.f, 1.f, 1.f, 4.f, 4.f, 4.f, 1.f, 1.f};
    for (int k = 0; k < 8; ++k) {
        lp.k = ks[k];
        OK(mkc_lrn(&lp, ta, &tb4));
        double worst = 0;
        for (int i = 0; i < M; ++i)
            worst = fmax(worst, fabs(b[i] - a[i] / pow(lp.k + lp.alpha * a[i] * a[i], lp.beta)));
        CHECK(worst < 1e-5);
    }
    mkc_tensor *all[] = {tx, ty, ts, tb, tm, tv, ta, tb4};
    for (int i = 0; i < 8; ++i) OK(mkc_tensor_destroy(all[i]));
}

/* dst sharing memory with an input: the second operand of an add, in a
 * blocked layout (the result used to be garbage); a wrapping reshape; a
 * concat of more inputs than oneDNN numbers in one primitive. */
static void test_probe_regressions(void) {
    enum { C = 5, HW = 9, N = C * HW };
    float a[N], b[N], out[N];
    for (int i = 0; i < N; ++i) {
        a[i] = (float)(i % 7) - 3.f;
        b[i] = (float)(i % 5) * 0.5f;
    }
    const int64_t dims[4] = {1, C, 3, 3};
    mkc_tensor *ta = NULL, *tb = NULL, *blocked = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, dims, MKC_LAYOUT_NCHW, a, &ta));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, dims, MKC_LAYOUT_NCHW, b, &tb));
    OK(mkc_tensor_to_layout(tb, "nChw8c", &blocked));
    mkc_tensor *dst = blocked;
    OK(mkc_binary(MKC_BINARY_SUB, NULL, ta, blocked, &dst)); /* blocked = a - blocked */
    CHECK(dst == blocked);
    OK(mkc_tensor_export(blocked, MKC_LAYOUT_NCHW, out, sizeof out));
    int wrong = 0;
    for (int i = 0; i < N; ++i) wrong += out[i] != a[i] - b[i];
    CHECK(wrong == 0);

    const int64_t wrapping[2] = {5, ((int64_t)1 << 62) + 9};
    mkc_tensor *r = NULL;
    CHECK(mkc_reshape(ta, 2, wrapping, &r) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(r == NULL && strstr(mkc_last_error(), "more elements") != NULL);

    enum { K = 1100 };
    static const mkc_tensor *many[K];
    for (int i = 0; i < K; ++i) many[i] = i % 2 ? ta : tb;
    mkc_tensor *cat = NULL;
    OK(mkc_concat(1, K, many, NULL, &cat));
    int64_t shape[MKC_MAX_NDIMS];
    int nd = 0;
    OK(mkc_tensor_get_shape(cat, &nd, shape));
    CHECK(nd == 4 && shape[1] == (int64_t)C * K);
    mkc_tensor *all[] = {ta, tb, blocked, cat};
    for (int i = 0; i < 4; ++i) OK(mkc_tensor_destroy(all[i]));
}

/* A call's status is INVALID_ARGUMENT and its message holds `words`. */
#define REFUSED(call, words)                                                     \
    do {                                                                         \
        CHECK((call) == MKC_STATUS_INVALID_ARGUMENT);                            \
        CHECK(strstr(mkc_last_error(), (words)) != NULL);                        \
    } while (0)

#define FIELD_END(T, field) (offsetof(T, field) + sizeof(((T *)0)->field))

/* Struct sizes (mkcache.h): the size query agrees with sizeof and every
 * _init sets struct_size; a call takes the library's own size as it is, an
 * older layout (a struct ending at the end of one of its fields) over the
 * defaults, and refuses 0, a size that ends no field and a larger size, with
 * a message naming the struct and both sizes. mkc_cache_stats is written as
 * far as it reaches; mkc_activation_call takes its exact size only. */
static void test_struct_sizes(void) {
    const struct {
        mkc_struct_id id;
        size_t size;
    } structs[] = {{MKC_STRUCT_CONV_PARAMS, sizeof(mkc_conv_params)},
                   {MKC_STRUCT_POOL_PARAMS, sizeof(mkc_pool_params)},
                   {MKC_STRUCT_LINEAR_PARAMS, sizeof(mkc_linear_params)},
                   {MKC_STRUCT_MATMUL_PARAMS, sizeof(mkc_matmul_params)},
                   {MKC_STRUCT_LAYER_NORM_PARAMS, sizeof(mkc_layer_norm_params)},
                   {MKC_STRUCT_BATCH_NORM_PARAMS, sizeof(mkc_batch_norm_params)},
                   {MKC_STRUCT_LRN_PARAMS, sizeof(mkc_lrn_params)},
                   {MKC_STRUCT_CACHE_STATS, sizeof(mkc_cache_stats)},
                   {MKC_STRUCT_ACTIVATION_CALL, sizeof(mkc_activation_call)},
                   {MKC_STRUCT_ACTIVATION_PARAMS, sizeof(mkc_activation_params)},
                   {MKC_STRUCT_SOFTMAX_PARAMS, sizeof(mkc_softmax_params)},
                   {MKC_STRUCT_BINARY_PARAMS, sizeof(mkc_binary_params)},
                   {MKC_STRUCT_CONCAT_PARAMS, sizeof(mkc_concat_params)},
                   {MKC_STRUCT_TRANSPOSE_PARAMS, sizeof(mkc_transpose_params)},
                   {MKC_STRUCT_RESHAPE_PARAMS, sizeof(mkc_reshape_params)},
                   {MKC_STRUCT_PROGRAM_OPTIONS, sizeof(mkc_program_options)},
                   {MKC_STRUCT_PROGRAM_MEMORY, sizeof(mkc_program_memory)},
                   {MKC_STRUCT_REDUCE_PARAMS, sizeof(mkc_reduce_params)},
                   {MKC_STRUCT_GATHER_PARAMS, sizeof(mkc_gather_params)},
                   {MKC_STRUCT_CAST_PARAMS, sizeof(mkc_cast_params)},
                   {MKC_STRUCT_SLICE_PARAMS, sizeof(mkc_slice_params)},
                   {MKC_STRUCT_EXPAND_PARAMS, sizeof(mkc_expand_params)},
                   {MKC_STRUCT_COMPARE_PARAMS, sizeof(mkc_compare_params)},
                   {MKC_STRUCT_PAD_PARAMS, sizeof(mkc_pad_params)},
                   {MKC_STRUCT_RESIZE_PARAMS, sizeof(mkc_resize_params)},
                   {MKC_STRUCT_LOGICAL_PARAMS, sizeof(mkc_logical_params)},
                   {MKC_STRUCT_RANGE_PARAMS, sizeof(mkc_range_params)},
                   {MKC_STRUCT_GATHER_ND_PARAMS, sizeof(mkc_gather_nd_params)},
                   {MKC_STRUCT_QUANTIZE_PARAMS, sizeof(mkc_quantize_params)},
                   {MKC_STRUCT_QUANTIZED_CONV_PARAMS, sizeof(mkc_quantized_conv_params)},
                   {MKC_STRUCT_QUANTIZED_LINEAR_PARAMS, sizeof(mkc_quantized_linear_params)},
                   {MKC_STRUCT_QUANTIZED_MATMUL_PARAMS, sizeof(mkc_quantized_matmul_params)},
                   {MKC_STRUCT_CALIBRATE_OPTIONS, sizeof(mkc_calibrate_options)}};
    size_t size = 0;
    for (size_t i = 0; i < sizeof structs / sizeof structs[0]; ++i) {
        size = 0;
        OK(mkc_get_struct_size(structs[i].id, &size));
        CHECK(size == structs[i].size);
    }
    size = 5;
    REFUSED(mkc_get_struct_size((mkc_struct_id)0, &size), "unknown struct id 0");
    REFUSED(mkc_get_struct_size((mkc_struct_id)34, &size), "unknown struct id 34");
    CHECK(size == 5);
    CHECK(mkc_get_struct_size(MKC_STRUCT_CONV_PARAMS, NULL) == MKC_STATUS_INVALID_ARGUMENT);

    mkc_conv_params cp;
    mkc_pool_params pp;
    mkc_linear_params lp;
    mkc_matmul_params mp;
    mkc_layer_norm_params np;
    mkc_batch_norm_params bp;
    mkc_lrn_params rp;
    mkc_cache_stats st;
    memset(&cp, 0xff, sizeof cp);
    memset(&pp, 0xff, sizeof pp);
    memset(&lp, 0xff, sizeof lp);
    memset(&mp, 0xff, sizeof mp);
    memset(&np, 0xff, sizeof np);
    memset(&bp, 0xff, sizeof bp);
    memset(&rp, 0xff, sizeof rp);
    memset(&st, 0xff, sizeof st);
    OK(mkc_conv_params_init(&cp));
    OK(mkc_pool_params_init(&pp));
    OK(mkc_linear_params_init(&lp));
    OK(mkc_matmul_params_init(&mp));
    OK(mkc_layer_norm_params_init(&np));
    OK(mkc_batch_norm_params_init(&bp));
    OK(mkc_lrn_params_init(&rp));
    OK(mkc_cache_stats_init(&st));
    CHECK(cp.struct_size == sizeof cp && pp.struct_size == sizeof pp);
    CHECK(lp.struct_size == sizeof lp && mp.struct_size == sizeof mp);
    CHECK(np.struct_size == sizeof np && bp.struct_size == sizeof bp);
    CHECK(rp.struct_size == sizeof rp && st.struct_size == sizeof st);
    CHECK(st.hits == 0 && st.transfers == 0);

    /* conv2d: x holds both signs, the 1x1 weights negate and add. */
    enum { C = 2, HW = 4, N = C * HW * HW, O = 3, OUT = O * HW * HW };
    float x[N], w[O * C], plain[OUT], got[OUT];
    for (int i = 0; i < N; ++i) x[i] = (float)(i - 16);
    for (int i = 0; i < O * C; ++i) w[i] = -1.f;
    const int64_t xd[4] = {1, C, HW, HW}, wd[4] = {O, C, 1, 1};
    mkc_tensor *tx = NULL, *tw = NULL, *y = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, xd, MKC_LAYOUT_NCHW, x, &tx));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, wd, MKC_LAYOUT_NCHW, w, &tw));
    OK(mkc_conv2d(&cp, tx, tw, NULL, &y));
    OK(mkc_tensor_export(y, MKC_LAYOUT_NCHW, plain, sizeof plain));
    OK(mkc_tensor_destroy(y));
    y = NULL;
    int negative = 0;
    for (int i = 0; i < OUT; ++i) negative += plain[i] < 0.f;
    CHECK(negative > 0);

    char want[256];
    const size_t conv_size = sizeof(mkc_conv_params);
    cp.struct_size = 0;
    snprintf(want, sizeof want,
             "conv2d: mkc_conv_params.struct_size is 0 (expected %zu; initialise params with "
             "mkc_conv_params_init)",
             conv_size);
    REFUSED(mkc_conv2d(&cp, tx, tw, NULL, &y), want);
    cp.struct_size = conv_size + 8;
    snprintf(want, sizeof want,
             "conv2d: mkc_conv_params.struct_size is %zu (expected %zu; a larger size is a "
             "struct of a newer mkcache.h",
             conv_size + 8, conv_size);
    REFUSED(mkc_conv2d(&cp, tx, tw, NULL, &y), want);
    cp.struct_size = FIELD_END(mkc_conv_params, stride) + 4; /* inside pad_begin */
    snprintf(want, sizeof want,
             "conv2d: mkc_conv_params.struct_size is %zu, which is not the end of a field "
             "(expected %zu, or an older layout's size",
             FIELD_END(mkc_conv_params, stride) + 4, conv_size);
    REFUSED(mkc_conv2d(&cp, tx, tw, NULL, &y), want);
    CHECK(y == NULL);
    cp.struct_size = 0;
    REFUSED(mkc_conv2d_backward(&cp, tx, tw, tx, &y, NULL, NULL),
            "conv2d_backward: mkc_conv_params.struct_size is 0");
    CHECK(y == NULL);

    /* An older layout, ending after data_format: the fused relu and the
     * name past its end are not read (the defaults hold). The struct is a
     * buffer of exactly that size, as an older caller's would be. */
    cp.struct_size = sizeof cp;
    cp.activation = MKC_ACTIVATION_RELU;
    cp.name = "struct_size_name_past_the_end";
    const size_t older_size = FIELD_END(mkc_conv_params, data_format);
    void *older = malloc(older_size);
    CHECK(older != NULL);
    if (older) {
        cp.struct_size = older_size;
        memcpy(older, &cp, older_size);
        OK(mkc_conv2d((const mkc_conv_params *)older, tx, tw, NULL, &y));
        OK(mkc_tensor_export(y, MKC_LAYOUT_NCHW, got, sizeof got));
        OK(mkc_tensor_destroy(y));
        y = NULL;
        CHECK(memcmp(got, plain, sizeof got) == 0); /* no relu */
        char keys[4096];
        OK(mkc_cache_get_keys(0, keys, sizeof keys, &size));
        CHECK(strstr(keys, "struct_size_name") == NULL);
        free(older);
    }
    cp.struct_size = sizeof cp; /* the same struct whole: relu and name read */
    OK(mkc_conv2d(&cp, tx, tw, NULL, &y));
    OK(mkc_tensor_export(y, MKC_LAYOUT_NCHW, got, sizeof got));
    OK(mkc_tensor_destroy(y));
    y = NULL;
    for (int i = 0; i < OUT; ++i) CHECK(got[i] == (plain[i] > 0.f ? plain[i] : 0.f));

    /* Every other params struct: 0 refused (naming op, struct and size), an
     * older layout ending before `name` accepted. */
    const int64_t d2[2] = {2, 4}, dw[2] = {3, 4}, db[2] = {4, 3}, dc[1] = {C};
    float x2[8], w2[12], b2[12], mean[C] = {0.f, 0.f}, var[C] = {1.f, 1.f};
    for (int i = 0; i < 8; ++i) x2[i] = (float)(i - 4);
    for (int i = 0; i < 12; ++i) w2[i] = b2[i] = 0.5f;
    mkc_tensor *tx2 = NULL, *tw2 = NULL, *tb2 = NULL, *tm = NULL, *tv = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, d2, MKC_LAYOUT_NCHW, x2, &tx2));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, dw, MKC_LAYOUT_NCHW, w2, &tw2));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, db, MKC_LAYOUT_NCHW, b2, &tb2));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, dc, MKC_LAYOUT_NCHW, mean, &tm));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, dc, MKC_LAYOUT_NCHW, var, &tv));
#define SIZES(params, T, last_field, op, call)                                       \
    do {                                                                             \
        (params).struct_size = 0;                                                    \
        snprintf(want, sizeof want, op ": " #T ".struct_size is 0 (expected %zu; ",  \
                 sizeof(T));                                                         \
        REFUSED(call, want);                                                         \
        CHECK(y == NULL);                                                            \
        (params).struct_size = FIELD_END(T, last_field);                             \
        OK(call);                                                                    \
        OK(mkc_tensor_destroy(y));                                                   \
        y = NULL;                                                                    \
    } while (0)
    SIZES(pp, mkc_pool_params, training, "pool", mkc_pool(&pp, tx, &y));
    SIZES(lp, mkc_linear_params, training, "linear", mkc_linear(&lp, tx2, tw2, NULL, &y));
    SIZES(mp, mkc_matmul_params, activation_beta, "matmul",
          mkc_matmul(&mp, tx2, tb2, NULL, &y));
    SIZES(np, mkc_layer_norm_params, training, "layer_norm",
          mkc_layer_norm(&np, tx2, NULL, NULL, &y));
    SIZES(bp, mkc_batch_norm_params, data_format, "batch_norm",
          mkc_batch_norm(&bp, tx, tm, tv, NULL, NULL, NULL, NULL, &y));
    SIZES(rp, mkc_lrn_params, training, "lrn", mkc_lrn(&rp, tx, &y));
#undef SIZES
    /* Where padding comes before `name`, its start ends no field. */
    mp.struct_size = offsetof(mkc_matmul_params, name);
    REFUSED(mkc_matmul(&mp, tx2, tb2, NULL, &y), "which is not the end of a field");
    CHECK(y == NULL);
    /* matmul's scale multiplies the result; a struct ending at `name` (the
     * layout before scale was appended) is read with scale 1. */
    {
        float unscaled[6], scaled[6];
        OK(mkc_matmul_params_init(&mp));
        CHECK(mp.scale == 1.f);
        OK(mkc_matmul(&mp, tx2, tb2, NULL, &y));
        OK(mkc_tensor_export(y, MKC_LAYOUT_NCHW, unscaled, sizeof unscaled));
        OK(mkc_tensor_destroy(y));
        y = NULL;
        mp.scale = -0.25f;
        OK(mkc_matmul(&mp, tx2, tb2, NULL, &y));
        OK(mkc_tensor_export(y, MKC_LAYOUT_NCHW, scaled, sizeof scaled));
        OK(mkc_tensor_destroy(y));
        y = NULL;
        for (int i = 0; i < 6; ++i) CHECK(scaled[i] == -0.25f * unscaled[i]);
        mp.struct_size = FIELD_END(mkc_matmul_params, name);
        OK(mkc_matmul(&mp, tx2, tb2, NULL, &y));
        OK(mkc_tensor_export(y, MKC_LAYOUT_NCHW, scaled, sizeof scaled));
        OK(mkc_tensor_destroy(y));
        y = NULL;
        CHECK(memcmp(scaled, unscaled, sizeof scaled) == 0);
        mp.struct_size = sizeof mp;
        mp.scale = NAN;
        REFUSED(mkc_matmul(&mp, tx2, tb2, NULL, &y), "matmul: scale must be finite");
        CHECK(y == NULL);
        mp.scale = 1.f;
    }

    /* Cache stats: written as far as struct_size reaches, nothing written
     * when it is refused. */
    mkc_cache_stats full, part, bad;
    OK(mkc_cache_stats_init(&full));
    OK(mkc_cache_get_stats(&full));
    CHECK(full.misses > 0 && full.entries > 0);
    memset(&part, 0xab, sizeof part);
    part.struct_size = FIELD_END(mkc_cache_stats, evicted_entries);
    OK(mkc_cache_get_stats(&part));
    CHECK(part.struct_size == FIELD_END(mkc_cache_stats, evicted_entries));
    CHECK(part.hits == full.hits && part.misses == full.misses);
    CHECK(part.insertions == full.insertions && part.evicted_entries == full.evicted_entries);
    CHECK(part.entries == 0xababababababababULL && part.transfers == 0xababababababababULL);
    const size_t bad_sizes[3] = {0, sizeof bad + 8, FIELD_END(mkc_cache_stats, hits) + 4};
    for (int i = 0; i < 3; ++i) {
        memset(&bad, 0xab, sizeof bad);
        bad.struct_size = bad_sizes[i];
        snprintf(want, sizeof want, "cache_get_session_stats: mkc_cache_stats.struct_size is %zu",
                 bad_sizes[i]);
        REFUSED(mkc_cache_get_session_stats(0, &bad), want);
        CHECK(bad.hits == 0xababababababababULL && bad.transfers == 0xababababababababULL);
    }
    CHECK(strstr(mkc_last_error(), "which is not the end of a field") != NULL);
    bad.struct_size = 0;
    snprintf(want, sizeof want,
             "cache_get_stats: mkc_cache_stats.struct_size is 0 (expected %zu; initialise "
             "stats with mkc_cache_stats_init)",
             sizeof bad);
    REFUSED(mkc_cache_get_stats(&bad), want);

    /* The binding helper: its exact size only. */
    mkc_activation_call call;
    memset(&call, 0, sizeof call);
    call.struct_size = sizeof call - 8;
    call.kind = MKC_ACTIVATION_RELU;
    call.ndims = 1;
    call.dims[0] = 8;
    snprintf(want, sizeof want,
             "activation_plain: mkc_activation_call.struct_size is %zu (expected %zu; ",
             sizeof call - 8, sizeof call);
    REFUSED(mkc_activation_plain(&call, x2, got), want);
    call.struct_size = sizeof call;
    OK(mkc_activation_plain(&call, x2, got));
    for (int i = 0; i < 8; ++i) CHECK(got[i] == (x2[i] > 0.f ? x2[i] : 0.f));

    mkc_tensor *all[] = {tx, tw, tx2, tw2, tb2, tm, tv};
    for (int i = 0; i < 7; ++i) OK(mkc_tensor_destroy(all[i]));
}

/* A program: conv (+bias) -> relu against the loop reference, with a batch bound
 * at run time, a caller's output, the plan and memory queries, and the
 * errors a C caller meets first. */
/* Enum values by name (mkcache.h): the header's enumerators by their
 * lowercase names and back, mkc_op's from the operator table; unknown
 * enums, names and values and NULL pointers refused, the out-parameter
 * left alone. */
static void test_enum_names(void) {
    const struct {
        const char *enum_name, *name;
        int32_t value;
    } known[] = {{"mkc_status", "invalid_handle", MKC_STATUS_INVALID_HANDLE},
                 {"mkc_struct_id", "program_memory", MKC_STRUCT_PROGRAM_MEMORY},
                 {"mkc_dtype", "f32", MKC_DTYPE_F32},
                 {"mkc_layout", "channels_last", MKC_LAYOUT_CHANNELS_LAST},
                 {"mkc_activation_kind", "gelu_erf", MKC_ACTIVATION_GELU_ERF},
                 {"mkc_activation_kind", "none", MKC_ACTIVATION_NONE},
                 {"mkc_binary_kind", "max", MKC_BINARY_MAX},
                 {"mkc_pool_kind", "avg_exclude_pad", MKC_POOL_AVG_EXCLUDE_PAD},
                 {"mkc_op", "conv2d", MKC_OP_CONV2D},
                 {"mkc_op", "conv2d_transpose", MKC_OP_CONV2D_TRANSPOSE},
                 {"mkc_op", "reshape", MKC_OP_RESHAPE},
                 {"mkc_op", "pad", MKC_OP_PAD},
                 {"mkc_op", "resize", MKC_OP_RESIZE},
                 {"mkc_op", "gather_nd", MKC_OP_GATHER_ND},
                 {"mkc_op", "integer_binary", MKC_OP_INTEGER_BINARY},
                 {"mkc_pad_mode", "reflect", MKC_PAD_REFLECT},
                 {"mkc_resize_mode", "linear", MKC_RESIZE_LINEAR},
                 {"mkc_resize_coordinates", "pytorch_half_pixel",
                  MKC_COORDINATES_PYTORCH_HALF_PIXEL},
                 {"mkc_resize_nearest", "round_prefer_ceil", MKC_NEAREST_ROUND_PREFER_CEIL}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; ++i) {
        int32_t value = -1;
        const char *name = NULL;
        OK(mkc_enum_value(known[i].enum_name, known[i].name, &value));
        CHECK(value == known[i].value);
        OK(mkc_enum_name(known[i].enum_name, known[i].value, &name));
        CHECK(name != NULL && strcmp(name, known[i].name) == 0);
    }
    /* An alias is found; the value's name is its first one. */
    int32_t value = -1;
    const char *name = NULL;
    OK(mkc_enum_value("mkc_layout", "nhwc", &value));
    CHECK(value == MKC_LAYOUT_NHWC);
    OK(mkc_enum_name("mkc_layout", MKC_LAYOUT_NCHW, &name));
    CHECK(name != NULL && strcmp(name, "channels_first") == 0);

    value = 77;
    name = "untouched";
    REFUSED(mkc_enum_value("mkc_nothing", "relu", &value), "unknown enum 'mkc_nothing'");
    REFUSED(mkc_enum_value("mkc_activation_kind", "gelu", &value),
            "mkc_activation_kind has no value named 'gelu'");
    REFUSED(mkc_enum_value("mkc_op", "Conv2d", &value), "mkc_op has no value named 'Conv2d'");
    REFUSED(mkc_enum_value("mkc_binary_kind", "max_enum", &value), "no value named 'max_enum'");
    REFUSED(mkc_enum_value(NULL, "relu", &value), "enum_name is NULL");
    REFUSED(mkc_enum_value("mkc_op", NULL, &value), "value_name is NULL");
    REFUSED(mkc_enum_value("mkc_op", "conv2d", NULL), "value (out-parameter) is NULL");
    CHECK(value == 77);
    REFUSED(mkc_enum_name("mkc_pool_kind", 0, &name), "mkc_pool_kind has no value 0");
    REFUSED(mkc_enum_name("mkc_op", MKC_OP_MAX_ENUM, &name), "mkc_op has no value 2147483647");
    REFUSED(mkc_enum_name("mkc_dtype", -1, &name), "mkc_dtype has no value -1");
    REFUSED(mkc_enum_name(NULL, 1, &name), "enum_name is NULL");
    REFUSED(mkc_enum_name("mkc_op", 1, NULL), "name (out-parameter) is NULL");
    CHECK(strcmp(name, "untouched") == 0);
}

static void test_program(void) {
    enum { N = 2, C = 3, H = 6, W = 5, O = 7, K = 3, PAD = 1 };
    float x[N * C * H * W], w[O * C * K * K], b[O], ref[N * O * H * W], out[N * O * H * W];
    for (int i = 0; i < N * C * H * W; ++i) x[i] = (float)((i * 29 % 19) - 9) / 5.0f;
    for (int i = 0; i < O * C * K * K; ++i) w[i] = (float)((i * 13 % 11) - 5) / 7.0f;
    for (int i = 0; i < O; ++i) b[i] = (float)i / 8.0f - 0.4f;
    conv_ref(x, w, b, ref, N, C, H, W, O, K, PAD);
    for (int i = 0; i < N * O * H * W; ++i) ref[i] = ref[i] > 0 ? ref[i] : 0.f;

    const int64_t xd[4] = {-1, C, H, W}, wd[4] = {O, C, K, K}, bd[1] = {O};
    mkc_tensor *tw = NULL, *tb = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, wd, MKC_LAYOUT_NCHW, w, &tw));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, bd, MKC_LAYOUT_NCHW, b, &tb));

    mkc_graph *g = NULL;
    OK(mkc_graph_create(&g));
    int vx = -1, vw = -1, vb = -1, vy = -1, vr = -1;
    OK(mkc_graph_input(g, "x", MKC_DTYPE_F32, 4, xd, MKC_LAYOUT_NCHW, &vx));
    OK(mkc_graph_constant(g, tw, "w", &vw));
    OK(mkc_graph_constant(g, tb, "b", &vb));
    OK(mkc_tensor_destroy(tw)); /* the graph holds a copy */
    OK(mkc_tensor_destroy(tb));
    mkc_conv_params cp;
    OK(mkc_conv_params_init(&cp));
    cp.pad_begin[0] = cp.pad_begin[1] = cp.pad_end[0] = cp.pad_end[1] = PAD;
    cp.name = "c_program_conv";
    const int conv_in[3] = {vx, vw, vb};
    OK(mkc_graph_node(g, MKC_OP_CONV2D, &cp, 3, conv_in, &vy));
    mkc_activation_params ap;
    OK(mkc_activation_params_init(&ap)); /* relu */
    OK(mkc_graph_node(g, MKC_OP_ACTIVATION, &ap, 1, &vy, &vr));
    OK(mkc_graph_output(g, vr, "y"));

    /* Bad nodes: unknown operator, a value that does not exist. */
    int none = -1;
    CHECK(mkc_graph_node(g, (mkc_op)77, &ap, 1, &vy, &none) == MKC_STATUS_INVALID_ARGUMENT);
    const int dangling = 99;
    CHECK(mkc_graph_node(g, MKC_OP_ACTIVATION, &ap, 1, &dangling, &none) ==
          MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "not a value of this graph") != NULL);

    /* Implementations: an unknown one refused at compile; every node forced
     * to reference, or chosen by timing them on the first run; either gives
     * the reference values. */
    const int64_t run_dims[4] = {N, C, H, W};
    const void *run_in[1] = {x};
    void *run_out[1] = {out};
    mkc_program_options po;
    OK(mkc_program_options_init(&po));
    CHECK(po.impl == NULL && po.measure == 0 && po.choices == NULL && po.dump == NULL);
    mkc_program *other = NULL;
    {
        /* The IR after every pass, appended to a file; one that cannot be
         * opened refused at compile. */
        char dump_path[] = "/tmp/mkcache_dump_XXXXXX";
        const int fd = mkstemp(dump_path);
        CHECK(fd >= 0);
        close(fd);
        po.dump = dump_path;
        OK(mkc_program_compile(g, &po, &other));
        OK(mkc_program_run_plain(other, run_dims, run_in, run_out)); /* plans the dims */
        OK(mkc_program_destroy(other));
        other = NULL;
        FILE *f = fopen(dump_path, "r");
        CHECK(f != NULL);
        char dumped[1 << 16];
        const size_t got = fread(dumped, 1, sizeof dumped - 1, f);
        dumped[got] = 0;
        fclose(f);
        remove(dump_path);
        CHECK(strstr(dumped, "=== program ") == dumped && strstr(dumped, "after fuse ===") &&
              strstr(dumped, "after plan_memory ===") != NULL);
        po.dump = "/nonexistent-dir/ir.txt";
        CHECK(mkc_program_compile(g, &po, &other) == MKC_STATUS_INVALID_ARGUMENT);
        CHECK(strstr(mkc_last_error(), "dump: cannot open") != NULL && other == NULL);
        po.dump = NULL;
    }
    /* precision: "int8" needs a calibration of this graph. */
    CHECK(po.precision == NULL && po.calibration == NULL);
    po.precision = "int4";
    CHECK(mkc_program_compile(g, &po, &other) == MKC_STATUS_INVALID_ARGUMENT && other == NULL);
    CHECK(strstr(mkc_last_error(), "precision must be") != NULL);
    po.precision = "f32,conv2d=f64"; /* per operator: f32 or bf16 */
    CHECK(mkc_program_compile(g, &po, &other) == MKC_STATUS_INVALID_ARGUMENT && other == NULL);
    CHECK(strstr(mkc_last_error(), "unknown precision 'f64' in 'conv2d=f64'") != NULL);
    po.precision = "f32,conv2d=f32"; /* as the program: nothing changes */
    OK(mkc_program_compile(g, &po, &other));
    OK(mkc_program_destroy(other));
    other = NULL;
    po.precision = "int8";
    CHECK(mkc_program_compile(g, &po, &other) == MKC_STATUS_INVALID_ARGUMENT && other == NULL);
    CHECK(strstr(mkc_last_error(), "calibration is empty") != NULL);
    po.calibration = "node7|conv2d|x|0\t0\t1\t1\n";
    CHECK(mkc_program_compile(g, &po, &other) == MKC_STATUS_INVALID_ARGUMENT && other == NULL);
    CHECK(strstr(mkc_last_error(), "names no node of this graph") != NULL);
    po.precision = po.calibration = NULL;
    /* precision "bf16" on the reference kernels (every CPU: without
     * oneDNN's bfloat16 kernels it needs them asked for): bfloat16's
     * rounding of the inputs, weights and result, the output float32. */
    po.precision = "bf16";
    po.impl = "conv2d=reference,activation=reference";
    OK(mkc_program_compile(g, &po, &other));
    OK(mkc_program_run_plain(other, run_dims, run_in, run_out));
    {
        double peak = 0;
        for (int i = 0; i < N * O * H * W; ++i) peak = fmax(peak, fabs(ref[i]));
        for (int i = 0; i < N * O * H * W; ++i)
            CHECK(fabs(out[i] - ref[i]) <= 0x1p-6 * fabs(ref[i]) + 0x1p-7 * peak);
    }
    OK(mkc_program_destroy(other));
    other = NULL;
    po.precision = NULL;
    po.impl = "conv2d=fast";
    CHECK(mkc_program_compile(g, &po, &other) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "unknown implementation 'fast'") != NULL && other == NULL);
    po.impl = "conv2d=reference,activation=reference";
    OK(mkc_program_compile(g, &po, &other));
    OK(mkc_program_run_plain(other, run_dims, run_in, run_out));
    for (int i = 0; i < N * O * H * W; ++i) CHECK(fabs(out[i] - ref[i]) <= 1e-5 * (1 + fabs(ref[i])));
    char steps_text[4096];
    size_t steps_needed = 0;
    OK(mkc_program_steps(other, steps_text, sizeof steps_text, &steps_needed));
    CHECK(strstr(steps_text, "\treference\toverride (option)\t") != NULL);
    OK(mkc_program_destroy(other));
    po.impl = NULL;
    po.measure = 1;
    OK(mkc_program_compile(g, &po, &other));
    OK(mkc_program_run_plain(other, run_dims, run_in, run_out));
    for (int i = 0; i < N * O * H * W; ++i) CHECK(fabs(out[i] - ref[i]) <= 1e-5 * (1 + fabs(ref[i])));
    OK(mkc_program_choices(other, steps_text, sizeof steps_text, &steps_needed));
    CHECK(strstr(steps_text, "\tonednn=") != NULL || strstr(steps_text, ",onednn=") != NULL);
    OK(mkc_program_destroy(other));

    mkc_program *prog = NULL;
    OK(mkc_program_compile(g, NULL, &prog));
    OK(mkc_graph_destroy(g)); /* the program keeps what it needs */

    const int64_t xdims[4] = {N, C, H, W}, ydims[4] = {N, O, H, W};
    mkc_tensor *tx = NULL, *ty = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, xdims, MKC_LAYOUT_NCHW, x, &tx));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 4, ydims, MKC_LAYOUT_NCHW, out, &ty));
    const mkc_tensor *ins[1] = {tx};
    mkc_tensor *outs[1] = {ty};
    OK(mkc_program_run(prog, 1, ins, 1, outs));
    CHECK(outs[0] == ty);
    double max_err = 0;
    for (int i = 0; i < N * O * H * W; ++i) {
        double e = fabs(out[i] - ref[i]) / (1.0 + fabs(ref[i]));
        if (e > max_err) max_err = e;
    }
    CHECK(max_err < 1e-5);

    mkc_program_memory m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    OK(mkc_program_memory_info(prog, &m));
    CHECK(m.steps >= 2 && m.plans == 1 && m.arena_bytes >= m.lower_bound_bytes);
    /* One plan: the converted constants it holds are all the program holds. */
    CHECK(m.held_constant_bytes == m.constant_bytes);
    /* A struct of the header before held_constant_bytes: the rest untouched. */
    mkc_program_memory older;
    memset(&older, 0xab, sizeof older);
    older.struct_size = offsetof(mkc_program_memory, held_constant_bytes);
    OK(mkc_program_memory_info(prog, &older));
    CHECK(older.steps == m.steps && older.held_constant_bytes == (size_t)0xabababababababab);
    size_t needed = 0;
    char text[4096];
    OK(mkc_program_plan(prog, text, sizeof text, &needed));
    CHECK(strstr(text, "c_program_conv") != NULL && needed == strlen(text) + 1);
    /* The steps for a program to read: a line per step and view, 8 fields. */
    OK(mkc_program_steps(prog, text, sizeof text, &needed));
    CHECK(strncmp(text, "0\t0\tnode\tonednn", 15) == 0 && needed == strlen(text) + 1);
    int step_lines = 0, tabs = 0;
    for (const char *c = text; *c; ++c) {
        step_lines += *c == '\n';
        tabs += *c == '\t';
    }
    CHECK(step_lines == m.steps + m.views && tabs == 7 * step_lines);
    CHECK(mkc_program_steps(NULL, text, sizeof text, &needed) == MKC_STATUS_INVALID_HANDLE);
    uint64_t executor = 0;
    OK(mkc_program_executor(prog, &executor));
    CHECK(executor >> 63 == 1);
    /* Nothing measured: no choices; a NULL program refused. */
    OK(mkc_program_choices(prog, text, sizeof text, &needed));
    CHECK(text[0] == '\0' && needed == 1);
    CHECK(mkc_program_choices(NULL, text, sizeof text, &needed) == MKC_STATUS_INVALID_HANDLE);

    /* A profiled run: a line per step, each with its implementation. */
    CHECK(mkc_program_profile_text(prog, text, sizeof text, &needed) ==
          MKC_STATUS_INVALID_ARGUMENT); /* none yet */
    OK(mkc_program_profile(prog, 1, ins, 1, outs));
    OK(mkc_program_profile_text(prog, text, sizeof text, &needed));
    CHECK(strstr(text, "0\tnode 0 (conv2d 'c_program_conv')\tonednn") == text);
    /* The conv's arithmetic ends its line: N*O*H*W outputs of C*K*K multiply-adds. */
    char flops_text[64];
    snprintf(flops_text, sizeof flops_text, "\t%lld\tf32\n",
             (long long)2 * N * O * H * W * C * K * K);
    CHECK(strstr(text, flops_text) != NULL);
    double peak = 0, peak8 = 0, same = 0;
    OK(mkc_get_peak_flops(&peak));
    CHECK(peak > 1e8);
    CHECK(mkc_get_peak_flops(NULL) == MKC_STATUS_INVALID_ARGUMENT);
    /* 8-bit dot products do at least as many operations as float32 FMAs. */
    OK(mkc_get_peak_ops(MKC_DTYPE_F32, &same));
    CHECK(same == peak);
    OK(mkc_get_peak_ops(MKC_DTYPE_S8, &peak8));
    CHECK(peak8 >= 0.9 * peak);
    CHECK(mkc_get_peak_ops(MKC_DTYPE_S64, &peak8) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "dtype must be F32, BF16, S8 or U8") != NULL);
    int lines = 0;
    for (const char *c = text; *c; ++c) lines += *c == '\n';
    CHECK(lines == m.steps);
    /* Calibration: the range of the conv's src over one run. */
    OK(mkc_program_calibration(prog, text, sizeof text, &needed));
    CHECK(needed == 1 && text[0] == '\0'); /* none yet */
    OK(mkc_program_calibrate(prog, 1, ins));
    OK(mkc_program_calibration(prog, text, sizeof text, &needed));
    CHECK(strstr(text, "# calibration method: percentile 99.999\nnode0|conv2d|c_program_conv|0\t") == text);
    CHECK(strstr(text, "\t1\n") != NULL); /* one run */
    CHECK(mkc_program_calibrate(prog, 0, ins) == MKC_STATUS_INVALID_ARGUMENT);

    /* The binding path: the output's shape, then plain buffers. */
    int ond = 0;
    int64_t od[MKC_MAX_NDIMS];
    OK(mkc_program_output_shape(prog, xdims, 0, &ond, od));
    CHECK(ond == 4 && od[0] == N && od[1] == O && od[2] == H && od[3] == W);
    float plain_out[N * O * H * W];
    const void *plain_in[1] = {x};
    void *plain_outs[1] = {plain_out};
    OK(mkc_program_run_plain(prog, xdims, plain_in, plain_outs));
    CHECK(memcmp(plain_out, out, sizeof out) == 0);
    memset(plain_out, 0, sizeof plain_out);
    const void *in_ref = x;
    void *out_ref = plain_out;
    const void *const *in_refs[1] = {&in_ref};
    void *const *out_refs[1] = {&out_ref};
    OK(mkc_program_run_plain_ref(prog, xdims, in_refs, out_refs));
    CHECK(memcmp(plain_out, out, sizeof out) == 0);
    const int64_t bad_dims[4] = {N, C + 1, H, W};
    CHECK(mkc_program_run_plain(prog, bad_dims, plain_in, plain_outs) ==
          MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "input 'x' dim 1 must be 3") != NULL);
    CHECK(mkc_program_output_shape(prog, xdims, 1, &ond, od) == MKC_STATUS_INVALID_ARGUMENT);

    /* A new output tensor; wrong counts; a wrong output shape. */
    mkc_tensor *fresh[1] = {NULL};
    OK(mkc_program_run(prog, 1, ins, 1, fresh));
    CHECK(fresh[0] != NULL);
    OK(mkc_tensor_destroy(fresh[0]));
    CHECK(mkc_program_run(prog, 0, ins, 1, outs) == MKC_STATUS_INVALID_ARGUMENT);
    mkc_tensor *wrong[1] = {tx};
    CHECK(mkc_program_run(prog, 1, ins, 1, wrong) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "is also input 'x'") != NULL);

    OK(mkc_program_destroy(prog));
    CHECK(mkc_program_destroy(prog) == MKC_STATUS_INVALID_HANDLE);
    OK(mkc_program_destroy(NULL));
    OK(mkc_tensor_destroy(ty));
    OK(mkc_tensor_destroy(tx));
}

/* The kernel variants by override: a linear layer on oneDNN's matmul
 * (weights converted once to the matmul's arrangement) against a double
 * reference, and the same in row parts (128 rows, then 5) where a plan
 * comes past the program's exact_plans; a variant asked for a node it
 * cannot run refused. */
static void test_kernel_variants(void) {
    enum { R = 133, I = 37, O = 29 };
    float x[R * I], w[O * I], b[O], out[R * O];
    double ref[R * O];
    for (int i = 0; i < R * I; ++i) x[i] = (float)((i * 29 % 19) - 9) / 5.0f;
    for (int i = 0; i < O * I; ++i) w[i] = (float)((i * 13 % 11) - 5) / 7.0f;
    for (int i = 0; i < O; ++i) b[i] = (float)i / 8.0f - 0.4f;
    for (int r = 0; r < R; ++r)
        for (int o = 0; o < O; ++o) {
            double acc = b[o];
            for (int i = 0; i < I; ++i) acc += (double)x[r * I + i] * w[o * I + i];
            ref[r * O + o] = acc;
        }
    const int64_t xd[2] = {-1, I}, wd[2] = {O, I}, bd[1] = {O}, run_dims[2] = {R, I};
    mkc_tensor *tw = NULL, *tb = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, wd, MKC_LAYOUT_NCHW, w, &tw));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, bd, MKC_LAYOUT_NCHW, b, &tb));
    mkc_graph *g = NULL;
    OK(mkc_graph_create(&g));
    int vx = -1, vw = -1, vb = -1, vy = -1;
    OK(mkc_graph_input(g, "x", MKC_DTYPE_F32, 2, xd, MKC_LAYOUT_NCHW, &vx));
    OK(mkc_graph_constant(g, tw, "w", &vw));
    OK(mkc_graph_constant(g, tb, "b", &vb));
    mkc_linear_params lp;
    OK(mkc_linear_params_init(&lp));
    const int in[3] = {vx, vw, vb};
    OK(mkc_graph_node(g, MKC_OP_LINEAR, &lp, 3, in, &vy));
    OK(mkc_graph_output(g, vy, "y"));
    mkc_program_options po;
    OK(mkc_program_options_init(&po));
    CHECK(po.exact_plans == 8);
    po.impl = "linear=onednn_matmul";
    mkc_program *p = NULL;
    OK(mkc_program_compile(g, &po, &p));
    const void *run_in[1] = {x};
    void *run_out[1] = {out};
    for (int round = 0; round < 2; ++round) { /* the converted weights read again */
        memset(out, 0, sizeof out);
        OK(mkc_program_run_plain(p, run_dims, run_in, run_out));
        for (int i = 0; i < R * O; ++i) CHECK(fabs(out[i] - ref[i]) <= 1e-5 * (1 + fabs(ref[i])));
    }
    char steps[2048];
    size_t needed = 0;
    OK(mkc_program_steps(p, steps, sizeof steps, &needed));
    CHECK(strstr(steps, "\tonednn_matmul:") != NULL);
    /* Row parts where the matmul's kernels are made per row count (brgemm,
     * AVX-512); its gemm kernels serve any rows as one part. */
    const int brgemm = strstr(steps, "\tonednn_matmul:brg") != NULL;
    CHECK(strstr(steps, "\toverride (option)\t") != NULL);
    OK(mkc_program_destroy(p));
    p = NULL;
    /* Every plan past none exact: the linear in row parts, by priority. */
    po.impl = NULL;
    po.exact_plans = 0;
    OK(mkc_program_compile(g, &po, &p));
    memset(out, 0, sizeof out);
    OK(mkc_program_run_plain(p, run_dims, run_in, run_out));
    for (int i = 0; i < R * O; ++i) CHECK(fabs(out[i] - ref[i]) <= 1e-5 * (1 + fabs(ref[i])));
    OK(mkc_program_steps(p, steps, sizeof steps, &needed));
    CHECK(strstr(steps, "\tonednn_matmul_shared:") != NULL);
    CHECK((strstr(steps, " rows 128+5\t") != NULL) == brgemm);
    CHECK(strstr(steps, "\tpriority, past the program's exact plans\t") != NULL);
    OK(mkc_program_destroy(p));
    p = NULL;
    po.exact_plans = -1; /* none shares */
    OK(mkc_program_compile(g, &po, &p));
    OK(mkc_program_run_plain(p, run_dims, run_in, run_out));
    OK(mkc_program_steps(p, steps, sizeof steps, &needed));
    CHECK(strstr(steps, "\tonednn_matmul:") != NULL && strstr(steps, "shared") == NULL);
    OK(mkc_program_destroy(p));
    p = NULL;
    po.exact_plans = 8;
    po.impl = "linear=onednn_conv1x1"; /* the layer as a 1x1 convolution */
    OK(mkc_program_compile(g, &po, &p));
    memset(out, 0, sizeof out);
    OK(mkc_program_run_plain(p, run_dims, run_in, run_out));
    for (int i = 0; i < R * O; ++i) CHECK(fabs(out[i] - ref[i]) <= 1e-5 * (1 + fabs(ref[i])));
    OK(mkc_program_steps(p, steps, sizeof steps, &needed));
    CHECK(strstr(steps, "\tonednn_conv1x1:") != NULL);
    OK(mkc_program_destroy(p));
    p = NULL;
    po.impl = "linear=onednn_contiguous"; /* refused when its plan is made */
    OK(mkc_program_compile(g, &po, &p));
    CHECK(mkc_program_run_plain(p, run_dims, run_in, run_out) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "linear reads no strided views") != NULL);
    OK(mkc_program_destroy(p));
    OK(mkc_graph_destroy(g));
    OK(mkc_tensor_destroy(tw));
    OK(mkc_tensor_destroy(tb));
}

int main(void) {
    test_version();
    test_core_api();
    test_op_run();
    test_typed_values();
    test_low_precision_dtypes();
    test_conv_and_relu();
    test_activation_plain();
    test_handles_and_buffers_across_calls();
    test_conv_arguments_remembered();
    test_activation_arguments_remembered();
    test_norm_arguments_remembered();
    test_cache();
    test_probe_regressions();
    test_struct_sizes();
    test_enum_names();
    test_program();
    test_kernel_variants();
    return finish("test_c_api");
}
