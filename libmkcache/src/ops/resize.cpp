// resize on oneDNN's resampling primitive: src read plain in its label, the
// result written plain in the same label.
#include "ops/resize.hpp"

#include "common/engine.hpp"
#include "common/error.hpp"
#include "common/op_kind.hpp"
#include "handler/handler.hpp"
#include "layout/layout.hpp"

namespace mkc::ops {

namespace {

dnnl::algorithm algorithm_of(mkc_resize_mode mode) {
    switch (mode) {
    case MKC_RESIZE_NEAREST: return dnnl::algorithm::resampling_nearest;
    case MKC_RESIZE_LINEAR: return dnnl::algorithm::resampling_linear;
    default: break;
    }
    fail(MKC_STATUS_INVALID_ARGUMENT, "resize: mode must be NEAREST or LINEAR, got ",
         static_cast<int>(mode));
}

} // namespace

ValueDesc ResizeOp::infer(const Attrs &attrs, const ValueDesc &src) {
    algorithm_of(attrs.mode);
    require(src.dtype == MKC_DTYPE_F32, "resize: src must be float32, got ",
            dtype_name(src.dtype));
    const int rank = static_cast<int>(src.dims.size());
    require(rank >= 3 && rank <= 5 && attrs.spatial == rank - 2,
            "resize: oneDNN resizes the 1 to 3 spatial dims of a 3-D to 5-D src, got rank ",
            rank);
    Dims out = src.dims;
    for (int i = 0; i < attrs.spatial; ++i) {
        require(attrs.out[i] >= 1, "resize: a result dim is ", attrs.out[i]);
        out[static_cast<size_t>(2 + i)] = attrs.out[i];
    }
    return plain_value(src.dtype, src.layout, out);
}

Prepared ResizeOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                           const ValueDesc &src) {
    const ValueDesc y = infer(attrs, src);
    const dnnl::memory::desc x =
        layout::plain_desc(src.dims, dnnl::memory::data_type::f32, src.layout);
    const dnnl::memory::desc d =
        layout::plain_desc(y.dims, dnnl::memory::data_type::f32, src.layout);
    const KeyText key = key_text("resize", "", attrs);
    Handler handler(scope, "resize", name, key.name, key.suffix, src.dims);
    handler.sign(OpKind::resampling);
    sign_attrs(handler, attrs);
    handler.sign(static_cast<int64_t>(src.layout));
    handler.sign_value(x);
    auto entry = handler.acquire_primitive<PrimitiveEntry>([&] {
        auto e = std::make_shared<PrimitiveEntry>();
        const auto pd = dnnl::resampling_forward::primitive_desc(
            cpu_engine(), dnnl::prop_kind::forward_inference, algorithm_of(attrs.mode), x, d,
            user_scratchpad_attr());
        e->primitive = dnnl::resampling_forward(pd);
        e->set_args(pd, {DNNL_ARG_SRC, DNNL_ARG_DST});
        return e;
    });
    return {entry, {x}, {y}, {DNNL_ARG_SRC}, {DNNL_ARG_DST}};
}

void ResizeOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    run_bound(scope, entry, buffers, {DNNL_ARG_SRC}, {DNNL_ARG_DST});
}

} // namespace mkc::ops
