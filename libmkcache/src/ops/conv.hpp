// Convolutions as phases (see ops/phases.hpp): conv2d, conv3d and
// conv2d_transpose, and their gradients with respect to the data and the
// weights. oneDNN chooses every arrangement the primitive reads and writes.
#pragma once

#include <vector>

#include "ops/attrs.hpp"
#include "ops/phases.hpp"

namespace mkc::ops {

// A convolution's attributes as the caller gave them, spatial fields to
// the operator's spatial rank `k`; `training` set for the training forward
// and its grad ops (which find what it left under the same name).
// k = 2: conv2d (transposed: conv2d_transpose); k = 3: conv3d.
struct ConvAttrs {
    ConvAttrs(const mkc_conv_params &params, int rank, bool is_transposed, bool for_training)
        : p(params), k(rank), transposed(is_transposed), training(for_training) {}
    const mkc_conv_params &p;
    int k;
    bool transposed;
    bool training;
    template <typename V>
    void each(V &v) const {
        v.field("t", transposed);
        v.field("s", Values{p.stride, k});
        v.field("p", Values{p.pad_begin, k});
        v.field("pe", Values{p.pad_end, k});
        v.field("d", Values{p.dilation, k});
        v.field("op", Values{p.output_padding, k});
        v.field("g", p.groups);
        v.field("df", p.data_format);
        v.field("", p.activation);
        v.field("a", p.activation_alpha);
        v.field("b", p.activation_beta);
        v.field("sum", p.sum);
        v.field("training", training);
    }
};

// The operator's name in messages ("conv2d", "conv3d", "conv2d_transpose")
// and its gradients' ("conv2d_backward", ...).
const char *conv_op_name(const ConvAttrs &attrs);
const char *conv_backward_op_name(const ConvAttrs &attrs);

// src, weights, bias (optional) -> dst, in the arrangements the primitive
// chose. The phases read attrs.p for everything but its name and training
// flag: prepare's `name` and attrs.training stand for them (the eager call
// sets training from p.training).
//
// weights are [C_out, C_in/groups, k...] ([C_in, C_out/groups, k...]
// transposed). An ungrouped convolution takes them as the primitive chose
// (`takes`); a grouped or transposed one reads the caller's plain
// arrangement, which `takes` then says and run binds through a view with
// oneDNN's dims (converting on each run when the primitive chose another).
//
// attrs.p.sum (dst += conv(src), before the activation): the output buffer
// must already hold the residual, arranged as `outputs[0]`, when run is
// called - the eager call's existing *dst.
//
// attrs.training: the training forward, which also leaves its descriptor
// for the grad ops in the scope (under the same name), as the eager call.
struct ConvOp {
    using Attrs = ConvAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &src, const ValueDesc &weights,
                           const ValueDesc *bias);
    // `y_strides` (caller order): the result written plain with these
    // strides (an inference convolution), as the step reading it takes it;
    // null: in the arrangement the primitive chooses.
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &src, const ValueDesc &weights, const ValueDesc *bias,
                            const Dims *y_strides = nullptr);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

// The gradients of a convolution, one primitive each. They take the
// forward's attributes (their `training` is not read: they always find
// what the training forward left) and its src, weights and diff_dst (ports
// 0..2); `with_bias` says whether the forward had a bias (its name and
// signature depend on it). A fused activation or sum has no backward.
//   data:    -> diff_src (src is only described, never read: its `takes`
//            is its own description); weights as for ConvOp;
//   weights: -> diff_weights (plain, the weights' dims), diff_bias [C_out]
//            (plain; with_bias only); weights are only described, never
//            read. Both are written plain, as the eager call returns them:
//            run converts them when the primitive chose another layout.
struct ConvBackwardDataOp {
    using Attrs = ConvAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &src, const ValueDesc &weights,
                           const ValueDesc &diff_dst);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            bool with_bias, const ValueDesc &src, const ValueDesc &weights,
                            const ValueDesc &diff_dst);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};
struct ConvBackwardWeightsOp {
    using Attrs = ConvAttrs;
    static std::vector<ValueDesc> infer(const Attrs &attrs, bool with_bias, const ValueDesc &src,
                                        const ValueDesc &weights, const ValueDesc &diff_dst);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            bool with_bias, const ValueDesc &src, const ValueDesc &weights,
                            const ValueDesc &diff_dst);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

// A 2-D convolution's shapes as oneDNN takes them, after the forward's
// checks of `p` and the dims (not of the dtypes): the result's dims and the
// weights' (groups first when grouped), strides, dilations (oneDNN's: 0 is
// dense) and paddings. For the operators that build their own primitive on
// a convolution's geometry (quantized_conv2d).
struct ConvShape {
    Dims y, weights, stride, dilation, pad_l, pad_r;
};
ConvShape conv2d_shape(const char *op, const mkc_conv_params &p, const ValueDesc &src,
                       const ValueDesc &weights, const ValueDesc *bias);

} // namespace mkc::ops
