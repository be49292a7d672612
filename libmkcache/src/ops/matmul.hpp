// linear and matmul as phases (see ops/phases.hpp). Both read plain
// row-major inputs and write a row-major result labelled channels-first.
#pragma once

#include "ops/attrs.hpp"
#include "ops/phases.hpp"

namespace mkc::ops {

// The post-ops of a linear layer's or a matmul's primitive (user scratchpad
// attribute included): the result times `scale` (when not 1), plus what the
// destination holds (`sum`: a residual) or an `addend` (broadcast into the
// result), then the activation. `addend_arg` gets the addend's argument.
dnnl::primitive_attr activation_attr(mkc_activation_kind kind, float alpha, float beta,
                                     float scale = 1.f, bool sum = false,
                                     const dnnl::memory::desc *addend = nullptr,
                                     int *addend_arg = nullptr);

// A linear layer's attributes; `training` set for the training forward and
// its grad ops (which find what it left under the same name).
struct LinearAttrs {
    LinearAttrs(const mkc_linear_params &params, bool for_training)
        : p(params), training(for_training) {}
    const mkc_linear_params &p;
    bool training;
    template <typename V>
    void each(V &v) const {
        v.field("", p.activation);
        v.field("a", p.activation_alpha);
        v.field("b", p.activation_beta);
        v.field("training", training);
        v.field("sum", p.sum);
    }
};

// A matmul's attributes.
struct MatmulAttrs {
    const mkc_matmul_params &p;
    template <typename V>
    void each(V &v) const {
        v.field("ta", p.transpose_a);
        v.field("tb", p.transpose_b);
        v.field("", p.activation);
        v.field("a", p.activation_alpha);
        v.field("b", p.activation_beta);
        v.field("s", Factor{p.scale});
    }
};

// The primitive families a linear layer runs on besides its inner product.
enum class LinearKernel { matmul, conv1x1 };

// src [..., in], weights [out, in], bias [out] (optional) -> dst [..., out].
// A training forward (attrs.training) leaves its descriptor for the grad
// ops, as the eager call does.
struct LinearOp {
    using Attrs = LinearAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &src, const ValueDesc &weights,
                           const ValueDesc *bias);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &src, const ValueDesc &weights, const ValueDesc *bias);
    // The same layer on another oneDNN primitive family, which a program
    // may choose where it runs faster (inference only; runs with `run`):
    //   matmul   weights read as [in, out] in the matmul's own arrangement;
    //   conv1x1  a 1x1 convolution over one image whose width is the rows,
    //            channels last (the same bytes as [rows, in]), weights
    //            [out, in, 1, 1] in the convolution's arrangement.
    // Either is shown to the caller as [out, in] weights.
    //
    // `row_parts`: rows past a whole multiple of kRowPart run on a primitive
    // of their own, after one for the multiple (one primitive where the
    // rows are a single part). Those primitives recur across row counts,
    // and oneDNN's primitive cache gives every caller asking for one the
    // primitive built first (both parts read one arrangement of the
    // weights), so a program meeting many input shapes holds far fewer:
    // one per whole multiple, and at most kRowPart - 1 for the rest.
    // Only where oneDNN's kernel for them is brgemm, whose code is made per
    // row count (its gemm kernels serve any rows).
    static constexpr int64_t kRowPart = 128;
    static Prepared prepare_on(const CacheScope &scope, const Attrs &attrs, const char *name,
                               const ValueDesc &src, const ValueDesc &weights,
                               const ValueDesc *bias, LinearKernel kernel,
                               bool row_parts = false);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

// "384+8" for a linear's entry in two row parts (its first part's rows,
// then the rest's), else "".
std::string linear_row_parts(const PrimitiveEntry &entry);

// The gradients of a linear layer, one primitive each. Inputs are the
// forward's src and weights and diff_dst (ports 0..2); `with_bias` says
// whether the forward had a bias (its signature depends on it).
//   data:    -> diff_src (src itself is only described, never read);
//   weights: -> diff_weights [out, in], diff_bias [out] (with_bias).
struct LinearBackwardDataOp {
    using Attrs = LinearAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &src, const ValueDesc &weights,
                           const ValueDesc &diff_dst);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            bool with_bias, const ValueDesc &src, const ValueDesc &weights,
                            const ValueDesc &diff_dst);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};
struct LinearBackwardWeightsOp {
    using Attrs = LinearAttrs;
    static std::vector<ValueDesc> infer(const Attrs &attrs, bool with_bias, const ValueDesc &src,
                                        const ValueDesc &weights, const ValueDesc &diff_dst);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            bool with_bias, const ValueDesc &src, const ValueDesc &weights,
                            const ValueDesc &diff_dst);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

// a [..., M, K] @ b [..., K, N] (+ bias [N]) with numpy batch broadcasting;
// transpose_a/b read a or b with their last two dims swapped; the result
// times scale, then the activation.
//
// An addend (a program's fused add after the matmul: an attention's mask)
// broadcasts into the result - never the other way - and is added after the
// scale, before the activation.
//
// prepare reads a and b where they are when their arrangements are strided
// ones (a program's view of a transposed value), and writes the result
// with `y_strides` (the result's caller order) when given, so that a
// transpose after it can read the bytes as row-major.
struct MatmulOp {
    using Attrs = MatmulAttrs;
    static ValueDesc infer(const Attrs &attrs, const ValueDesc &a, const ValueDesc &b,
                           const ValueDesc *bias, const ValueDesc *addend = nullptr);
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &a, const ValueDesc &b, const ValueDesc *bias,
                            const ValueDesc *addend = nullptr, const Dims *y_strides = nullptr);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

} // namespace mkc::ops
