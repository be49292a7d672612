// linear (inner product: weights [out, in], converted once when constant)
// and batched matmul (transpose flags, broadcast batch dims), both with an
// optional bias and a fused activation.
#include <algorithm>
#include <string>

#include "common/engine.hpp"
#include "common/error.hpp"
#include "handler/handler.hpp"
#include "keys/keys.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

using tag = dnnl::memory::format_tag;
const auto f32 = dnnl::memory::data_type::f32;

struct LinearEntry : PrimitiveEntry {
    dnnl::inner_product_forward::primitive_desc pd;
    dnnl::memory::desc x_plain, y_md; // src as the caller has it; the result
};
struct MatmulEntry : PrimitiveEntry {
    dnnl::matmul::primitive_desc pd;
};

dnnl::primitive_attr activation_attr(mkc_activation_kind kind, float alpha, float beta) {
    dnnl::primitive_attr attr = user_scratchpad_attr();
    if (kind != MKC_ACTIVATION_NONE) {
        dnnl::post_ops ops;
        ops.append_eltwise(activation_info(kind).alg, alpha, beta);
        attr.set_post_ops(ops);
    }
    return attr;
}

} // namespace

void linear(const mkc_linear_params &p, const Tensor &src, const Tensor &weights,
            const Tensor *bias, mkc_tensor **dst) {
    require(src.dtype == MKC_DTYPE_F32 && weights.dtype == MKC_DTYPE_F32 &&
                (!bias || bias->dtype == MKC_DTYPE_F32),
            "linear: every input must be float32");
    const Dims xc = caller_dims(src);
    const Dims &w = onednn_dims(weights);
    require(w.size() == 2, "linear: weights must be 2-D [out, in], got rank ", w.size());
    require(xc.back() == w[1], "linear: src has ", xc.back(), " input features but weights expect ",
            w[1], " (weights shape ", shape_text(w), ")");
    if (bias) {
        const Dims &b = onednn_dims(*bias);
        require(b.size() == 1 && b[0] == w[0], "linear: bias must have shape [", w[0], "]");
    }
    if (p.activation != MKC_ACTIVATION_NONE) activation_info(p.activation);
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < xc.size(); ++i) rows *= xc[i];
    const Dims x2 = {rows, w[1]};

    std::string default_name;
    if (!p.name || !p.name[0]) {
        default_name = "linear:" + std::to_string(w[1]) + "x" + std::to_string(w[0]);
        if (bias) default_name += ":bias";
        if (p.activation != MKC_ACTIVATION_NONE)
            default_name += std::string(":") + activation_info(p.activation).name;
    }
    Handler handler("linear", p.name, default_name, nullptr, x2);
    handler.sign(7); // operator id
    handler.sign(src.dims);
    handler.sign(src.layout);
    handler.sign(w);
    handler.sign(bias ? 1 : 0);
    handler.sign(p.activation);
    handler.sign_float(p.activation_alpha);
    handler.sign_float(p.activation_beta);
    auto entry = handler.acquire_primitive<LinearEntry>([&] {
        auto e = std::make_shared<LinearEntry>();
        const dnnl::memory::desc x_view(x2, f32, tag::ab), w_md(w, f32, tag::any),
            y2_md({rows, w[0]}, f32, tag::ab);
        const auto attr = activation_attr(p.activation, p.activation_alpha, p.activation_beta);
        if (bias)
            e->pd = dnnl::inner_product_forward::primitive_desc(
                cpu_engine(), dnnl::prop_kind::forward_inference, x_view, w_md,
                dnnl::memory::desc({w[0]}, f32, tag::a), y2_md, attr);
        else
            e->pd = dnnl::inner_product_forward::primitive_desc(
                cpu_engine(), dnnl::prop_kind::forward_inference, x_view, w_md, y2_md, attr);
        e->primitive = dnnl::inner_product_forward(e->pd);
        std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
        if (bias) args.push_back(DNNL_ARG_BIAS);
        e->set_args(e->pd, args);
        e->x_plain = layout::plain_desc(src.dims, f32, src.layout);
        Dims yc(xc.begin(), xc.end() - 1);
        yc.push_back(w[0]);
        // The result is row-major [rows, out]; the caller sees it with x's
        // leading dims.
        e->y_md = dnnl::memory::desc(yc, f32, row_major_strides(yc));
        e->add_scratchpad(e->pd);
        return e;
    });
    std::unique_ptr<Tensor> holder, created;
    const Tensor &x = Handler::plain_input(*entry, DNNL_ARG_SRC, src, entry->x_plain, holder);
    Tensor &y = Handler::plain_output(*entry, DNNL_ARG_DST, dst, entry->y_md,
                                      MKC_LAYOUT_CHANNELS_FIRST, created, "linear");
    {
        Handler::Execution exec(*entry);
        exec.raw(DNNL_ARG_SRC, x.data); // plain [..., in] is the [rows, in] the primitive wants
        exec.input(DNNL_ARG_WEIGHTS, weights);
        if (bias) exec.input(DNNL_ARG_BIAS, *bias);
        exec.output(DNNL_ARG_DST, y.data);
        exec.run();
    }
    Handler::publish(created, dst);
}

void matmul(const mkc_matmul_params &p, const Tensor &a_in, const Tensor &b_in, const Tensor *bias,
            mkc_tensor **dst) {
    require(a_in.dtype == MKC_DTYPE_F32 && b_in.dtype == MKC_DTYPE_F32 &&
                (!bias || bias->dtype == MKC_DTYPE_F32),
            "matmul: every input must be float32");
    std::unique_ptr<Tensor> ha, hb;
    const Tensor &a = row_major(a_in, ha);
    const Tensor &b = row_major(b_in, hb);
    Dims ac = caller_dims(a), bc = caller_dims(b);
    require(ac.size() >= 2 && bc.size() >= 2, "matmul: a and b must have rank >= 2, got ", ac.size(),
            " and ", bc.size());
    const size_t n = std::max(ac.size(), bc.size());
    ac.insert(ac.begin(), n - ac.size(), 1);
    bc.insert(bc.begin(), n - bc.size(), 1);
    // Memory order is [..., rows, cols]; the views swap the last two when
    // transposed.
    Dims a_strides = row_major_strides(ac), b_strides = row_major_strides(bc);
    if (p.transpose_a) {
        std::swap(ac[n - 1], ac[n - 2]);
        std::swap(a_strides[n - 1], a_strides[n - 2]);
    }
    if (p.transpose_b) {
        std::swap(bc[n - 1], bc[n - 2]);
        std::swap(b_strides[n - 1], b_strides[n - 2]);
    }
    const int64_t M = ac[n - 2], K = ac[n - 1], N = bc[n - 1];
    require(bc[n - 2] == K, "matmul: inner dims differ: a is ", shape_text(caller_dims(a)),
            p.transpose_a ? " (transposed)" : "", ", b is ", shape_text(caller_dims(b)),
            p.transpose_b ? " (transposed)" : "", "; need a[..., K] @ b[K, ...]");
    Dims yc(n);
    for (size_t i = 0; i + 2 < n; ++i) {
        require(ac[i] == bc[i] || ac[i] == 1 || bc[i] == 1, "matmul: batch dims ",
                shape_text(caller_dims(a)), " and ", shape_text(caller_dims(b)), " do not broadcast");
        yc[i] = std::max(ac[i], bc[i]);
    }
    yc[n - 2] = M;
    yc[n - 1] = N;
    if (bias) {
        const Dims &bd = onednn_dims(*bias);
        require(bd.size() == 1 && bd[0] == N, "matmul: bias must have shape [", N, "]");
    }
    if (p.activation != MKC_ACTIVATION_NONE) activation_info(p.activation);
    const dnnl::memory::desc a_view(ac, f32, a_strides), b_view(bc, f32, b_strides);
    const dnnl::memory::desc y_md(yc, f32, row_major_strides(yc));
    Dims bias_dims(n, 1);
    bias_dims[n - 1] = N;
    const dnnl::memory::desc bias_view(bias_dims, f32, row_major_strides(bias_dims));

    Handler handler("matmul", p.name, "matmul", nullptr, ac);
    handler.sign(8); // operator id
    handler.sign(ac);
    handler.sign(bc);
    handler.sign(p.transpose_a);
    handler.sign(p.transpose_b);
    handler.sign(bias ? 1 : 0);
    handler.sign(p.activation);
    handler.sign_float(p.activation_alpha);
    handler.sign_float(p.activation_beta);
    handler.sign_layout(a_view);
    handler.sign_layout(b_view);
    auto entry = handler.acquire_primitive<MatmulEntry>([&] {
        auto e = std::make_shared<MatmulEntry>();
        const auto attr = activation_attr(p.activation, p.activation_alpha, p.activation_beta);
        if (bias)
            e->pd = dnnl::matmul::primitive_desc(cpu_engine(), a_view, b_view, bias_view, y_md, attr);
        else
            e->pd = dnnl::matmul::primitive_desc(cpu_engine(), a_view, b_view, y_md, attr);
        e->primitive = dnnl::matmul(e->pd);
        std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
        if (bias) args.push_back(DNNL_ARG_BIAS);
        e->set_args(e->pd, args);
        return e;
    });
    Handler::Output out = Handler::prepare_output(dst, *entry, DNNL_ARG_DST,
                                                  MKC_LAYOUT_CHANNELS_FIRST, MKC_DTYPE_F32, "matmul");
    {
        Handler::Execution exec(*entry);
        exec.input(DNNL_ARG_SRC, a, &a_view);
        exec.input(DNNL_ARG_WEIGHTS, b, &b_view);
        if (bias) {
            const dnnl::memory::desc bias_bytes = bias_view;
            exec.input(DNNL_ARG_BIAS, *bias, &bias_bytes);
        }
        exec.output(DNNL_ARG_DST, out.data);
        exec.run();
    }
    Handler::finish_output(out, dst);
}

} // namespace mkc::ops
