// Reshape and transpose without a copy. A program describes their results
// as the input's own bytes read with other dims and strides (a view), so a
// transpose between a linear and an attention's matmul costs nothing: the
// matmul reads the view where it is. A reader that cannot read a strided
// arrangement gets one converter, as for any other arrangement.
//
//   reshape    of bytes row-major in the caller's order: the same bytes,
//              row-major over the new dims;
//   transpose  of any strided bytes: the dims and strides permuted; when
//              the permuted strides are row-major (the producer wrote them
//              so), the result is plain.
#pragma once

#include <vector>

#include "ops/phases.hpp"

namespace mkc::graph {

// Whether `src`'s bytes are row-major in its caller order (a reshape reads
// them as they are).
bool row_major_bytes(const ops::ValueDesc &src);

// `src` transposed by `perm` (caller axes) as a view of its bytes, labelled
// channels-first; false when src's arrangement is not a strided one
// (blocked, as nChw16c), `out` untouched then.
bool transposed_view(const ops::ValueDesc &src, const std::vector<int> &perm, ops::ValueDesc &out);

// The strides (caller order) to write a value of caller dims `dims` with,
// so that its transpose by `perm` is row-major bytes.
Dims strides_for_transpose(const Dims &dims, const std::vector<int> &perm);

// Whether `v` is a view that only strided readers can take as it is: a
// strided arrangement other than its plain one.
bool strided_view(const ops::ValueDesc &v);

} // namespace mkc::graph
