// Convolutions through the handler base: conv2d, conv3d and conv2d_transpose
// share one implementation. oneDNN chooses every layout (format_tag::any);
// the output stays in that layout until exported. Options: groups,
// dilation, asymmetric padding, bias, a fused activation, and accumulation
// into dst (the residual "sum" post-op).
#include <atomic>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>

#include "common/engine.hpp"
#include "common/error.hpp"
#include "common/small_dims.hpp"
#include "handler/handler.hpp"
#include "ops/attrs.hpp"
#include "ops/call_words.hpp"
#include "keys/keys.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

using tag = dnnl::memory::format_tag;
const auto f32 = dnnl::memory::data_type::f32;

struct ConvEntry : PrimitiveEntry {
    dnnl::convolution_forward::primitive_desc conv_pd;
    dnnl::deconvolution_forward::primitive_desc deconv_pd;
    std::atomic<bool> transferred{false}; // training: left for the grad op
    // Grouped or transposed: the weights must be plain (`plain_weights`);
    // the primitive sees their bytes as `weights_view`.
    std::optional<dnnl::memory::desc> weights_view;
    dnnl::memory::desc plain_weights;
};

// A convolution's attributes as the caller gave them, spatial fields to
// the operator's spatial rank `k`; `training` set for the training forward
// and its grad ops (which find what it left under the same name).
struct ConvAttrs {
    ConvAttrs(const mkc_conv_params &params, int rank, bool is_transposed, bool for_training)
        : p(params), k(rank), transposed(is_transposed), training(for_training) {}
    const mkc_conv_params &p;
    int k;
    bool transposed;
    bool training;
    template <typename V>
    void each(V &v) const {
        v.field("t", transposed);
        v.field("s", Values{p.stride, k});
        v.field("p", Values{p.pad_begin, k});
        v.field("pe", Values{p.pad_end, k});
        v.field("d", Values{p.dilation, k});
        v.field("op", Values{p.output_padding, k});
        v.field("g", p.groups);
        v.field("df", p.data_format);
        v.field("", p.activation);
        v.field("a", p.activation_alpha);
        v.field("b", p.activation_beta);
        v.field("sum", p.sum);
        v.field("training", training);
    }
};

// What the thread's argument cache knows a forward call by: every argument
// its checks and its primitive depend on (the name goes in as text).
// Hashed: the name's text, the first stride and padding, the types and
// src's shape.
class ConvCall : public CallWords<1 + 3 * 7 + 5 * 3 + 8> {
public:
    ConvCall(OpKind kind, const ConvAttrs &attrs, const Tensor &src, const Tensor &weights,
             const Tensor *bias) {
        const mkc_conv_params &p = attrs.p;
        add(kind_word(kind) | int64_t(attrs.k) << 24 | src.dtype << 16 | weights.dtype << 8 |
            (bias ? bias->dtype + 1 : 0));
        add_dims(src.dims);
        seal(p.name, static_cast<uint64_t>(p.stride[0]) << 8 ^
                         static_cast<uint64_t>(p.pad_begin[0]));
        add_dims(weights.dims);
        if (bias) add_dims(bias->dims);
        add_attrs(*this, attrs);
    }
};
// Computed on every call, so nothing here allocates: x and w are the
// tensors' own dims, the rest inline lists.
struct Geometry {
    Geometry(int rank, const Dims &src, const Dims &weights) : k(rank), x(src), w(weights) {}
    int k;                 // spatial rank
    const Dims &x, &w;     // oneDNN order; w as the caller gives it
    SmallDims y;
    SmallDims onednn_w;    // weights dims oneDNN wants (grouped: g first)
    SmallDims stride, dilation, pad_l, pad_r;
};

void check_params(const char *op, const mkc_conv_params &p, int k, bool transposed) {
    const int64_t big = int64_t(1) << 30;
    for (int i = 0; i < k; ++i) {
        require(p.stride[i] >= 1, op, ": stride must be >= 1, got ", p.stride[i]);
        require(p.dilation[i] >= 1, op, ": dilation must be >= 1, got ", p.dilation[i]);
        require(p.pad_begin[i] >= 0 && p.pad_end[i] >= 0, op, ": padding must be >= 0");
        require(p.stride[i] <= big && p.dilation[i] <= big && p.pad_begin[i] <= big &&
                    p.pad_end[i] <= big,
                op, ": stride, padding or dilation is absurdly large");
        if (transposed)
            require(p.output_padding[i] >= 0 &&
                        (p.output_padding[i] < p.stride[i] || p.output_padding[i] < p.dilation[i]),
                    op, ": output_padding must be >= 0 and smaller than stride or dilation");
        else
            require(p.output_padding[i] == 0, op, ": output_padding is for conv2d_transpose only");
    }
    require(p.groups >= 1, op, ": groups must be >= 1, got ", p.groups);
    if (p.activation != MKC_ACTIVATION_NONE) activation_info(p.activation); // validates
}

Geometry geometry(const char *op, const mkc_conv_params &p, const Tensor &src,
                  const Tensor &weights, const Tensor *bias, int k, bool transposed) {
    Geometry g(k, onednn_dims(src), onednn_dims(weights));
    const char *names = k == 2 ? "N,C,H,W" : "N,C,D,H,W";
    require(static_cast<int>(g.x.size()) == k + 2, op, ": src must be ", k + 2, "-D (", names,
            " or channels-last), got rank ", g.x.size());
    require(static_cast<int>(g.w.size()) == k + 2, op, ": weights must be ", k + 2, "-D ",
            transposed ? "[C_in, C_out/groups, k...]" : "[C_out, C_in/groups, k...]", ", got rank ",
            g.w.size());
    const int64_t groups = p.groups;
    const int64_t ic = transposed ? g.w[0] : g.w[1] * groups;
    const int64_t oc = transposed ? g.w[1] * groups : g.w[0];
    // `if (!...) fail`: require() would build these messages on every call.
    if (g.x[1] != ic) {
        if (transposed)
            fail(MKC_STATUS_INVALID_ARGUMENT, op, ": src has ", g.x[1],
                 " channels but weights expect ", ic, " (weights dim 0)");
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": src has ", g.x[1], " channels but weights expect ",
             ic, " (weights dim 1 = ", g.w[1], " x groups = ", groups, ")");
    }
    require((transposed ? ic : oc) % groups == 0, op, ": ", transposed ? "input" : "output",
            " channels (", transposed ? ic : oc, ") not divisible by groups (", groups, ")");
    if (bias) {
        const Dims &b = onednn_dims(*bias);
        require(b.size() == 1 && b[0] == oc, op, ": bias must have shape [", oc, "]");
    }
    g.y.push_back(g.x[0]);
    g.y.push_back(oc);
    for (int i = 0; i < k; ++i) {
        const int64_t kernel = g.w[2 + i];
        const int64_t in = g.x[2 + i];
        // Dims are below 2^56, stride, dilation and padding at most 2^30:
        // only these two products can leave int64.
        int64_t extent = 0, stretched = 0;
        if (__builtin_mul_overflow(kernel - 1, p.dilation[i], &extent) ||
            (transposed && __builtin_mul_overflow(in - 1, p.stride[i], &stretched)))
            fail(MKC_STATUS_INVALID_ARGUMENT, op, ": the result is too large along spatial dim ",
                 i);
        extent += 1;
        g.stride.push_back(p.stride[i]);
        g.dilation.push_back(p.dilation[i] - 1);
        g.pad_l.push_back(p.pad_begin[i]);
        if (transposed) {
            const int64_t out =
                stretched - p.pad_begin[i] - p.pad_end[i] + extent + p.output_padding[i];
            require(out >= 1, op, ": padding leaves no output along spatial dim ", i);
            // oneDNN has no output_padding: it is less padding at the end
            // (negative when output_padding is larger: see negative_end_pad).
            g.pad_r.push_back(p.pad_end[i] - p.output_padding[i]);
            g.y.push_back(out);
        } else {
            const int64_t span = in + p.pad_begin[i] + p.pad_end[i] - extent;
            require(span >= 0, op, ": kernel (", kernel, " with dilation ", p.dilation[i],
                    ") is larger than the padded input (", in + p.pad_begin[i] + p.pad_end[i],
                    ") along spatial dim ", i);
            g.pad_r.push_back(p.pad_end[i]);
            g.y.push_back(span / p.stride[i] + 1);
        }
    }
    check_result_dims(op, g.y, MKC_DTYPE_F32);
    if (groups > 1) g.onednn_w.push_back(groups);
    g.onednn_w.push_back(oc / (groups > 1 ? groups : 1));
    g.onednn_w.push_back(ic / groups);
    for (int i = 0; i < k; ++i) g.onednn_w.push_back(g.w[2 + i]);
    return g;
}

// Plain OIHW (conv) or IOHW (transpose, [C_in, C_out/g, k...]) weight bytes
// described with the dims oneDNN wants (goihw for groups).
dnnl::memory::desc plain_weights_view(const Geometry &g, int64_t groups, bool transposed) {
    const Dims &w = g.w;
    if (!transposed && groups == 1) return layout::plain_desc(w, f32, MKC_LAYOUT_CHANNELS_FIRST);
    int64_t ks = 1; // product of kernel dims
    for (int i = 0; i < g.k; ++i) ks *= w[2 + i];
    Dims ksd(g.k), kst(g.k);
    for (int i = g.k - 1, s = 1; i >= 0; --i) {
        ksd[i] = w[2 + i];
        kst[i] = s;
        s *= w[2 + i];
    }
    Dims dims, strides;
    if (!transposed) { // [O, I/g, k] -> [g, O/g, I/g, k]
        dims = {groups, w[0] / groups, w[1]};
        strides = {(w[0] / groups) * w[1] * ks, w[1] * ks, ks};
    } else { // [I, O/g, k] -> [g, O/g, I/g, k] (element (g,o,i) at [g*I/g + i, o])
        const int64_t icg = w[0] / groups, ocg = w[1];
        dims = {groups, ocg, icg};
        strides = {icg * ocg * ks, ks, ocg * ks};
        if (groups == 1) {
            dims.erase(dims.begin());
            strides.erase(strides.begin());
        }
    }
    dims.insert(dims.end(), ksd.begin(), ksd.end());
    strides.insert(strides.end(), kst.begin(), kst.end());
    return dnnl::memory::desc(dims, f32, strides);
}

// The caller's weights re-described as oneDNN sees them (plain bytes) for
// grouped or transposed convolutions; none for a plain one, whose weights
// are bound as they are (any layout, converted as needed).
std::optional<dnnl::memory::desc> weights_view(const Geometry &g, int64_t groups,
                                               bool transposed) {
    if (!transposed && groups == 1) return std::nullopt;
    return plain_weights_view(g, groups, transposed);
}

// Grouped and transposed convolutions read their weights' bytes as plain
// (`plain`: whether they are).
void require_plain_weights(bool plain, const char *op, bool transposed) {
    require(plain, op, ": ", transposed ? "transposed" : "grouped",
            " convolution weights must be plain (row-major)");
}

void check_plain_weights(const char *op, const Tensor &weights, const Geometry &g,
                         int64_t groups, bool transposed) {
    if (!transposed && groups == 1) return;
    require_plain_weights(weights.desc == layout::plain_desc(g.w, f32, MKC_LAYOUT_CHANNELS_FIRST),
                          op, transposed);
}

void bind_weights(Handler::Execution &exec, const Tensor &weights,
                  const std::optional<dnnl::memory::desc> &view) {
    if (view) exec.input(DNNL_ARG_WEIGHTS, weights, &*view);
    else exec.input(DNNL_ARG_WEIGHTS, weights);
}

// The key name of an unnamed call, in a per-thread buffer (the hit path
// formats but does not allocate): valid until the thread's next call. The
// kernel's shape and the bias come first (they are the weights', not
// attributes), then the attributes.
const char *default_name(const char *op, const ConvAttrs &attrs, const Geometry &g, bool bias) {
    thread_local std::string n;
    n = op;
    n += ":k";
    keys::append_shape(n, g.w.data() + 2, g.k);
    n += bias ? ":bias" : ":nobias";
    append_attrs_name(n, attrs);
    return n.c_str();
}

// Everything a forward primitive depends on (the grad ops sign the same, so
// they find what a training forward left them).
void sign_forward(Handler &h, const ConvAttrs &attrs, const Geometry &g, bool bias) {
    h.sign(attrs.transposed ? OpKind::deconvolution : OpKind::convolution);
    h.sign(g.x);
    h.sign(g.w);
    h.sign(bias ? 1 : 0);
    sign_attrs(h, attrs);
}

// The bias (or bias gradient) descriptor; a zero one means "no bias" to
// oneDNN, so one primitive-descriptor constructor serves both.
dnnl::memory::desc bias_desc(const Geometry &g, bool bias) {
    return bias ? dnnl::memory::desc({g.y[1]}, f32, tag::a) : dnnl::memory::desc();
}

std::shared_ptr<ConvEntry> forward_descriptor(const mkc_conv_params &p, const Geometry &g,
                                              bool transposed, bool bias, bool training) {
    dnnl::post_ops ops;
    if (p.sum) ops.append_sum(1.f);
    if (p.activation != MKC_ACTIVATION_NONE)
        ops.append_eltwise(activation_info(p.activation).alg, p.activation_alpha,
                           p.activation_beta);
    dnnl::primitive_attr attr = user_scratchpad_attr();
    attr.set_post_ops(ops);
    const auto prop = training ? dnnl::prop_kind::forward_training
                               : dnnl::prop_kind::forward_inference;
    const dnnl::memory::desc src_md(g.x, f32, tag::any), w_md(g.onednn_w.vec(), f32, tag::any),
        dst_md(g.y.vec(), f32, tag::any), b_md = bias_desc(g, bias);
    auto e = std::make_shared<ConvEntry>();
    if (transposed) {
        try {
            e->deconv_pd = dnnl::deconvolution_forward::primitive_desc(
                cpu_engine(), prop, dnnl::algorithm::deconvolution_direct, src_md, w_md, b_md,
                dst_md, g.stride.vec(), g.dilation.vec(), g.pad_l.vec(), g.pad_r.vec(), attr);
        } catch (const dnnl::error &) {
            // An output_padding larger than the end padding is a negative
            // end padding to oneDNN, which not every deconvolution takes
            // (none with a dilation).
            for (size_t i = 0; i < g.pad_r.size(); ++i)
                if (g.pad_r.data()[i] < 0)
                    fail(MKC_STATUS_UNSUPPORTED,
                         "conv2d_transpose: output_padding larger than the end padding along "
                         "spatial dim ", i, " is not supported with these arguments (oneDNN "
                         "takes no negative end padding here)");
            throw;
        }
    } else
        e->conv_pd = dnnl::convolution_forward::primitive_desc(
            cpu_engine(), prop, dnnl::algorithm::convolution_direct, src_md, w_md, b_md, dst_md,
            g.stride.vec(), g.dilation.vec(), g.pad_l.vec(), g.pad_r.vec(), attr);
    return e;
}

// The forward's entry through the handler: checks, shapes, key, signature.
// (What can differ between calls with equal arguments - the weights being
// plain, the sum's dst - the caller checks on every call.)
std::shared_ptr<ConvEntry> acquire_forward(const CacheScope &scope, const char *op, int k,
                                           bool transposed, const mkc_conv_params &p,
                                           const Tensor &src, const Tensor &weights,
                                           const Tensor *bias, BlobCache::HitTicket &ticket,
                                           bool &hit) {
    check_params(op, p, k, transposed);
    const Geometry g = geometry(op, p, src, weights, bias, k, transposed);

    const bool named = p.name && p.name[0];
    const ConvAttrs attrs(p, k, transposed, p.training != 0);
    Handler handler(scope, op, p.name, named ? nullptr : default_name(op, attrs, g, bias), nullptr,
                    g.x);
    sign_forward(handler, attrs, g, bias);
    auto entry = handler.acquire_primitive<ConvEntry>([&] {
        auto e = forward_descriptor(p, g, transposed, bias, p.training);
        const dnnl::primitive_desc *pd;
        if (transposed) {
            e->primitive = dnnl::deconvolution_forward(e->deconv_pd);
            pd = &e->deconv_pd;
        } else {
            e->primitive = dnnl::convolution_forward(e->conv_pd);
            pd = &e->conv_pd;
        }
        std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
        if (bias) args.push_back(DNNL_ARG_BIAS);
        e->set_args(*pd, args);
        e->weights_view = weights_view(g, p.groups, transposed);
        if (e->weights_view)
            e->plain_weights = layout::plain_desc(g.w, f32, MKC_LAYOUT_CHANNELS_FIRST);
        return e;
    });
    if (p.training && !entry->transferred.exchange(true)) {
        // The descriptor is the same for every call: leave it once per entry.
        auto t = std::make_shared<Transfer>();
        t->forward = entry;
        handler.leave_transfer(t);
    }
    handler.report_hit(ticket, hit);
    return entry;
}

} // namespace

void convolution(const CacheScope &scope, const char *op, int k, bool transposed,
                 const mkc_conv_params &p, const Tensor &src, const Tensor &weights,
                 const Tensor *bias, mkc_tensor **dst) {
    require(src.dtype == MKC_DTYPE_F32 && weights.dtype == MKC_DTYPE_F32 &&
                (!bias || bias->dtype == MKC_DTYPE_F32),
            op, ": every input must be float32");
    ThreadState &state = *scope.state; // once: a thread-local lookup
    const mkc_layout data_format = layout::resolve(state, p.data_format, k + 2);
    if (p.sum) require(*dst != nullptr, op, ": sum (accumulate into dst) needs an existing dst");

    // A call whose arguments this thread ran before (and whose entry the
    // cache still holds) skips the checks, shapes, key and signature: they
    // are the same as the last time, which passed.
    const ConvCall args(transposed ? OpKind::deconvolution : OpKind::convolution,
                        ConvAttrs(p, k, transposed, p.training != 0), src, weights, bias);
    const std::shared_ptr<void> blob = remembered_entry<ConvEntry>(
        state, scope, args, p.name, [](const ConvEntry &) { return true; },
        [&](BlobCache::HitTicket &ticket, bool &hit) {
            return acquire_forward(scope, op, k, transposed, p, src, weights, bias, ticket, hit);
        });
    auto *entry = static_cast<ConvEntry *>(blob.get());
    if (entry->weights_view)
        require_plain_weights(entry->matches(weights, kPlainWeightsCheck, entry->plain_weights),
                              op, transposed);
    const dnnl::memory::desc &y_want = entry->arg_desc(DNNL_ARG_DST);
    std::shared_ptr<void> residual; // sum into a dst of another layout
    if (p.sum && !entry->matches(**dst, DNNL_ARG_DST, y_want)) {
        require((*dst)->dims == y_want.get_dims(), op,
                ": dst must have the output's shape to accumulate into");
        residual = allocate(y_want.get_size(), false);
        reorder(scope, (*dst)->desc, (*dst)->data, y_want, residual.get());
    }
    Handler::Output out =
        residual ? Handler::Output{} : Handler::prepare_output(dst, *entry, DNNL_ARG_DST,
                                                               data_format, MKC_DTYPE_F32, op);
    void *y_data = residual ? residual.get() : out.data;
    {
        Handler::Execution exec(*entry, scope);
        exec.input(DNNL_ARG_SRC, src);
        bind_weights(exec, weights, entry->weights_view);
        if (bias) exec.input(DNNL_ARG_BIAS, *bias);
        exec.output(DNNL_ARG_DST, y_data);
        exec.run();
    }
    if (residual) {
        Tensor &t = **dst;
        if (t.owned && y_want.get_size() <= t.desc.get_size()) {
            // Keep the result in the primitive's layout: re-describe dst.
            std::memcpy(t.data, residual.get(), y_want.get_size());
            adopt_result_layout(t, y_want);
        } else {
            reorder(scope, y_want, residual.get(), t.desc, t.data);
        }
    } else {
        Handler::finish_output(scope, out, dst);
    }
    layout::set_target(state, data_format); // the model's layout becomes the thread's target
}

} // namespace mkc::ops

namespace mkc::ops {

namespace {

// The backward primitives of a convolution; Prim is the convolution or the
// deconvolution flavour (their descriptors take the same arguments).
template <typename Prim, typename Hint>
void build_backward_data(PrimitiveEntry &e, const Geometry &g, dnnl::algorithm alg,
                         const Hint &hint) {
    const dnnl::memory::desc dx(g.x, f32, tag::any), w(g.onednn_w.vec(), f32, tag::any),
        dy(g.y.vec(), f32, tag::any);
    typename Prim::primitive_desc pd(cpu_engine(), alg, dx, w, dy, g.stride.vec(),
                                     g.dilation.vec(), g.pad_l.vec(), g.pad_r.vec(), hint,
                                     user_scratchpad_attr());
    e.primitive = Prim(pd);
    e.set_args(pd, {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC});
}

template <typename Prim, typename Hint>
void build_backward_weights(PrimitiveEntry &e, const Geometry &g, dnnl::algorithm alg, bool bias,
                            const Hint &hint) {
    const dnnl::memory::desc x(g.x, f32, tag::any), dw(g.onednn_w.vec(), f32, tag::any),
        dy(g.y.vec(), f32, tag::any), db = bias_desc(g, bias);
    typename Prim::primitive_desc pd(cpu_engine(), alg, x, dw, db, dy, g.stride.vec(),
                                     g.dilation.vec(), g.pad_l.vec(), g.pad_r.vec(), hint,
                                     user_scratchpad_attr());
    e.primitive = Prim(pd);
    std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS};
    if (bias) args.push_back(DNNL_ARG_DIFF_BIAS);
    e.set_args(pd, args);
}

} // namespace

void convolution_backward(const CacheScope &scope, const char *op, int k, bool transposed,
                          const mkc_conv_params &p, const Tensor &src, const Tensor &weights,
                          const Tensor &diff_dst, mkc_tensor **diff_src, mkc_tensor **diff_weights,
                          mkc_tensor **diff_bias) {
    check_params(op, p, k, transposed);
    require(p.activation == MKC_ACTIVATION_NONE && !p.sum, op,
            ": a fused activation or sum has no backward; run the activation as its own op");
    require(src.dtype == MKC_DTYPE_F32 && weights.dtype == MKC_DTYPE_F32 &&
                diff_dst.dtype == MKC_DTYPE_F32,
            op, ": every input must be float32");
    const mkc_layout data_format = layout::resolve(p.data_format, k + 2);
    const bool bias = diff_bias != nullptr;
    const Geometry g = geometry(op, p, src, weights, nullptr, k, transposed);
    if (diff_dst.dims != g.y)
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": diff_dst has shape ", shape_text(diff_dst.dims),
             " (oneDNN order) but the forward output is ", shape_text(g.y.vec()));
    check_plain_weights(op, weights, g, p.groups, transposed);
    const auto w_view = weights_view(g, p.groups, transposed);
    // The training forward's attributes: its name and signature.
    const ConvAttrs attrs(p, k, transposed, true);
    const char *name = p.name && p.name[0] ? p.name : default_name(op, attrs, g, bias);

    // On a miss: the forward's training descriptor is the hint, taken from the cache when a training forward left it, else made
    // here (a descriptor only, no primitive).
    auto hint = [&]() -> std::shared_ptr<ConvEntry> {
        Handler forward(scope, op, name, name, nullptr, g.x);
        sign_forward(forward, attrs, g, bias);
        if (auto t = forward.find_transfer())
            return std::static_pointer_cast<ConvEntry>(t->forward);
        return forward_descriptor(p, g, transposed, bias, true);
    };
    const auto alg = transposed ? dnnl::algorithm::deconvolution_direct
                                : dnnl::algorithm::convolution_direct;

    if (diff_src) {
        Handler handler(scope, op, name, name, "bwd_data", g.x);
        sign_forward(handler, attrs, g, bias);
        handler.sign(OpKind::backward_data);
        auto entry = handler.acquire_primitive<PrimitiveEntry>([&] {
            auto fwd = hint();
            auto e = std::make_shared<PrimitiveEntry>();
            if (transposed)
                build_backward_data<dnnl::deconvolution_backward_data>(*e, g, alg, fwd->deconv_pd);
            else
                build_backward_data<dnnl::convolution_backward_data>(*e, g, alg, fwd->conv_pd);
            return e;
        });
        Handler::Output out = Handler::prepare_output(diff_src, *entry, DNNL_ARG_DIFF_SRC,
                                                      data_format, MKC_DTYPE_F32, op);
        {
            Handler::Execution exec(*entry, scope);
            exec.input(DNNL_ARG_DIFF_DST, diff_dst);
            bind_weights(exec, weights, w_view);
            exec.output(DNNL_ARG_DIFF_SRC, out.data);
            exec.run();
        }
        Handler::finish_output(scope, out, diff_src);
    }

    if (diff_weights || diff_bias) {
        require(diff_weights != nullptr, op, ": diff_bias needs diff_weights too");
        Handler handler(scope, op, name, name, "bwd_weights", g.x);
        sign_forward(handler, attrs, g, bias);
        handler.sign(OpKind::backward_weights);
        auto entry = handler.acquire_primitive<PrimitiveEntry>([&] {
            auto fwd = hint();
            auto e = std::make_shared<PrimitiveEntry>();
            if (transposed)
                build_backward_weights<dnnl::deconvolution_backward_weights>(*e, g, alg, bias,
                                                                             fwd->deconv_pd);
            else
                build_backward_weights<dnnl::convolution_backward_weights>(*e, g, alg, bias,
                                                                           fwd->conv_pd);
            return e;
        });
        Handler::PlainResult dw(scope, *entry, DNNL_ARG_DIFF_WEIGHTS, diff_weights,
                                layout::plain_desc(g.w, f32, MKC_LAYOUT_CHANNELS_FIRST),
                                plain_weights_view(g, p.groups, transposed), op);
        const dnnl::memory::desc b_plain(Dims{g.y[1]}, f32, tag::a);
        std::unique_ptr<Handler::PlainResult> db;
        if (bias)
            db = std::make_unique<Handler::PlainResult>(scope, *entry, DNNL_ARG_DIFF_BIAS,
                                                        diff_bias, b_plain, b_plain, op);
        {
            Handler::Execution exec(*entry, scope);
            exec.input(DNNL_ARG_SRC, src);
            exec.input(DNNL_ARG_DIFF_DST, diff_dst);
            exec.output(DNNL_ARG_DIFF_WEIGHTS, dw.data());
            if (db) exec.output(DNNL_ARG_DIFF_BIAS, db->data());
            exec.run();
        }
        dw.finish();
        if (db) db->finish();
    }
    layout::set_target(data_format);
}

} // namespace mkc::ops
