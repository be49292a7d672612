/* The direct reference the C thread tests check their convolutions by:
 * relu(conv, 3x3-style kernel, stride 1, padding (k-1)/2) computed in double,
 * compared with benchdnn's bound (a few reduction-length epsilons of the
 * magnitude of the terms). */
#ifndef MKCACHE_TESTS_CONV_REFERENCE_H
#define MKCACHE_TESTS_CONV_REFERENCE_H

#include <math.h>

/* 1 if y (n, o, h, w) is relu(conv(x (n, c, h, w), weights (o, c, k, k))). */
static int conv_relu_matches(const float *x, const float *weights, const float *y, int n,
                             int c, int o, int k, int h, int w) {
    const int pad = (k - 1) / 2;
    for (int in = 0; in < n; ++in)
        for (int oc = 0; oc < o; ++oc)
            for (int i = 0; i < h; ++i)
                for (int j = 0; j < w; ++j) {
                    double acc = 0, mag = 0;
                    for (int ic = 0; ic < c; ++ic)
                        for (int ki = 0; ki < k; ++ki)
                            for (int kj = 0; kj < k; ++kj) {
                                int yy = i + ki - pad, xx = j + kj - pad;
                                if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
                                double p = (double)x[((in * c + ic) * h + yy) * w + xx] *
                                           weights[((oc * c + ic) * k + ki) * k + kj];
                                acc += p;
                                mag += fabs(p);
                            }
                    double want = acc > 0 ? acc : 0;
                    double got = y[((in * o + oc) * h + i) * w + j];
                    if (fabs(got - want) > 4.0 * (c * k * k + 1) * 1.2e-7 * mag + 1e-30) return 0;
                }
    return 1;
}

#endif
