// Dims: a tensor's dims (or any list of extents) as the library passes them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mkc {

using Dims = std::vector<int64_t>;

// The number of elements of a value of these dims.
inline int64_t dims_product(const Dims &dims) {
    int64_t n = 1;
    for (int64_t d : dims)
        n *= d;
    return n;
}

// Whether `small` broadcasts into `big` by numpy's rule without changing
// it: no more dims, and each of its dims (aligned from the last) 1 or big's.
inline bool broadcasts_into(const Dims &small, const Dims &big) {
    if (small.size() > big.size())
        return false;
    for (std::size_t i = 0, shift = big.size() - small.size(); i < small.size(); ++i)
        if (small[i] != 1 && small[i] != big[shift + i])
            return false;
    return true;
}

} // namespace mkc
