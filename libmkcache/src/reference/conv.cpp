// The reference convolution and its transpose: one output element at a
// time, its sum gathered over the input cells and kernel taps that reach it,
// accumulated in double.
//
// Both read their spatial dims through a 3-D frame: a 1-D or 2-D case is the
// 3-D one with leading spatial extents of 1 (kernel 1, stride 1, no
// padding), so one loop nest serves every rank.
#include <cstdint>

#include "reference/kernels.hpp"

namespace mkc::reference {

namespace {

// The spatial geometry in the 3-D frame (d, h, w): the source's, the
// destination's and the kernel's extents and p's stride, dilation and
// begin padding. Index i of p's arrays is spatial dim i of the caller's
// rank, which lands at frame index 3 - k + i. The end padding and the output
// padding only decide the output's extents, which are given.
struct Frame {
    int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1};
    int64_t stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1}, pad[3] = {0, 0, 0};
    int64_t in_size = 1, out_size = 1, kernel_size = 1; // products of the extents
};

// Dims are [N, C, spatial...] or [N, spatial..., C]; weights always
// [*, *, k...].
Frame frame_of(const mkc_conv_params &p, bool channels_last, const Dims &src_dims,
               const Dims &weights_dims, const Dims &dst_dims) {
    Frame f;
    const int k = static_cast<int>(src_dims.size()) - 2;
    const int first = channels_last ? 1 : 2; // the first spatial axis of src and dst
    for (int i = 0; i < k; ++i) {
        const int at = 3 - k + i;
        f.in[at] = src_dims[first + i];
        f.out[at] = dst_dims[first + i];
        f.kernel[at] = weights_dims[2 + i];
        f.stride[at] = p.stride[i];
        f.dilation[at] = p.dilation[i];
        f.pad[at] = p.pad_begin[i];
    }
    for (int i = 0; i < 3; ++i) {
        f.in_size *= f.in[i];
        f.out_size *= f.out[i];
        f.kernel_size *= f.kernel[i];
    }
    return f;
}

// Where element (n, c, spatial cell s) of a [N, C, cells] or [N, cells, C]
// tensor lives.
int64_t offset(bool channels_last, int64_t channels, int64_t cells, int64_t n, int64_t c,
               int64_t s) {
    return channels_last ? (n * cells + s) * channels + c : (n * channels + c) * cells + s;
}

// The input coordinate a kernel tap reads for an output coordinate, along
// one frame dim, or -1 where the tap falls on padding (or, transposed,
// between the input's cells).
int64_t conv_source(const Frame &f, int dim, int64_t o, int64_t t) {
    const int64_t i = o * f.stride[dim] - f.pad[dim] + t * f.dilation[dim];
    return i >= 0 && i < f.in[dim] ? i : -1;
}

// Transposed: input cell i reaches output o = i * stride - pad + t *
// dilation, so o reads the i that solves it, when it is a whole cell.
int64_t transposed_source(const Frame &f, int dim, int64_t o, int64_t t) {
    const int64_t scaled = o + f.pad[dim] - t * f.dilation[dim];
    if (scaled < 0 || scaled % f.stride[dim] != 0)
        return -1;
    const int64_t i = scaled / f.stride[dim];
    return i < f.in[dim] ? i : -1;
}

} // namespace

void conv(const mkc_conv_params &p, bool transposed, bool channels_last, const Dims &src_dims,
          const float *src, const Dims &weights_dims, const float *weights, const float *bias,
          const Dims &dst_dims, float *dst) {
    const Frame f = frame_of(p, channels_last, src_dims, weights_dims, dst_dims);
    const int64_t batch = src_dims[0];
    const int64_t in_channels = channels_last ? src_dims.back() : src_dims[1];
    const int64_t out_channels = channels_last ? dst_dims.back() : dst_dims[1];
    const int64_t groups = p.groups;
    const int64_t in_per_group = in_channels / groups, out_per_group = out_channels / groups;
    const auto source = transposed ? transposed_source : conv_source;

    for (int64_t n = 0; n < batch; ++n)
        for (int64_t oc = 0; oc < out_channels; ++oc) {
            const int64_t g = oc / out_per_group, oc_in_group = oc % out_per_group;
            for (int64_t od = 0; od < f.out[0]; ++od)
                for (int64_t oh = 0; oh < f.out[1]; ++oh)
                    for (int64_t ow = 0; ow < f.out[2]; ++ow) {
                        double sum = bias ? bias[oc] : 0.0;
                        for (int64_t icg = 0; icg < in_per_group; ++icg) {
                            const int64_t ic = g * in_per_group + icg;
                            // conv: [O, I/groups, k...]; transposed: [I,
                            // O/groups, k...], the group's output channels
                            // along dim 1.
                            const float *w =
                                weights + (transposed ? ic * out_per_group + oc_in_group
                                                      : oc * in_per_group + icg) *
                                              f.kernel_size;
                            for (int64_t td = 0; td < f.kernel[0]; ++td) {
                                const int64_t id = source(f, 0, od, td);
                                if (id < 0)
                                    continue;
                                for (int64_t th = 0; th < f.kernel[1]; ++th) {
                                    const int64_t ih = source(f, 1, oh, th);
                                    if (ih < 0)
                                        continue;
                                    for (int64_t tw = 0; tw < f.kernel[2]; ++tw) {
                                        const int64_t iw = source(f, 2, ow, tw);
                                        if (iw < 0)
                                            continue;
                                        const int64_t cell = (id * f.in[1] + ih) * f.in[2] + iw;
                                        const int64_t tap =
                                            (td * f.kernel[1] + th) * f.kernel[2] + tw;
                                        sum += double(src[offset(channels_last, in_channels,
                                                                 f.in_size, n, ic, cell)]) *
                                               w[tap];
                                    }
                                }
                            }
                        }
                        const int64_t cell = (od * f.out[1] + oh) * f.out[2] + ow;
                        float &y =
                            dst[offset(channels_last, out_channels, f.out_size, n, oc, cell)];
                        // The residual joins before the activation, as the
                        // eager sum post-op does.
                        if (p.sum)
                            sum += y;
                        y = activate(p.activation, p.activation_alpha, p.activation_beta,
                                     static_cast<float>(sum));
                    }
        }
}

} // namespace mkc::reference
