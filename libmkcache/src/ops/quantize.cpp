// quantize with `fast` set, on oneDNN: one reorder from src's arrangement
// (blocked, strided or plain) to the 8-bit result plain in src's layout,
// the scale and zero point bound at run time. oneDNN multiplies by the
// scale's reciprocal, so a value within float32 rounding of a half step
// may round to the other neighbour: the operator allows that only when
// asked (the exact definition is the reference kernel's).
#include "ops/quantize.hpp"

#include <cmath>

#include "common/error.hpp"
#include "common/op_kind.hpp"
#include "handler/handler.hpp"
#include "layout/layout.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

constexpr const char *kOp = "quantize";

struct QuantizeEntry : PrimitiveEntry {
    bool zero_point = false; // a zero point is bound (int32, from the port's byte)
    mkc_dtype dtype = MKC_DTYPE_U8;
};

} // namespace

Verdict quantize_onednn_supports(const mkc_quantize_params &p, const ValueDesc &src,
                                 const ValueDesc &scale) {
    (void)src;
    Verdict v;
    if (!p.fast) {
        v.status = MKC_STATUS_UNSUPPORTED;
        v.reason = "quantize: oneDNN's reorder multiplies by 1 / scale, which may round a value "
                   "at a half step the other way (allowed with fast)";
    } else if (scale.dims != Dims{1}) {
        v.status = MKC_STATUS_UNSUPPORTED;
        v.reason = "quantize: fast runs on oneDNN for a per-tensor scale only";
    }
    return v;
}

Prepared QuantizeOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                             const ValueDesc &src, const ValueDesc &scale,
                             const ValueDesc *zero_point) {
    const mkc_quantize_params &p = attrs.p;
    require(scale.dims == Dims{1}, kOp, ": fast runs on oneDNN for a per-tensor scale only");
    const dnnl::memory::desc to =
        layout::plain_desc(src.dims, to_onednn(p.to), src.layout);
    const KeyText key = key_text(kOp, "", attrs);
    Handler handler(scope, kOp, name, key.name, key.suffix, src.dims);
    handler.sign(OpKind::reorder);
    handler.sign_value(src.desc);
    handler.sign_layout(src.desc);
    handler.sign_value(to);
    handler.sign(zero_point ? 1 : 0);
    auto entry = handler.acquire_primitive<QuantizeEntry>([&] {
        auto e = std::make_shared<QuantizeEntry>();
        dnnl::primitive_attr attr = user_scratchpad_attr();
        attr.set_scales_mask(DNNL_ARG_DST, 0);
        if (zero_point) attr.set_zero_points_mask(DNNL_ARG_DST, 0);
        dnnl::reorder::primitive_desc pd(cpu_engine(), src.desc, cpu_engine(), to, attr);
        e->primitive = dnnl::reorder(pd);
        const dnnl::memory::desc one_f32({1}, dnnl::memory::data_type::f32,
                                         dnnl::memory::format_tag::a),
            one_s32({1}, dnnl::memory::data_type::s32, dnnl::memory::format_tag::a);
        std::vector<std::pair<int, dnnl::memory::desc>> args = {
            {DNNL_ARG_FROM, src.desc},
            {DNNL_ARG_TO, to},
            {DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST, one_f32}};
        if (zero_point) args.push_back({DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, one_s32});
        e->set_args(args);
        e->add_scratchpad(pd);
        e->zero_point = zero_point != nullptr;
        e->dtype = p.to;
        return e;
    });
    Prepared out{entry, {src.desc, layout::plain_desc(scale.dims, to_onednn(scale.dtype),
                                                      MKC_LAYOUT_CHANNELS_FIRST)},
                 {ValueDesc{p.to, src.layout, src.dims, to}}, {}, {}};
    if (zero_point)
        out.takes.push_back(layout::plain_desc(zero_point->dims, to_onednn(zero_point->dtype),
                                               MKC_LAYOUT_CHANNELS_FIRST));
    return out;
}

void QuantizeOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    const auto &e = static_cast<const QuantizeEntry &>(entry);
    float scale = *static_cast<const float *>(buffers.in[1]);
    if (!(std::isfinite(scale) && scale > 0.0f))
        fail(MKC_STATUS_INVALID_ARGUMENT, kOp, ": scale[0] is ", scale,
             "; every scale must be finite and > 0");
    // The port holds the zero point in the result's dtype; oneDNN reads int32.
    int32_t zero = 0;
    if (e.zero_point)
        zero = e.dtype == MKC_DTYPE_S8 ? *static_cast<const int8_t *>(buffers.in[2])
                                       : *static_cast<const uint8_t *>(buffers.in[2]);
    Handler::Execution exec(entry, scope);
    exec.raw(DNNL_ARG_FROM, const_cast<void *>(buffers.in[0])); // read only
    exec.raw(DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST, &scale);
    if (e.zero_point) exec.raw(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, &zero);
    exec.output(DNNL_ARG_TO, buffers.out[0]);
    exec.run();
}

} // namespace mkc::ops
