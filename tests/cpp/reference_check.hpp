// What the reference kernels' tests share: a comparison with an absolute
// and a relative tolerance, and input shaping.
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

// A tensor's values scaled by `gain` (and shifted), written back into it.
inline void rescale(Tensor &t, float gain, float offset = 0.f, bool absolute = false) {
    auto *p = static_cast<float *>(t.data);
    for (int64_t i = 0; i < element_count(t); ++i)
        p[i] = (absolute ? std::fabs(p[i]) : p[i]) * gain + offset;
}

} // namespace mkc::test
