#include "graph/range_histogram.hpp"

#include <algorithm>
#include <cmath>

namespace mkc::graph {

namespace {

constexpr int kHalf = RangeHistogram::kHalfBins;
constexpr int kLogHalf = 11; // 2^11 == kHalfBins
static_assert(1 << kLogHalf == kHalf);
constexpr int kBins = 2 * kHalf;
constexpr size_t kStride = 16; // mse_range's first, coarse search

// floor(offset / 2^shift) for a bin offset in [-kHalf, kHalf).
int floor_shift(int offset, int shift) {
    return offset >= 0 ? offset >> shift : -((-offset + (1 << shift) - 1) >> shift);
}

} // namespace

double RangeHistogram::width() const { return std::ldexp(1.0, exponent_ - kLogHalf); }

// Doubles R until it is 2^exponent (exponent above the current one).
void RangeHistogram::coarsen_to(int exponent) {
    // Past kLogHalf + 1 doublings every bin has reached offset -1 or 0.
    const int shift = std::min(exponent - exponent_, kLogHalf + 2);
    std::vector<uint64_t> coarse(kBins, 0);
    for (int b = 0; b < kBins; ++b)
        coarse[static_cast<size_t>(floor_shift(b - kHalf, shift) + kHalf)] +=
            bins_[static_cast<size_t>(b)];
    bins_ = std::move(coarse);
    exponent_ = exponent;
}

void RangeHistogram::add(const float *x, int64_t n, double lo, double hi) {
    if (n <= 0)
        return;
    if (bins_.empty())
        bins_.assign(kBins, 0);
    const double magnitude = std::max(-lo, hi);
    if (magnitude > 0) {
        // The least power of two above |x|.
        const int exponent = std::ilogb(magnitude) + 1;
        if (!nonzero_) {
            exponent_ = exponent; // the bins so far hold zeros, in bin kHalf whatever R
            nonzero_ = true;
        } else if (exponent > exponent_) {
            coarsen_to(exponent);
        }
    }
    min_ = count_ == 0 ? lo : std::min(min_, lo);
    max_ = count_ == 0 ? hi : std::max(max_, hi);
    count_ += n;
    uint64_t *bins = bins_.data() + kHalf;
    if (!nonzero_) {
        bins[0] += static_cast<uint64_t>(n);
        zeros_ += n;
        return;
    }
    // x * scale is exact (a float times a power of two, in double), and so
    // is the floor taken from it.
    const double scale = std::ldexp(1.0, kLogHalf - exponent_);
    int64_t zeros = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double t = static_cast<double>(x[i]) * scale;
        int b = static_cast<int>(t);
        b -= t < b;
        ++bins[b];
        zeros += x[i] == 0.0f;
    }
    zeros_ += zeros;
}

void RangeHistogram::merge(const RangeHistogram &other) {
    if (other.count_ == 0)
        return;
    if (count_ == 0) {
        *this = other;
        return;
    }
    const std::vector<uint64_t> *add = &other.bins_;
    RangeHistogram coarser;
    if (other.nonzero_) {
        if (!nonzero_) {
            exponent_ = other.exponent_;
            nonzero_ = true;
        } else if (other.exponent_ > exponent_) {
            coarsen_to(other.exponent_);
        } else if (other.exponent_ < exponent_) {
            coarser = other;
            coarser.coarsen_to(exponent_);
            add = &coarser.bins_;
        }
    }
    for (size_t b = 0; b < bins_.size(); ++b)
        bins_[b] += (*add)[b];
    min_ = std::min(min_, other.min_);
    max_ = std::max(max_, other.max_);
    count_ += other.count_;
    zeros_ += other.zeros_;
}

std::pair<double, double> RangeHistogram::percentile_range(double percent) const {
    if (percent >= 100 || !nonzero_)
        return {min_, max_};
    const double cut = (100.0 - percent) / 200.0 * static_cast<double>(count_);
    const double w = width();
    double lo = min_, hi = max_, below = 0, above = 0;
    for (int b = 0; b < kBins; ++b) {
        const double h = static_cast<double>(bins_[static_cast<size_t>(b)]);
        if (h > 0 && below + h >= cut) {
            lo = (b - kHalf + (cut - below) / h) * w;
            break;
        }
        below += h;
    }
    for (int b = kBins - 1; b >= 0; --b) {
        const double h = static_cast<double>(bins_[static_cast<size_t>(b)]);
        if (h > 0 && above + h >= cut) {
            hi = (b - kHalf + 1 - (cut - above) / h) * w;
            break;
        }
        above += h;
    }
    return {std::clamp(lo, min_, max_), std::clamp(hi, min_, max_)};
}

std::pair<double, double> RangeHistogram::mse_range() const {
    if (!nonzero_)
        return {min_, max_};
    const double w = width();
    // Sums of count, count * centre and count * centre^2 over the bins
    // below each index (exact zeros left out: they quantize exactly).
    std::vector<double> s0(kBins + 1, 0), s1(kBins + 1, 0), s2(kBins + 1, 0);
    for (int b = 0; b < kBins; ++b) {
        double h = static_cast<double>(bins_[static_cast<size_t>(b)]);
        if (b == kHalf)
            h -= static_cast<double>(zeros_);
        const double c = (b - kHalf + 0.5) * w;
        s0[b + 1] = s0[b] + h;
        s1[b + 1] = s1[b] + h * c;
        s2[b + 1] = s2[b] + h * c * c;
    }
    // The ends tried: 0, the bin edges strictly inside (min, 0) or (0, max),
    // and min or max themselves.
    const auto ends = [w](double extreme) {
        std::vector<double> e{0.0};
        if (extreme == 0)
            return e;
        const double sign = extreme < 0 ? -1 : 1;
        for (int j = 1; j * w < std::fabs(extreme); ++j)
            e.push_back(sign * j * w);
        e.push_back(extreme);
        return e;
    };
    const std::vector<double> lows = ends(std::min(min_, 0.0)), highs = ends(std::max(max_, 0.0));
    const auto clamp_index = [](double i) {
        return static_cast<size_t>(std::clamp(i, 0.0, static_cast<double>(kBins)));
    };
    const auto error = [&](double a, double b) {
        // Bins whose centre is below a: [0, ia); above b: [ib, kBins).
        const size_t ia = clamp_index(std::ceil(a / w + kHalf - 0.5));
        const size_t ib = clamp_index(std::floor(b / w + kHalf - 0.5) + 1);
        const double n0 = s0[kBins] - s0[ib], n1 = s1[kBins] - s1[ib], n2 = s2[kBins] - s2[ib];
        const double step = (b - a) / 255.0;
        return (s2[ia] - 2 * a * s1[ia] + a * a * s0[ia]) + (n2 - 2 * b * n1 + b * b * n0) +
               step * step / 12.0 * (s0[ib] - s0[ia]);
    };
    // Every kStride-th end (and the extremes) first, then every end within
    // kStride of the best pair.
    const size_t nl = lows.size(), nh = highs.size();
    double best = INFINITY;
    size_t bi = 0, bj = 0;
    const auto search = [&](size_t i0, size_t i1, size_t j0, size_t j1, size_t stride) {
        for (size_t i = i0; i <= i1; i = i == i1 ? i1 + 1 : std::min(i + stride, i1))
            for (size_t j = j0; j <= j1; j = j == j1 ? j1 + 1 : std::min(j + stride, j1)) {
                if (highs[j] <= lows[i])
                    continue;
                const double e = error(lows[i], highs[j]);
                if (e < best) {
                    best = e;
                    bi = i;
                    bj = j;
                }
            }
    };
    search(0, nl - 1, 0, nh - 1, kStride);
    const size_t ci = bi, cj = bj;
    search(ci > kStride ? ci - kStride : 0, std::min(ci + kStride, nl - 1),
           cj > kStride ? cj - kStride : 0, std::min(cj + kStride, nh - 1), 1);
    std::pair<double, double> range{lows[bi], highs[bj]};
    return range;
}

namespace {

// onnxruntime's smoothing of a distribution of counts: each zero becomes
// eps, the amount taken evenly from the nonzero ones; then normalised.
// Empty when every count is zero.
void smooth(std::vector<double> &p) {
    constexpr double eps = 1e-4;
    size_t zeros = 0;
    for (double v : p)
        zeros += v == 0;
    const size_t nonzeros = p.size() - zeros;
    const double take = nonzeros ? eps * static_cast<double>(zeros) / nonzeros : 0;
    double sum = 0;
    for (double &v : p) {
        v = v == 0 ? eps : v - take;
        sum += v;
    }
    for (double &v : p)
        v /= sum;
}

} // namespace

std::pair<double, double> RangeHistogram::kl_range() const {
    if (!nonzero_)
        return {min_, max_};
    const double w = width();
    // |x|'s histogram. Exact zeros are left out: the zero point keeps them
    // exact, and a relu's spike of them in bin 0, merged with its neighbours
    // into one level, would otherwise weigh against every wider threshold.
    std::vector<double> h(kHalf, 0);
    for (int k = 0; k < kHalf; ++k)
        h[static_cast<size_t>(k)] = static_cast<double>(bins_[static_cast<size_t>(kHalf + k)]) +
                                    static_cast<double>(bins_[static_cast<size_t>(kHalf - 1 - k)]);
    h[0] -= static_cast<double>(zeros_);
    const double magnitude = std::max(-min_, max_);
    const int n = std::min(kHalf, static_cast<int>(magnitude / w) + 1);
    const int levels = min_ >= 0 || max_ <= 0 ? 255 : 128;
    std::vector<double> beyond(kHalf + 1, 0); // beyond[i]: the counts of bins >= i
    for (int k = kHalf - 1; k >= 0; --k)
        beyond[static_cast<size_t>(k)] = beyond[static_cast<size_t>(k) + 1] + h[static_cast<size_t>(k)];
    std::vector<double> p, q;
    const auto divergence = [&](int i) {
        p.assign(h.begin(), h.begin() + i);
        p[static_cast<size_t>(i) - 1] += beyond[static_cast<size_t>(i)];
        q.assign(static_cast<size_t>(i), 0);
        const int merged = std::max(1, i / levels);
        for (int start = 0; start < i; start += merged) {
            const bool last = start + 2 * merged > i || start / merged == levels - 1;
            const int end = last ? i : start + merged;
            double sum = 0;
            int held = 0;
            for (int k = start; k < end; ++k) {
                sum += h[static_cast<size_t>(k)];
                held += h[static_cast<size_t>(k)] != 0;
            }
            for (int k = start; k < end; ++k)
                if (h[static_cast<size_t>(k)] != 0)
                    q[static_cast<size_t>(k)] = sum / held;
            if (last)
                break;
        }
        smooth(p);
        smooth(q);
        double kl = 0;
        for (int k = 0; k < i; ++k)
            kl += p[static_cast<size_t>(k)] *
                  std::log(p[static_cast<size_t>(k)] / q[static_cast<size_t>(k)]);
        return kl;
    };
    // Every kStride-th threshold (and the last) first, then every one within
    // kStride of the best of those.
    double best = INFINITY;
    int best_i = n;
    const auto search = [&](int i0, int i1, int stride) {
        for (int i = i0; i <= i1; i = i == i1 ? i1 + 1 : std::min(i + stride, i1)) {
            const double kl = divergence(i);
            if (kl < best) {
                best = kl;
                best_i = i;
            }
        }
    };
    const int first = std::min(levels, n), stride = static_cast<int>(kStride);
    search(first, n, stride);
    const int coarse = best_i;
    search(std::max(first, coarse - stride), std::min(n, coarse + stride), 1);
    const double t = best_i * w;
    return {std::clamp(-t, min_, max_), std::clamp(t, min_, max_)};
}

} // namespace mkc::graph
