// The indexing kernels. gather copies whole rows (an embedding lookup copies
// one table row per index), gather_nd whole slices, gather_elements single
// elements, every index checked before any is copied; slice copies element
// by element.
#include <cstring>
#include <vector>

#include "common/error.hpp"
#include "reference/kernels.hpp"

namespace mkc::reference {

namespace {

int64_t product(const Dims &dims, size_t from, size_t to) {
    int64_t n = 1;
    for (size_t i = from; i < to; ++i)
        n *= dims[i];
    return n;
}

// indices[k] as int64, checked against a dim of `extent` and made
// non-negative.
int64_t index_at(const char *op, const void *indices, bool int64, int64_t k, int64_t extent) {
    const int64_t i = int64 ? static_cast<const int64_t *>(indices)[k]
                            : static_cast<const int32_t *>(indices)[k];
    if (i < -extent || i >= extent)
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": index ", i, " is out of range for a dim of ",
             extent, " (valid: ", -extent, "..", extent - 1, ")");
    return i < 0 ? i + extent : i;
}

} // namespace

void gather(const Dims &data_dims, const void *data, int axis, const Dims &index_dims,
            const void *indices, bool int64, size_t bytes, void *out) {
    const auto a = static_cast<size_t>(axis);
    const int64_t outer = product(data_dims, 0, a);
    const int64_t inner = product(data_dims, a + 1, data_dims.size());
    const int64_t count = product(index_dims, 0, index_dims.size());
    const int64_t extent = data_dims[a];
    std::vector<int64_t> at(static_cast<size_t>(count));
    for (int64_t k = 0; k < count; ++k)
        at[static_cast<size_t>(k)] = index_at("gather", indices, int64, k, extent);
    const size_t row = static_cast<size_t>(inner) * bytes;
    const auto *from = static_cast<const char *>(data);
    auto *to = static_cast<char *>(out);
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < count; ++k)
            std::memcpy(to + static_cast<size_t>(o * count + k) * row,
                        from + static_cast<size_t>(o * extent + at[static_cast<size_t>(k)]) * row,
                        row);
}

void gather_elements(const Dims &data_dims, const void *data, int axis, const Dims &index_dims,
                     const void *indices, bool int64, size_t bytes, void *out) {
    const size_t rank = data_dims.size(), a = static_cast<size_t>(axis);
    const int64_t total = product(index_dims, 0, rank);
    std::vector<int64_t> at(static_cast<size_t>(total));
    for (int64_t k = 0; k < total; ++k) {
        // The element's place in data: its own coordinates, the index's
        // along the axis.
        int64_t rest = k, place = 0, stride = 1;
        for (size_t d = rank; d-- > 0;) {
            const int64_t i = rest % index_dims[d];
            rest /= index_dims[d];
            const int64_t c = d == a ? index_at("gather_elements", indices, int64, k, data_dims[d])
                                     : i;
            place += c * stride;
            stride *= data_dims[d];
        }
        at[static_cast<size_t>(k)] = place;
    }
    const auto *from = static_cast<const char *>(data);
    auto *to = static_cast<char *>(out);
    for (int64_t k = 0; k < total; ++k)
        std::memcpy(to + static_cast<size_t>(k) * bytes,
                    from + static_cast<size_t>(at[static_cast<size_t>(k)]) * bytes, bytes);
}

void gather_nd(const Dims &data_dims, const void *data, int batch_dims, const Dims &index_dims,
               const void *indices, bool int64, size_t bytes, void *out) {
    const auto b = static_cast<size_t>(batch_dims);
    const size_t q = index_dims.size();
    const auto k = static_cast<size_t>(index_dims[q - 1]);
    const int64_t batches = product(data_dims, 0, b);
    // Per batch: its index rows, each picking one slice of `slice` elements.
    const int64_t rows = product(index_dims, b, q - 1);
    const int64_t slice = product(data_dims, b + k, data_dims.size());
    const int64_t batch_size = product(data_dims, b, data_dims.size());
    std::vector<int64_t> at(static_cast<size_t>(batches * rows));
    for (int64_t r = 0; r < batches * rows; ++r) {
        int64_t place = 0;
        for (size_t c = 0; c < k; ++c)
            place = place * data_dims[b + c] +
                    index_at("gather_nd", indices, int64, r * static_cast<int64_t>(k) +
                             static_cast<int64_t>(c), data_dims[b + c]);
        at[static_cast<size_t>(r)] = (r / rows) * batch_size + place * slice;
    }
    const size_t piece = static_cast<size_t>(slice) * bytes;
    const auto *from = static_cast<const char *>(data);
    auto *to = static_cast<char *>(out);
    for (int64_t r = 0; r < batches * rows; ++r)
        std::memcpy(to + static_cast<size_t>(r) * piece,
                    from + static_cast<size_t>(at[static_cast<size_t>(r)]) * bytes, piece);
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
