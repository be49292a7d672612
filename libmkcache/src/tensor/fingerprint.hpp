// What a tensor holds, in 64 bits: its dims, its arrangement and every byte
// of its data. A training forward leaves data for its backward (max-pool
// indices, the LRN workspace, layer-norm statistics) that is right only for
// the values it read; the backward uses it only when its own src gives the
// same fingerprint. A data address says nothing of the values behind it: a
// new array may sit where a freed one was, and a caller may refill a buffer.
#pragma once

#include <cstdint>

#include "tensor/tensor.hpp"

namespace mkc {

uint64_t fingerprint(const Tensor &t);

} // namespace mkc
