// The reduction reference kernel: each output element accumulated in
// double over its reduced elements, rounded once.
#include <cmath>
#include <limits>

#include "reference/kernels.hpp"

namespace mkc::reference {

void reduce(mkc_reduce_kind kind, const Dims &dims, uint32_t axes, const float *src, float *dst) {
    const size_t rank = dims.size();
    // Split each flat source index into (kept position, reduced position):
    // the output index walks the kept axes in order.
    Dims out_strides(rank, 0);
    int64_t out_count = 1, group = 1;
    for (size_t i = rank; i-- > 0;) {
        if (axes >> i & 1u) {
            group *= dims[i];
        } else {
            out_strides[i] = out_count;
            out_count *= dims[i];
        }
    }
    const double none = kind == MKC_REDUCE_MAX   ? -std::numeric_limits<double>::infinity()
                        : kind == MKC_REDUCE_MIN ? std::numeric_limits<double>::infinity()
                                                 : 0.0;
    std::vector<double> acc(static_cast<size_t>(out_count), none);
    std::vector<bool> nan(acc.size(), false);
    int64_t total = 1;
    for (int64_t d : dims)
        total *= d;
    Dims at(rank, 0);
    for (int64_t flat = 0; flat < total; ++flat) {
        int64_t o = 0;
        for (size_t i = 0; i < rank; ++i)
            o += at[i] * out_strides[i];
        const double v = src[flat];
        double &a = acc[static_cast<size_t>(o)];
        if (std::isnan(v))
            nan[static_cast<size_t>(o)] = true;
        else if (kind == MKC_REDUCE_MAX)
            a = std::fmax(a, v);
        else if (kind == MKC_REDUCE_MIN)
            a = std::fmin(a, v);
        else
            a += v;
        for (size_t i = rank; i-- > 0;) { // the next source index
            if (++at[i] < dims[i])
                break;
            at[i] = 0;
        }
    }
    for (size_t o = 0; o < acc.size(); ++o) {
        double v = kind == MKC_REDUCE_MEAN ? acc[o] / static_cast<double>(group) : acc[o];
        if (nan[o])
            v = std::numeric_limits<double>::quiet_NaN();
        dst[o] = static_cast<float>(v);
    }
}

} // namespace mkc::reference
