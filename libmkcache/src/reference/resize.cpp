// The resize reference kernel: ONNX's Resize written from its definition,
// one axis at a time (nearest, linear and cubic interpolation all separate
// by axis), every step in double.
//
// Each result index along an axis reads a few src elements (its taps) with
// weights; the weights are ONNX's reference implementation's own formulas
// evaluated in the same order of operations, so the double result agrees
// with it to the last bits of a double, far below float32's rounding.
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
            return 0.0;
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

// Keys' cubic weights of the four elements around a coordinate whose
// distance to the second is `r` (in (0, 1]): the elements lie r + 1, r,
// 1 - r and 2 - r from it. ONNX's expressions as its reference writes them.
void cubic_weights(double r, double a, double *w) {
    const double s = 1.0 - r;
    w[0] = ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a;
    w[1] = ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0;
    w[2] = ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0;
    w[3] = ((a * (s + 1.0) - 5.0 * a) * (s + 1.0) + 8.0 * a) * (s + 1.0) - 4.0 * a;
}

// The cubic kernel at distance t (any sign), as ONNX's antialiasing
// reference evaluates it.
double cubic_kernel(double t, double a) {
    const double x = std::fabs(t), x2 = x * x, x3 = x * x2;
    if (x <= 1.0)
        return (a + 2.0) * x3 - (a + 3.0) * x2 + 1.0;
    if (x < 2.0)
        return a * x3 - 5.0 * a * x2 + 8.0 * a * x - 4.0 * a;
    return 0.0;
}

// Per result index along one axis: `width` src indices (clamped into src:
// coordinates outside read the border) and their weights, row-major.
struct Taps {
    int64_t width = 1;
    std::vector<int64_t> index;
    std::vector<double> weight;
};

// The first tap's offset from ceil(x) - 1 and the taps' count: ONNX takes
// the `width` elements nearest the coordinate, preferring the lower of two
// at equal distance, which is this window for a distance r in (0, 1].
// Antialiasing (below 1 only: `scale` is then the axis's) widens the window
// to the filter's support stretched by 1 / scale.
struct Window {
    int64_t first, width;
};
Window window_of(mkc_resize_mode mode, bool antialias, double scale) {
    if (mode == MKC_RESIZE_NEAREST)
        return {0, 2};
    const double half = mode == MKC_RESIZE_CUBIC ? 2.0 : 1.0; // the filter's half-width
    if (!antialias || scale >= 1.0)
        return {1 - static_cast<int64_t>(half), 2 * static_cast<int64_t>(half)};
    const auto first = static_cast<int64_t>(std::floor(-half / scale) + 1.0);
    return {first, 2 - 2 * first};
}

Taps axis_taps(const mkc_resize_params &p, int64_t n, double length, int64_t m) {
    const auto clamp = [n](int64_t i) { return std::clamp<int64_t>(i, 0, n - 1); };
    // The scale as ONNX's reference takes it: the given one, or m / n
    // (length is n times the given scale exactly, so this divides back to it).
    const double scale = length / static_cast<double>(n);
    const bool antialias = p.antialias != 0 && p.mode != MKC_RESIZE_NEAREST;
    const Window win = window_of(p.mode, antialias, scale);
    Taps t;
    t.width = p.mode == MKC_RESIZE_NEAREST ? 1 : win.width;
    t.index.reserve(static_cast<size_t>(m * t.width));
    t.weight.reserve(static_cast<size_t>(m * t.width));
    std::vector<double> w(static_cast<size_t>(t.width));
    for (int64_t y = 0; y < m; ++y) {
        const double x = source_coordinate(p.coordinates, y, n, length, m);
        if (p.mode == MKC_RESIZE_NEAREST) {
            t.index.push_back(static_cast<int64_t>(
                std::clamp(rounded(p.nearest, x), 0.0, static_cast<double>(n - 1))));
            t.weight.push_back(1.0);
            continue;
        }
        // base = ceil(x) - 1 and r = x - base, exactly (a double's distance
        // to an integer near it is a double): r is 1, not 0, on a whole x.
        const double base = std::ceil(x) - 1.0;
        const double r = x - base;
        const auto first = static_cast<int64_t>(base) + win.first;
        if (!antialias && p.mode == MKC_RESIZE_LINEAR) {
            w[0] = 1.0 - r;
            w[1] = r;
        } else if (!antialias && r == 1.0) {
            // A whole coordinate: W(2), W(1), W(0), W(1) are 0, 0, 1, 0
            // for every a, which the expressions give only up to rounding
            // for some a; its element then comes out as it is.
            w.assign({0.0, 0.0, 1.0, 0.0});
        } else if (!antialias) {
            cubic_weights(r, p.cubic_coeff_a, w.data());
        } else {
            // The filter at each element's distance (i - r) times the
            // scale (clamped to 1 above: upsampling does not widen it),
            // divided by the sum of the weights (in order, as ONNX sums).
            const double s = std::min(scale, 1.0);
            double sum = 0.0;
            for (int64_t k = 0; k < win.width; ++k) {
                const double d = s * (static_cast<double>(win.first + k) - r);
                w[static_cast<size_t>(k)] = p.mode == MKC_RESIZE_LINEAR
                                                ? std::clamp(1.0 - std::fabs(d), 0.0, 1.0)
                                                : cubic_kernel(d, p.cubic_coeff_a);
                sum += w[static_cast<size_t>(k)];
            }
            for (double &v : w)
                v /= sum;
        }
        if (p.exclude_outside) {
            // Elements outside src weigh nothing; the rest are scaled to
            // sum to 1 (left as they are where nothing inside weighs).
            double sum = 0.0;
            for (int64_t k = 0; k < win.width; ++k) {
                const int64_t i = first + k;
                if (i < 0 || i >= n)
                    w[static_cast<size_t>(k)] = 0.0;
                sum += w[static_cast<size_t>(k)];
            }
            if (sum != 0.0)
                for (double &v : w)
                    v /= sum;
        }
        for (int64_t k = 0; k < win.width; ++k) {
            t.index.push_back(clamp(first + k));
            t.weight.push_back(w[static_cast<size_t>(k)]);
        }
    }
    return t;
}

// True if the taps copy src as it is (n == m, each result index reading
// its own element alone with weight 1).
bool is_identity(const Taps &t, int64_t n, int64_t m) {
    if (n != m)
        return false;
    for (int64_t y = 0; y < m; ++y)
        for (int64_t k = 0; k < t.width; ++k) {
            const auto j = static_cast<size_t>(y * t.width + k);
            const double want = t.index[j] == y ? 1.0 : 0.0;
            // Several taps may clamp to the same element: their weights
            // add up there, so look at the nonzero ones only.
            if (t.weight[j] != 0.0 && (t.index[j] != y || t.weight[j] != want))
                return false;
        }
    return true;
}

} // namespace

void resize(const mkc_resize_params &params, const Dims &src_dims, const float *src,
            const std::vector<double> &lengths, const Dims &out_dims, float *out) {
    Dims dims = src_dims;
    std::vector<double> buf(src, src + [&] {
        int64_t n = 1;
        for (int64_t d : src_dims)
            n *= d;
        return n;
    }());
    for (size_t a = 0; a < dims.size(); ++a) {
        const int64_t n = dims[a], m = out_dims[a];
        const Taps t = axis_taps(params, n, lengths[a], m);
        if (is_identity(t, n, m))
            continue;
        // buf is [outer, n, inner]; the next is [outer, m, inner].
        int64_t outer = 1, inner = 1;
        for (size_t i = 0; i < a; ++i)
            outer *= dims[i];
        for (size_t i = a + 1; i < dims.size(); ++i)
            inner *= dims[i];
        std::vector<double> next(static_cast<size_t>(outer * m * inner), 0.0);
        for (int64_t o = 0; o < outer; ++o)
            for (int64_t y = 0; y < m; ++y) {
                double *to = next.data() + (o * m + y) * inner;
                bool first = true;
                for (int64_t k = 0; k < t.width; ++k) {
                    const auto j = static_cast<size_t>(y * t.width + k);
                    const double w = t.weight[j];
                    // A tap of weight 0 is not read: a whole coordinate
                    // gives its element as it is, whatever its neighbours
                    // hold (an infinity beside it included).
                    if (w == 0.0)
                        continue;
                    const double *from = buf.data() + (o * n + t.index[j]) * inner;
                    if (first) // assigned, so a -0 or NaN read with weight 1 stays itself
                        for (int64_t i = 0; i < inner; ++i)
                            to[i] = w * from[i];
                    else
                        for (int64_t i = 0; i < inner; ++i)
                            to[i] += w * from[i];
                    first = false;
                }
            }
        buf = std::move(next);
        dims[a] = m;
    }
    for (size_t i = 0; i < buf.size(); ++i)
        out[i] = static_cast<float>(buf[i]);
}

} // namespace mkc::reference
