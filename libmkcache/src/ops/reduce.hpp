// Reductions (sum, mean, max, min over some axes) as phases (see
// ops/phases.hpp), on oneDNN's reduction primitive.
#pragma once

#include <cstdint>

#include "ops/phases.hpp"

namespace mkc::ops {

// A reduction's attributes: its kind, the reduced axes (a mask over the
// caller's dims order, after negative axes are counted from the end; 0:
// every axis) and whether they stay as 1s.
struct ReduceAttrs {
    mkc_reduce_kind kind;
    uint32_t axes;
    bool keepdims;
    template <typename V>
    void each(V &v) const {
        v.field("k", kind);
        v.field("axes", axes);
        v.field("keep", keepdims);
    }
};

// The attributes of `params` for a src of rank `rank`: the axes checked
// (in range, each once) and made a mask. Throws INVALID_ARGUMENT naming the
// operator.
ReduceAttrs reduce_attrs(const mkc_reduce_params &params, int rank);

// The result's caller-order dims: src's with the reduced axes 1 (kept) or
// dropped ([1] when none is left).
Dims reduced_caller_dims(const ReduceAttrs &attrs, const Dims &src_caller);

// src (float32, plain in its label or any strides) -> dst, plain: in src's
// label when the axes are kept, else channels-first.
struct ReduceOp {
    using Attrs = ReduceAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &src);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &src);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

} // namespace mkc::ops
