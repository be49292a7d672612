// The reference pooling: each output cell scans its window's taps over the
// input (every dilation-th cell from the window's start), skipping the taps
// that fall outside it (on padding, or past the end where ceil mode added a
// last window).
//
// As the reference convolution, it reads the spatial dims through a 3-D
// frame (d, h, w): a 2-D case is the 3-D one with a leading extent of 1.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "reference/kernels.hpp"

namespace mkc::reference {

namespace {

// The window geometry along the frame's dims. pad_end is the caller's:
// ceil mode's extra cells are not padding, and the output's extents (given)
// say how many windows there are.
struct Window {
    int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1};
    int64_t stride[3] = {1, 1, 1}, pad_begin[3] = {0, 0, 0}, pad_end[3] = {0, 0, 0};
    int64_t dilation[3] = {1, 1, 1};
    int64_t in_size = 1, out_size = 1;
};

Window window_of(const mkc_pool_params &p, bool channels_last, const Dims &src_dims,
                 const Dims &dst_dims) {
    Window w;
    const int k = static_cast<int>(src_dims.size()) - 2;
    const int first = channels_last ? 1 : 2; // the first spatial axis
    for (int i = 0; i < k; ++i) {
        const int at = 3 - k + i;
        w.in[at] = src_dims[first + i];
        w.out[at] = dst_dims[first + i];
        if (p.global) {
            // The whole extent, once: kernel = input, no stride or padding.
            w.kernel[at] = w.in[at];
        } else {
            w.kernel[at] = p.kernel[i];
            w.stride[at] = p.stride[i];
            w.dilation[at] = p.dilation[i];
            w.pad_begin[at] = p.pad_begin[i];
            w.pad_end[at] = p.pad_end[i];
        }
    }
    for (int i = 0; i < 3; ++i) {
        w.in_size *= w.in[i];
        w.out_size *= w.out[i];
    }
    return w;
}

// The taps [first, last) of one dim, of a window starting at `start`, whose
// cells start + tap * dilation lie in [low, high): `inside` the input,
// `padded` in the input and its padding (what an average that counts
// padding divides by).
struct Span {
    int64_t first, last;
};
Span taps(const Window &w, int dim, int64_t start, int64_t low, int64_t high) {
    const int64_t d = w.dilation[dim];
    // The first tap at or past `bound`.
    const auto from = [&](int64_t bound) { return start >= bound ? 0 : (bound - start + d - 1) / d; };
    const int64_t first = std::min(from(low), w.kernel[dim]);
    return {first, std::max(first, std::min(from(high), w.kernel[dim]))};
}
Span inside(const Window &w, int dim, int64_t start) { return taps(w, dim, start, 0, w.in[dim]); }
Span padded(const Window &w, int dim, int64_t start) {
    return taps(w, dim, start, -w.pad_begin[dim], w.in[dim] + w.pad_end[dim]);
}

} // namespace

void pool(const mkc_pool_params &p, bool channels_last, const Dims &src_dims, const float *src,
          const Dims &dst_dims, float *dst) {
    const Window w = window_of(p, channels_last, src_dims, dst_dims);
    const int64_t batch = src_dims[0];
    const int64_t channels = channels_last ? src_dims.back() : src_dims[1];
    const bool is_max = p.kind == MKC_POOL_MAX;

    for (int64_t n = 0; n < batch; ++n)
        for (int64_t c = 0; c < channels; ++c) {
            // Element (n, c, cell) of a [N, C, cells] or [N, cells, C] tensor.
            const auto at = [&](int64_t cells, int64_t cell) {
                return channels_last ? (n * cells + cell) * channels + c
                                     : (n * channels + c) * cells + cell;
            };
            for (int64_t od = 0; od < w.out[0]; ++od)
                for (int64_t oh = 0; oh < w.out[1]; ++oh)
                    for (int64_t ow = 0; ow < w.out[2]; ++ow) {
                        const int64_t start[3] = {od * w.stride[0] - w.pad_begin[0],
                                                  oh * w.stride[1] - w.pad_begin[1],
                                                  ow * w.stride[2] - w.pad_begin[2]};
                        const Span d = inside(w, 0, start[0]), h = inside(w, 1, start[1]),
                                   x = inside(w, 2, start[2]);
                        // Padding cells never win a max: it starts below
                        // every value.
                        double best = -std::numeric_limits<double>::infinity(), sum = 0;
                        int64_t count = 0;
                        for (int64_t td = d.first; td < d.last; ++td)
                            for (int64_t th = h.first; th < h.last; ++th)
                                for (int64_t tw = x.first; tw < x.last; ++tw) {
                                    const int64_t id = start[0] + td * w.dilation[0],
                                                  ih = start[1] + th * w.dilation[1],
                                                  iw = start[2] + tw * w.dilation[2];
                                    const double v =
                                        src[at(w.in_size, (id * w.in[1] + ih) * w.in[2] + iw)];
                                    if (v > best)
                                        best = v;
                                    sum += v;
                                    ++count;
                                }
                        if (p.kind == MKC_POOL_AVG_INCLUDE_PAD) {
                            // The padding counts, but not cells past it.
                            count = 1;
                            for (int i = 0; i < 3; ++i) {
                                const Span s = padded(w, i, start[i]);
                                count *= s.last - s.first;
                            }
                        }
                        const int64_t cell = (od * w.out[1] + oh) * w.out[2] + ow;
                        // Every window holds a cell of the input: it starts
                        // inside it or in the begin padding, which is
                        // narrower than the kernel.
                        dst[at(w.out_size, cell)] = static_cast<float>(is_max ? best : sum / count);
                    }
        }
}

} // namespace mkc::reference
