// The reference pooling against the eager operator: every kind, 2-D and
// 3-D, both layouts, odd shapes, padding (asymmetric), ceil mode and global
// pooling.
//
// Tolerance: a max picks one of src's values, so it must be equal. An
// average sums up to n cells in float32 in an order of its own, then
// divides: off by at most about (n + 1) * 2^-24 times the average of the
// cells' magnitudes (the reference itself on absolute values), taken here as
// (n + 1) * 1e-7 of it.
#include <cstdio>

#include "internal_test.hpp"
#include "ops/ops.hpp"
#include "reference/kernels.hpp"

namespace mkc::test {
namespace {

// One pooling: src's shape (oneDNN order) and layout, and the attributes,
// one value per spatial dim.
struct Case {
    mkc_pool_kind kind;
    Dims x;
    mkc_layout layout;
    Dims kernel, stride, pad_begin, pad_end;
    bool ceil, global;
};

mkc_pool_params params_of(const Case &c) {
    mkc_pool_params p;
    mkc_pool_params_init(&p);
    p.kind = c.kind;
    for (size_t i = 0; i < c.kernel.size(); ++i) {
        p.kernel[i] = c.kernel[i];
        p.stride[i] = c.stride[i];
        p.pad_begin[i] = c.pad_begin[i];
        p.pad_end[i] = c.pad_end[i];
    }
    p.ceil_mode = c.ceil;
    p.global = c.global;
    p.data_format = c.layout;
    return p;
}

// Every kind with padding (asymmetric too) and with ceil mode, global
// pooling, 3-D, both layouts, channels off multiples of 16, batches above 1.
// The averages counting padding in ceil mode: one where the rounding adds
// no window (its height: the last would start past the input and its begin
// padding; its width: the windows fit exactly), and ones whose last window
// hangs past the end padding along one dim or several.
std::vector<Case> cases() {
    const auto NCHW = MKC_LAYOUT_CHANNELS_FIRST, NHWC = MKC_LAYOUT_CHANNELS_LAST;
    const auto max = MKC_POOL_MAX, avg = MKC_POOL_AVG_INCLUDE_PAD,
               avg_ex = MKC_POOL_AVG_EXCLUDE_PAD;
    return {
        {max, {2, 3, 11, 9}, NCHW, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false, false},
        {max, {2, 5, 8, 7}, NHWC, {3, 3}, {2, 2}, {0, 0}, {0, 0}, true, false},
        {max, {3, 19, 10, 9}, NCHW, {3, 2}, {2, 3}, {1, 0}, {2, 1}, true, false},
        {max, {2, 17, 7, 6}, NHWC, {2, 3}, {1, 2}, {1, 2}, {0, 1}, false, false},
        {avg, {3, 13, 10, 7}, NHWC, {3, 3}, {1, 1}, {1, 1}, {0, 0}, false, false},
        {avg, {2, 7, 9, 8}, NCHW, {3, 2}, {2, 2}, {2, 1}, {1, 1}, false, false},
        {avg, {2, 11, 4, 9}, NHWC, {4, 3}, {3, 2}, {1, 1}, {3, 1}, true, false},
        {avg, {2, 17, 10, 10}, NCHW, {3, 3}, {2, 2}, {0, 0}, {0, 0}, true, false},
        {avg, {3, 19, 9, 13}, NHWC, {3, 2}, {3, 2}, {1, 0}, {1, 1}, true, false},
        {avg_ex, {2, 17, 9, 8}, NCHW, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true, false},
        {avg_ex, {2, 6, 10, 11}, NHWC, {3, 4}, {3, 2}, {1, 2}, {2, 0}, true, false},
        {avg_ex, {3, 9, 7, 7}, NCHW, {3, 3}, {1, 1}, {1, 1}, {1, 1}, false, false},
        {max, {2, 7, 5, 6}, NCHW, {1, 1}, {1, 1}, {0, 0}, {0, 0}, false, true},
        {avg, {3, 19, 4, 5}, NHWC, {1, 1}, {1, 1}, {0, 0}, {0, 0}, false, true},
        {avg_ex, {2, 33, 3, 7}, NCHW, {1, 1}, {1, 1}, {0, 0}, {0, 0}, false, true},
        // 3-D
        {max, {2, 3, 5, 6, 7}, NCHW, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, false, false},
        {max, {2, 5, 6, 5, 7}, NHWC, {3, 2, 3}, {2, 2, 2}, {1, 0, 1}, {0, 1, 1}, true, false},
        {avg, {2, 4, 5, 6, 5}, NHWC, {3, 3, 2}, {1, 2, 1}, {1, 1, 0}, {1, 0, 1}, false, false},
        {avg, {2, 7, 5, 6, 7}, NCHW, {2, 3, 3}, {2, 2, 2}, {1, 1, 0}, {0, 1, 2}, true, false},
        {avg_ex, {1, 5, 4, 5, 6}, NHWC, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, false, false},
        {avg_ex, {2, 6, 7, 5, 6}, NCHW, {2, 3, 2}, {2, 2, 3}, {0, 1, 1}, {1, 0, 0}, true, false},
        {avg, {2, 9, 3, 4, 5}, NHWC, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, false, true},
        {max, {2, 9, 3, 4, 5}, NCHW, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, false, true},
    };
}

// The cells one window sums (at most): the kernel's, or the whole extent.
int64_t cells_of(const Case &c) {
    int64_t n = 1;
    for (size_t i = 2; i < c.x.size(); ++i)
        n *= c.global ? c.x[i] : c.kernel[i - 2];
    return n;
}

TEST(reference_pool_matches_eager) {
    const std::vector<Case> all = cases();
    for (size_t index = 0; index < all.size(); ++index) {
        const Case &c = all[index];
        const mkc_pool_params p = params_of(c);
        auto x = tensor(c.x, c.layout, 31);
        mkc_tensor *dst = nullptr;
        ops::pool(thread_state().scope, p, *x, &dst);
        const Dims y_dims = caller_dims(*dst);
        const std::vector<float> got = take_values(dst);

        const bool channels_last = c.layout == MKC_LAYOUT_CHANNELS_LAST;
        const Dims x_dims = caller_dims(*x);
        std::vector<float> xv = values(*x), want(got.size()), mag(got.size());
        reference::pool(p, channels_last, x_dims, xv.data(), y_dims, want.data());
        for (float &v : xv)
            v = std::fabs(v);
        reference::pool(p, channels_last, x_dims, xv.data(), y_dims, mag.data());

        const double n = double(cells_of(c)) + 1;
        for (size_t i = 0; i < got.size(); ++i) {
            const double bound = c.kind == MKC_POOL_MAX ? 0.0 : n * 1e-7 * mag[i];
            const double d = std::fabs(double(got[i]) - want[i]);
            if (!(d <= bound)) {
                std::fprintf(stderr,
                             "pool case %zu: element %zu: eager %.9g, reference %.9g "
                             "(bound %g)\n",
                             index, i, got[i], want[i], bound);
                CHECK(d <= bound);
                break;
            }
        }
    }
}

// Ceil mode's last window may hang past the end padding; an average that
// counts padding then divides by the cells within the input and its
// padding, not by the whole kernel (as PyTorch and ONNX). Checked by hand
// on one row, the reference and the eager operator.
TEST(reference_pool_include_pad_past_the_padding) {
    mkc_pool_params p;
    mkc_pool_params_init(&p);
    p.kind = MKC_POOL_AVG_INCLUDE_PAD;
    p.kernel[0] = 1;
    p.kernel[1] = 3;
    p.stride[0] = 1;
    p.stride[1] = 2;
    p.pad_begin[1] = 1;
    p.pad_end[1] = 1;
    p.ceil_mode = 1;
    // A row of 6 padded by 1 at both ends: windows [-1, 2), [1, 4), [3, 6)
    // and, by ceil mode, [5, 8), of which cell 5 is in the row and cell 6 in
    // the padding.
    const std::vector<float> x = {1, 2, 3, 4, 5, 6};
    std::vector<float> y(4);
    reference::pool(p, false, {1, 1, 1, 6}, x.data(), {1, 1, 1, 4}, y.data());
    CHECK(y[0] == 1.f && y[1] == 3.f && y[2] == 5.f && y[3] == 3.f);

    auto src = tensor({1, 1, 1, 6}, MKC_LAYOUT_CHANNELS_FIRST, 0);
    std::copy(x.begin(), x.end(), static_cast<float *>(src->data));
    mkc_tensor *dst = nullptr;
    ops::pool(thread_state().scope, p, *src, &dst);
    CHECK(caller_dims(*dst) == (Dims{1, 1, 1, 4}));
    const std::vector<float> eager = take_values(dst);
    for (size_t i = 0; i < y.size(); ++i)
        CHECK(std::fabs(eager[i] - y[i]) <= 1e-6f * std::fabs(y[i]));
}

} // namespace
} // namespace mkc::test
