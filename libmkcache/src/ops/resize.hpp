// resize (mkc_resize_params) on oneDNN's resampling primitive, as phases
// (see ops/phases.hpp), for the cases where that primitive computes what
// the operator defines: the operator table's row says which (graph/
// op_table.cpp); its reference kernel takes the rest.
#pragma once

#include <cstdint>

#include "ops/attrs.hpp"
#include "ops/phases.hpp"

namespace mkc::ops {

// The primitive's algorithm and the result's spatial dims (oneDNN order,
// `spatial` of the three count); N and C are src's.
struct ResizeAttrs {
    mkc_resize_mode mode = MKC_RESIZE_NEAREST;
    int spatial = 0;
    int64_t out[3] = {0, 0, 0};
    template <typename V>
    void each(V &v) const {
        v.field("m", mode);
        v.field("o", Values{out, spatial});
    }
};

// src (float32, 3-D to 5-D, plain in its label) -> dst of src's N and C
// and the spatial dims `attrs.out`, plain in src's label.
struct ResizeOp {
    using Attrs = ResizeAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &src);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &src);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

} // namespace mkc::ops
