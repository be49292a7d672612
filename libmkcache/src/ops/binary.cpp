// Binary element-wise ops with numpy broadcasting. oneDNN broadcasts only
// its second source, so: the operand with the output's shape becomes src0
// (swapping a and b when needed: sub and div then fix the order with a
// post-op), the other is viewed with size-1 dims in the output's oneDNN
// order, and when neither has the output's shape one side is expanded first.
#include <algorithm>
#include <cstring>
#include <string>

#include "common/engine.hpp"
#include "common/error.hpp"
#include "handler/handler.hpp"
#include "keys/keys.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

struct BinaryEntry : PrimitiveEntry {
    dnnl::binary::primitive_desc pd;
};

struct BinaryInfo {
    dnnl::algorithm alg;
    const char *name;
    const char *suffix; // seed 002: elementwise mul carries "M"
    bool commutative;
};

BinaryInfo binary_info(mkc_binary_kind kind) {
    using a = dnnl::algorithm;
    switch (kind) {
    case MKC_BINARY_ADD: return {a::binary_add, "add", "A", true};
    case MKC_BINARY_SUB: return {a::binary_sub, "sub", "S", false};
    case MKC_BINARY_MUL: return {a::binary_mul, "mul", "M", true};
    case MKC_BINARY_DIV: return {a::binary_div, "div", "D", false};
    case MKC_BINARY_MAX: return {a::binary_max, "maximum", "X", true};
    case MKC_BINARY_MIN: return {a::binary_min, "minimum", "N", true};
    default: break;
    }
    fail(MKC_STATUS_INVALID_ARGUMENT, "binary: unsupported kind ", static_cast<int>(kind));
}

// Caller-order dims padded with leading 1s to rank n.
Dims padded(const Dims &caller, int n) {
    Dims out(n - caller.size(), 1);
    out.insert(out.end(), caller.begin(), caller.end());
    return out;
}

// Caller-order dims and strides -> the output layout's oneDNN order.
Dims permute_to_onednn(const Dims &v, mkc_layout layout) {
    return layout::to_onednn_order(v, layout);
}

// `t` seen as an n-D tensor in `out_layout`'s oneDNN order, with its own
// dims (some 1). Needs t to be plain in its own caller order; returns false
// if it is not (blocked), so the caller converts it first.
bool broadcast_view(const Tensor &t, int n, mkc_layout out_layout, dnnl::memory::desc &view) {
    const int r = static_cast<int>(t.dims.size());
    if (r == n && (t.layout == out_layout || n < 3)) {
        view = t.desc;
        return true;
    }
    if (!(t.desc == layout::plain_desc(t.dims, to_onednn(t.dtype), t.layout))) return false;
    const Dims cd = padded(caller_dims(t), n);
    Dims strides(n, 1);
    for (int i = n - 2; i >= 0; --i) strides[i] = strides[i + 1] * cd[i + 1];
    view = dnnl::memory::desc(permute_to_onednn(cd, out_layout), to_onednn(t.dtype),
                              permute_to_onednn(strides, out_layout));
    return true;
}

} // namespace

void binary(mkc_binary_kind kind, const char *name, const Tensor &a, const Tensor &b,
            mkc_tensor **dst) {
    const BinaryInfo info = binary_info(kind);
    require(a.dtype == MKC_DTYPE_F32 && b.dtype == MKC_DTYPE_F32, info.name,
            ": a and b must be float32");
    const Dims ca = caller_dims(a), cb = caller_dims(b);
    const int n = static_cast<int>(std::max(ca.size(), cb.size()));
    const Dims pa = padded(ca, n), pb = padded(cb, n);
    Dims out(n);
    for (int i = 0; i < n; ++i) {
        if (pa[i] == pb[i] || pb[i] == 1) out[i] = pa[i];
        else if (pa[i] == 1) out[i] = pb[i];
        else
            fail(MKC_STATUS_INVALID_ARGUMENT, info.name, ": shapes ", shape_text(ca), " (a) and ",
                 shape_text(cb), " (b) do not broadcast (dim ", i, ": ", pa[i], " vs ", pb[i],
                 ")");
    }
    // src0 must have the output's shape; prefer a (so `a op= b` is in place).
    const bool a_full = pa == out && static_cast<int>(ca.size()) == n;
    const bool b_full = pb == out && static_cast<int>(cb.size()) == n;
    std::unique_ptr<Tensor> expanded; // when neither side has the output's shape
    const Tensor *src0 = &a, *src1 = &b;
    bool swapped = false;
    if (!a_full && b_full) {
        src0 = &b;
        src1 = &a;
        swapped = true;
    } else if (!a_full && !b_full) {
        // Expand a to the output's shape: zeros(out) + a.
        const mkc_layout lay = static_cast<int>(ca.size()) == n ? a.layout : MKC_LAYOUT_CHANNELS_FIRST;
        const Dims od = layout::to_onednn_order(out, lay);
        auto zeros = make_owned_tensor(layout::plain_desc(od, to_onednn(a.dtype), lay), lay, a.dtype);
        std::memset(zeros->data, 0, zeros->desc.get_size());
        mkc_tensor *result = zeros.get();
        binary(MKC_BINARY_ADD, nullptr, *zeros, a, &result);
        expanded = std::move(zeros);
        src0 = expanded.get();
    }
    const mkc_layout out_layout = src0->layout;

    dnnl::memory::desc view;
    std::unique_ptr<Tensor> src1_plain;
    if (!broadcast_view(*src1, n, out_layout, view)) {
        src1 = &row_major(*src1, src1_plain);
        broadcast_view(*src1, n, out_layout, view);
    }

    Handler handler(info.name, name, std::string("binary:") + info.name, info.suffix,
                    src0->dims);
    handler.sign(5); // operator id
    handler.sign(kind);
    handler.sign(swapped ? 1 : 0);
    handler.sign_layout(*src0, DNNL_ARG_SRC_0);
    handler.sign_layout(view);
    auto entry = handler.acquire_primitive<BinaryEntry>([&] {
        auto e = std::make_shared<BinaryEntry>();
        dnnl::primitive_attr attr = user_scratchpad_attr();
        if (swapped && !info.commutative) {
            // We computed b op a; turn it into a op b.
            dnnl::post_ops ops;
            if (kind == MKC_BINARY_SUB) ops.append_eltwise(dnnl::algorithm::eltwise_linear, -1.f, 0.f);
            else ops.append_eltwise(dnnl::algorithm::eltwise_pow, 1.f, -1.f); // 1 / (b / a)
            attr.set_post_ops(ops);
        }
        e->pd = dnnl::binary::primitive_desc(cpu_engine(), info.alg, src0->desc, view, src0->desc,
                                             attr);
        e->primitive = dnnl::binary(e->pd);
        e->set_args(e->pd, {DNNL_ARG_SRC_0, DNNL_ARG_SRC_1, DNNL_ARG_DST});
        return e;
    });
    Handler::Output result =
        Handler::prepare_output(dst, *entry, DNNL_ARG_DST, out_layout, src0->dtype, info.name);
    {
        Handler::Execution exec(*entry);
        exec.input(DNNL_ARG_SRC_0, *src0);
        exec.input(DNNL_ARG_SRC_1, *src1, &view);
        exec.output(DNNL_ARG_DST, result.data);
        exec.run();
    }
    Handler::finish_output(result, dst);
}

} // namespace mkc::ops
