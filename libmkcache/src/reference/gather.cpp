// The gather kernel: whole rows copied (an embedding lookup copies one
// table row per index), every index checked before any is copied.
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

} // namespace mkc::reference
