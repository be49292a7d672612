// quantized_conv2d and quantized_linear on oneDNN's int8 kernels, as
// phases (see ops/phases.hpp). Their ports and what they compute are
// mkcache.h's (mkc_quantized_conv_params); scales and zero points are
// inputs bound at run time, so one primitive serves every scale.
#pragma once

#include <array>

#include "ops/attrs.hpp"
#include "ops/phases.hpp"

namespace mkc::ops {

// The ports, in order.
enum QuantizedPort {
    kQSrc,
    kQWeights,
    kQSrcScale,
    kQWeightScale,
    kQBias,
    kQSrcZeroPoint,
    kQDstScale,
    kQDstZeroPoint,
    kQResidual, // quantized_conv2d with a sum: held by the output buffer, not read
    kQPorts
};
using QuantizedInputs = std::array<const ValueDesc *, kQPorts>;

struct QuantizedConvAttrs {
    const mkc_quantized_conv_params &p;
    template <typename V>
    void each(V &v) const {
        const mkc_conv_params &c = p.conv;
        v.field("s", Values{c.stride, 2});
        v.field("p", Values{c.pad_begin, 2});
        v.field("pe", Values{c.pad_end, 2});
        v.field("d", Values{c.dilation, 2});
        v.field("g", c.groups);
        v.field("df", c.data_format);
        v.field("", c.activation);
        v.field("a", c.activation_alpha);
        v.field("b", c.activation_beta);
        v.field("to", p.dst_dtype);
        v.field("sum", c.sum);
        v.field("ss", p.sum_scale);
        v.field("sz", static_cast<int64_t>(p.sum_zero_point));
    }
};

struct QuantizedLinearAttrs {
    const mkc_quantized_linear_params &p;
    template <typename V>
    void each(V &v) const {
        v.field("", p.activation);
        v.field("a", p.activation_alpha);
        v.field("b", p.activation_beta);
        v.field("to", p.dst_dtype);
        v.field("sum", p.sum);
        v.field("ss", p.sum_scale);
        v.field("sz", static_cast<int64_t>(p.sum_zero_point));
    }
};

struct QuantizedMatmulAttrs {
    const mkc_quantized_matmul_params &p;
    template <typename V>
    void each(V &v) const {
        v.field("ta", p.transpose_a);
        v.field("tb", p.transpose_b);
        v.field("", p.activation);
        v.field("a", p.activation_alpha);
        v.field("b", p.activation_beta);
        v.field("to", p.dst_dtype);
    }
};

// Whether oneDNN's int8 kernels on this CPU (no VNNI) add pairs of uint8 x
// int8 products in 16 bits with saturation: exact only for weights within
// -63..63.
bool int8_pairs_saturate();

// Whether `bytes` int8 values all lie within -63..63.
bool within_seven_bits(const void *data, size_t bytes);

// The checks every implementation shares (dtypes, shapes, which ports are
// given for the result's dtype) and the result: conv2d's dims in its data
// format, linear's [..., N] channels-first; U8, S8 or F32 as dst_dtype.
ValueDesc quantized_conv_infer(const mkc_quantized_conv_params &p, const QuantizedInputs &in);
ValueDesc quantized_linear_infer(const mkc_quantized_linear_params &p, const QuantizedInputs &in);
// quantized_matmul: a (src) [..., M, K] @ b (weights) [..., K, N], an
// addend at port 8; the result [..., M, N] channels-first.
ValueDesc quantized_matmul_infer(const mkc_quantized_matmul_params &p, const QuantizedInputs &in);

// Whether oneDNN's kernels compute the operator as defined for these
// inputs (else the reference kernel does).
Verdict quantized_conv_onednn_supports(const mkc_quantized_conv_params &p,
                                       const QuantizedInputs &in);
Verdict quantized_matmul_onednn_supports(const mkc_quantized_matmul_params &p,
                                         const QuantizedInputs &in);

struct QuantizedConvOp {
    using Attrs = QuantizedConvAttrs;
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const QuantizedInputs &in);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

// src [..., K] as [M, K] times the weights [N, K] read transposed through a
// view, on oneDNN's matmul (which takes zero points).
struct QuantizedLinearOp {
    using Attrs = QuantizedLinearAttrs;
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const QuantizedInputs &in);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

// a and b read where they are when strided (a program's views of
// transposed values), the result written with `y_strides` when given, as
// the float32 matmul.
struct QuantizedMatmulOp {
    using Attrs = QuantizedMatmulAttrs;
    static Prepared prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const QuantizedInputs &in, const Dims *y_strides);
    static void run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers);
};

} // namespace mkc::ops
