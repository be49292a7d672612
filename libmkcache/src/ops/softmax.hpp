// softmax / log_softmax as phases (see ops/phases.hpp). Both keep their
// input's arrangement: the result is laid out as src (the gradient as dst).
#pragma once

#include "ops/phases.hpp"

namespace mkc::ops {

// A softmax's attributes: the axis (also the key's suffix) and whether it
// is a log-softmax. The phases take the axis as the caller gives it
// (negative counts from the end).
struct SoftmaxAttrs {
    int axis;
    bool log;
    template <typename V>
    void each(V &v) const {
        v.in_suffix("axis", axis);
        v.field("log", log);
    }
};

// src -> dst.
struct SoftmaxOp {
    using Attrs = SoftmaxAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &src);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &src);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

// dst (the forward's result), diff_dst -> diff_src.
struct SoftmaxBackwardOp {
    using Attrs = SoftmaxAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &dst, const ValueDesc &diff_dst);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &dst, const ValueDesc &diff_dst);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

} // namespace mkc::ops
