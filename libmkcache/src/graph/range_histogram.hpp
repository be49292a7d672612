// The histogram a calibration keeps of one observed value, for the methods
// that choose a range from the distribution (percentile, mse) rather than
// from the extremes.
//
// It covers [-R, R) with 2 * kHalfBins bins of width R / kHalfBins, R a
// power of two above every |x| seen. A batch reaching past R doubles R
// (each new bin the sum of two old ones, whose edges are among the old
// edges), so the memory stays fixed and the histogram of several batches
// merged is the one of the same values seen in one batch: a value's bin,
// floor(x * kHalfBins / R), is computed exactly (x float32, the scale a
// power of two), and doubling R maps bin b to floor(b / 2).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace mkc::graph {

class RangeHistogram {
public:
    static constexpr int kHalfBins = 2048;

    // `n` finite values whose min and max are `lo` and `hi` (n > 0).
    void add(const float *x, int64_t n, double lo, double hi);
    void merge(const RangeHistogram &other);

    // The range holding all but (100 - percent) / 2 percent of the values at
    // each end (the cut points found by linear interpolation within their
    // bin), kept within [min, max]; `percent` in (0, 100], 100 being
    // [min, max].
    std::pair<double, double> percentile_range(double percent) const;
    // The range [a, b] (a <= 0 <= b, as the uint8 form widens it) minimising
    // the squared error of quantizing the histogram's values to 256 levels
    // over it: each bin taken at its centre, a value outside the range
    // costing its distance to the nearer end squared and one inside
    // step^2 / 12 (step = (b - a) / 255), exact zeros nothing. The ends
    // are taken from 0, the bin edges strictly between 0 and min (max), and
    // min (max): every 16th of them and the last first, then every one
    // within 16 of the best pair of those (ties: the first found).
    std::pair<double, double> mse_range() const;
    // TensorRT's entropy calibration, on the histogram of |x| (bin k holding
    // k * width <= |x| < (k + 1) * width, the negative side folded on; exact
    // zeros left out, as they quantize exactly):
    // the threshold T = i * width, i from `levels` to the bins reaching
    // max |x|, minimising KL(P || Q), P the first i bins with every count
    // beyond folded into the last, Q those i bins merged into `levels`
    // groups (i / levels bins each, the last taking the rest), each group's
    // count spread evenly over its bins that hold values; both smoothed as
    // onnxruntime does (a zero becomes 1e-4, taken evenly from the others)
    // before being normalised. levels: 255 when the values have one sign
    // (the uint8 range spans [0, T]), else 128 (it spans [-T, T]). The
    // range is [-T, T] within [min, max]. The thresholds tried: every 16th
    // from `levels` and the last, then every one within 16 of the best of
    // those (ties: the first found).
    std::pair<double, double> kl_range() const;

    int64_t count() const { return count_; }

private:
    double width() const;
    void coarsen_to(int exponent);

    std::vector<uint64_t> bins_; // empty until the first add
    int exponent_ = 0;           // R = 2^exponent_; meaningful once nonzero_
    bool nonzero_ = false;       // whether any value is not 0
    int64_t count_ = 0, zeros_ = 0;
    double min_ = 0, max_ = 0;
};

} // namespace mkc::graph
