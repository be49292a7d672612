// Convolutions through the handler base: conv2d, conv3d and conv2d_transpose
// share one implementation. oneDNN chooses every layout (format_tag::any);
// the output stays in that layout until exported. Options: groups,
// dilation, asymmetric padding, bias, a fused activation, and accumulation
// into dst (the residual "sum" post-op).
//
// The eager calls and the phases (ops/conv.hpp) share the checks and the
// entries: the checks are templates over the value type (a tensor or a
// ValueDesc), the entries are built from the shapes they work out.
#include <atomic>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>

#include "common/engine.hpp"
#include "common/error.hpp"
#include "common/small_dims.hpp"
#include "common/cpu_features.hpp"
#include "handler/handler.hpp"
#include "handler/kept_primitives.hpp"
#include "ops/attrs.hpp"
#include "ops/call_words.hpp"
#include "keys/keys.hpp"
#include "ops/conv.hpp"
#include "ops/float_dtype.hpp"
#include "ops/ops.hpp"
#include "ops/window_bounds.hpp"

namespace mkc::ops {

namespace {

using tag = dnnl::memory::format_tag;
const auto f32 = dnnl::memory::data_type::f32;

struct ConvEntry : PrimitiveEntry {
    std::atomic<bool> transferred{false}; // training: left for the grad op
    // Grouped or transposed: the weights must be plain (`plain_weights`);
    // the primitive sees their bytes as `weights_view`.
    std::optional<dnnl::memory::desc> weights_view;
    dnnl::memory::desc plain_weights;
};

// A gradient's entry (data or weights), with the descriptions of the
// weights' bytes its calls bind or write, made once with the primitive.
struct ConvBackwardEntry : PrimitiveEntry {
    // The data gradient of a grouped or transposed convolution reads the
    // weights through this view (as ConvEntry's).
    std::optional<dnnl::memory::desc> weights_view;
    dnnl::memory::desc plain_weights;      // the caller's plain weights
    dnnl::memory::desc plain_diff_weights; // their gradient's, always float32
    dnnl::memory::desc onednn_weights;     // the gradient's bytes with oneDNN's dims
    dnnl::memory::desc plain_bias;         // the bias gradient, [C_out], float32
};

} // namespace

const char *conv_op_name(const ConvAttrs &attrs) {
    if (attrs.transposed && attrs.k == 2) return "conv2d_transpose";
    if (!attrs.transposed && attrs.k == 2) return "conv2d";
    if (!attrs.transposed && attrs.k == 3) return "conv3d";
    fail(MKC_STATUS_INVALID_ARGUMENT, "conv: no ", attrs.transposed ? "transposed " : "",
         "convolution of spatial rank ", attrs.k);
}

const char *conv_backward_op_name(const ConvAttrs &attrs) {
    if (attrs.transposed && attrs.k == 2) return "conv2d_transpose_backward";
    if (!attrs.transposed && attrs.k == 2) return "conv2d_backward";
    if (!attrs.transposed && attrs.k == 3) return "conv3d_backward";
    return conv_op_name(attrs); // throws
}

namespace {

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
// values' own dims, the rest inline lists.
struct Geometry {
    Geometry(int rank, const Dims &src, mkc_dtype src_dtype, const Dims &weights,
             mkc_dtype weights_dtype)
        : k(rank), x(src), w(weights), x_dtype(src_dtype), w_dtype(weights_dtype) {}
    int k;                 // spatial rank
    const Dims &x, &w;     // oneDNN order; w as the caller gives it
    mkc_dtype x_dtype, w_dtype;
    mkc_dtype b_dtype = MKC_DTYPE_F32; // the bias's, when there is one
    SmallDims y;
    SmallDims onednn_w;    // weights dims oneDNN wants (grouped: g first)
    SmallDims stride, dilation, pad_l, pad_r;
};

// data_format with TARGET read as `target`: the thread's target layout for
// a call, src's own layout for infer (which has no thread).
mkc_layout data_format_of(mkc_layout requested, mkc_layout target, int ndims) {
    return layout::resolve(requested == MKC_LAYOUT_TARGET ? target : requested, ndims);
}

template <typename V>
void check_types(const char *op, const V &src, const V &weights, const V *bias) {
    const mkc_dtype dtype = require_float_src(op, "src", src.dtype);
    require_same_float(op, "weights", weights.dtype, dtype);
    if (bias) require_float_param(op, "bias", bias->dtype);
}

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
    if (p.activation != MKC_ACTIVATION_NONE) activation_info(p.activation, p.activation_alpha); // validates
}

template <typename V>
Geometry geometry(const char *op, const mkc_conv_params &p, const V &src, const V &weights,
                  const V *bias, int k, bool transposed) {
    Geometry g(k, onednn_dims(src), src.dtype, onednn_dims(weights), weights.dtype);
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
        g.b_dtype = bias->dtype;
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
    // The window slides over src, or over dst for a transposed convolution
    // (oneDNN runs it as the data gradient of one from dst to src).
    WindowDim dims[3] = {}; // zeroed: GCC cannot tell that only the first k are read
    for (int i = 0; i < k; ++i)
        dims[i] = {transposed ? g.y[2 + i] : g.x[2 + i], g.pad_l[i], g.pad_r[i], g.stride[i],
                   p.dilation[i], (g.w[2 + i] - 1) * p.dilation[i] + 1};
    check_window_bounds(op, dims, k, ic > oc ? ic : oc);
    if (groups > 1) g.onednn_w.push_back(groups);
    g.onednn_w.push_back(oc / (groups > 1 ? groups : 1));
    g.onednn_w.push_back(ic / groups);
    for (int i = 0; i < k; ++i) g.onednn_w.push_back(g.w[2 + i]);
    return g;
}

// Plain OIHW (conv) or IOHW (transpose, [C_in, C_out/g, k...]) weight bytes
// of dtype `dt` described with the dims oneDNN wants (goihw for groups).
dnnl::memory::desc plain_weights_view(const Geometry &g, int64_t groups, bool transposed,
                                      dnnl::memory::data_type dt) {
    const Dims &w = g.w;
    if (!transposed && groups == 1) return layout::plain_desc(w, dt, MKC_LAYOUT_CHANNELS_FIRST);
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
    return dnnl::memory::desc(dims, dt, strides);
}

// The caller's weights re-described as oneDNN sees them (plain bytes) for
// grouped or transposed convolutions; none for a plain one, whose weights
// are bound as they are (any layout, converted as needed).
std::optional<dnnl::memory::desc> weights_view(const Geometry &g, int64_t groups,
                                               bool transposed) {
    if (!transposed && groups == 1) return std::nullopt;
    return plain_weights_view(g, groups, transposed, onednn_float(g.w_dtype));
}

// Grouped and transposed convolutions read their weights' bytes as plain
// (`plain`: whether they are).
void require_plain_weights(bool plain, const char *op, bool transposed) {
    require(plain, op, ": ", transposed ? "transposed" : "grouped",
            " convolution weights must be plain (row-major)");
}

template <typename V>
void check_plain_weights(const char *op, const V &weights, const Geometry &g, int64_t groups,
                         bool transposed) {
    if (!transposed && groups == 1) return;
    require_plain_weights(weights.desc == layout::plain_desc(g.w, onednn_float(weights.dtype),
                                                             MKC_LAYOUT_CHANNELS_FIRST),
                          op, transposed);
}

void bind_weights(Handler::Execution &exec, const Tensor &weights,
                  const std::optional<dnnl::memory::desc> &view) {
    if (view) exec.input(DNNL_ARG_WEIGHTS, weights, &*view);
    else exec.input(DNNL_ARG_WEIGHTS, weights);
}

// A phase run's weights buffer as the primitive reads it: the bytes
// themselves, arranged as prepare's `takes` said, or (a view whose layout
// the primitive does not take) a converted copy kept in `temporary`.
void *weights_for_run(const CacheScope &scope, const PrimitiveEntry &entry,
                      const std::optional<dnnl::memory::desc> &view, const void *data,
                      std::shared_ptr<void> &temporary) {
    const dnnl::memory::desc &want = entry.arg_desc(DNNL_ARG_WEIGHTS);
    if (!view || *view == want) return const_cast<void *>(data); // read only
    temporary = allocate(want.get_size(), false);
    reorder(scope, *view, data, want, temporary.get());
    return temporary.get();
}

// What `takes` says for the weights: the primitive's layout, or the
// caller's plain one when read through a view.
const dnnl::memory::desc &weights_taken(const PrimitiveEntry &entry,
                                        const std::optional<dnnl::memory::desc> &view,
                                        const dnnl::memory::desc &plain) {
    return view ? plain : entry.arg_desc(DNNL_ARG_WEIGHTS);
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
    h.sign_value(g.x, g.x_dtype);
    h.sign_value(g.w, g.w_dtype);
    h.sign(bias ? 1 + static_cast<int>(g.b_dtype) : 0);
    sign_attrs(h, attrs);
}

// The bias (or bias gradient) descriptor; a zero one means "no bias" to
// oneDNN, so one primitive-descriptor constructor serves both.
dnnl::memory::desc bias_desc(const Geometry &g, bool bias) {
    return bias ? dnnl::memory::desc({g.y[1]}, onednn_float(g.b_dtype), tag::a)
                : dnnl::memory::desc();
}

// A forward's descriptor: the convolution's, or the transposed one's.
struct ConvDescriptor {
    dnnl::convolution_forward::primitive_desc conv;
    dnnl::deconvolution_forward::primitive_desc deconv;
};

// `dst`: the arrangement the result is written in, when not the
// primitive's own choice (empty).
ConvDescriptor forward_descriptor(const mkc_conv_params &p, const Geometry &g, bool transposed,
                                  bool bias, bool training,
                                  const dnnl::memory::desc &dst = {}) {
    dnnl::post_ops ops;
    if (p.sum) ops.append_sum(1.f);
    if (p.activation != MKC_ACTIVATION_NONE)
        ops.append_eltwise(activation_info(p.activation, p.activation_alpha).alg, p.activation_alpha,
                           p.activation_beta);
    dnnl::primitive_attr attr = user_scratchpad_attr();
    attr.set_post_ops(ops);
    const auto prop = training ? dnnl::prop_kind::forward_training
                               : dnnl::prop_kind::forward_inference;
    const auto dt = onednn_float(g.x_dtype);
    const dnnl::memory::desc src_md(g.x, dt, tag::any), w_md(g.onednn_w.vec(), dt, tag::any),
        dst_md = dst.is_zero() ? dnnl::memory::desc(g.y.vec(), dt, tag::any) : dst,
        b_md = bias_desc(g, bias);
    ConvDescriptor d;
    if (transposed) {
        try {
            d.deconv = dnnl::deconvolution_forward::primitive_desc(
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
        d.conv = dnnl::convolution_forward::primitive_desc(
            cpu_engine(), prop, dnnl::algorithm::convolution_direct, src_md, w_md, b_md, dst_md,
            g.stride.vec(), g.dilation.vec(), g.pad_l.vec(), g.pad_r.vec(), attr);
    return d;
}

// The forward's entry through the handler: checks, shapes, key, signature.
// (What can differ between calls with equal arguments - the weights being
// plain, the sum's dst - the caller checks on every call.) A training
// forward leaves its descriptor for the grad ops. `dst`: the arrangement
// to write the result in (its own key), empty: the primitive's choice.
template <typename V>
std::shared_ptr<ConvEntry> prepare_forward(const CacheScope &scope, const char *op,
                                           const ConvAttrs &attrs, const char *name,
                                           const V &src, const V &weights, const V *bias,
                                           BlobCache::HitTicket &ticket, bool &hit,
                                           const dnnl::memory::desc &dst = {}) {
    const mkc_conv_params &p = attrs.p;
    const int k = attrs.k;
    const bool transposed = attrs.transposed;
    check_params(op, p, k, transposed);
    const Geometry g = geometry(op, p, src, weights, bias, k, transposed);
    if (g.x_dtype != MKC_DTYPE_F32) require_bf16_kernels(op);

    const bool named = name && name[0];
    Handler handler(scope, op, name, named ? nullptr : default_name(op, attrs, g, bias),
                    dst.is_zero() ? nullptr : "dst", g.x);
    sign_forward(handler, attrs, g, bias);
    if (!dst.is_zero()) handler.sign_layout(dst);
    auto entry = handler.acquire_primitive<ConvEntry>([&] {
        const ConvDescriptor d = forward_descriptor(p, g, transposed, bias, attrs.training, dst);
        auto e = std::make_shared<ConvEntry>();
        const dnnl::primitive_desc *pd;
        if (transposed) {
            e->primitive = make_kept_primitive<dnnl::deconvolution_forward>(d.deconv);
            pd = &d.deconv;
        } else {
            e->primitive = make_kept_primitive<dnnl::convolution_forward>(d.conv);
            pd = &d.conv;
        }
        std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
        if (bias) args.push_back(DNNL_ARG_BIAS);
        e->set_args(*pd, args);
        e->weights_view = weights_view(g, p.groups, transposed);
        if (e->weights_view)
            e->plain_weights =
                layout::plain_desc(g.w, onednn_float(g.w_dtype), MKC_LAYOUT_CHANNELS_FIRST);
        return e;
    });
    if (attrs.training && !entry->transferred.exchange(true)) {
        // The descriptor is the same for every call: leave it once per entry.
        auto t = std::make_shared<Transfer>();
        t->forward = entry;
        handler.leave_transfer(t);
    }
    handler.report_hit(ticket, hit);
    return entry;
}

} // namespace

ValueDesc ConvOp::infer(const Attrs &attrs, const ValueDesc &src, const ValueDesc &weights,
                        const ValueDesc *bias) {
    const char *op = conv_op_name(attrs);
    const mkc_conv_params &p = attrs.p;
    check_types(op, src, weights, bias);
    const mkc_layout data_format = data_format_of(p.data_format, src.layout, attrs.k + 2);
    check_params(op, p, attrs.k, attrs.transposed);
    const Geometry g = geometry(op, p, src, weights, bias, attrs.k, attrs.transposed);
    check_plain_weights(op, weights, g, p.groups, attrs.transposed);
    return plain_value(src.dtype, data_format, g.y.vec());
}

Prepared ConvOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                         const ValueDesc &src, const ValueDesc &weights, const ValueDesc *bias,
                         const Dims *y_strides) {
    const char *op = conv_op_name(attrs);
    const ValueDesc inferred = infer(attrs, src, weights, bias);
    const mkc_layout data_format =
        layout::resolve(*scope.state, attrs.p.data_format, attrs.k + 2);
    dnnl::memory::desc dst;
    if (y_strides) {
        require(!attrs.transposed && !attrs.training, op,
                ": only an inference convolution writes its result with given strides");
        require(y_strides->size() == inferred.dims.size(), op, ": the result's strides ",
                shape_text(*y_strides), " do not match its rank ", inferred.dims.size());
        dst = dnnl::memory::desc(inferred.dims, onednn_float(inferred.dtype),
                                 layout::to_onednn_order(*y_strides, data_format));
    }
    BlobCache::HitTicket ticket;
    bool hit = false;
    auto entry = prepare_forward(scope, op, attrs, name, src, weights, bias, ticket, hit, dst);
    const dnnl::memory::desc &y = entry->arg_desc(DNNL_ARG_DST);
    // The weights in the primitive's own arrangement; grouped or transposed
    // ones come from their plain bytes read through a view.
    Prepared out{entry,
                 {entry->arg_desc(DNNL_ARG_SRC), entry->arg_desc(DNNL_ARG_WEIGHTS),
                  bias ? entry->arg_desc(DNNL_ARG_BIAS) : empty_desc()},
                 {ValueDesc{src.dtype, data_format, y.get_dims(), y}},
                 {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS},
                 {DNNL_ARG_DST}};
    if (entry->weights_view)
        out.views = {{}, {entry->plain_weights, *entry->weights_view}, {}};
    return out;
}

void ConvOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    auto &e = static_cast<ConvEntry &>(entry);
    Handler::Execution exec(e, scope);
    exec.raw(DNNL_ARG_SRC, const_cast<void *>(buffers.in[0])); // read only
    exec.raw(DNNL_ARG_WEIGHTS, const_cast<void *>(buffers.in[1]));
    if (buffers.in[2]) exec.raw(DNNL_ARG_BIAS, const_cast<void *>(buffers.in[2]));
    exec.output(DNNL_ARG_DST, buffers.out[0]); // holds the residual for a sum
    exec.run();
}

ConvShape conv2d_shape(const char *op, const mkc_conv_params &p, const ValueDesc &src,
                       const ValueDesc &weights, const ValueDesc *bias) {
    check_params(op, p, 2, false);
    const Geometry g = geometry(op, p, src, weights, bias, 2, false);
    return {g.y.vec(), g.onednn_w.vec(), g.stride.vec(), g.dilation.vec(), g.pad_l.vec(),
            g.pad_r.vec()};
}

void convolution(const CacheScope &scope, const char *op, int k, bool transposed,
                 const mkc_conv_params &p, const Tensor &src, const Tensor &weights,
                 const Tensor *bias, mkc_tensor **dst) {
    check_types(op, src, weights, bias);
    ThreadState &state = *scope.state; // once: a thread-local lookup
    const mkc_layout data_format = layout::resolve(state, p.data_format, k + 2);
    if (p.sum) {
        require(*dst != nullptr, op, ": sum (accumulate into dst) needs an existing dst");
        require_same_float(op, "dst (the sum's residual)", (*dst)->dtype, src.dtype);
    }

    // A call whose arguments this thread ran before (and whose entry the
    // cache still holds) skips the checks, shapes, key and signature: they
    // are the same as the last time, which passed.
    const ConvAttrs attrs(p, k, transposed, p.training != 0);
    const ConvCall args(transposed ? OpKind::deconvolution : OpKind::convolution, attrs, src,
                        weights, bias);
    const std::shared_ptr<void> blob = remembered_entry<ConvEntry>(
        state, scope, args, p.name, [](const ConvEntry &) { return true; },
        [&](BlobCache::HitTicket &ticket, bool &hit) {
            return prepare_forward(scope, op, attrs, p.name, src, weights, bias, ticket, hit);
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
                                                               data_format, src.dtype, op);
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

// The backward primitives of a convolution, in the forward's data dtype
// (bfloat16 training: diff_src bfloat16, accumulated in float32 by oneDNN;
// the weights and bias gradients always float32); Prim is the convolution or the
// deconvolution flavour (their descriptors take the same arguments).
template <typename Prim, typename Hint>
void build_backward_data(PrimitiveEntry &e, const Geometry &g, dnnl::algorithm alg,
                         const Hint &hint) {
    const auto dt = onednn_float(g.x_dtype);
    const dnnl::memory::desc dx(g.x, dt, tag::any), w(g.onednn_w.vec(), dt, tag::any),
        dy(g.y.vec(), dt, tag::any);
    typename Prim::primitive_desc pd(cpu_engine(), alg, dx, w, dy, g.stride.vec(),
                                     g.dilation.vec(), g.pad_l.vec(), g.pad_r.vec(), hint,
                                     user_scratchpad_attr());
    e.primitive = make_kept_primitive<Prim>(pd);
    e.set_args(pd, {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC});
}

template <typename Prim, typename Hint>
void build_backward_weights(PrimitiveEntry &e, const Geometry &g, dnnl::algorithm alg, bool bias,
                            const Hint &hint) {
    const auto dt = onednn_float(g.x_dtype);
    const dnnl::memory::desc x(g.x, dt, tag::any), dw(g.onednn_w.vec(), f32, tag::any),
        dy(g.y.vec(), dt, tag::any),
        db = bias ? dnnl::memory::desc({g.y[1]}, f32, tag::a) : dnnl::memory::desc();
    typename Prim::primitive_desc pd(cpu_engine(), alg, x, dw, db, dy, g.stride.vec(),
                                     g.dilation.vec(), g.pad_l.vec(), g.pad_r.vec(), hint,
                                     user_scratchpad_attr());
    e.primitive = make_kept_primitive<Prim>(pd);
    std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS};
    if (bias) args.push_back(DNNL_ARG_DIFF_BIAS);
    e.set_args(pd, args);
}

// What a gradient call's checks work out: the forward's shapes and the
// layout its results are labelled with.
struct BackwardGeometry {
    Geometry g;
    mkc_layout data_format;
};

// The checks of every gradient call (`target`: what a TARGET data_format
// stands for). attrs are the training forward's.
template <typename V>
BackwardGeometry check_backward(const char *op, const ConvAttrs &attrs, const V &src,
                                const V &weights, const V &diff_dst, mkc_layout target) {
    const mkc_conv_params &p = attrs.p;
    const int k = attrs.k;
    const bool transposed = attrs.transposed;
    check_params(op, p, k, transposed);
    require(p.activation == MKC_ACTIVATION_NONE && !p.sum, op,
            ": a fused activation or sum has no backward; run the activation as its own op");
    check_types(op, src, weights, static_cast<const V *>(nullptr));
    require_diff_dtype(op, "diff_dst", diff_dst.dtype, "src", src.dtype);
    const mkc_layout data_format = data_format_of(p.data_format, target, k + 2);
    const Geometry g = geometry(op, p, src, weights, static_cast<const V *>(nullptr), k,
                                transposed);
    if (diff_dst.dims != g.y)
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": diff_dst has shape ", shape_text(diff_dst.dims),
             " (oneDNN order) but the forward output is ", shape_text(g.y.vec()));
    check_plain_weights(op, weights, g, p.groups, transposed);
    return {g, data_format};
}

// The gradients' key name: the caller's, else the default (with the
// backward op's name).
const char *backward_name(const char *op, const ConvAttrs &attrs, const Geometry &g,
                          const char *name, bool bias) {
    return name && name[0] ? name : default_name(op, attrs, g, bias);
}

// On a miss: the forward's training descriptor is the hint, copied from the
// primitive a training forward left in the cache, else made here (a
// descriptor only, no primitive).
ConvDescriptor forward_hint(const CacheScope &scope, const char *op, const ConvAttrs &attrs,
                            const char *name, const Geometry &g, bool bias) {
    Geometry with_bias = g;
    const auto left = find_with_either_bias(g.x_dtype, bias, [&](mkc_dtype b) {
        with_bias.b_dtype = b;
        Handler forward(scope, op, name, name, nullptr, g.x);
        sign_forward(forward, attrs, with_bias, bias);
        return forward.find_transfer();
    });
    if (!left) return forward_descriptor(attrs.p, g, attrs.transposed, bias, true);
    const dnnl::primitive &forward = left->forward->primitive;
    ConvDescriptor d;
    if (attrs.transposed)
        d.deconv = descriptor_of<dnnl::deconvolution_forward::primitive_desc>(forward);
    else
        d.conv = descriptor_of<dnnl::convolution_forward::primitive_desc>(forward);
    return d;
}

void describe_weights(ConvBackwardEntry &e, const Geometry &g, const ConvAttrs &attrs) {
    e.weights_view = weights_view(g, attrs.p.groups, attrs.transposed);
    e.plain_weights = layout::plain_desc(g.w, onednn_float(g.w_dtype), MKC_LAYOUT_CHANNELS_FIRST);
    e.plain_diff_weights = layout::plain_desc(g.w, f32, MKC_LAYOUT_CHANNELS_FIRST);
    e.onednn_weights = plain_weights_view(g, attrs.p.groups, attrs.transposed, f32);
    e.plain_bias = dnnl::memory::desc(Dims{g.y[1]}, f32, tag::a);
}

dnnl::algorithm backward_algorithm(const ConvAttrs &attrs) {
    return attrs.transposed ? dnnl::algorithm::deconvolution_direct
                            : dnnl::algorithm::convolution_direct;
}

// The data gradient's entry (`name`: backward_name's).
std::shared_ptr<ConvBackwardEntry> prepare_backward_data(const CacheScope &scope, const char *op,
                                                         const ConvAttrs &attrs, const char *name,
                                                         const Geometry &g, bool bias) {
    if (g.x_dtype != MKC_DTYPE_F32) require_bf16_kernels(op);
    Handler handler(scope, op, name, name, "bwd_data", g.x);
    sign_forward(handler, attrs, g, bias);
    handler.sign(OpKind::backward_data);
    return handler.acquire_primitive<ConvBackwardEntry>([&] {
        auto fwd = forward_hint(scope, op, attrs, name, g, bias);
        auto e = std::make_shared<ConvBackwardEntry>();
        const auto alg = backward_algorithm(attrs);
        if (attrs.transposed)
            build_backward_data<dnnl::deconvolution_backward_data>(*e, g, alg, fwd.deconv);
        else
            build_backward_data<dnnl::convolution_backward_data>(*e, g, alg, fwd.conv);
        describe_weights(*e, g, attrs);
        return e;
    });
}

// The weights (and bias) gradient's entry.
std::shared_ptr<ConvBackwardEntry> prepare_backward_weights(const CacheScope &scope,
                                                            const char *op,
                                                            const ConvAttrs &attrs,
                                                            const char *name, const Geometry &g,
                                                            bool bias) {
    if (g.x_dtype != MKC_DTYPE_F32) require_bf16_kernels(op);
    Handler handler(scope, op, name, name, "bwd_weights", g.x);
    sign_forward(handler, attrs, g, bias);
    handler.sign(OpKind::backward_weights);
    return handler.acquire_primitive<ConvBackwardEntry>([&] {
        auto fwd = forward_hint(scope, op, attrs, name, g, bias);
        auto e = std::make_shared<ConvBackwardEntry>();
        const auto alg = backward_algorithm(attrs);
        if (attrs.transposed)
            build_backward_weights<dnnl::deconvolution_backward_weights>(*e, g, alg, bias,
                                                                         fwd.deconv);
        else
            build_backward_weights<dnnl::convolution_backward_weights>(*e, g, alg, bias,
                                                                       fwd.conv);
        describe_weights(*e, g, attrs);
        return e;
    });
}

// The gradients' attributes: the training forward's.
ConvAttrs training_attrs(const ConvAttrs &attrs) {
    return ConvAttrs(attrs.p, attrs.k, attrs.transposed, true);
}

} // namespace

ValueDesc ConvBackwardDataOp::infer(const Attrs &attrs, const ValueDesc &src,
                                    const ValueDesc &weights, const ValueDesc &diff_dst) {
    const BackwardGeometry c = check_backward(conv_backward_op_name(attrs), attrs, src, weights,
                                              diff_dst, src.layout);
    return plain_value(src.dtype, c.data_format, c.g.x);
}

Prepared ConvBackwardDataOp::prepare(const CacheScope &scope, const Attrs &attrs,
                                     const char *name, bool with_bias, const ValueDesc &src,
                                     const ValueDesc &weights, const ValueDesc &diff_dst) {
    const char *op = conv_backward_op_name(attrs);
    const BackwardGeometry c =
        check_backward(op, attrs, src, weights, diff_dst, scope.state->target_layout);
    const ConvAttrs forward = training_attrs(attrs);
    auto entry = prepare_backward_data(scope, op, forward,
                                       backward_name(op, forward, c.g, name, with_bias), c.g,
                                       with_bias);
    const dnnl::memory::desc &dx = entry->arg_desc(DNNL_ARG_DIFF_SRC);
    return {entry,
            {src.desc, weights_taken(*entry, entry->weights_view, entry->plain_weights),
             entry->arg_desc(DNNL_ARG_DIFF_DST)},
            {ValueDesc{src.dtype, c.data_format, dx.get_dims(), dx}}};
}

void ConvBackwardDataOp::run(const CacheScope &scope, PrimitiveEntry &entry,
                             const Buffers &buffers) {
    auto &e = static_cast<ConvBackwardEntry &>(entry);
    std::shared_ptr<void> converted;
    void *weights = weights_for_run(scope, e, e.weights_view, buffers.in[1], converted);
    Handler::Execution exec(e, scope);
    exec.raw(DNNL_ARG_DIFF_DST, const_cast<void *>(buffers.in[2])); // read only
    exec.raw(DNNL_ARG_WEIGHTS, weights);
    exec.output(DNNL_ARG_DIFF_SRC, buffers.out[0]);
    exec.run();
}

std::vector<ValueDesc> ConvBackwardWeightsOp::infer(const Attrs &attrs, bool with_bias,
                                                    const ValueDesc &src,
                                                    const ValueDesc &weights,
                                                    const ValueDesc &diff_dst) {
    const BackwardGeometry c = check_backward(conv_backward_op_name(attrs), attrs, src, weights,
                                              diff_dst, src.layout);
    std::vector<ValueDesc> out = {plain_value(MKC_DTYPE_F32, MKC_LAYOUT_CHANNELS_FIRST, c.g.w)};
    if (with_bias) out.push_back(plain_value(MKC_DTYPE_F32, MKC_LAYOUT_CHANNELS_FIRST, {c.g.y[1]}));
    return out;
}

Prepared ConvBackwardWeightsOp::prepare(const CacheScope &scope, const Attrs &attrs,
                                        const char *name, bool with_bias, const ValueDesc &src,
                                        const ValueDesc &weights, const ValueDesc &diff_dst) {
    const char *op = conv_backward_op_name(attrs);
    const BackwardGeometry c =
        check_backward(op, attrs, src, weights, diff_dst, scope.state->target_layout);
    const ConvAttrs forward = training_attrs(attrs);
    auto entry = prepare_backward_weights(scope, op, forward,
                                          backward_name(op, forward, c.g, name, with_bias), c.g,
                                          with_bias);
    const mkc_layout plain = MKC_LAYOUT_CHANNELS_FIRST;
    Prepared out{entry,
                 {entry->arg_desc(DNNL_ARG_SRC), weights.desc, entry->arg_desc(DNNL_ARG_DIFF_DST)},
                 {ValueDesc{MKC_DTYPE_F32, plain, c.g.w, entry->plain_diff_weights}}};
    if (with_bias)
        out.outputs.push_back(ValueDesc{MKC_DTYPE_F32, plain, Dims{c.g.y[1]}, entry->plain_bias});
    return out;
}

void ConvBackwardWeightsOp::run(const CacheScope &scope, PrimitiveEntry &entry,
                                const Buffers &buffers) {
    auto &e = static_cast<ConvBackwardEntry &>(entry);
    // Each result is written plain: straight into its buffer when the
    // primitive's layout is that plain one, else into a temporary converted
    // after the execution (as the eager call's Handler::PlainResult).
    struct Result {
        const dnnl::memory::desc *have = nullptr, *view = nullptr;
        std::shared_ptr<void> temporary;
        void *data = nullptr;
    };
    const bool bias = e.has_arg(DNNL_ARG_DIFF_BIAS);
    Result results[2];
    for (int i = 0; i < (bias ? 2 : 1); ++i) {
        Result &r = results[i];
        r.have = &e.arg_desc(i == 0 ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_DIFF_BIAS);
        r.view = i == 0 ? &e.onednn_weights : &e.plain_bias;
        r.data = buffers.out[i];
        if (!(*r.have == *r.view)) {
            r.temporary = allocate(r.have->get_size(), false);
            r.data = r.temporary.get();
        }
    }
    {
        Handler::Execution exec(e, scope);
        exec.raw(DNNL_ARG_SRC, const_cast<void *>(buffers.in[0])); // read only
        exec.raw(DNNL_ARG_DIFF_DST, const_cast<void *>(buffers.in[2]));
        exec.output(DNNL_ARG_DIFF_WEIGHTS, results[0].data);
        if (bias) exec.output(DNNL_ARG_DIFF_BIAS, results[1].data);
        exec.run();
    }
    for (int i = 0; i < (bias ? 2 : 1); ++i)
        if (results[i].temporary)
            reorder(scope, *results[i].have, results[i].data, *results[i].view, buffers.out[i]);
}

void convolution_backward(const CacheScope &scope, const char *op, int k, bool transposed,
                          const mkc_conv_params &p, const Tensor &src, const Tensor &weights,
                          const Tensor &diff_dst, mkc_tensor **diff_src, mkc_tensor **diff_weights,
                          mkc_tensor **diff_bias) {
    // The training forward's attributes: its name and signature.
    const ConvAttrs attrs(p, k, transposed, true);
    const BackwardGeometry c = check_backward(op, attrs, src, weights, diff_dst, layout::target());
    const Geometry &g = c.g;
    const bool bias = diff_bias != nullptr;
    const char *name = backward_name(op, attrs, g, p.name, bias);

    if (diff_src) {
        auto entry = prepare_backward_data(scope, op, attrs, name, g, bias);
        Handler::Output out = Handler::prepare_output(diff_src, *entry, DNNL_ARG_DIFF_SRC,
                                                      c.data_format, src.dtype, op);
        {
            Handler::Execution exec(*entry, scope);
            exec.input(DNNL_ARG_DIFF_DST, diff_dst);
            bind_weights(exec, weights, entry->weights_view);
            exec.output(DNNL_ARG_DIFF_SRC, out.data);
            exec.run();
        }
        Handler::finish_output(scope, out, diff_src);
    }

    if (diff_weights || diff_bias) {
        require(diff_weights != nullptr, op, ": diff_bias needs diff_weights too");
        auto entry = prepare_backward_weights(scope, op, attrs, name, g, bias);
        Handler::PlainResult dw(scope, *entry, DNNL_ARG_DIFF_WEIGHTS, diff_weights,
                                entry->plain_diff_weights, entry->onednn_weights, op);
        std::unique_ptr<Handler::PlainResult> db;
        if (bias)
            db = std::make_unique<Handler::PlainResult>(scope, *entry, DNNL_ARG_DIFF_BIAS,
                                                        diff_bias, entry->plain_bias,
                                                        entry->plain_bias, op);
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
    layout::set_target(c.data_format);
}

} // namespace mkc::ops
