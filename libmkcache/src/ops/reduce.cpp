// Reductions on oneDNN's reduction primitive: src read plain in its label,
// the result written plain with the reduced dims as 1s (in src's label, so
// dropping them leaves the same bytes row-major in the caller's order).
#include "ops/reduce.hpp"

#include "common/engine.hpp"
#include "common/error.hpp"
#include "common/op_kind.hpp"
#include "handler/handler.hpp"
#include "layout/layout.hpp"
#include "ops/attrs.hpp"

namespace mkc::ops {

namespace {

dnnl::algorithm algorithm_of(mkc_reduce_kind kind) {
    switch (kind) {
    case MKC_REDUCE_SUM: return dnnl::algorithm::reduction_sum;
    case MKC_REDUCE_MEAN: return dnnl::algorithm::reduction_mean;
    case MKC_REDUCE_MAX: return dnnl::algorithm::reduction_max;
    case MKC_REDUCE_MIN: return dnnl::algorithm::reduction_min;
    default: break;
    }
    fail(MKC_STATUS_INVALID_ARGUMENT, "reduce: kind must be SUM, MEAN, MAX or MIN, got ",
         static_cast<int>(kind));
}

bool reduced(const ReduceAttrs &a, size_t caller_axis) {
    return a.axes == 0 || (a.axes >> caller_axis & 1u) != 0;
}

// The primitive's dst: src's oneDNN dims with the reduced ones 1, plain in
// src's label.
dnnl::memory::desc kept_desc(const ReduceAttrs &a, const ValueDesc &src) {
    Dims caller = caller_dims(src);
    for (size_t i = 0; i < caller.size(); ++i)
        if (reduced(a, i))
            caller[i] = 1;
    return layout::plain_desc(layout::to_onednn_order(caller, src.layout),
                              dnnl::memory::data_type::f32, src.layout);
}

} // namespace

ReduceAttrs reduce_attrs(const mkc_reduce_params &p, int rank) {
    algorithm_of(p.kind);
    require(p.naxes >= 0 && p.naxes <= rank, "reduce: naxes must be 0..", rank,
            " (src's rank), got ", p.naxes);
    uint32_t mask = 0;
    for (int i = 0; i < p.naxes; ++i) {
        const int axis = p.axes[i];
        require(axis >= -rank && axis < rank, "reduce: axis ", axis, " is out of range for rank ",
                rank);
        const int a = axis < 0 ? axis + rank : axis;
        require((mask >> a & 1u) == 0, "reduce: axis ", axis, " is given twice");
        mask |= 1u << a;
    }
    return {p.kind, mask, p.keepdims != 0};
}

Dims reduced_caller_dims(const ReduceAttrs &a, const Dims &src) {
    Dims out;
    for (size_t i = 0; i < src.size(); ++i) {
        if (!reduced(a, i))
            out.push_back(src[i]);
        else if (a.keepdims)
            out.push_back(1);
    }
    if (out.empty())
        out.push_back(1);
    return out;
}

ValueDesc ReduceOp::infer(const Attrs &attrs, const ValueDesc &src) {
    algorithm_of(attrs.kind);
    require(src.dtype == MKC_DTYPE_F32, "reduce: src must be float32, got ",
            dtype_name(src.dtype));
    const Dims out = reduced_caller_dims(attrs, caller_dims(src));
    if (attrs.keepdims)
        return plain_value(src.dtype, src.layout, layout::to_onednn_order(out, src.layout));
    return plain_value(src.dtype, MKC_LAYOUT_CHANNELS_FIRST, out);
}

Prepared ReduceOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                           const ValueDesc &src) {
    const ValueDesc y = infer(attrs, src);
    const dnnl::memory::desc x =
        layout::plain_desc(src.dims, dnnl::memory::data_type::f32, src.layout);
    const dnnl::memory::desc kept = kept_desc(attrs, src);
    const KeyText key = key_text("reduce", "", attrs);
    Handler handler(scope, "reduce", name, key.name, key.suffix, src.dims);
    handler.sign(OpKind::reduction);
    sign_attrs(handler, attrs);
    // The label decides which caller axes the mask names.
    handler.sign(static_cast<int64_t>(src.layout));
    handler.sign_value(x);
    auto entry = handler.acquire_primitive<PrimitiveEntry>([&] {
        auto e = std::make_shared<PrimitiveEntry>();
        const auto pd = dnnl::reduction::primitive_desc(
            cpu_engine(), algorithm_of(attrs.kind), x, kept, 0.f, 0.f, user_scratchpad_attr());
        e->primitive = dnnl::reduction(pd);
        e->set_args(pd, {DNNL_ARG_SRC, DNNL_ARG_DST});
        return e;
    });
    return {entry, {x}, {y}, {DNNL_ARG_SRC}, {DNNL_ARG_DST}};
}

void ReduceOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    run_bound(scope, entry, buffers, {DNNL_ARG_SRC}, {DNNL_ARG_DST});
}

} // namespace mkc::ops
