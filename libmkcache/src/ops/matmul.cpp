// linear (inner product: weights [out, in], converted once when constant)
// and batched matmul (transpose flags, broadcast batch dims), both with an
// optional bias and a fused activation.
#include <algorithm>
#include <atomic>
#include <string>

#include "common/engine.hpp"
#include "common/error.hpp"
#include "common/handles.hpp"
#include "handler/handler.hpp"
#include "keys/keys.hpp"
#include "ops/attrs.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

using tag = dnnl::memory::format_tag;
const auto f32 = dnnl::memory::data_type::f32;

struct LinearEntry : PrimitiveEntry {
    dnnl::inner_product_forward::primitive_desc pd;
    dnnl::memory::desc x_plain, y_md; // src as the caller has it; the result
    std::atomic<bool> transferred{false}; // training: left for the grad op
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
    }
};

} // namespace

namespace {

struct LinearGeometry {
    Dims xc, w;
    int64_t rows;
    const char *default_name; // a per-thread buffer: valid until the thread's next call
};

LinearGeometry linear_geometry(const char *op, const mkc_linear_params &p, const Tensor &src,
                               const Tensor &weights, bool bias, bool training) {
    require(src.dtype == MKC_DTYPE_F32 && weights.dtype == MKC_DTYPE_F32, op,
            ": every input must be float32");
    LinearGeometry g;
    g.xc = caller_dims(src);
    g.w = onednn_dims(weights);
    const Dims &w = g.w;
    require(w.size() == 2, op, ": weights must be 2-D [out, in], got rank ", w.size());
    if (g.xc.back() != w[1])
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": src has ", g.xc.back(),
             " input features but weights expect ", w[1], " (weights shape ", shape_text(w), ")");
    if (p.activation != MKC_ACTIVATION_NONE) activation_info(p.activation);
    g.rows = 1;
    for (size_t i = 0; i + 1 < g.xc.size(); ++i) g.rows *= g.xc[i];
    check_result_dims(op, Dims{g.rows, w[0]}, MKC_DTYPE_F32); // rows: bounded by src's size
    g.default_name = "";
    if (p.name && p.name[0]) return g; // not needed
    // The weights' shape and the bias first (they are inputs), then the
    // attributes.
    thread_local std::string name;
    name = "linear:";
    keys::append_shape(name, w.data(), 2);
    name += bias ? ":bias" : ":nobias";
    append_attrs_name(name, LinearAttrs(p, training));
    g.default_name = name.c_str();
    return g;
}

void sign_linear(Handler &handler, const mkc_linear_params &p, const LinearGeometry &g,
                 const Tensor &src, bool bias, bool training) {
    handler.sign(OpKind::linear);
    handler.sign(src.dims);
    handler.sign(src.layout);
    handler.sign(g.w);
    handler.sign(bias ? 1 : 0);
    sign_attrs(handler, LinearAttrs(p, training));
}

dnnl::inner_product_forward::primitive_desc linear_descriptor(const mkc_linear_params &p,
                                                              const LinearGeometry &g, bool bias,
                                                              bool training) {
    const Dims &w = g.w;
    const dnnl::memory::desc x_view({g.rows, w[1]}, f32, tag::ab), w_md(w, f32, tag::any),
        y2_md({g.rows, w[0]}, f32, tag::ab);
    const auto attr = activation_attr(p.activation, p.activation_alpha, p.activation_beta);
    const auto prop =
        training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    if (bias)
        return dnnl::inner_product_forward::primitive_desc(
            cpu_engine(), prop, x_view, w_md, dnnl::memory::desc({w[0]}, f32, tag::a), y2_md,
            attr);
    return dnnl::inner_product_forward::primitive_desc(cpu_engine(), prop, x_view, w_md, y2_md,
                                                       attr);
}

} // namespace

void linear(const CacheScope &scope, const mkc_linear_params &p, const Tensor &src,
            const Tensor &weights, const Tensor *bias, mkc_tensor **dst) {
    const LinearGeometry g = linear_geometry("linear", p, src, weights, bias, p.training != 0);
    const Dims &w = g.w;
    if (bias) {
        require(bias->dtype == MKC_DTYPE_F32, "linear: every input must be float32");
        const Dims &b = onednn_dims(*bias);
        require(b.size() == 1 && b[0] == w[0], "linear: bias must have shape [", w[0], "]");
    }
    Handler handler(scope, "linear", p.name, g.default_name, nullptr, Dims{g.rows, w[1]});
    sign_linear(handler, p, g, src, bias, p.training);
    auto entry = handler.acquire_primitive<LinearEntry>([&] {
        auto e = std::make_shared<LinearEntry>();
        e->pd = linear_descriptor(p, g, bias, p.training);
        e->primitive = dnnl::inner_product_forward(e->pd);
        std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
        if (bias) args.push_back(DNNL_ARG_BIAS);
        e->set_args(e->pd, args);
        e->x_plain = layout::plain_desc(src.dims, f32, src.layout);
        Dims yc(g.xc.begin(), g.xc.end() - 1);
        yc.push_back(w[0]);
        // The result is row-major [rows, out]; the caller sees it with x's
        // leading dims.
        e->y_md = dnnl::memory::desc(yc, f32, row_major_strides(yc));
        return e;
    });
    if (p.training && !entry->transferred.exchange(true)) {
        auto t = std::make_shared<Transfer>(); // forward -> backward: the descriptor
        t->forward = entry;
        handler.leave_transfer(t);
    }
    std::unique_ptr<Tensor> holder, created;
    const Tensor &x =
        Handler::plain_input(scope, *entry, DNNL_ARG_SRC, src, entry->x_plain, holder);
    Tensor &y = Handler::plain_output(*entry, DNNL_ARG_DST, dst, entry->y_md,
                                      MKC_LAYOUT_CHANNELS_FIRST, created, "linear");
    {
        Handler::Execution exec(*entry, scope);
        exec.raw(DNNL_ARG_SRC, x.data); // plain [..., in] is the [rows, in] the primitive wants
        exec.input(DNNL_ARG_WEIGHTS, weights);
        if (bias) exec.input(DNNL_ARG_BIAS, *bias);
        exec.output(DNNL_ARG_DST, y.data);
        exec.run();
    }
    Handler::publish(created, dst);
}

void linear_backward(const CacheScope &scope, const mkc_linear_params &p, const Tensor &src,
                     const Tensor &weights, const Tensor &diff_dst, mkc_tensor **diff_src,
                     mkc_tensor **diff_weights, mkc_tensor **diff_bias) {
    const char *op = "linear_backward";
    require(p.activation == MKC_ACTIVATION_NONE, op,
            ": a fused activation has no backward; run the activation as its own op");
    const bool bias = diff_bias != nullptr;
    const LinearGeometry g = linear_geometry(op, p, src, weights, bias, true); // the forward's
    const Dims &w = g.w;
    Dims yc(g.xc.begin(), g.xc.end() - 1);
    yc.push_back(w[0]);
    if (!(diff_dst.dtype == MKC_DTYPE_F32 && caller_dims(diff_dst) == yc))
        fail(MKC_STATUS_INVALID_ARGUMENT, op,
             ": diff_dst must be float32 with the forward output's shape ", shape_text(yc),
             ", got ", shape_text(caller_dims(diff_dst)));
    const std::string name = p.name && p.name[0] ? p.name : g.default_name;
    const Dims key_dims{g.rows, w[1]};
    const dnnl::memory::desc x2({g.rows, w[1]}, f32, tag::ab), y2({g.rows, w[0]}, f32, tag::ab);

    auto hint = [&]() {
        Handler forward(scope, "linear", name.c_str(), name.c_str(), nullptr, key_dims);
        sign_linear(forward, p, g, src, bias, true);
        if (auto t = forward.find_transfer())
            return std::static_pointer_cast<LinearEntry>(t->forward)->pd;
        return linear_descriptor(p, g, bias, true);
    };
    std::unique_ptr<Tensor> hx, hdy;
    const Tensor &dy = row_major(scope, diff_dst, hdy); // the [rows, out] the primitives want

    if (diff_src) {
        Handler handler(scope, "linear", name.c_str(), name.c_str(), "bwd_data", key_dims);
        sign_linear(handler, p, g, src, bias, true);
        handler.sign(OpKind::backward_data);
        auto entry = handler.acquire_primitive<LinearEntry>([&] {
            auto fwd = hint();
            dnnl::inner_product_backward_data::primitive_desc pd(
                cpu_engine(), x2, dnnl::memory::desc(w, f32, tag::any), y2, fwd,
                user_scratchpad_attr());
            auto e = std::make_shared<LinearEntry>();
            e->primitive = dnnl::inner_product_backward_data(pd);
            e->set_args(pd, {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC});
            e->x_plain = layout::plain_desc(src.dims, f32, src.layout);
            return e;
        });
        std::unique_ptr<Tensor> created;
        Tensor &dx = Handler::plain_output(*entry, DNNL_ARG_DIFF_SRC, diff_src, entry->x_plain,
                                           src.layout, created, op);
        {
            Handler::Execution exec(*entry, scope);
            exec.raw(DNNL_ARG_DIFF_DST, dy.data);
            exec.input(DNNL_ARG_WEIGHTS, weights);
            exec.output(DNNL_ARG_DIFF_SRC, dx.data);
            exec.run();
        }
        Handler::publish(created, diff_src);
    }
    if (diff_weights || diff_bias) {
        require(diff_weights != nullptr, op, ": diff_bias needs diff_weights too");
        Handler handler(scope, "linear", name.c_str(), name.c_str(), "bwd_weights", key_dims);
        sign_linear(handler, p, g, src, bias, true);
        handler.sign(OpKind::backward_weights);
        auto entry = handler.acquire_primitive<LinearEntry>([&] {
            auto fwd = hint();
            const dnnl::memory::desc dw(w, f32, tag::any), db({w[0]}, f32, tag::a);
            auto pd = bias ? dnnl::inner_product_backward_weights::primitive_desc(
                                 cpu_engine(), x2, dw, db, y2, fwd, user_scratchpad_attr())
                           : dnnl::inner_product_backward_weights::primitive_desc(
                                 cpu_engine(), x2, dw, y2, fwd, user_scratchpad_attr());
            auto e = std::make_shared<LinearEntry>();
            e->primitive = dnnl::inner_product_backward_weights(pd);
            std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS};
            if (bias) args.push_back(DNNL_ARG_DIFF_BIAS);
            e->set_args(pd, args);
            e->x_plain = layout::plain_desc(src.dims, f32, src.layout);
            return e;
        });
        const Tensor &x =
            Handler::plain_input(scope, *entry, DNNL_ARG_SRC, src, entry->x_plain, hx);
        const dnnl::memory::desc w_plain(w, f32, tag::ab), b_plain({w[0]}, f32, tag::a);
        Handler::PlainResult dw(scope, *entry, DNNL_ARG_DIFF_WEIGHTS, diff_weights, w_plain,
                                w_plain, op);
        std::unique_ptr<Handler::PlainResult> db;
        if (bias)
            db = std::make_unique<Handler::PlainResult>(scope, *entry, DNNL_ARG_DIFF_BIAS,
                                                        diff_bias, b_plain, b_plain, op);
        {
            Handler::Execution exec(*entry, scope);
            exec.raw(DNNL_ARG_SRC, x.data);
            exec.raw(DNNL_ARG_DIFF_DST, dy.data);
            exec.output(DNNL_ARG_DIFF_WEIGHTS, dw.data());
            if (db) exec.output(DNNL_ARG_DIFF_BIAS, db->data());
            exec.run();
        }
        dw.finish();
        if (db) db->finish();
    }
}

namespace {

// Dims of a matmul call, all padded to the same rank n: a and b as read
// (transposes applied through the strides of their row-major bytes) and
// the result.
struct MatmulGeometry {
    Dims ac, bc, a_strides, b_strides, yc;
    int64_t n;
};

MatmulGeometry matmul_geometry(const mkc_matmul_params &p, const Tensor &a, const Tensor &b,
                               const Tensor *bias) {
    MatmulGeometry g;
    Dims &ac = g.ac, &bc = g.bc;
    ac = caller_dims(a);
    bc = caller_dims(b);
    require(ac.size() >= 2 && bc.size() >= 2, "matmul: a and b must have rank >= 2, got ", ac.size(),
            " and ", bc.size());
    const size_t n = std::max(ac.size(), bc.size());
    g.n = static_cast<int64_t>(n);
    ac.insert(ac.begin(), n - ac.size(), 1);
    bc.insert(bc.begin(), n - bc.size(), 1);
    // Memory order is [..., rows, cols]; the views swap the last two when
    // transposed.
    g.a_strides = row_major_strides(ac);
    g.b_strides = row_major_strides(bc);
    if (p.transpose_a) {
        std::swap(ac[n - 1], ac[n - 2]);
        std::swap(g.a_strides[n - 1], g.a_strides[n - 2]);
    }
    if (p.transpose_b) {
        std::swap(bc[n - 1], bc[n - 2]);
        std::swap(g.b_strides[n - 1], g.b_strides[n - 2]);
    }
    const int64_t M = ac[n - 2], K = ac[n - 1], N = bc[n - 1];
    if (bc[n - 2] != K)
        fail(MKC_STATUS_INVALID_ARGUMENT, "matmul: inner dims differ: a is ", shape_text(caller_dims(a)),
             p.transpose_a ? " (transposed)" : "", ", b is ", shape_text(caller_dims(b)),
             p.transpose_b ? " (transposed)" : "", "; need a[..., K] @ b[K, ...]");
    Dims &yc = g.yc;
    yc.resize(n);
    for (size_t i = 0; i + 2 < n; ++i) {
        if (!(ac[i] == bc[i] || ac[i] == 1 || bc[i] == 1))
            fail(MKC_STATUS_INVALID_ARGUMENT, "matmul: batch dims ",
                 shape_text(caller_dims(a)), " and ", shape_text(caller_dims(b)), " do not broadcast");
        yc[i] = std::max(ac[i], bc[i]);
    }
    yc[n - 2] = M;
    yc[n - 1] = N;
    check_result_dims("matmul", yc, MKC_DTYPE_F32);
    if (bias) {
        const Dims &bd = onednn_dims(*bias);
        require(bd.size() == 1 && bd[0] == N, "matmul: bias must have shape [", N, "]");
    }
    if (p.activation != MKC_ACTIVATION_NONE) activation_info(p.activation);
    return g;
}

} // namespace

void matmul(const CacheScope &scope, const mkc_matmul_params &p, const Tensor &a_in,
            const Tensor &b_in, const Tensor *bias, mkc_tensor **dst) {
    require(a_in.dtype == MKC_DTYPE_F32 && b_in.dtype == MKC_DTYPE_F32 &&
                (!bias || bias->dtype == MKC_DTYPE_F32),
            "matmul: every input must be float32");
    std::unique_ptr<Tensor> ha, hb;
    const Tensor &a = row_major(scope, a_in, ha);
    const Tensor &b = row_major(scope, b_in, hb);
    const MatmulGeometry g = matmul_geometry(p, a, b, bias);
    const Dims &ac = g.ac, &bc = g.bc, &yc = g.yc;
    const auto &a_strides = g.a_strides, &b_strides = g.b_strides;
    const size_t n = static_cast<size_t>(g.n);
    const int64_t N = yc[n - 1];
    const dnnl::memory::desc a_view(ac, f32, a_strides), b_view(bc, f32, b_strides);
    const dnnl::memory::desc y_md(yc, f32, row_major_strides(yc));
    Dims bias_dims(n, 1);
    bias_dims[n - 1] = N;
    const dnnl::memory::desc bias_view(bias_dims, f32, row_major_strides(bias_dims));

    const MatmulAttrs attrs{p};
    thread_local std::string default_name;
    default_name = bias ? "matmul:bias" : "matmul";
    append_attrs_name(default_name, attrs);
    Handler handler(scope, "matmul", p.name, default_name.c_str(), nullptr, ac);
    handler.sign(OpKind::matmul);
    handler.sign(ac);
    handler.sign(bc);
    handler.sign(bias ? 1 : 0);
    sign_attrs(handler, attrs);
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
        Handler::Execution exec(*entry, scope);
        exec.input(DNNL_ARG_SRC, a, &a_view);
        exec.input(DNNL_ARG_WEIGHTS, b, &b_view);
        if (bias) {
            const dnnl::memory::desc bias_bytes = bias_view;
            exec.input(DNNL_ARG_BIAS, *bias, &bias_bytes);
        }
        exec.output(DNNL_ARG_DST, out.data);
        exec.run();
    }
    Handler::finish_output(scope, out, dst);
}

void matmul_backward(const CacheScope &scope, const mkc_matmul_params &p, const Tensor &a,
                     const Tensor &b, const Tensor *bias, const Tensor &diff_dst,
                     mkc_tensor **diff_a, mkc_tensor **diff_b, mkc_tensor **diff_bias) {
    const char *op = "matmul_backward";
    require(p.activation == MKC_ACTIVATION_NONE, op,
            ": a fused activation has no backward; run the activation as its own op");
    require(diff_dst.dtype == MKC_DTYPE_F32, op, ": diff_dst must be float32");
    require(!diff_bias || bias, op, ": diff_bias needs the forward's bias");
    const Dims yc = matmul_geometry(p, a, b, bias).yc; // checks the forward's shapes too
    if (!(caller_dims(diff_dst) == yc))
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": diff_dst must have the forward output's shape ",
             shape_text(yc), ", got ", shape_text(caller_dims(diff_dst)));
    // With op(X) = X or X^T and C = op(A) op(B):
    //   d op(A) = dC op(B)^T,  d op(B) = op(A)^T dC,
    // transposed back where A or B was read transposed; then summed over
    // the batch dims A or B was broadcast along.
    auto product = [&](const Tensor &x, bool tx, const Tensor &y, bool ty) {
        mkc_matmul_params q{};
        q.transpose_a = tx;
        q.transpose_b = ty;
        q.activation = MKC_ACTIVATION_NONE;
        mkc_tensor *result = nullptr;
        matmul(scope, q, x, y, nullptr, &result);
        registry<Tensor>().remove(result); // internal: never handed out
        return std::unique_ptr<Tensor>(result);
    };
    const bool ta = p.transpose_a != 0, tb = p.transpose_b != 0;
    if (diff_a) {
        auto full = ta ? product(b, tb, diff_dst, true) : product(diff_dst, false, b, !tb);
        reduce_sum_to(scope, *full, a, 1.f, diff_a, op);
    }
    if (diff_b) {
        auto full = tb ? product(diff_dst, true, a, ta) : product(a, !ta, diff_dst, false);
        reduce_sum_to(scope, *full, b, 1.f, diff_b, op);
    }
    if (diff_bias) reduce_sum_to(scope, diff_dst, *bias, 1.f, diff_bias, op);
}

} // namespace mkc::ops
