// LRN as phases (see ops/phases.hpp). src is read in its own arrangement
// and the result written in it (but see LrnBackwardOp), labelled
// data_format (TARGET: the scope's thread's target layout in prepare, src's
// own layout in infer).
//
// The phases read attrs.p for everything but its name and training flag:
// prepare's `name` and attrs.training stand for them (the eager calls pass
// p.name and p.training). Unlike the eager call, run leaves the thread's
// target layout alone: a program resolved its data_format when prepared.
#pragma once

#include "ops/phases.hpp"

namespace mkc::ops {

// An LRN's attributes; `training` set for the training forward and its
// grad op (which finds what it left under the same name).
struct LrnAttrs {
    LrnAttrs(const mkc_lrn_params &params, bool for_training)
        : p(params), training(for_training) {}
    const mkc_lrn_params &p;
    bool training;
    template <typename V>
    void each(V &v) const {
        v.field("size", p.size);
        v.field("a", p.alpha);
        v.field("b", p.beta);
        v.field("k", p.k);
        v.field("df", p.data_format);
        v.field("training", training);
    }
};

// src -> dst. attrs.training: the training forward, which leaves its
// descriptor for the grad op in the scope (under the same name), as the
// eager call; its workspace is the run's alone (the grad op computes it
// again from src).
struct LrnOp {
    using Attrs = LrnAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &src);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &src);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

// src, diff_dst -> diff_src: the gradient of the training forward with these
// attributes. When the primitive takes a workspace, run executes the
// training forward on src for it first, as the eager call does (that
// entry comes along in the prepared one). Sizes 1 and 2 on dense
// channels-last 4-D data read src and diff_dst, and write diff_src, plain
// channels-first (oneDNN 3.2's kernel for them crashes), as the eager call.
struct LrnBackwardOp {
    using Attrs = LrnAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &src, const ValueDesc &diff_dst);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &src, const ValueDesc &diff_dst);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

} // namespace mkc::ops
