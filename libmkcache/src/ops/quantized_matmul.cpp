// quantized_matmul: a batched matmul of two 8-bit values with their scales
// (and a's zero point) bound at run time, an addend and the activation as
// post-ops, the result requantized or dequantized inside the primitive.
// It reads strided operands where they are, as the float32 matmul does,
// so an attention's heads cost no copy in 8 bits either.
#include <cmath>

#include "common/engine.hpp"
#include "common/error.hpp"
#include "common/op_kind.hpp"
#include "handler/handler.hpp"
#include "layout/layout.hpp"
#include "ops/matmul_geometry.hpp"
#include "ops/ops.hpp"
#include "ops/quantized.hpp"
#include "ops/quantized_parts.hpp"

namespace mkc::ops {

namespace {

constexpr const char *kOp = "quantized_matmul";

MatmulGeometry geometry(const mkc_quantized_matmul_params &p, const QuantizedInputs &in) {
    require(in[kQSrc] && in[kQWeights], kOp, ": a and b are required");
    const ValueDesc *addend = in[kQResidual];
    MatmulGeometry g = matmul_shapes(kOp, p.transpose_a != 0, p.transpose_b != 0, *in[kQSrc],
                                     *in[kQWeights], in[kQBias], addend);
    const int64_t n = g.yc.back();
    check_ports(kOp, p.dst_dtype, in, n);
    if (addend)
        require(addend->dtype == MKC_DTYPE_F32, kOp, ": the addend must be float32, got ",
                dtype_name(addend->dtype));
    if (p.activation != MKC_ACTIVATION_NONE) activation_info(p.activation, p.activation_alpha);
    g.dtype = p.dst_dtype;
    return g;
}

} // namespace

ValueDesc quantized_matmul_infer(const mkc_quantized_matmul_params &p, const QuantizedInputs &in) {
    const MatmulGeometry g = geometry(p, in);
    return plain_value(p.dst_dtype, MKC_LAYOUT_CHANNELS_FIRST, g.yc);
}

Verdict quantized_matmul_onednn_supports(const mkc_quantized_matmul_params &p,
                                         const QuantizedInputs &in) {
    (void)p;
    Verdict v;
    if (int8_pairs_saturate() && in[kQSrc] && in[kQSrc]->dtype == MKC_DTYPE_S8) {
        v.status = MKC_STATUS_UNSUPPORTED;
        v.reason = "quantized_matmul: without VNNI, oneDNN's int8 matmul is exact for uint8 a "
                   "only";
    }
    return v;
}

Prepared QuantizedMatmulOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                                    const QuantizedInputs &in, const Dims *y_strides) {
    const mkc_quantized_matmul_params &p = attrs.p;
    const MatmulGeometry g = geometry(p, in);
    require(!y_strides || y_strides->size() == g.yc.size(), kOp, ": the result's strides have ",
            y_strides ? y_strides->size() : 0, " entries for rank ", g.yc.size());
    const dnnl::memory::desc a(g.ac, to_onednn(in[kQSrc]->dtype), g.a_strides),
        b(g.bc, dnnl::memory::data_type::s8, g.b_strides),
        y(g.yc, to_onednn(p.dst_dtype), y_strides ? *y_strides : row_major_strides(g.yc));
    Dims bias_dims(g.yc.size(), 1);
    bias_dims.back() = g.yc.back();
    const dnnl::memory::desc bias =
        in[kQBias] ? dnnl::memory::desc(bias_dims, dnnl::memory::data_type::f32,
                                        row_major_strides(bias_dims))
                   : dnnl::memory::desc();
    const dnnl::memory::desc addend =
        g.addend.empty() ? dnnl::memory::desc()
                         : dnnl::memory::desc(g.addend, dnnl::memory::data_type::f32,
                                              row_major_strides(g.addend));
    const KeyText key = key_text(kOp, "", attrs);
    Handler handler(scope, kOp, name, key.name, key.suffix, g.ac);
    handler.sign(OpKind::matmul);
    sign_ports(handler, in);
    sign_attrs(handler, attrs);
    handler.sign_layout(a);
    handler.sign_layout(b);
    handler.sign(y_strides ? 1 : 0);
    if (y_strides) handler.sign_layout(y);
    if (!g.addend.empty()) handler.sign_layout(addend);
    auto entry = handler.acquire_primitive<QuantizedEntry>([&] {
        auto e = std::make_shared<QuantizedEntry>();
        // Per-column scales of b run along the result's last dim.
        const int columns = 1 << (static_cast<int>(g.n) - 1);
        const dnnl::primitive_attr attr = quantization_attr(
            in, p.dst_dtype, columns, p.activation, p.activation_alpha, p.activation_beta,
            SumPostOp{}, g.addend.empty() ? nullptr : &addend, &e->addend_arg);
        dnnl::matmul::primitive_desc pd =
            in[kQBias] ? dnnl::matmul::primitive_desc(cpu_engine(), a, b, bias, y, attr)
                       : dnnl::matmul::primitive_desc(cpu_engine(), a, b, y, attr);
        e->primitive = dnnl::matmul(pd);
        std::vector<std::pair<int, dnnl::memory::desc>> extra;
        if (e->addend_arg) extra.push_back({e->addend_arg, addend});
        finish_entry(*e, pd, in, kOp, extra);
        e->y_md = y;
        return e;
    });
    Prepared out{entry, {}, {ValueDesc{p.dst_dtype, MKC_LAYOUT_CHANNELS_FIRST, g.yc, y}}, {}, {}};
    for (int port = 0; port < kQPorts; ++port) {
        const ValueDesc *v = in[static_cast<size_t>(port)];
        if (!v)
            out.takes.push_back(empty_desc());
        else if (port == kQSrc || port == kQWeights)
            out.takes.push_back(operand_takes(*v));
        else
            out.takes.push_back(layout::plain_desc(v->dims, to_onednn(v->dtype), v->layout));
    }
    return out;
}

void QuantizedMatmulOp::run(const CacheScope &scope, PrimitiveEntry &entry,
                            const Buffers &buffers) {
    const auto &e = static_cast<const QuantizedEntry &>(entry);
    check_scales(e, buffers);
    if (e.weight_bytes) check_weight_range(e, buffers.in[kQWeights]);
    Handler::Execution exec(entry, scope);
    for (int port = 0; port < kQResidual; ++port)
        if (buffers.in[port]) exec.raw(kQArg[port], const_cast<void *>(buffers.in[port]));
    if (e.addend_arg) exec.raw(e.addend_arg, const_cast<void *>(buffers.in[kQResidual]));
    exec.output(DNNL_ARG_DST, buffers.out[0]);
    exec.run();
}

} // namespace mkc::ops
