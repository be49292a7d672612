// Dims: a tensor's dims (or any list of extents) as the library passes them.
#pragma once

#include <cstdint>
#include <vector>

namespace mkc {

using Dims = std::vector<int64_t>;

} // namespace mkc
