// The floating dtypes the arithmetic operators compute in: float32, and
// bfloat16 where oneDNN has bfloat16 kernels (the reference kernels widen
// it to float32 and round their results back). An operator's data (src,
// weights, a second operand, a residual) share one dtype, which its result
// takes; a bias and normalisation parameters may be either.
//
// Training in bfloat16 is mixed precision, as oneDNN's backward primitives
// do it (they accumulate in float32): the forward's data, diff_dst and the
// data gradient (diff_src) are bfloat16, while the gradients of weights,
// biases and normalisation parameters are always float32, for float32
// master weights and a float32 update.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "common/error.hpp"
#include "mkcache/mkcache.h"
#include "tensor/tensor.hpp"

namespace mkc::ops {

inline bool is_float_dtype(mkc_dtype d) { return d == MKC_DTYPE_F32 || d == MKC_DTYPE_BF16; }

// `what` (src, a, ...) of `op`, which fixes the operator's dtype.
inline mkc_dtype require_float_src(const char *op, const char *what, mkc_dtype d) {
    if (!is_float_dtype(d))
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": ", what, " must be float32 or bfloat16, got ",
             dtype_name(d));
    return d;
}

// Another data input, which must have the operator's dtype.
inline void require_same_float(const char *op, const char *what, mkc_dtype d, mkc_dtype dtype) {
    if (d != dtype)
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": ", what, " is ", dtype_name(d), " but src is ",
             dtype_name(dtype), " (the data inputs share one dtype)");
}

// A bias or a normalisation parameter: float32 or bfloat16 either way.
inline void require_float_param(const char *op, const char *what, mkc_dtype d) {
    require_float_src(op, what, d);
}

// A gradient's diff_dst (or another data input of a backward), which must
// have the forward's data dtype: mixed precision keeps the data in
// bfloat16 end to end, and a float32 gradient of a bfloat16 forward (or the
// reverse) is a caller's mistake rather than a conversion to guess.
// `of`: the forward input whose dtype it must have (src, or softmax's dst).
inline void require_diff_dtype(const char *op, const char *what, mkc_dtype d, const char *of,
                               mkc_dtype dtype) {
    if (d != dtype)
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": ", what, " is ", dtype_name(d), " but ", of,
             " is ", dtype_name(dtype), " (a gradient has its forward's dtype)");
}

// What a gradient finds of its training forward (`find(bias_dtype)`: the
// transfer left under the forward's signature with that bias dtype, or
// none). The gradient does not see the forward's bias: a float32 one is
// looked for first, then for bfloat16 data a bfloat16 one.
template <typename Find>
auto find_with_either_bias(mkc_dtype data, bool bias, Find &&find) {
    auto found = find(MKC_DTYPE_F32);
    if (!found && bias && data != MKC_DTYPE_F32) found = find(MKC_DTYPE_BF16);
    return found;
}

inline dnnl::memory::data_type onednn_float(mkc_dtype d) {
    return d == MKC_DTYPE_BF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

} // namespace mkc::ops
