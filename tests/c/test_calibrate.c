/* Calibration methods through the C ABI: mkc_calibrate_options, each
 * method's range of a linear layer's src, errors on bad options and on a
 * method changed between calls (the text kept as it was), an older
 * struct_size, and an int8 program compiled from the text. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mkcache/mkcache.h"

enum { N = 64, C = 8, O = 4 };

static float x[N * C];

/* A program of y = linear(x): its src is x itself, so the recorded range
 * is the range of x's values. */
static mkc_program *linear_program(const mkc_program_options *options) {
    float w[O * C], b[O];
    for (int i = 0; i < O * C; ++i) w[i] = (float)((i * 7 % 13) - 6) / 9.0f;
    for (int i = 0; i < O; ++i) b[i] = (float)i / 4.0f;
    const int64_t xd[2] = {N, C}, wd[2] = {O, C}, bd[1] = {O};
    mkc_tensor *tw = NULL, *tb = NULL;
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, wd, MKC_LAYOUT_NCHW, w, &tw));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 1, bd, MKC_LAYOUT_NCHW, b, &tb));
    mkc_graph *g = NULL;
    OK(mkc_graph_create(&g));
    int vx = -1, vw = -1, vb = -1, vy = -1;
    OK(mkc_graph_input(g, "x", MKC_DTYPE_F32, 2, xd, MKC_LAYOUT_NCHW, &vx));
    OK(mkc_graph_constant(g, tw, "w", &vw));
    OK(mkc_graph_constant(g, tb, "b", &vb));
    OK(mkc_tensor_destroy(tw));
    OK(mkc_tensor_destroy(tb));
    mkc_linear_params lp;
    OK(mkc_linear_params_init(&lp));
    lp.name = "lin";
    const int in[3] = {vx, vw, vb};
    OK(mkc_graph_node(g, MKC_OP_LINEAR, &lp, 3, in, &vy));
    OK(mkc_graph_output(g, vy, "y"));
    mkc_program *p = NULL;
    OK(mkc_program_compile(g, options, &p));
    OK(mkc_graph_destroy(g));
    return p;
}

/* The min and max of the calibration text's one value line. */
static int read_range(const char *text, double *lo, double *hi) {
    const char *line = strstr(text, "node0|linear|lin|0\t");
    if (!line) return 0;
    return sscanf(line, "node0|linear|lin|0\t%lf\t%lf\t", lo, hi) == 2;
}

static void calibrate_text(const char *method, double percentile, char *text, size_t size) {
    mkc_program *p = linear_program(NULL);
    mkc_tensor *tx = NULL;
    const int64_t xd[2] = {N, C};
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, xd, MKC_LAYOUT_NCHW, x, &tx));
    const mkc_tensor *ins[1] = {tx};
    mkc_calibrate_options o;
    OK(mkc_calibrate_options_init(&o));
    o.method = method;
    o.percentile = percentile;
    OK(mkc_program_calibrate_with(p, 1, ins, &o));
    size_t needed = 0;
    OK(mkc_program_calibration(p, text, size, &needed));
    OK(mkc_tensor_destroy(tx));
    OK(mkc_program_destroy(p));
}

int main(void) {
    /* Values in [-3, 3], one outlier of 1000. */
    for (int i = 0; i < N * C; ++i) x[i] = (float)((i * 37 % 61) - 30) / 10.0f;
    x[5] = 1000.0f;

    mkc_calibrate_options o;
    memset(&o, 0xff, sizeof o);
    OK(mkc_calibrate_options_init(&o));
    CHECK(o.struct_size == sizeof o && o.method == NULL && o.percentile == 0);
    CHECK(mkc_calibrate_options_init(NULL) == MKC_STATUS_INVALID_ARGUMENT);
    size_t size = 0;
    OK(mkc_get_struct_size(MKC_STRUCT_CALIBRATE_OPTIONS, &size));
    CHECK(size == sizeof(mkc_calibrate_options));

    char text[1024];
    double lo = 0, hi = 0;
    /* minmax: the extremes. */
    calibrate_text("minmax", 0, text, sizeof text);
    CHECK(strncmp(text, "# calibration method: minmax\n", 29) == 0);
    CHECK(read_range(text, &lo, &hi) && lo == -3.0 && hi == 1000.0);
    /* percentile 99: 0.5% of the 512 values cut at each end, the outlier
     * among them. */
    calibrate_text("percentile", 99, text, sizeof text);
    CHECK(strncmp(text, "# calibration method: percentile 99\n", 36) == 0);
    CHECK(read_range(text, &lo, &hi) && lo >= -3.0 && lo < -2.8 && hi > 2.8 && hi < 4.0);
    /* percentile 0 is its default, 99.999: the outlier kept. */
    calibrate_text("percentile", 0, text, sizeof text);
    CHECK(strncmp(text, "# calibration method: percentile 99.999\n", 40) == 0);
    /* mse: a range within the extremes. */
    calibrate_text("mse", 0, text, sizeof text);
    CHECK(strncmp(text, "# calibration method: mse\n", 26) == 0);
    CHECK(read_range(text, &lo, &hi) && lo >= -3.0 && lo <= 0 && hi > 0 && hi <= 1000.0);
    /* kl: a symmetric threshold within the extremes. */
    calibrate_text("kl", 0, text, sizeof text);
    CHECK(strncmp(text, "# calibration method: kl\n", 25) == 0);
    CHECK(read_range(text, &lo, &hi) && lo >= -3.0 && lo < 0 && hi > 0 && hi <= 1000.0);

    mkc_program *p = linear_program(NULL);
    mkc_tensor *tx = NULL;
    const int64_t xd[2] = {N, C};
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, xd, MKC_LAYOUT_NCHW, x, &tx));
    const mkc_tensor *ins[1] = {tx};
    /* Bad options: nothing recorded. */
    OK(mkc_calibrate_options_init(&o));
    o.method = "entropy";
    CHECK(mkc_program_calibrate_with(p, 1, ins, &o) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "unknown method 'entropy'") != NULL);
    o.method = "percentile";
    const double bad[3] = {101, -1, NAN};
    for (int i = 0; i < 3; ++i) {
        o.percentile = bad[i];
        CHECK(mkc_program_calibrate_with(p, 1, ins, &o) == MKC_STATUS_INVALID_ARGUMENT);
        CHECK(strstr(mkc_last_error(), "is not in (0, 100]") != NULL);
    }
    o.method = "minmax";
    o.percentile = 99;
    CHECK(mkc_program_calibrate_with(p, 1, ins, &o) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "is for method 'percentile'") != NULL);
    o.struct_size = 3;
    CHECK(mkc_program_calibrate_with(p, 1, ins, &o) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "mkc_calibrate_options.struct_size") != NULL);
    size_t needed = 0;
    OK(mkc_program_calibration(p, text, sizeof text, &needed));
    CHECK(needed == 1 && text[0] == '\0');

    /* An older caller's struct, ending at method: percentile's default. */
    OK(mkc_calibrate_options_init(&o));
    o.method = "percentile";
    o.percentile = 50; /* past the size given: not read */
    o.struct_size = sizeof(size_t) + sizeof(const char *);
    OK(mkc_program_calibrate_with(p, 1, ins, &o));
    OK(mkc_program_calibration(p, text, sizeof text, &needed));
    CHECK(strncmp(text, "# calibration method: percentile 99.999\n", 40) == 0);
    /* Another method (or percentile) on the same program: refused, the text
     * as it was. */
    char before[1024];
    strcpy(before, text);
    OK(mkc_calibrate_options_init(&o));
    o.method = "mse";
    CHECK(mkc_program_calibrate_with(p, 1, ins, &o) == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(mkc_last_error(), "calibrated with 'percentile 99.999'") != NULL);
    o.method = "percentile";
    o.percentile = 99.9;
    CHECK(mkc_program_calibrate_with(p, 1, ins, &o) == MKC_STATUS_INVALID_ARGUMENT);
    OK(mkc_program_calibration(p, text, sizeof text, &needed));
    CHECK(strcmp(text, before) == 0);
    /* The same method again (the default's): a second run merged. */
    OK(mkc_program_calibrate(p, 1, ins));
    OK(mkc_program_calibration(p, text, sizeof text, &needed));
    CHECK(strstr(text, "\t2\n") != NULL);

    /* Percentile 99's text, the outlier cut, compiles an int8 program whose
     * result on data without the outlier is near float32's. */
    calibrate_text("percentile", 99, text, sizeof text);
    float y32[N * O], y8[N * O];
    x[5] = 3.0f;
    mkc_tensor *t32 = NULL, *t8 = NULL;
    const int64_t yd[2] = {N, O};
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, yd, MKC_LAYOUT_NCHW, y32, &t32));
    OK(mkc_tensor_wrap(MKC_DTYPE_F32, 2, yd, MKC_LAYOUT_NCHW, y8, &t8));
    mkc_tensor *outs[1] = {t32};
    OK(mkc_program_run(p, 1, ins, 1, outs));
    mkc_program_options po;
    OK(mkc_program_options_init(&po));
    po.precision = "int8";
    po.calibration = text;
    mkc_program *p8 = linear_program(&po);
    CHECK(p8 != NULL);
    outs[0] = t8;
    OK(mkc_program_run(p8, 1, ins, 1, outs));
    /* One uint8 step of the src (about 6 / 255) times the weights' sum of
     * magnitudes bounds the error, with room for the weights' rounding. */
    double worst = 0;
    for (int i = 0; i < N * O; ++i) worst = fmax(worst, fabs((double)y8[i] - y32[i]));
    CHECK(worst < 0.2);

    OK(mkc_program_destroy(p8));
    OK(mkc_program_destroy(p));
    OK(mkc_tensor_destroy(t8));
    OK(mkc_tensor_destroy(t32));
    OK(mkc_tensor_destroy(tx));
    return finish("test_calibrate");
}
