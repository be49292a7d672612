// The resize reference kernel: ONNX's Resize written from its definition,
// one axis at a time (nearest and linear interpolation both separate by
// axis), every step in double.
#include <algorithm>
#include <cmath>

#include "reference/kernels.hpp"

namespace mkc::reference {

namespace {

// src's coordinate of result index y along an axis of src extent n mapped
// with length `length`, m the result's extent (mkcache.h,
// mkc_resize_coordinates). The scale is length / n; dividing by it is
// written as a product by n over length, the same correctly rounded value,
// exact where a half-pixel lands on a tie.
double source_coordinate(mkc_resize_coordinates c, int64_t y, int64_t n, double length,
                         int64_t m) {
    const double yd = static_cast<double>(y), nd = static_cast<double>(n);
    switch (c) {
    case MKC_COORDINATES_HALF_PIXEL_SYMMETRIC:
        return nd / 2.0 * (1.0 - static_cast<double>(m) / length) + (yd + 0.5) * nd / length -
               0.5;
    case MKC_COORDINATES_PYTORCH_HALF_PIXEL:
        if (length == 1.0)
            return -0.5;
        return (yd + 0.5) * nd / length - 0.5;
    case MKC_COORDINATES_ALIGN_CORNERS:
        return length == 1.0 ? 0.0 : yd * (nd - 1.0) / (length - 1.0);
    case MKC_COORDINATES_ASYMMETRIC: return yd * nd / length;
    default: return (yd + 0.5) * nd / length - 0.5; // HALF_PIXEL
    }
}

// Nearest: the index x rounds to; halves go down (ROUND_PREFER_FLOOR) or
// up (ROUND_PREFER_CEIL).
double rounded(mkc_resize_nearest r, double x) {
    switch (r) {
    case MKC_NEAREST_ROUND_PREFER_CEIL: return std::floor(x + 0.5);
    case MKC_NEAREST_FLOOR: return std::floor(x);
    case MKC_NEAREST_CEIL: return std::ceil(x);
    default: return std::ceil(x - 0.5); // ROUND_PREFER_FLOOR
    }
}

// Per result index along one axis: the two src indices it reads (clamped
// into src: coordinates outside read the border) and the second one's
// weight.
struct Taps {
    std::vector<int64_t> lo, hi;
    std::vector<double> w;
};

Taps axis_taps(mkc_resize_mode mode, mkc_resize_coordinates c, mkc_resize_nearest r, int64_t n,
               double length, int64_t m) {
    Taps t;
    const auto clamp = [n](double i) {
        return static_cast<int64_t>(std::clamp(i, 0.0, static_cast<double>(n - 1)));
    };
    for (int64_t y = 0; y < m; ++y) {
        const double x = source_coordinate(c, y, n, length, m);
        if (mode == MKC_RESIZE_NEAREST) {
            const int64_t i = clamp(rounded(r, x));
            t.lo.push_back(i);
            t.hi.push_back(i);
            t.w.push_back(0.0);
        } else {
            const double x0 = std::floor(x);
            t.lo.push_back(clamp(x0));
            t.hi.push_back(clamp(x0 + 1.0));
            t.w.push_back(x - x0);
        }
    }
    return t;
}

} // namespace

void resize(mkc_resize_mode mode, mkc_resize_coordinates coordinates, mkc_resize_nearest nearest,
            const Dims &src_dims, const float *src, const std::vector<double> &lengths,
            const Dims &out_dims, float *out) {
    Dims dims = src_dims;
    std::vector<double> buf(src, src + [&] {
        int64_t n = 1;
        for (int64_t d : src_dims)
            n *= d;
        return n;
    }());
    for (size_t a = 0; a < dims.size(); ++a) {
        const int64_t n = dims[a], m = out_dims[a];
        const Taps t = axis_taps(mode, coordinates, nearest, n, lengths[a], m);
        bool identity = n == m;
        for (int64_t y = 0; identity && y < m; ++y)
            identity = t.lo[static_cast<size_t>(y)] == y && t.w[static_cast<size_t>(y)] == 0.0;
        if (identity)
            continue;
        // buf is [outer, n, inner]; the next is [outer, m, inner].
        int64_t outer = 1, inner = 1;
        for (size_t i = 0; i < a; ++i)
            outer *= dims[i];
        for (size_t i = a + 1; i < dims.size(); ++i)
            inner *= dims[i];
        std::vector<double> next(static_cast<size_t>(outer * m * inner));
        for (int64_t o = 0; o < outer; ++o)
            for (int64_t y = 0; y < m; ++y) {
                const auto k = static_cast<size_t>(y);
                const double *lo = buf.data() + (o * n + t.lo[k]) * inner;
                const double *hi = buf.data() + (o * n + t.hi[k]) * inner;
                double *to = next.data() + (o * m + y) * inner;
                const double w = t.w[k];
                for (int64_t i = 0; i < inner; ++i)
                    to[i] = w == 0.0 ? lo[i] : (1.0 - w) * lo[i] + w * hi[i];
            }
        buf = std::move(next);
        dims[a] = m;
    }
    for (size_t i = 0; i < buf.size(); ++i)
        out[i] = static_cast<float>(buf[i]);
}

} // namespace mkc::reference
