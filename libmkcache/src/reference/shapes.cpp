// The shape reference kernels: concat and transpose, plain copies in the
// caller's dims order.
#include "reference/kernels.hpp"

namespace mkc::reference {

void concat(int axis, const std::vector<Dims> &dims, const std::vector<const float *> &srcs,
            float *dst) {
    // Every source is [outer, its own extent along axis, inner] with the
    // same outer and inner; dst takes, for each outer index, one block of
    // each source in turn.
    int64_t outer = 1;
    for (int i = 0; i < axis; ++i)
        outer *= dims[0][i];
    std::vector<int64_t> block(dims.size(), 1);
    for (size_t s = 0; s < dims.size(); ++s)
        for (size_t i = axis; i < dims[s].size(); ++i)
            block[s] *= dims[s][i];

    float *out = dst;
    for (int64_t o = 0; o < outer; ++o) {
        for (size_t s = 0; s < srcs.size(); ++s) {
            const float *from = srcs[s] + o * block[s];
            for (int64_t i = 0; i < block[s]; ++i)
                *out++ = from[i];
        }
    }
}

void transpose(const Dims &dims, const std::vector<int> &perm, const float *src, float *dst) {
    const size_t rank = dims.size();
    Dims src_strides(rank);
    int64_t step = 1;
    for (size_t i = rank; i-- > 0;) {
        src_strides[i] = step;
        step *= dims[i];
    }
    // dst's axis i steps through src along src's axis perm[i].
    Dims dst_dims(rank), steps(rank);
    int64_t total = 1;
    for (size_t i = 0; i < rank; ++i) {
        dst_dims[i] = dims[perm[i]];
        steps[i] = src_strides[perm[i]];
        total *= dst_dims[i];
    }

    // Each dst element's position, taken apart axis by axis from the last,
    // gives its src offset.
    for (int64_t j = 0; j < total; ++j) {
        int64_t rest = j, at = 0;
        for (size_t axis = rank; axis-- > 0;) {
            at += rest % dst_dims[axis] * steps[axis];
            rest /= dst_dims[axis];
        }
        dst[j] = src[at];
    }
}

} // namespace mkc::reference
