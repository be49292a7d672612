// conv2d forward through the handler base. oneDNN chooses every layout
// (format_tag::any); the output stays in that layout until exported.
#include <string>

#include "common/engine.hpp"
#include "common/error.hpp"
#include "handler/handler.hpp"
#include "keys/keys.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

using tag = dnnl::memory::format_tag;

struct ConvEntry : PrimitiveEntry {
    dnnl::convolution_forward::primitive_desc pd;
};

std::string default_conv_name(const mkc_conv2d_params &p, const Dims &w, bool bias) {
    std::string n = "conv2d:k";
    keys::append_int(n, w[2]);
    n += 'x';
    keys::append_int(n, w[3]);
    n += ":s";
    keys::append_shape(n, p.stride, 2);
    n += ":p";
    const int64_t pads[4] = {p.pad_begin[0], p.pad_begin[1], p.pad_end[0], p.pad_end[1]};
    keys::append_shape(n, pads, 4);
    n += ":d";
    keys::append_shape(n, p.dilation, 2);
    n += ":g";
    keys::append_int(n, p.groups);
    n += bias ? ":bias" : ":nobias";
    if (p.activation != MKC_ACTIVATION_NONE) {
        n += ':';
        n += activation_info(p.activation).name;
        if (p.activation_alpha != 0.f || p.activation_beta != 0.f)
            n += '(' + std::to_string(p.activation_alpha) + ',' +
                 std::to_string(p.activation_beta) + ')';
    }
    n += p.data_format == MKC_LAYOUT_CHANNELS_LAST ? ":nhwc" : ":nchw";
    return n;
}

void check_params(const mkc_conv2d_params &p) {
    for (int i = 0; i < 2; ++i) {
        require(p.stride[i] >= 1, "conv2d: stride must be >= 1, got ", p.stride[i]);
        require(p.dilation[i] >= 1, "conv2d: dilation must be >= 1, got ", p.dilation[i]);
        require(p.pad_begin[i] >= 0 && p.pad_end[i] >= 0, "conv2d: padding must be >= 0");
        require(p.stride[i] <= (int64_t(1) << 30) && p.dilation[i] <= (int64_t(1) << 30) &&
                    p.pad_begin[i] <= (int64_t(1) << 30) && p.pad_end[i] <= (int64_t(1) << 30),
                "conv2d: stride, padding or dilation is absurdly large");
    }
    require(p.groups >= 1, "conv2d: groups must be >= 1, got ", p.groups);
    if (p.activation != MKC_ACTIVATION_NONE) activation_info(p.activation); // validates
}

} // namespace

void conv2d(const mkc_conv2d_params &p, const Tensor &src, const Tensor &weights,
            const Tensor *bias, mkc_tensor **dst) {
    check_params(p);
    const mkc_layout data_format = layout::resolve(p.data_format, 4);
    require(src.dtype == MKC_DTYPE_F32 && weights.dtype == MKC_DTYPE_F32 &&
                (!bias || bias->dtype == MKC_DTYPE_F32),
            "conv2d: every input must be float32");
    const Dims &x = onednn_dims(src);
    const Dims &w = onednn_dims(weights);
    require(x.size() == 4, "conv2d: src must be 4-D (N,C,H,W or N,H,W,C), got rank ", x.size());
    require(w.size() == 4, "conv2d: weights must be 4-D [O, C/groups, KH, KW], got rank ",
            w.size());
    const int64_t g = p.groups;
    require(x[1] == w[1] * g, "conv2d: src has ", x[1], " channels but weights expect ",
            w[1] * g, " (weights dim 1 = ", w[1], " x groups = ", g, ")");
    require(w[0] % g == 0, "conv2d: output channels (", w[0], ") not divisible by groups (", g,
            ")");
    if (bias) {
        const Dims &b = onednn_dims(*bias);
        require(b.size() == 1 && b[0] == w[0], "conv2d: bias must have shape [", w[0], "]");
    }
    Dims y = {x[0], w[0], 0, 0};
    for (int i = 0; i < 2; ++i) {
        const int64_t extent = (w[2 + i] - 1) * p.dilation[i] + 1;
        const int64_t span = x[2 + i] + p.pad_begin[i] + p.pad_end[i] - extent;
        require(span >= 0, "conv2d: kernel (", w[2 + i], " with dilation ", p.dilation[i],
                ") is larger than the padded input (", x[2 + i] + p.pad_begin[i] + p.pad_end[i],
                ") along ", i == 0 ? "H" : "W");
        y[2 + i] = span / p.stride[i] + 1;
    }

    Handler handler("conv2d", p.name, p.name && p.name[0] ? std::string() :
                    default_conv_name(p, w, bias != nullptr), nullptr, x);
    handler.sign(1); // operator id
    handler.sign(x);
    handler.sign(w);
    handler.sign(bias ? 1 : 0);
    for (int i = 0; i < 2; ++i) {
        handler.sign(p.stride[i]);
        handler.sign(p.pad_begin[i]);
        handler.sign(p.pad_end[i]);
        handler.sign(p.dilation[i]);
    }
    handler.sign(g);
    handler.sign(p.activation);
    handler.sign_float(p.activation_alpha);
    handler.sign_float(p.activation_beta);
    handler.sign(MKC_DTYPE_F32);

    const Dims wg = g > 1 ? Dims{g, w[0] / g, w[1], w[2], w[3]} : w;
    auto entry = handler.acquire_primitive<ConvEntry>([&] {
        const auto f32 = dnnl::memory::data_type::f32;
        dnnl::post_ops ops;
        if (p.activation != MKC_ACTIVATION_NONE)
            ops.append_eltwise(activation_info(p.activation).alg, p.activation_alpha,
                               p.activation_beta);
        dnnl::primitive_attr attr;
        attr.set_post_ops(ops);
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::library);
        const dnnl::memory::desc src_md(x, f32, tag::any), w_md(wg, f32, tag::any),
            dst_md(y, f32, tag::any);
        const Dims strides = {p.stride[0], p.stride[1]};
        const Dims dil = {p.dilation[0] - 1, p.dilation[1] - 1};
        const Dims pl = {p.pad_begin[0], p.pad_begin[1]}, pr = {p.pad_end[0], p.pad_end[1]};
        auto e = std::make_shared<ConvEntry>();
        if (bias) {
            const dnnl::memory::desc b_md({w[0]}, f32, tag::a);
            e->pd = dnnl::convolution_forward::primitive_desc(
                cpu_engine(), dnnl::prop_kind::forward_inference,
                dnnl::algorithm::convolution_direct, src_md, w_md, b_md, dst_md, strides, dil,
                pl, pr, attr);
        } else {
            e->pd = dnnl::convolution_forward::primitive_desc(
                cpu_engine(), dnnl::prop_kind::forward_inference,
                dnnl::algorithm::convolution_direct, src_md, w_md, dst_md, strides, dil, pl, pr,
                attr);
        }
        e->primitive = dnnl::convolution_forward(e->pd);
        std::vector<std::pair<int, dnnl::memory::desc>> args = {
            {DNNL_ARG_SRC, e->pd.src_desc()},
            {DNNL_ARG_WEIGHTS, e->pd.weights_desc()},
            {DNNL_ARG_DST, e->pd.dst_desc()}};
        if (bias) args.push_back({DNNL_ARG_BIAS, e->pd.bias_desc()});
        e->set_args(args);
        e->bytes = e->pd.scratchpad_desc().get_size();
        return e;
    });

    Handler::Output out = Handler::prepare_output(dst, *entry, DNNL_ARG_DST, data_format,
                                                  MKC_DTYPE_F32, "conv2d");
    {
        Handler::Execution exec(*entry);
        exec.input(DNNL_ARG_SRC, src);
        if (g > 1) {
            // OIHW bytes seen as goihw: O splits into (g, O/g) in place.
            dnnl::memory::desc view;
            try {
                view = weights.desc.reshape(wg);
            } catch (const dnnl::error &) {
                fail(MKC_STATUS_UNSUPPORTED,
                     "conv2d: grouped weights must be in a plain layout (OIHW)");
            }
            exec.input(DNNL_ARG_WEIGHTS, weights, &view);
        } else {
            exec.input(DNNL_ARG_WEIGHTS, weights);
        }
        if (bias) exec.input(DNNL_ARG_BIAS, *bias);
        exec.output(DNNL_ARG_DST, out.data);
        exec.run();
    }
    Handler::finish_output(out, dst);
    layout::set_target(data_format); // seed 001: the model's layout is the thread's target
}

} // namespace mkc::ops
