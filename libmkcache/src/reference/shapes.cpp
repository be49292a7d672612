// The shape reference kernels: concat, transpose and pad, plain copies in
// the caller's dims order.
#include <cstring>

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

void transpose(const Dims &dims, const std::vector<int> &perm, size_t element_size,
               const void *src, void *dst) {
    const auto *from = static_cast<const unsigned char *>(src);
    auto *to = static_cast<unsigned char *>(dst);
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
        std::memcpy(to + j * element_size, from + at * element_size, element_size);
    }
}

namespace {

// Where each result index along an axis of extent n reads src: its index,
// or -1 for the fill. The axis keeps src's [kept_begin, kept_end), then
// grows by `before` on the left and the rest on the right.
std::vector<int64_t> pad_map(mkc_pad_mode mode, int64_t n, int64_t begin, int64_t end) {
    const int64_t kept_begin = begin < 0 ? -begin : 0, kept_end = end < 0 ? n + end : n;
    const int64_t kept = kept_end - kept_begin, before = begin > 0 ? begin : 0;
    const int64_t out = kept + before + (end > 0 ? end : 0);
    std::vector<int64_t> map(static_cast<size_t>(out));
    for (int64_t i = 0; i < out; ++i) {
        int64_t t = i - before; // in the kept part's coordinates
        if (t < 0 || t >= kept) {
            if (mode == MKC_PAD_CONSTANT) {
                map[static_cast<size_t>(i)] = -1;
                continue;
            }
            if (mode == MKC_PAD_EDGE)
                t = t < 0 ? 0 : kept - 1;
            else if (mode == MKC_PAD_REFLECT)
                t = t < 0 ? -t : 2 * (kept - 1) - t;
            else // WRAP
                t = (t % kept + kept) % kept;
        }
        map[static_cast<size_t>(i)] = kept_begin + t;
    }
    return map;
}

} // namespace

void pad(mkc_pad_mode mode, const Dims &src_dims, const void *src, const Dims &begin,
         const Dims &end, const void *fill, size_t bytes, void *out) {
    const size_t rank = src_dims.size();
    std::vector<std::vector<int64_t>> maps(rank);
    Dims out_dims(rank), strides(rank, 1);
    int64_t total = 1;
    for (size_t a = 0; a < rank; ++a) {
        maps[a] = pad_map(mode, src_dims[a], begin[a], end[a]);
        out_dims[a] = static_cast<int64_t>(maps[a].size());
        total *= out_dims[a];
    }
    for (size_t a = rank - 1; a-- > 0;)
        strides[a] = strides[a + 1] * src_dims[a + 1];
    const auto *from = static_cast<const char *>(src);
    auto *to = static_cast<char *>(out);
    const auto b = static_cast<int64_t>(bytes);
    for (int64_t k = 0; k < total; ++k) {
        int64_t rest = k, at = 0;
        bool filled = false;
        for (size_t a = rank; a-- > 0;) {
            const int64_t j = maps[a][static_cast<size_t>(rest % out_dims[a])];
            rest /= out_dims[a];
            filled = filled || j < 0;
            at += j * strides[a];
        }
        std::memcpy(to + k * b, filled ? fill : from + at * b, bytes);
    }
}

} // namespace mkc::reference
