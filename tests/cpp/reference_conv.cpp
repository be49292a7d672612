// The reference convolution (conv2d, conv3d, conv2d_transpose) against the
// eager operator: odd shapes, both layouts, strides, asymmetric padding,
// dilation, groups (depthwise too), output padding, bias, a residual sum
// and fused activations.
//
// Tolerance: the eager result sums the same terms in float32, in an order
// of its own. Summing n terms in float32 is off by at most about n * 2^-24
// times the sum of their magnitudes, so each element may differ by n * 1e-7
// times that sum (computed by the reference itself on the absolute values),
// times the activation's steepest slope, plus the error of evaluating the
// activation (evaluation_error: one rounding for exact ones, oneDNN's own
// accuracy for its approximations of the others).
#include <cstdio>

#include "internal_test.hpp"
#include "ops/ops.hpp"
#include "reference/kernels.hpp"
#include "reference_check.hpp"

namespace mkc::test {
namespace {

// One convolution: src's and the weights' shapes (oneDNN order), src's
// layout, and the parameters, one value per spatial dim.
struct Case {
    bool transposed;
    Dims x, w;
    mkc_layout layout;
    Dims stride, pad_begin, pad_end, dilation, output_padding;
    int64_t groups;
    bool bias;
    mkc_activation_kind activation;
    float alpha, beta;
};

int spatial_rank(const Case &c) { return static_cast<int>(c.x.size()) - 2; }

mkc_conv_params params_of(const Case &c) {
    mkc_conv_params p;
    mkc_conv_params_init(&p);
    for (int i = 0; i < spatial_rank(c); ++i) {
        p.stride[i] = c.stride[i];
        p.pad_begin[i] = c.pad_begin[i];
        p.pad_end[i] = c.pad_end[i];
        p.dilation[i] = c.dilation[i];
        p.output_padding[i] = c.output_padding.empty() ? 0 : c.output_padding[i];
    }
    p.groups = c.groups;
    p.data_format = c.layout;
    p.activation = c.activation;
    p.activation_alpha = c.alpha;
    p.activation_beta = c.beta;
    return p;
}

const char *op_of(const Case &c) {
    return c.transposed ? "conv2d_transpose" : spatial_rank(c) == 3 ? "conv3d" : "conv2d";
}

int64_t out_channels(const Case &c) { return c.transposed ? c.w[1] * c.groups : c.w[0]; }

// The products summed into one output element (an upper bound: at the
// edges fewer taps land), the bias and the residual included.
int64_t terms_of(const Case &c, bool sum) {
    int64_t n = c.transposed ? c.w[0] / c.groups : c.w[1];
    for (size_t i = 2; i < c.w.size(); ++i)
        n *= c.w[i];
    return n + (c.bias ? 1 : 0) + (sum ? 1 : 0);
}

// Odd channel counts, batches above 1, NCHW and NHWC (NCDHW and NDHWC),
// strides, asymmetric padding, dilation, groups and depthwise, 1x1,
// transposed with output padding and groups, leaky relu, gelu, swish, clip.
std::vector<Case> cases() {
    const auto NCHW = MKC_LAYOUT_CHANNELS_FIRST, NHWC = MKC_LAYOUT_CHANNELS_LAST;
    const auto none = MKC_ACTIVATION_NONE, relu = MKC_ACTIVATION_RELU,
               gelu = MKC_ACTIVATION_GELU_ERF, swish = MKC_ACTIVATION_SWISH,
               clip = MKC_ACTIVATION_CLIP;
    // clang-format off: a case's fields as Case lists them, two lines a case
    return {
        // conv2d
        {false, {2, 3, 11, 9}, {5, 3, 3, 3}, NCHW, {1, 1}, {1, 0}, {2, 1}, {1, 1}, {}, 1, true,
         relu, 0.f, 0.f},
        {false, {3, 13, 10, 7}, {17, 13, 3, 2}, NHWC, {2, 1}, {1, 1}, {0, 1}, {2, 1}, {}, 1,
         false, none, 0.f, 0.f},
        {false, {2, 12, 8, 9}, {18, 4, 3, 3}, NCHW, {1, 2}, {1, 1}, {2, 0}, {1, 1}, {}, 3, true,
         relu, 0.1f, 0.f},
        {false, {2, 16, 9, 9}, {32, 1, 3, 3}, NHWC, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {}, 16, true,
         none, 0.f, 0.f},
        {false, {2, 20, 7, 8}, {20, 1, 5, 5}, NCHW, {1, 1}, {3, 2}, {1, 2}, {2, 1}, {}, 20, false,
         clip, 0.f, 6.f},
        {false, {2, 21, 7, 8}, {21, 1, 3, 3}, NHWC, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {}, 21, true,
         none, 0.f, 0.f},
        {false, {2, 32, 7, 6}, {48, 32, 1, 1}, NCHW, {1, 1}, {0, 0}, {0, 0}, {1, 1}, {}, 1, true,
         none, 0.f, 0.f},
        {false, {2, 34, 7, 7}, {46, 17, 3, 3}, NHWC, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {}, 2, true,
         gelu, 0.f, 0.f},
        {false, {1, 37, 6, 9}, {19, 37, 2, 4}, NCHW, {3, 2}, {0, 3}, {1, 0}, {1, 2}, {}, 1, true,
         swish, 1.f, 0.f},
        // conv3d
        {false, {2, 3, 5, 6, 7}, {4, 3, 3, 3, 3}, NCHW, {2, 2, 2}, {1, 1, 1}, {1, 1, 1},
         {1, 1, 1}, {}, 1, true, none, 0.f, 0.f},
        {false, {1, 6, 4, 5, 6}, {10, 3, 2, 3, 2}, NHWC, {1, 1, 2}, {1, 0, 1}, {0, 1, 1},
         {2, 1, 2}, {}, 2, false, relu, 0.f, 0.f},
        {false, {2, 5, 3, 4, 5}, {5, 1, 3, 3, 3}, NHWC, {1, 1, 1}, {1, 1, 1}, {1, 1, 1},
         {1, 1, 1}, {}, 5, true, none, 0.f, 0.f},
        // conv2d_transpose: weights [C_in, C_out/groups, KH, KW]
        {true, {2, 6, 5, 7}, {6, 3, 3, 3}, NCHW, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1,
         true, none, 0.f, 0.f},
        {true, {3, 8, 4, 5}, {8, 3, 3, 3}, NHWC, {2, 2}, {0, 0}, {1, 1}, {1, 1}, {1, 1}, 2,
         false, relu, 0.f, 0.f},
        {true, {2, 9, 4, 5}, {9, 2, 3, 2}, NCHW, {3, 2}, {1, 0}, {2, 1}, {2, 1}, {2, 1}, 3,
         true, none, 0.f, 0.f},
        {true, {2, 17, 5, 5}, {17, 5, 2, 3}, NHWC, {1, 2}, {0, 1}, {0, 2}, {2, 1}, {0, 1}, 1,
         true, gelu, 0.f, 0.f},
        // output padding past the end padding
        {true, {2, 5, 3, 4}, {5, 7, 2, 2}, NHWC, {2, 2}, {0, 0}, {0, 0}, {1, 1}, {1, 1}, 1,
         true, none, 0.f, 0.f},
        // depthwise
        {true, {2, 12, 3, 4}, {12, 1, 3, 3}, NCHW, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {0, 1}, 12,
         true, none, 0.f, 0.f},
    };
    // clang-format on
}

// Runs the reference on plain caller-order values; `dst` holds the residual
// on entry for a sum.
void run_reference(const Case &c, const mkc_conv_params &p, const Dims &x_dims,
                   const std::vector<float> &x, const std::vector<float> &w,
                   const std::vector<float> *b, const Dims &y_dims, std::vector<float> &y) {
    reference::conv(p, c.transposed, c.layout == MKC_LAYOUT_CHANNELS_LAST, x_dims, x.data(), c.w,
                    w.data(), b ? b->data() : nullptr, y_dims, y.data());
}

TEST(reference_conv_matches_eager) {
    const std::vector<Case> all = cases();
    for (size_t index = 0; index < all.size(); ++index) {
        const Case &c = all[index];
        for (const bool sum : {false, true}) {
            mkc_conv_params p = params_of(c);
            auto x = tensor(c.x, c.layout, 11);
            auto w = tensor(c.w, MKC_LAYOUT_CHANNELS_FIRST, 12);
            auto b = c.bias ? tensor({out_channels(c)}, MKC_LAYOUT_CHANNELS_FIRST, 13) : nullptr;

            // The eager result, accumulated into a residual for a sum.
            mkc_tensor *plain = nullptr;
            ops::convolution(thread_state().scope, op_of(c), spatial_rank(c), c.transposed, p, *x,
                             *w, b.get(), &plain);
            const Dims y_onednn = plain->dims;
            std::vector<float> got = take_values(plain);
            auto residual = tensor(y_onednn, c.layout, 14);
            const std::vector<float> r = values(*residual);
            if (sum) {
                p.sum = 1;
                mkc_tensor *into = residual.get();
                ops::convolution(thread_state().scope, op_of(c), spatial_rank(c), c.transposed, p,
                                 *x, *w, b.get(), &into);
                CHECK(into == residual.get());
                got = values(*residual);
            }

            const Dims x_dims = caller_dims(*x), y_dims = caller_dims(*residual);
            const std::vector<float> xv = values(*x), wv = values(*w);
            const std::vector<float> bv = b ? values(*b) : std::vector<float>{};
            std::vector<float> want = r;
            run_reference(c, p, x_dims, xv, wv, b ? &bv : nullptr, y_dims, want);

            // The bound: the sums of the terms' magnitudes (the reference on
            // absolute values, no activation).
            mkc_conv_params q = p;
            q.activation = MKC_ACTIVATION_NONE;
            const std::vector<float> bm = magnitudes(bv);
            std::vector<float> mag = magnitudes(r);
            run_reference(c, q, x_dims, magnitudes(xv), magnitudes(wv), b ? &bm : nullptr, y_dims,
                          mag);
            CHECK(within(got, want, mag, double(terms_of(c, sum)), c.activation,
                         sum ? "conv with sum" : "conv", index));
        }
    }
}

// A 1-D convolution is the 2-D one with a height of 1 (the kernels take 1..3
// spatial dims; the eager operators none below 2).
TEST(reference_conv_one_spatial_dim_is_a_flat_2d) {
    for (const bool channels_last : {false, true}) {
        mkc_conv_params p2;
        mkc_conv_params_init(&p2);
        p2.stride[0] = 1;
        p2.stride[1] = 2;
        p2.pad_begin[1] = 2;
        p2.pad_end[1] = 1;
        p2.dilation[1] = 2;
        p2.groups = 3;
        mkc_conv_params p1 = p2;
        p1.stride[0] = p2.stride[1];
        p1.pad_begin[0] = p2.pad_begin[1];
        p1.pad_end[0] = p2.pad_end[1];
        p1.dilation[0] = p2.dilation[1];
        const Dims x2 = channels_last ? Dims{2, 1, 13, 6} : Dims{2, 6, 1, 13};
        const Dims x1 = channels_last ? Dims{2, 13, 6} : Dims{2, 6, 13};
        const Dims y2 = channels_last ? Dims{2, 1, 6, 9} : Dims{2, 9, 1, 6};
        const Dims y1 = channels_last ? Dims{2, 6, 9} : Dims{2, 9, 6};
        auto x = tensor({2 * 6 * 13}, MKC_LAYOUT_CHANNELS_FIRST, 21);
        auto w = tensor({9 * 2 * 3}, MKC_LAYOUT_CHANNELS_FIRST, 22);
        auto b = tensor({9}, MKC_LAYOUT_CHANNELS_FIRST, 23);
        const std::vector<float> xv = values(*x), wv = values(*w), bv = values(*b);
        std::vector<float> flat(2 * 9 * 6), line(2 * 9 * 6);
        reference::conv(p2, false, channels_last, x2, xv.data(), {9, 2, 1, 3}, wv.data(), bv.data(),
                        y2, flat.data());
        reference::conv(p1, false, channels_last, x1, xv.data(), {9, 2, 3}, wv.data(), bv.data(),
                        y1, line.data());
        CHECK(flat == line);
    }
}

} // namespace
} // namespace mkc::test
