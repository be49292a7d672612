// The floating dtypes the arithmetic operators compute in: float32, and
// bfloat16 for inference where oneDNN has bfloat16 kernels (the reference
// kernels widen it to float32 and round their results back). An operator's
// data (src, weights, a second operand, a residual) share one dtype, which
// its result takes; a bias and normalisation parameters may be either.
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
    if (!is_float_dtype(d))
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": ", what, " must be float32 or bfloat16, got ",
             dtype_name(d));
}

// bfloat16 is inference only: oneDNN's bfloat16 training primitives are
// not wired here.
inline void require_f32_training(const char *op, mkc_dtype dtype, bool training) {
    if (training && dtype != MKC_DTYPE_F32)
        fail(MKC_STATUS_UNSUPPORTED, op, ": training computes in float32; ", dtype_name(dtype),
             " is for inference");
}

inline dnnl::memory::data_type onednn_float(mkc_dtype d) {
    return d == MKC_DTYPE_BF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

} // namespace mkc::ops
