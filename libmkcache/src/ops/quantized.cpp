// quantized_conv2d and quantized_linear: 8-bit src and weights with their
// scales (and zero points) bound as run-time arguments of oneDNN's int8
// primitives, the result requantized to 8 bits or dequantized to float32
// inside the primitive.
#include "ops/quantized.hpp"
#include "ops/quantized_parts.hpp"

#include <cmath>
#include <cstring>

#include "common/cpu_features.hpp"
#include "common/engine.hpp"
#include "common/error.hpp"
#include "common/op_kind.hpp"
#include "handler/handler.hpp"
#include "layout/layout.hpp"
#include "ops/conv.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

using tag = dnnl::memory::format_tag;
const auto f32 = dnnl::memory::data_type::f32;
const auto s32 = dnnl::memory::data_type::s32;

} // namespace

size_t weight_elements(const dnnl::memory::desc &packed) {
    size_t n = 1;
    for (int64_t d : packed.get_padded_dims()) n *= static_cast<size_t>(d);
    return n;
}

// s8 src is shifted to u8 first, so the bound is the same for both: 255 *
// 63 * 2 fits in 16 bits, 255 * 127 * 2 does not.
bool int8_pairs_saturate() { return !cpu_has_int8_dot_product(); }


// Messages name the ports as the operator's header entry does.
const char *port_name(const char *op, int port) {
    static constexpr const char *kMatmul[kQPorts] = {
        "a", "b", "a_scale", "b_scale", "bias", "a_zero_point", "dst_scale", "dst_zero_point",
        "addend"};
    return std::strcmp(op, "quantized_matmul") == 0 ? kMatmul[port] : kQPortName[port];
}


// Scales are data: checked on each run (a handful of floats).
void check_scales(const QuantizedEntry &e, const Buffers &buffers) {
    for (int port : {kQSrcScale, kQWeightScale, kQDstScale}) {
        const auto *scale = static_cast<const float *>(buffers.in[port]);
        if (!scale) continue;
        const size_t n = port == kQWeightScale ? e.weight_scales : 1;
        for (size_t i = 0; i < n; ++i)
            if (!(std::isfinite(scale[i]) && scale[i] > 0.0f))
                fail(MKC_STATUS_INVALID_ARGUMENT, e.op, ": ", port_name(e.op, port), "[", i, "] is ",
                     scale[i], "; every scale must be finite and > 0");
    }
}

bool within_seven_bits(const void *data, size_t bytes) {
    const auto *w = static_cast<const int8_t *>(data);
    int outside = 0;
    // w + 63 lies in 0..126 exactly when w is in -63..63 (a negative sum
    // is a large unsigned one): one comparison, which vectorizes.
    for (size_t i = 0; i < bytes; ++i) outside |= static_cast<unsigned>(w[i] + 63) > 126u;
    return !outside;
}

void check_weight_range(const QuantizedEntry &e, const void *weights) {
    if (!within_seven_bits(weights, e.weight_bytes))
        fail(MKC_STATUS_UNSUPPORTED, e.op,
             ": this CPU has no VNNI, and oneDNN's int8 kernels would saturate with weights "
             "outside -63..63 (7 bits): quantize the weights to 7 bits (a scale twice as large)");
}

bool quantized_dtype(mkc_dtype d) { return d == MKC_DTYPE_U8 || d == MKC_DTYPE_S8; }

// A scale or zero point: rank 1, of `dtype`, `n` elements (or 1 where
// `per_channel` allows `n`).
void check_vector(const char *op, const QuantizedInputs &in, int port, mkc_dtype dtype,
                  int64_t n) {
    const ValueDesc &v = *in[static_cast<size_t>(port)];
    if (v.dtype != dtype)
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": ", port_name(op, port), " must be ", dtype_name(dtype),
             ", got ", dtype_name(v.dtype));
    if (v.dims.size() != 1 || (v.dims[0] != 1 && v.dims[0] != n))
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": ", port_name(op, port), " must have shape [1]",
             n != 1 ? " or [" + std::to_string(n) + "]" : std::string(), ", got ",
             shape_text(v.dims));
}

// The checks both operators share; `channels` is the output channels.
void check_ports(const char *op, mkc_dtype dst, const QuantizedInputs &in, int64_t channels) {
    for (int port : {kQSrc, kQWeights, kQSrcScale, kQWeightScale})
        if (!in[static_cast<size_t>(port)])
            fail(MKC_STATUS_INVALID_ARGUMENT, op, ": ", port_name(op, port), " (input ", port,
                 ") is required");
    require(quantized_dtype(in[kQSrc]->dtype), op, ": ", port_name(op, kQSrc),
            " must be uint8 or int8, got ", dtype_name(in[kQSrc]->dtype));
    require(in[kQWeights]->dtype == MKC_DTYPE_S8, op, ": ", port_name(op, kQWeights),
            " must be int8, got ", dtype_name(in[kQWeights]->dtype));
    if (in[kQBias])
        require(in[kQBias]->dtype == MKC_DTYPE_F32, op, ": bias must be float32 (real units), got ",
                dtype_name(in[kQBias]->dtype));
    check_vector(op, in, kQSrcScale, MKC_DTYPE_F32, 1);
    check_vector(op, in, kQWeightScale, MKC_DTYPE_F32, channels);
    if (in[kQSrcZeroPoint]) check_vector(op, in, kQSrcZeroPoint, MKC_DTYPE_S32, 1);
    if (dst == MKC_DTYPE_F32) {
        require(!in[kQDstScale] && !in[kQDstZeroPoint], op,
                ": dst_scale and dst_zero_point are for uint8 and int8 results (dst_dtype is "
                "float32)");
        return;
    }
    require(quantized_dtype(dst), op, ": dst_dtype must be F32, U8 or S8, got ", dtype_name(dst));
    require(in[kQDstScale] != nullptr, op, ": a ", dtype_name(dst),
            " result needs dst_scale (input 6)");
    check_vector(op, in, kQDstScale, MKC_DTYPE_F32, 1);
    if (in[kQDstZeroPoint]) check_vector(op, in, kQDstZeroPoint, MKC_DTYPE_S32, 1);
}

dnnl::primitive_attr quantization_attr(const QuantizedInputs &in, mkc_dtype dst,
                                       int weights_mask, mkc_activation_kind activation,
                                       float alpha, float beta, SumPostOp sum,
                                       const dnnl::memory::desc *addend, int *addend_arg) {
    dnnl::primitive_attr attr = user_scratchpad_attr();
    attr.set_scales_mask(DNNL_ARG_SRC, 0);
    attr.set_scales_mask(DNNL_ARG_WEIGHTS, in[kQWeightScale]->dims[0] > 1 ? weights_mask : 0);
    if (in[kQSrcZeroPoint]) attr.set_zero_points_mask(DNNL_ARG_SRC, 0);
    if (dst != MKC_DTYPE_F32) {
        attr.set_scales_mask(DNNL_ARG_DST, 0);
        if (in[kQDstZeroPoint]) attr.set_zero_points_mask(DNNL_ARG_DST, 0);
    }
    dnnl::post_ops ops;
    // The residual's raw values (the destination's bytes before the run),
    // in real units: before the activation, and before the result is
    // divided by dst_scale.
    if (sum.on) ops.append_sum(sum.scale, sum.zero_point);
    if (addend) {
        *addend_arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(ops.len()) | DNNL_ARG_SRC_1;
        ops.append_binary(dnnl::algorithm::binary_add, *addend);
    }
    if (activation != MKC_ACTIVATION_NONE)
        ops.append_eltwise(activation_info(activation, alpha).alg, alpha, beta);
    if (ops.len() > 0) attr.set_post_ops(ops);
    return attr;
}

// Everything a primitive depends on besides its attributes: the ports
// given and their dtypes and sizes.
void sign_ports(Handler &h, const QuantizedInputs &in) {
    for (const ValueDesc *v : in) {
        if (!v) {
            h.sign(-1);
            continue;
        }
        h.sign_value(v->dims, v->dtype);
    }
}

// The scale and zero point ports' run-time arguments: plain vectors.
void add_quantization_args(std::vector<std::pair<int, dnnl::memory::desc>> &args,
                           const QuantizedInputs &in) {
    for (int port : {kQSrcScale, kQWeightScale, kQSrcZeroPoint, kQDstScale, kQDstZeroPoint})
        if (const ValueDesc *v = in[static_cast<size_t>(port)])
            args.push_back({kQArg[port], dnnl::memory::desc(v->dims, to_onednn(v->dtype), tag::a)});
}

Prepared prepared(const std::shared_ptr<QuantizedEntry> &entry, const QuantizedInputs &in,
                  const dnnl::memory::desc &src_takes, const ValueDesc &y) {
    Prepared out{entry, {}, {y}, {}, {}};
    for (int port = 0; port < kQPorts; ++port) {
        const ValueDesc *v = in[static_cast<size_t>(port)];
        if (!v || port == kQResidual)
            out.takes.push_back(empty_desc());
        else if (port == kQSrc)
            out.takes.push_back(src_takes);
        else if (port == kQWeights)
            out.takes.push_back(entry->arg_desc(DNNL_ARG_WEIGHTS));
        else
            out.takes.push_back(layout::plain_desc(v->dims, to_onednn(v->dtype),
                                                   MKC_LAYOUT_CHANNELS_FIRST));
    }
    return out;
}

namespace {

mkc_layout conv_data_format(const mkc_quantized_conv_params &p, const ValueDesc &src) {
    const mkc_layout asked = p.conv.data_format;
    return layout::resolve(asked == MKC_LAYOUT_TARGET ? src.layout : asked, 4);
}

// linear: [..., K] x [N, K] -> [..., N].
struct LinearShape {
    int64_t rows = 1, k = 0, n = 0;
    Dims y; // caller order
};
LinearShape linear_shape(const QuantizedInputs &in) {
    const char *op = "quantized_linear";
    const Dims x = caller_dims(*in[kQSrc]);
    const Dims &w = in[kQWeights]->dims;
    require(w.size() == 2, op, ": weights must be [N, K], got ", shape_text(w));
    LinearShape s;
    s.k = x.back();
    s.n = w[0];
    require(w[1] == s.k, op, ": src's last dim is ", s.k, " but weights are ", shape_text(w),
            " ([N, K])");
    for (size_t i = 0; i + 1 < x.size(); ++i) s.rows *= x[i];
    s.y = x;
    s.y.back() = s.n;
    if (in[kQBias])
        require(in[kQBias]->dims == Dims{s.n}, op, ": bias must have shape [", s.n, "], got ",
                shape_text(in[kQBias]->dims));
    return s;
}

// A sum's residual (port 8): given exactly when `sum`, of the result's
// dtype and shape, with a valid scale and zero point.
void check_residual(const char *op, const char *flag, bool sum, mkc_dtype dst, float sum_scale,
                    int32_t sum_zero_point, const QuantizedInputs &in, const ValueDesc &y) {
    const ValueDesc *r = in[kQResidual];
    if (!sum) {
        require(!r, op, ": a residual (input 8) is added only with ", flag, " != 0");
        return;
    }
    require(r != nullptr, op, ": ", flag, " needs the residual (input 8)");
    require(r->dtype == dst, op, ": the residual is ", dtype_name(r->dtype), ", the result ",
            dtype_name(dst), " (dst_dtype): they must match");
    require(caller_dims(*r) == caller_dims(y), op, ": the residual's shape ",
            shape_text(caller_dims(*r)), " is not the result's ", shape_text(caller_dims(y)));
    require(std::isfinite(sum_scale) && sum_scale > 0, op, ": sum_scale is ", sum_scale,
            "; it must be finite and > 0");
    if (dst == MKC_DTYPE_F32)
        require(sum_zero_point == 0, op, ": sum_zero_point must be 0 for a float32 residual");
    else
        require(sum_zero_point >= (dst == MKC_DTYPE_U8 ? 0 : -128) &&
                    sum_zero_point <= (dst == MKC_DTYPE_U8 ? 255 : 127),
                op, ": sum_zero_point ", sum_zero_point, " is outside ", dtype_name(dst),
                "'s range");
}

} // namespace

ValueDesc quantized_conv_infer(const mkc_quantized_conv_params &p, const QuantizedInputs &in) {
    const char *op = "quantized_conv2d";
    require(in[kQSrc] && in[kQWeights], op, ": src and weights are required");
    require(p.conv.training == 0, op, ": conv.training must be 0");
    require(in[kQWeights]->dims.size() == 4, op, ": weights must be [O, C/groups, KH, KW]");
    const int64_t channels = in[kQWeights]->dims[0];
    check_ports(op, p.dst_dtype, in, channels);
    const ConvShape s = conv2d_shape(op, p.conv, *in[kQSrc], *in[kQWeights], in[kQBias]);
    const ValueDesc y = plain_value(p.dst_dtype, conv_data_format(p, *in[kQSrc]), s.y);
    check_residual(op, "conv.sum", p.conv.sum != 0, p.dst_dtype, p.sum_scale, p.sum_zero_point,
                   in, y);
    return y;
}

ValueDesc quantized_linear_infer(const mkc_quantized_linear_params &p, const QuantizedInputs &in) {
    const char *op = "quantized_linear";
    require(in[kQSrc] && in[kQWeights], op, ": src and weights are required");
    require(in[kQWeights]->dims.size() == 2, op, ": weights must be [N, K], got ",
            shape_text(in[kQWeights]->dims));
    check_ports(op, p.dst_dtype, in, in[kQWeights]->dims[0]);
    if (p.activation != MKC_ACTIVATION_NONE) activation_info(p.activation, p.activation_alpha);
    const LinearShape s = linear_shape(in);
    const ValueDesc y = plain_value(p.dst_dtype, MKC_LAYOUT_CHANNELS_FIRST, s.y);
    check_residual(op, "sum", p.sum != 0, p.dst_dtype, p.sum_scale, p.sum_zero_point, in, y);
    return y;
}

Verdict quantized_conv_onednn_supports(const mkc_quantized_conv_params &p,
                                       const QuantizedInputs &in) {
    (void)p;
    Verdict v;
    if (int8_pairs_saturate() && in[kQSrc] && in[kQSrc]->dtype == MKC_DTYPE_S8) {
        // Its kernels for int8 src halve the weights there (rounding odd ones).
        v.status = MKC_STATUS_UNSUPPORTED;
        v.reason = "quantized_conv2d: without VNNI, oneDNN's kernels for int8 src round the "
                   "weights to even values (uint8 src is exact)";
    }
    return v;
}

Prepared QuantizedConvOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                                  const QuantizedInputs &in) {
    const char *op = "quantized_conv2d";
    const mkc_quantized_conv_params &p = attrs.p;
    const ValueDesc y0 = quantized_conv_infer(p, in);
    const ConvShape s = conv2d_shape(op, p.conv, *in[kQSrc], *in[kQWeights], in[kQBias]);
    const mkc_layout data_format = conv_data_format(p, *in[kQSrc]);
    const KeyText key = key_text(op, "", attrs);
    Handler handler(scope, op, name, key.name, key.suffix, in[kQSrc]->dims);
    handler.sign(OpKind::convolution);
    sign_ports(handler, in);
    sign_attrs(handler, attrs);
    auto entry = handler.acquire_primitive<QuantizedEntry>([&] {
        auto e = std::make_shared<QuantizedEntry>();
        const dnnl::memory::desc x(in[kQSrc]->dims, to_onednn(in[kQSrc]->dtype), tag::any),
            w(s.weights, dnnl::memory::data_type::s8, tag::any),
            b = in[kQBias] ? dnnl::memory::desc({s.y[1]}, f32, tag::a) : dnnl::memory::desc(),
            y(s.y, to_onednn(p.dst_dtype), tag::any);
        // Per-output-channel scales run along the weights' dim 0, or dims
        // 0 and 1 (group, channel in group) of grouped weights.
        const int weights_mask = p.conv.groups > 1 ? 3 : 1;
        const dnnl::primitive_attr attr =
            quantization_attr(in, p.dst_dtype, weights_mask, p.conv.activation,
                              p.conv.activation_alpha,
                              p.conv.activation_beta,
                              SumPostOp{p.conv.sum != 0, p.sum_scale, p.sum_zero_point},
                              nullptr, nullptr);
        dnnl::convolution_forward::primitive_desc pd(
            cpu_engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
            x, w, b, y, s.stride, s.dilation, s.pad_l, s.pad_r, attr);
        e->primitive = dnnl::convolution_forward(pd);
        finish_entry(*e, pd, in, op);
        e->y_md = pd.dst_desc();
        return e;
    });
    Prepared out = prepared(entry, in, entry->arg_desc(DNNL_ARG_SRC),
                            ValueDesc{y0.dtype, data_format, entry->y_md.get_dims(), entry->y_md});
    if (p.conv.groups > 1) {
        // Grouped weights [O, C/G, KH, KW] are read as [G, O/G, C/G, KH, KW]:
        // the same plain bytes.
        out.views.resize(kQPorts);
        out.views[kQWeights] = {
            layout::plain_desc(in[kQWeights]->dims, dnnl::memory::data_type::s8,
                               MKC_LAYOUT_CHANNELS_FIRST),
            dnnl::memory::desc(s.weights, dnnl::memory::data_type::s8, tag::goihw)};
    }
    return out;
}

void QuantizedConvOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    const auto &e = static_cast<const QuantizedEntry &>(entry);
    check_scales(e, buffers);
    if (e.weight_bytes && !buffers.weights_checked) check_weight_range(e, buffers.in[kQWeights]);
    // The output buffer holds the residual of a sum before the run.
    run_bound(scope, entry, buffers,
              {kQArg[0], kQArg[1], kQArg[2], kQArg[3], kQArg[4], kQArg[5], kQArg[6], kQArg[7]},
              {DNNL_ARG_DST});
}

Prepared QuantizedLinearOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                                    const QuantizedInputs &in) {
    const char *op = "quantized_linear";
    const mkc_quantized_linear_params &p = attrs.p;
    const ValueDesc y0 = quantized_linear_infer(p, in);
    const LinearShape s = linear_shape(in);
    const KeyText key = key_text(op, "", attrs);
    Handler handler(scope, op, name, key.name, key.suffix, in[kQSrc]->dims);
    handler.sign(OpKind::matmul);
    sign_ports(handler, in);
    sign_attrs(handler, attrs);
    auto entry = handler.acquire_primitive<QuantizedEntry>([&] {
        auto e = std::make_shared<QuantizedEntry>();
        const dnnl::memory::desc x({s.rows, s.k}, to_onednn(in[kQSrc]->dtype), tag::ab),
            w({s.k, s.n}, dnnl::memory::data_type::s8, tag::any),
            b = in[kQBias] ? dnnl::memory::desc({1, s.n}, f32, tag::ab) : dnnl::memory::desc(),
            y({s.rows, s.n}, to_onednn(p.dst_dtype), tag::ab);
        // Per-output-channel weight scales run along N, matmul's dim 1.
        const dnnl::primitive_attr attr =
            quantization_attr(in, p.dst_dtype, 1 << 1, p.activation, p.activation_alpha,
                              p.activation_beta, SumPostOp{p.sum != 0, p.sum_scale, p.sum_zero_point},
                              nullptr, nullptr);
        dnnl::matmul::primitive_desc pd(cpu_engine(), x, w, b, y, attr);
        e->primitive = dnnl::matmul(pd);
        finish_entry(*e, pd, in, op);
        e->y_md = layout::plain_desc(s.y, to_onednn(p.dst_dtype), MKC_LAYOUT_CHANNELS_FIRST);
        return e;
    });
    // Plain [..., K] bytes are the [rows, K] the primitive reads; the [N, K]
    // weights are read as [K, N] through a transposed view.
    Prepared out = prepared(
        entry, in,
        layout::plain_desc(in[kQSrc]->dims, to_onednn(in[kQSrc]->dtype), in[kQSrc]->layout),
        ValueDesc{y0.dtype, MKC_LAYOUT_CHANNELS_FIRST, s.y, entry->y_md});
    out.views.resize(kQPorts);
    out.views[kQWeights] = {
        layout::plain_desc(in[kQWeights]->dims, dnnl::memory::data_type::s8,
                           MKC_LAYOUT_CHANNELS_FIRST),
        dnnl::memory::desc({s.k, s.n}, dnnl::memory::data_type::s8, Dims{1, s.k})};
    return out;
}

void QuantizedLinearOp::run(const CacheScope &scope, PrimitiveEntry &entry,
                            const Buffers &buffers) {
    const auto &e = static_cast<const QuantizedEntry &>(entry);
    check_scales(e, buffers);
    if (e.weight_bytes && !buffers.weights_checked) check_weight_range(e, buffers.in[kQWeights]);
    run_bound(scope, entry, buffers,
              {kQArg[0], kQArg[1], kQArg[2], kQArg[3], kQArg[4], kQArg[5], kQArg[6], kQArg[7]},
              {DNNL_ARG_DST});
}

} // namespace mkc::ops
