// Element-wise activations as phases (see ops/phases.hpp). An activation
// keeps its input's arrangement: a conv output in nChw16c stays nChw16c.
#pragma once

#include "ops/phases.hpp"

namespace mkc::ops {

// An activation's attributes: the kind (also the key's suffix, so kinds
// under one caller name stay apart) and its two parameters.
struct ActivationAttrs {
    mkc_activation_kind kind;
    float alpha, beta;
    template <typename V>
    void each(V &v) const {
        v.in_suffix("kind", kind);
        v.field("a", alpha);
        v.field("b", beta);
    }
};

// src -> dst.
struct ActivationOp {
    using Attrs = ActivationAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &src);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &src);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

// src, diff_dst -> diff_src (the gradient is computed from src).
struct ActivationBackwardOp {
    using Attrs = ActivationAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &src, const ValueDesc &diff_dst);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &src, const ValueDesc &diff_dst);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

} // namespace mkc::ops
