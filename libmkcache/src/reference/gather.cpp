// The indexing kernels. gather copies whole rows (an embedding lookup copies
// one table row per index), every index checked before any is copied;
// slice copies element by element.
#include <cstring>
#include <vector>

#include "common/error.hpp"
#include "reference/kernels.hpp"

namespace mkc::reference {

void gather(const Dims &data_dims, const float *data, int axis, const Dims &index_dims,
            const void *indices, bool int64, float *out) {
    int64_t outer = 1, inner = 1, count = 1;
    for (int i = 0; i < axis; ++i)
        outer *= data_dims[i];
    for (size_t i = static_cast<size_t>(axis) + 1; i < data_dims.size(); ++i)
        inner *= data_dims[i];
    for (int64_t d : index_dims)
        count *= d;
    const int64_t extent = data_dims[axis];
    std::vector<int64_t> at(static_cast<size_t>(count));
    for (int64_t k = 0; k < count; ++k) {
        const int64_t i = int64 ? static_cast<const int64_t *>(indices)[k]
                                : static_cast<const int32_t *>(indices)[k];
        if (i < -extent || i >= extent)
            fail(MKC_STATUS_INVALID_ARGUMENT, "gather: index ", i, " is out of range for a dim of ",
                 extent, " (valid: ", -extent, "..", extent - 1, ")");
        at[static_cast<size_t>(k)] = i < 0 ? i + extent : i;
    }
    const size_t row = static_cast<size_t>(inner) * sizeof(float);
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < count; ++k)
            std::memcpy(out + (o * count + k) * inner,
                        data + (o * extent + at[static_cast<size_t>(k)]) * inner, row);
}

void slice(const Dims &src_dims, const void *src, const Dims &start, const Dims &step,
           const Dims &out_dims, size_t bytes, void *out) {
    const size_t rank = src_dims.size();
    Dims src_strides(rank, 1);
    for (size_t i = rank - 1; i-- > 0;)
        src_strides[i] = src_strides[i + 1] * src_dims[i + 1];
    int64_t total = 1;
    for (int64_t d : out_dims)
        total *= d;
    const auto *from = static_cast<const char *>(src);
    auto *to = static_cast<char *>(out);
    for (int64_t k = 0; k < total; ++k) {
        int64_t rest = k, at = 0;
        for (size_t a = rank; a-- > 0;) {
            const int64_t i = rest % out_dims[a];
            rest /= out_dims[a];
            at += (start[a] + i * step[a]) * src_strides[a];
        }
        std::memcpy(to + k * static_cast<int64_t>(bytes), from + at * static_cast<int64_t>(bytes),
                    bytes);
    }
}

} // namespace mkc::reference
