// quantize on oneDNN's reorder, for callers that allow its rounding (the
// `fast` flag of mkc_quantize_params): see ops/quantize.cpp.
#pragma once

#include "ops/attrs.hpp"
#include "ops/phases.hpp"

namespace mkc::ops {

struct QuantizeAttrs {
    const mkc_quantize_params &p;
    template <typename V>
    void each(V &v) const {
        v.field("to", p.to);
        v.field("fast", p.fast);
    }
};

// Whether the reorder computes this quantize as asked: only with `fast`,
// for a per-tensor scale.
Verdict quantize_onednn_supports(const mkc_quantize_params &p, const ValueDesc &src,
                                 const ValueDesc &scale);

// src (float32, any arrangement) -> the 8-bit result plain in src's layout;
// ports src, scale, zero_point (optional, in the result's dtype).
struct QuantizeOp {
    using Attrs = QuantizeAttrs;
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &src, const ValueDesc &scale,
                            const ValueDesc *zero_point);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

} // namespace mkc::ops
