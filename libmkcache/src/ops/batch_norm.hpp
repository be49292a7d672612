// batch_norm as phases (see ops/phases.hpp). src is read in its own
// arrangement and dst written in it, labelled data_format (TARGET: the
// scope's thread's target layout in prepare, src's own layout in infer);
// the statistics, scale, shift and their gradients are plain float32
// vectors of C values.
//
// The phases read attrs.p for everything but its name and training flag:
// prepare's `name` and attrs.training stand for them (the eager calls pass
// p.name and p.training). Unlike the eager call, run leaves the thread's
// target layout alone: a program resolved its data_format when prepared.
#pragma once

#include "ops/phases.hpp"

namespace mkc::ops {

// A batch_norm's attributes; `training` set for the training forward and
// its grad op (which finds what it left under the same name).
struct BatchNormAttrs {
    BatchNormAttrs(const mkc_batch_norm_params &params, bool for_training)
        : p(params), training(for_training) {}
    const mkc_batch_norm_params &p;
    bool training;
    template <typename V>
    void each(V &v) const {
        v.field("eps", p.epsilon);
        v.field("m", p.momentum);
        v.field("df", p.data_format);
        v.field("training", training);
    }
};

// Inputs: src, mean, variance, scale, shift (scale and shift optional).
// Inference (mean and variance, the running statistics, required) -> dst.
// Training (attrs.training; mean and variance optional) normalizes with the
// batch statistics, as the eager call -> dst, batch_mean, batch_variance,
// and the momentum update of the given running mean and variance (ports 3
// and 4; an empty description for one not given). The eager call updates
// them in place; a run may do so too by passing an input's buffer as the
// output's. The training forward leaves its descriptor for the grad op in
// the scope, as the eager call does. A null output buffer is skipped (its
// values computed into scratch when the primitive writes them anyway).
struct BatchNormOp {
    using Attrs = BatchNormAttrs;
    static std::vector<ValueDesc> infer(const Attrs &attrs, const ValueDesc &src,
                                        const ValueDesc *mean, const ValueDesc *variance,
                                        const ValueDesc *scale, const ValueDesc *shift);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &src, const ValueDesc *mean,
                            const ValueDesc *variance, const ValueDesc *scale,
                            const ValueDesc *shift);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

// src, mean, variance (the batch statistics the training forward gave),
// scale, shift (the forward's, each optional), diff_dst -> diff_src,
// diff_scale, diff_shift (an empty description when the forward had no
// scale or shift). shift only tells whether there was one: its takes is
// empty and run reads no buffer for it. A null output buffer is skipped.
// The gradient of the training forward whatever attrs.training says.
struct BatchNormBackwardOp {
    using Attrs = BatchNormAttrs;
    static std::vector<ValueDesc> infer(const Attrs &attrs, const ValueDesc &src,
                                        const ValueDesc &mean, const ValueDesc &variance,
                                        const ValueDesc *scale, const ValueDesc *shift,
                                        const ValueDesc &diff_dst);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &src, const ValueDesc &mean,
                            const ValueDesc &variance, const ValueDesc *scale,
                            const ValueDesc *shift, const ValueDesc &diff_dst);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

} // namespace mkc::ops
