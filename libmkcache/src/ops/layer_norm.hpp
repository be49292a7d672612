// layer_norm as phases (see ops/phases.hpp). Every value is read and written
// plain (row-major in its caller order): src and dst in src's layout, scale
// and shift as their own plain bytes.
//
// The phases read attrs.p for everything but its name and training flag:
// prepare's `name` and attrs.training stand for them (the eager calls pass
// p.name and p.training).
#pragma once

#include "ops/phases.hpp"

namespace mkc::ops {

// A layer_norm's attributes; `training` set for the training forward and
// its grad op.
struct LayerNormAttrs {
    LayerNormAttrs(const mkc_layer_norm_params &params, bool for_training)
        : p(params), training(for_training) {}
    const mkc_layer_norm_params &p;
    bool training;
    template <typename V>
    void each(V &v) const {
        v.field("axis", p.begin_norm_axis);
        v.field("eps", p.epsilon);
        v.field("training", training);
    }
};

// src, scale, shift (each optional) -> dst. A training forward computes
// the statistics too and drops them, as the eager call: the grad op
// recomputes them.
struct LayerNormOp {
    using Attrs = LayerNormAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &src, const ValueDesc *scale,
                           const ValueDesc *shift);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &src, const ValueDesc *scale, const ValueDesc *shift);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

// src, scale, shift (the forward's, each optional), diff_dst -> diff_src,
// diff_scale, diff_shift (the normalized dims' shape; an empty description
// when the forward had no scale or shift). The gradient of the training
// forward whatever attrs.training says. run recomputes the statistics (a
// second entry, the training forward's, comes along in the prepared one)
// and writes only the outputs given a buffer.
struct LayerNormBackwardOp {
    using Attrs = LayerNormAttrs;
    static std::vector<ValueDesc> infer(const Attrs &attrs, const ValueDesc &src,
                                        const ValueDesc *scale, const ValueDesc *shift,
                                        const ValueDesc &diff_dst);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &src, const ValueDesc *scale, const ValueDesc *shift,
                            const ValueDesc &diff_dst);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

} // namespace mkc::ops
