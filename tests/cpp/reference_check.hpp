// What the reference kernels' tests share: a comparison with an absolute
// and a relative tolerance, the bound of a summed result through a fused
// activation, and input shaping.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "internal_test.hpp"

namespace mkc::test {

// Whether every |got - want| <= rel * |want| + abs; NaNs and infinities
// must match exactly. The worst element is reported on a failure.
inline bool close_to(const std::vector<float> &got, const std::vector<float> &want, double rel,
                     double abs, const std::string &what) {
    if (got.size() != want.size()) {
        std::fprintf(stderr, "%s: %zu values, want %zu\n", what.c_str(), got.size(), want.size());
        return false;
    }
    double worst = 0; // the largest error over its tolerance
    size_t at = 0;
    bool ok = true;
    for (size_t i = 0; i < got.size(); ++i) {
        const double g = got[i], w = want[i];
        if (std::isnan(w) || std::isinf(w)) {
            const bool same = std::isnan(w) ? std::isnan(g) : g == w;
            if (!same) {
                std::fprintf(stderr, "%s: [%zu] %.9g, want %.9g\n", what.c_str(), i, g, w);
                ok = false;
            }
            continue;
        }
        const double error = std::fabs(g - w), tolerance = rel * std::fabs(w) + abs;
        if (!(error <= tolerance) && !(error - tolerance <= worst)) {
            worst = std::isnan(error) ? INFINITY : error - tolerance;
            at = i;
        }
    }
    if (worst > 0) {
        std::fprintf(stderr, "%s: [%zu] %.9g, want %.9g (tolerance %.3g + %.3g relative)\n",
                     what.c_str(), at, got[at], want[at], abs, rel);
        ok = false;
    }
    return ok;
}

// |x| of every value (the reference run on them gives the sums of the
// terms' magnitudes).
inline std::vector<float> magnitudes(std::vector<float> v) {
    for (float &x : v)
        x = std::fabs(x);
    return v;
}

// The steepest slope of the fused activations the tests use (gelu's is
// about 1.13, swish's about 1.1; relu, tanh, sigmoid and clip at most 1):
// how far an error before it can grow through it.
inline double slope_of(mkc_activation_kind kind) {
    return kind == MKC_ACTIVATION_GELU_ERF || kind == MKC_ACTIVATION_GELU_TANH ||
                   kind == MKC_ACTIVATION_SWISH
               ? 1.2
               : 1.0;
}

// How far oneDNN's evaluation of an activation may be from the exact value,
// relative to it: one rounding for the kinds that are exact arithmetic;
// else the accuracy oneDNN's own tests hold its float32 approximations to
// (4e-6, and 4e-5 for the kinds they name as harder).
inline double evaluation_error(mkc_activation_kind kind) {
    switch (kind) {
    case MKC_ACTIVATION_NONE:
    case MKC_ACTIVATION_RELU:
    case MKC_ACTIVATION_CLIP:
    case MKC_ACTIVATION_ABS:
    case MKC_ACTIVATION_SQUARE:
        return 4 * 0x1p-24;
    case MKC_ACTIVATION_GELU_TANH:
    case MKC_ACTIVATION_ELU:
    case MKC_ACTIVATION_SWISH:
    case MKC_ACTIVATION_TANH:
    case MKC_ACTIVATION_MISH:
    case MKC_ACTIVATION_LOG:
        return 4e-5;
    default:
        return 4e-6;
    }
}

// For the kernels that sum n products and then apply a fused activation
// (conv, linear, matmul): whether every eager value is within its bound of
// the reference's - the sum's error (n * 1e-7 times `mag`, the sum of the
// terms' magnitudes) through the activation `kind`, plus the error of
// evaluating it. The first that is not is printed.
inline bool within(const std::vector<float> &got, const std::vector<float> &want,
                   const std::vector<float> &mag, double n, mkc_activation_kind kind,
                   const char *what, size_t index) {
    if (got.size() != want.size()) {
        std::fprintf(stderr, "%s case %zu: %zu values, the reference has %zu\n", what, index,
                     got.size(), want.size());
        return false;
    }
    for (size_t i = 0; i < got.size(); ++i) {
        const double bound =
            slope_of(kind) * n * 1e-7 * mag[i] + evaluation_error(kind) * std::fabs(want[i]);
        const double d = std::fabs(double(got[i]) - want[i]);
        if (!(d <= bound)) {
            std::fprintf(stderr,
                         "%s case %zu: element %zu: eager %.9g, reference %.9g, off by %g "
                         "(bound %g)\n",
                         what, index, i, got[i], want[i], d, bound);
            return false;
        }
    }
    return true;
}

// A tensor's values scaled by `gain` (and shifted), written back into it.
inline void rescale(Tensor &t, float gain, float offset = 0.f, bool absolute = false) {
    auto *p = static_cast<float *>(t.data);
    for (int64_t i = 0; i < element_count(t); ++i)
        p[i] = (absolute ? std::fabs(p[i]) : p[i]) * gain + offset;
}

} // namespace mkc::test
