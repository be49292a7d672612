// Pooling as phases (see ops/phases.hpp): max and average pooling over 2-D
// and 3-D inputs, forward and backward. Pooling runs on its input's
// arrangement (a blocked conv output stays blocked).
#pragma once

#include "ops/attrs.hpp"
#include "ops/phases.hpp"

namespace mkc::ops {

// A pooling's attributes as the caller gave them, spatial fields to the
// spatial rank `k` of src (clamped to 0..3, so a call of a bad rank still has
// words; its checks then report it).
struct PoolAttrs {
    PoolAttrs(const mkc_pool_params &params, int rank, bool for_training)
        : p(params), k(rank < 2 ? 0 : rank > 5 ? 3 : rank - 2), training(for_training) {}
    const mkc_pool_params &p;
    int k;
    bool training; // the training forward and its grad op: true
    template <typename V>
    void each(V &v) const {
        v.field("", p.kind);
        v.field("k", Values{p.kernel, k});
        v.field("s", Values{p.stride, k});
        v.field("pb", Values{p.pad_begin, k});
        v.field("pe", Values{p.pad_end, k});
        v.field("d", Values{p.dilation, k});
        v.field("ceil", p.ceil_mode);
        v.field("global", p.global);
        v.field("df", p.data_format);
        v.field("training", training);
    }
};

// The phases read attrs.p for everything but its name and training flag:
// prepare's `name` and attrs.training stand for them (the eager calls set
// training from p.training, and the grad op always); attrs.k is worked out
// from src again.

// src -> dst, read in src's own arrangement (`takes` is src's description).
// attrs.training: the training forward, which leaves its descriptor for the
// grad op in the scope (under the same name), as the eager call; max
// pooling's indices go to a workspace of the run alone, as in the eager
// call (the grad op computes them again from src).
struct PoolOp {
    using Attrs = PoolAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &src);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &src);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

// src, diff_dst -> diff_src: the gradient of the training forward with these
// attributes. Max pooling reads src (run executes the training forward on
// it for the indices of the maxima, as the eager call does); average
// pooling only describes it.
struct PoolBackwardOp {
    using Attrs = PoolAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &src, const ValueDesc &diff_dst);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &src, const ValueDesc &diff_dst);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

} // namespace mkc::ops
