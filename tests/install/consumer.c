/*
 * consumer.c -- what a C user of an installed libmkcache writes: the public
 * header, two tensors, relu and add, every value checked. Built by
 * tests/install/run.sh against an installed (and then moved) prefix, once
 * with pkg-config and once with CMake's find_package(mkcache).
 * Prints OK and returns 0, or says what failed and returns 1.
 */
#include <mkcache/mkcache.h>

#include <stdio.h>

#define N 8

static int failed(const char *what, mkc_status status)
{
    fprintf(stderr, "consumer: %s failed: %s: %s\n", what,
            mkc_status_string(status), mkc_last_error());
    return 1;
}

int main(void)
{
    int major = -1, minor = -1, patch = -1;
    const int64_t dims[2] = {2, N / 2};
    float a_data[N], b_data[N], relu_out[N], sum_out[N];
    mkc_tensor *a = NULL, *b = NULL, *relu = NULL, *sum = NULL;
    mkc_status st;
    int bad = 0, i;

    st = mkc_get_version(&major, &minor, &patch);
    if (st != MKC_STATUS_OK) return failed("mkc_get_version", st);
    if (major != MKC_VERSION_MAJOR || minor != MKC_VERSION_MINOR) {
        fprintf(stderr, "consumer: header %s but library %d.%d.%d\n",
                MKC_VERSION_STRING, major, minor, patch);
        return 1;
    }

    for (i = 0; i < N; ++i) {
        a_data[i] = (float)i - 3.5f;   /* -3.5 .. 3.5: both signs */
        b_data[i] = 0.25f * (float)i;
    }

    st = mkc_tensor_wrap(MKC_DTYPE_F32, 2, dims, MKC_LAYOUT_CHANNELS_FIRST, a_data, &a);
    if (st != MKC_STATUS_OK) return failed("mkc_tensor_wrap(a)", st);
    st = mkc_tensor_wrap(MKC_DTYPE_F32, 2, dims, MKC_LAYOUT_CHANNELS_FIRST, b_data, &b);
    if (st != MKC_STATUS_OK) { mkc_tensor_destroy(a); return failed("mkc_tensor_wrap(b)", st); }

    st = mkc_activation(MKC_ACTIVATION_RELU, 0.f, 0.f, "consumer_relu", a, &relu);
    if (st != MKC_STATUS_OK) { bad = failed("mkc_activation(relu)", st); goto out; }
    st = mkc_binary(MKC_BINARY_ADD, "consumer_add", relu, b, &sum);
    if (st != MKC_STATUS_OK) { bad = failed("mkc_binary(add)", st); goto out; }

    st = mkc_tensor_export(relu, MKC_LAYOUT_CHANNELS_FIRST, relu_out, sizeof relu_out);
    if (st != MKC_STATUS_OK) { bad = failed("mkc_tensor_export(relu)", st); goto out; }
    st = mkc_tensor_export(sum, MKC_LAYOUT_CHANNELS_FIRST, sum_out, sizeof sum_out);
    if (st != MKC_STATUS_OK) { bad = failed("mkc_tensor_export(sum)", st); goto out; }

    for (i = 0; i < N; ++i) {
        /* Exact in float: relu copies or zeroes, and the sums are of
         * multiples of 0.25 far below 2^24. */
        float want_relu = a_data[i] > 0.f ? a_data[i] : 0.f;
        float want_sum = want_relu + b_data[i];
        if (relu_out[i] != want_relu || sum_out[i] != want_sum) {
            fprintf(stderr, "consumer: element %d: relu %g (want %g), add %g (want %g)\n",
                    i, (double)relu_out[i], (double)want_relu,
                    (double)sum_out[i], (double)want_sum);
            bad = 1;
        }
    }

out:
    mkc_tensor_destroy(sum);
    mkc_tensor_destroy(relu);
    mkc_tensor_destroy(b);
    mkc_tensor_destroy(a);
    if (bad) return 1;
    printf("OK: libmkcache %d.%d.%d, relu and add on %d values\n", major, minor, patch, N);
    return 0;
}
