// The normalisation reference kernels: layer_norm, inference batch_norm and
// across-channel LRN. Statistics and window sums are accumulated in double.
#include <algorithm>
#include <cmath>

#include "reference/kernels.hpp"

namespace mkc::reference {

namespace {

// dims seen as [outer, channels, inner] around the channel axis (last, or
// axis 1), so one loop serves both layouts.
struct ChannelSplit {
    int64_t outer = 1, channels = 1, inner = 1;
};

ChannelSplit split_at_channels(const Dims &dims, bool channels_last) {
    const size_t axis = channels_last ? dims.size() - 1 : 1;
    ChannelSplit s;
    for (size_t i = 0; i < dims.size(); ++i) {
        if (i < axis)
            s.outer *= dims[i];
        else if (i == axis)
            s.channels = dims[i];
        else
            s.inner *= dims[i];
    }
    return s;
}

} // namespace

void layer_norm(const Dims &dims, int begin_axis, float epsilon, const float *src,
                const float *scale, const float *shift, float *dst) {
    int64_t rows = 1, cols = 1;
    for (size_t i = 0; i < dims.size(); ++i)
        (static_cast<int>(i) < begin_axis ? rows : cols) *= dims[i];

    for (int64_t r = 0; r < rows; ++r) {
        const float *x = src + r * cols;
        float *y = dst + r * cols;
        // Two passes (mean, then the mean square deviation) keep the
        // variance free of cancellation; it is the biased one (over cols).
        double sum = 0;
        for (int64_t j = 0; j < cols; ++j)
            sum += x[j];
        const double mean = sum / static_cast<double>(cols);
        double square_sum = 0;
        for (int64_t j = 0; j < cols; ++j)
            square_sum += (x[j] - mean) * (x[j] - mean);
        const double variance = square_sum / static_cast<double>(cols);
        const double inv_std = 1.0 / std::sqrt(variance + epsilon);
        // The row's statistics are known before it is written: dst may be src.
        for (int64_t j = 0; j < cols; ++j) {
            double v = (x[j] - mean) * inv_std;
            if (scale)
                v *= scale[j];
            if (shift)
                v += shift[j];
            y[j] = static_cast<float>(v);
        }
    }
}

void batch_norm(const Dims &dims, bool channels_last, float epsilon, const float *src,
                const float *mean, const float *variance, const float *scale, const float *shift,
                float *dst) {
    const ChannelSplit s = split_at_channels(dims, channels_last);
    for (int64_t o = 0; o < s.outer; ++o) {
        for (int64_t c = 0; c < s.channels; ++c) {
            const double inv_std = 1.0 / std::sqrt(static_cast<double>(variance[c]) + epsilon);
            const double gain = scale ? scale[c] * inv_std : inv_std;
            const double bias = shift ? shift[c] : 0.0;
            const int64_t base = (o * s.channels + c) * s.inner;
            // Element by element: dst may be src.
            for (int64_t i = 0; i < s.inner; ++i)
                dst[base + i] = static_cast<float>((double(src[base + i]) - mean[c]) * gain + bias);
        }
    }
}

void lrn(const Dims &dims, bool channels_last, int64_t size, float alpha, float beta, float k,
         const float *src, float *dst) {
    const ChannelSplit s = split_at_channels(dims, channels_last);
    // The channels c - (size - 1) / 2 .. c + size / 2, as ONNX's LRN:
    // centred for an odd size, one more above c than below for an even one
    // (size 2 is c, c + 1; 4 is c - 1 .. c + 2).
    const int64_t down = (size - 1) / 2, up = size / 2;
    const double scaled_alpha = static_cast<double>(alpha) / static_cast<double>(size);
    for (int64_t o = 0; o < s.outer; ++o) {
        const float *x = src + o * s.channels * s.inner;
        float *y = dst + o * s.channels * s.inner;
        for (int64_t c = 0; c < s.channels; ++c) {
            const int64_t first = std::max<int64_t>(0, c - down);
            const int64_t last = std::min<int64_t>(s.channels - 1, c + up);
            for (int64_t i = 0; i < s.inner; ++i) {
                double sum = 0;
                for (int64_t w = first; w <= last; ++w) {
                    const double v = x[w * s.inner + i];
                    sum += v * v;
                }
                const double denominator =
                    std::pow(k + scaled_alpha * sum, static_cast<double>(beta));
                y[c * s.inner + i] = static_cast<float>(x[c * s.inner + i] / denominator);
            }
        }
    }
}

} // namespace mkc::reference
