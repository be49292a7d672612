// layer_norm: normalisation over the trailing dims, with optional scale and
// shift, forward and backward.
#include <atomic>
#include <optional>
#include <string>

#include "common/cpu_features.hpp"
#include "common/engine.hpp"
#include "common/error.hpp"
#include "handler/handler.hpp"
#include "ops/attrs.hpp"
#include "ops/call_words.hpp"
#include "ops/float_dtype.hpp"
#include "keys/keys.hpp"
#include "ops/layer_norm.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

using tag = dnnl::memory::format_tag;
using flags = dnnl::normalization_flags;
const auto f32 = dnnl::memory::data_type::f32;

struct LayerNormEntry : PrimitiveEntry {
    dnnl::memory::desc x_plain, scale_plain, shift_plain; // src (= dst), scale, shift
};

// The default name of an unnamed call (valid until the thread's next call).
const char *default_name(const LayerNormAttrs &attrs) { return default_attrs_name("layer_norm", attrs); }

struct LayerNormGeometry {
    Dims xc;            // caller dims of src
    int axis;           // first normalized caller axis
    int64_t rows, cols; // src seen as [rows, cols]
};

template <typename V>
LayerNormGeometry layer_norm_geometry(const char *op, const mkc_layer_norm_params &p,
                                      const V &src, const V *scale, const V *shift) {
    require_float_src(op, "src", src.dtype);
    require(p.epsilon >= 0.f, op, ": epsilon must be >= 0");
    LayerNormGeometry g;
    g.xc = caller_dims(src);
    const int n = static_cast<int>(g.xc.size());
    require(p.begin_norm_axis >= -n && p.begin_norm_axis < n, op, ": begin_norm_axis ",
            p.begin_norm_axis, " is out of range for rank ", n);
    g.axis = p.begin_norm_axis < 0 ? p.begin_norm_axis + n : p.begin_norm_axis;
    g.rows = g.cols = 1;
    for (int i = 0; i < n; ++i) (i < g.axis ? g.rows : g.cols) *= g.xc[i];
    for (const V *v : {scale, shift}) {
        if (!v) continue;
        int64_t count = 1;
        for (auto d : v->dims) count *= d;
        require(v->dtype == MKC_DTYPE_F32 && count == g.cols, op, ": ",
                v == scale ? "scale" : "shift", " must hold ", g.cols,
                " float32 values (one per normalized element)");
    }
    return g;
}

template <typename V>
std::shared_ptr<LayerNormEntry> acquire_layer_norm(Handler &handler, const LayerNormAttrs &attrs,
                                                   const LayerNormGeometry &g, const V &src,
                                                   const V *scale, const V *shift) {
    const mkc_layer_norm_params &p = attrs.p;
    const bool training = attrs.training;
    handler.sign(OpKind::layer_norm);
    handler.sign_value(src.dims, src.dtype);
    handler.sign(src.layout);
    handler.sign(g.rows);
    handler.sign(scale ? static_cast<int64_t>(scale->dims.size()) : -1);
    handler.sign(shift ? static_cast<int64_t>(shift->dims.size()) : -1);
    sign_attrs(handler, attrs);
    return handler.acquire_primitive<LayerNormEntry>([&] {
        auto e = std::make_shared<LayerNormEntry>();
        // Scale and shift stay float32 for bfloat16 data, as oneDNN takes them.
        const dnnl::memory::desc x2({g.rows, g.cols}, onednn_float(src.dtype), tag::ab),
            vec({g.cols}, f32, tag::a), stat({g.rows}, f32, tag::a);
        flags f = flags::none;
        if (scale) f |= flags::use_scale;
        if (shift) f |= flags::use_shift;
        const auto pd = dnnl::layer_normalization_forward::primitive_desc(
            cpu_engine(),
            training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference, x2,
            x2, p.epsilon, f, user_scratchpad_attr());
        e->primitive = dnnl::layer_normalization_forward(pd);
        std::vector<std::pair<int, dnnl::memory::desc>> args = {{DNNL_ARG_SRC, x2},
                                                                {DNNL_ARG_DST, x2}};
        if (scale) args.push_back({DNNL_ARG_SCALE, vec});
        if (shift) args.push_back({DNNL_ARG_SHIFT, vec});
        if (training) {
            args.push_back({DNNL_ARG_MEAN, stat});
            args.push_back({DNNL_ARG_VARIANCE, stat});
        }
        e->set_args(args);
        e->x_plain = layout::plain_desc(src.dims, onednn_float(src.dtype), src.layout);
        if (scale) e->scale_plain = layout::plain_desc(scale->dims, f32, scale->layout);
        if (shift) e->shift_plain = layout::plain_desc(shift->dims, f32, shift->layout);
        e->add_scratchpad(pd);
        return e;
    });
}

// The forward's entry under `name` (or the attributes' default name).
template <typename V>
std::shared_ptr<LayerNormEntry> prepare_layer_norm(const CacheScope &scope,
                                                   const LayerNormAttrs &attrs, const char *name,
                                                   const LayerNormGeometry &g, const V &src,
                                                   const V *scale, const V *shift,
                                                   BlobCache::HitTicket &ticket, bool &hit) {
    if (src.dtype != MKC_DTYPE_F32) require_bf16_kernels("layer_norm");
    const bool named = name && name[0];
    Handler handler(scope, "layer_norm", name, named ? nullptr : default_name(attrs), nullptr,
                    Dims{g.rows, g.cols});
    auto e = acquire_layer_norm(handler, attrs, g, src, scale, shift);
    handler.report_hit(ticket, hit);
    return e;
}

// Runs the forward on plain src bytes; training writes the statistics.
void execute_layer_norm(const CacheScope &scope, LayerNormEntry &entry, const void *x,
                        const void *scale, const void *shift, void *y, void *mean,
                        void *variance) {
    Handler::Execution exec(entry, scope);
    // Plain src is the [rows, cols] it wants; the inputs are only read.
    exec.raw(DNNL_ARG_SRC, const_cast<void *>(x));
    if (scale) exec.raw(DNNL_ARG_SCALE, const_cast<void *>(scale));
    if (shift) exec.raw(DNNL_ARG_SHIFT, const_cast<void *>(shift));
    if (mean) {
        exec.raw(DNNL_ARG_MEAN, mean);
        exec.raw(DNNL_ARG_VARIANCE, variance);
    }
    exec.output(DNNL_ARG_DST, y);
    exec.run();
}

// scale and shift are read as their plain bytes: `plain(value, arg)` says
// whether a given one is.
template <typename V, typename Plain>
void check_plain_vectors(const V *scale, const V *shift, const char *op, Plain &&plain) {
    require(!scale || plain(*scale, DNNL_ARG_SCALE), op, ": scale must be plain (row-major)");
    require(!shift || plain(*shift, DNNL_ARG_SHIFT), op, ": shift must be plain (row-major)");
}

// Whether `v` is plain in its own dims and layout.
template <typename V>
bool own_plain(const V &v) {
    return v.desc == layout::plain_desc(v.dims, f32, v.layout);
}

// The same for tensors, first against the arrangements `entry` reads
// (remembered per tensor): those of the scale and shift it was built with,
// whose dims another call's may not have (only their rank is signed).
void check_plain_vectors(const LayerNormEntry &entry, const Tensor *scale, const Tensor *shift,
                         const char *op) {
    check_plain_vectors(scale, shift, op, [&](const Tensor &v, int arg) {
        const dnnl::memory::desc &want = arg == DNNL_ARG_SCALE ? entry.scale_plain
                                                               : entry.shift_plain;
        return entry.matches(v, arg, want) || own_plain(v);
    });
}

// The same on descriptions.
void check_plain_vectors(const ValueDesc *scale, const ValueDesc *shift, const char *op) {
    check_plain_vectors(scale, shift, op, [](const ValueDesc &v, int) { return own_plain(v); });
}

} // namespace

namespace {

// What the thread's argument cache knows an inference layer_norm by (with
// the name's text): epsilon, the axis as given, and the dtypes, caller
// layouts and dims of src, scale and shift: everything its checks, key and
// primitive depend on. The tensors' exact layouts are matched on each call.
class LayerNormCall : public CallWords<4 + 3 * (1 + MKC_MAX_NDIMS)> {
public:
    LayerNormCall(const mkc_layer_norm_params &p, const Tensor &src, const Tensor *scale,
                  const Tensor *shift) {
        const auto vector = [](const Tensor *t) {
            return t ? int64_t(t->dtype) << 8 | t->layout : int64_t(0xff);
        };
        add(kind_word(OpKind::layer_norm) | int64_t(src.dtype) << 32 | int64_t(src.layout) << 24 |
            vector(scale) << 12 | vector(shift));
        add_attrs(*this, LayerNormAttrs(p, p.training != 0));
        add_dims(src.dims);
        seal(p.name);
        if (scale) add_dims(scale->dims);
        if (shift) add_dims(shift->dims);
    }
};

} // namespace

ValueDesc LayerNormOp::infer(const Attrs &attrs, const ValueDesc &src, const ValueDesc *scale,
                             const ValueDesc *shift) {
    layer_norm_geometry("layer_norm", attrs.p, src, scale, shift);
    check_plain_vectors(scale, shift, "layer_norm");
    return plain_value(src.dtype, src.layout, src.dims);
}

Prepared LayerNormOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                              const ValueDesc &src, const ValueDesc *scale,
                              const ValueDesc *shift) {
    const LayerNormGeometry g = layer_norm_geometry("layer_norm", attrs.p, src, scale, shift);
    BlobCache::HitTicket ticket;
    bool hit = false;
    auto entry = prepare_layer_norm(scope, attrs, name, g, src, scale, shift, ticket, hit);
    check_plain_vectors(scale, shift, "layer_norm");
    Prepared out{entry,
                 {entry->x_plain, scale ? scale->desc : empty_desc(),
                  shift ? shift->desc : empty_desc()},
                 {{src.dtype, src.layout, src.dims, entry->x_plain}}};
    if (!entry->has_arg(DNNL_ARG_MEAN)) { // a training forward's statistics: run()'s
        out.in_args = {DNNL_ARG_SRC, DNNL_ARG_SCALE, DNNL_ARG_SHIFT};
        out.out_args = {DNNL_ARG_DST};
    }
    return out;
}

void LayerNormOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    auto &e = static_cast<LayerNormEntry &>(entry);
    std::shared_ptr<void> mean, variance; // a training forward's, dropped
    if (e.has_arg(DNNL_ARG_MEAN)) {
        mean = allocate(e.arg_desc(DNNL_ARG_MEAN).get_size(), false);
        variance = allocate(e.arg_desc(DNNL_ARG_VARIANCE).get_size(), false);
    }
    execute_layer_norm(scope, e, buffers.in[0], buffers.in[1], buffers.in[2], buffers.out[0],
                       mean.get(), variance.get());
}

void layer_norm(const CacheScope &scope, const mkc_layer_norm_params &p, const Tensor &src,
                const Tensor *scale, const Tensor *shift, mkc_tensor **dst) {
    ThreadState &state = *scope.state;
    std::optional<LayerNormGeometry> g;
    const auto acquire = [&](BlobCache::HitTicket &ticket, bool &hit) {
        g.emplace(layer_norm_geometry("layer_norm", p, src, scale, shift));
        return prepare_layer_norm(scope, LayerNormAttrs(p, p.training != 0), p.name, *g, src,
                                  scale, shift, ticket, hit);
    };
    // An inference call this thread made before, whose entry the cache still
    // holds, skips the checks, geometry, key and lookup.
    const std::shared_ptr<void> blob = remembered_inference_entry<LayerNormEntry>(
        p.training, state, scope, LayerNormCall(p, src, scale, shift), p.name,
        [](const LayerNormEntry &) { return true; }, acquire);
    auto &entry = *static_cast<LayerNormEntry *>(blob.get());
    // src, scale, shift and dst are all used as plain bytes; the entry holds
    // their expected plain descriptors, matched once per tensor.
    std::unique_ptr<Tensor> holder, created;
    const Tensor &x = Handler::plain_input(scope, entry, DNNL_ARG_SRC, src, entry.x_plain, holder);
    check_plain_vectors(entry, scale, shift, "layer_norm");
    Tensor &y = Handler::plain_output(entry, DNNL_ARG_DST, dst, entry.x_plain, src.layout,
                                      created, "layer_norm");
    std::shared_ptr<void> mean, variance; // the training forward computes them
    if (p.training) {
        mean = allocate(g->rows * sizeof(float), false);
        variance = allocate(g->rows * sizeof(float), false);
    }
    // No transfer: the grad op builds the same training entry (found in the
    // cache) and recomputes the statistics (see Transfer).
    execute_layer_norm(scope, entry, x.data, scale ? scale->data : nullptr,
                       shift ? shift->data : nullptr, y.data, mean.get(), variance.get());
    Handler::publish(created, dst);
}

namespace {

// The checks of a gradient call (those of its diff outputs aside).
template <typename V>
LayerNormGeometry check_layer_norm_backward(const mkc_layer_norm_params &p, const V &src,
                                            const V *scale, const V *shift, const V &diff_dst) {
    const char *op = "layer_norm_backward";
    const LayerNormGeometry g = layer_norm_geometry(op, p, src, scale, shift);
    require_diff_dtype(op, "diff_dst", diff_dst.dtype, "src", src.dtype);
    if (!(caller_dims(diff_dst) == g.xc))
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": diff_dst must have src's shape ",
             shape_text(g.xc));
    return g;
}

// The gradient's name: `name`, or the training forward's default.
const char *gradient_name(const mkc_layer_norm_params &p, const char *name) {
    return name && name[0] ? name : default_name(LayerNormAttrs(p, true));
}

// The training forward a gradient recomputes the statistics with (and its
// primitive is built from). `key_dims`: {rows, cols}, the key's shape of
// both the gradient's entries (made once per call).
template <typename V>
std::shared_ptr<LayerNormEntry> gradient_forward(const CacheScope &scope,
                                                 const mkc_layer_norm_params &p, const char *name,
                                                 const Dims &key_dims, const LayerNormGeometry &g,
                                                 const V &src, const V *scale, const V *shift) {
    if (src.dtype != MKC_DTYPE_F32) require_bf16_kernels("layer_norm_backward");
    Handler forward(scope, "layer_norm", name, name, nullptr, key_dims);
    return acquire_layer_norm(forward, LayerNormAttrs(p, true), g, src, scale, shift);
}

template <typename V>
std::shared_ptr<PrimitiveEntry>
prepare_layer_norm_backward(const CacheScope &scope, const mkc_layer_norm_params &p,
                            const char *name, const Dims &key_dims, const LayerNormGeometry &g,
                            const V &src, bool scale, bool shift, const LayerNormEntry &fwd) {
    const bool params_grad = scale || shift;
    const LayerNormAttrs attrs(p, true); // the training forward's
    Handler handler(scope, "layer_norm", name, name, "bwd", key_dims);
    handler.sign(OpKind::layer_norm_backward);
    handler.sign_value(src.dims, src.dtype);
    handler.sign(src.layout);
    handler.sign(g.rows);
    handler.sign(scale ? 1 : 0);
    handler.sign(shift ? 1 : 0);
    sign_attrs(handler, attrs);
    return handler.acquire_primitive<PrimitiveEntry>([&] {
        // src, diff_dst and diff_src in src's dtype; the statistics and the
        // scale and shift gradients float32.
        const dnnl::memory::desc x2({g.rows, g.cols}, onednn_float(src.dtype), tag::ab);
        flags f = flags::none;
        if (scale) f |= flags::use_scale;
        if (shift) f |= flags::use_shift;
        dnnl::layer_normalization_backward::primitive_desc pd(
            cpu_engine(), params_grad ? dnnl::prop_kind::backward : dnnl::prop_kind::backward_data,
            x2, x2, x2, p.epsilon, f,
            descriptor_of<dnnl::layer_normalization_forward::primitive_desc>(fwd.primitive),
            user_scratchpad_attr());
        auto e = std::make_shared<PrimitiveEntry>();
        e->primitive = dnnl::layer_normalization_backward(pd);
        std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE,
                                 DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC};
        if (scale) args.insert(args.end(), {DNNL_ARG_SCALE, DNNL_ARG_DIFF_SCALE});
        // oneDNN v3.2 counts shift among the backward's inputs (unused).
        if (shift) args.insert(args.end(), {DNNL_ARG_SHIFT, DNNL_ARG_DIFF_SHIFT});
        e->set_args(pd, args);
        return e;
    });
}

// The statistics of one src, computed by the training forward.
struct LayerNormStatistics {
    std::shared_ptr<void> mean, variance;
};

// The statistics of this very src, recomputed: ones a forward left could
// only be matched to src's values by reading all of them, which costs as
// much as computing them (see Transfer). All buffers plain.
LayerNormStatistics layer_norm_statistics(const CacheScope &scope, LayerNormEntry &fwd,
                                          const LayerNormGeometry &g, const void *x,
                                          const void *scale, const void *shift) {
    LayerNormStatistics s{allocate(g.rows * sizeof(float), false),
                          allocate(g.rows * sizeof(float), false)};
    auto y = allocate(g.rows * g.cols * sizeof(float), false);
    execute_layer_norm(scope, fwd, x, scale, shift, y.get(), s.mean.get(), s.variance.get());
    return s;
}

// Executes the gradient on plain buffers; a null output goes to scratch
// (diff_scale and diff_shift: when the forward had scale or shift).
void execute_layer_norm_backward(const CacheScope &scope, PrimitiveEntry &entry,
                                 const LayerNormGeometry &g, const LayerNormStatistics &s,
                                 const void *x, const void *scale, const void *shift,
                                 const void *dy, void *dx, void *dscale, void *dshift) {
    std::shared_ptr<void> dx_scratch, param_scratch;
    if (!dx) dx = (dx_scratch = allocate(g.rows * g.cols * sizeof(float), false)).get();
    if ((scale && !dscale) || (shift && !dshift))
        param_scratch = allocate(2 * g.cols * sizeof(float), false); // [scale | shift]
    Handler::Execution exec(entry, scope);
    // The inputs are only read.
    exec.raw(DNNL_ARG_SRC, const_cast<void *>(x));
    exec.raw(DNNL_ARG_MEAN, s.mean.get());
    exec.raw(DNNL_ARG_VARIANCE, s.variance.get());
    exec.raw(DNNL_ARG_DIFF_DST, const_cast<void *>(dy));
    exec.output(DNNL_ARG_DIFF_SRC, dx);
    if (scale) {
        exec.raw(DNNL_ARG_SCALE, const_cast<void *>(scale));
        exec.output(DNNL_ARG_DIFF_SCALE, dscale ? dscale : param_scratch.get());
    }
    if (shift) {
        exec.raw(DNNL_ARG_SHIFT, const_cast<void *>(shift));
        exec.output(DNNL_ARG_DIFF_SHIFT,
                    dshift ? dshift : static_cast<float *>(param_scratch.get()) + g.cols);
    }
    exec.run();
}

// The parameter gradients' shape: the normalized dims.
Dims trailing_dims(const LayerNormGeometry &g) { return Dims(g.xc.begin() + g.axis, g.xc.end()); }

// What LayerNormBackwardOp::prepare hands out: the gradient's entry and the
// training forward's (each shared with the cache). Itself in no cache.
struct LayerNormGradient : PrimitiveEntry {
    std::shared_ptr<LayerNormEntry> forward;
    std::shared_ptr<PrimitiveEntry> backward;
    LayerNormGeometry g;
};

} // namespace

void layer_norm_backward(const CacheScope &scope, const mkc_layer_norm_params &p, const Tensor &src,
                         const Tensor *scale, const Tensor *shift, const Tensor &diff_dst,
                         mkc_tensor **diff_src, mkc_tensor **diff_scale, mkc_tensor **diff_shift) {
    const char *op = "layer_norm_backward";
    const LayerNormGeometry g = check_layer_norm_backward(p, src, scale, shift, diff_dst);
    require(!diff_scale || scale, op, ": diff_scale needs scale (the forward used none)");
    require(!diff_shift || shift, op, ": diff_shift needs shift (the forward used none)");
    const char *name = gradient_name(p, p.name);
    const Dims key_dims{g.rows, g.cols};

    auto fwd = gradient_forward(scope, p, name, key_dims, g, src, scale, shift);
    check_plain_vectors(*fwd, scale, shift, op);
    auto entry = prepare_layer_norm_backward(scope, p, name, key_dims, g, src, scale != nullptr,
                                             shift != nullptr, *fwd);

    std::unique_ptr<Tensor> hx, hdy;
    const Tensor &x = Handler::plain_input(scope, *fwd, DNNL_ARG_SRC, src, fwd->x_plain, hx);
    const Tensor &dy = Handler::plain_input(scope, *fwd, DNNL_ARG_DST, diff_dst, fwd->x_plain,
                                            hdy);
    const void *scale_data = scale ? scale->data : nullptr;
    const void *shift_data = shift ? shift->data : nullptr;
    const LayerNormStatistics stats =
        layer_norm_statistics(scope, *fwd, g, x.data, scale_data, shift_data);
    std::unique_ptr<Tensor> created;
    Tensor *dx = nullptr;
    if (diff_src)
        dx = &Handler::plain_output(*entry, DNNL_ARG_DIFF_SRC, diff_src, fwd->x_plain, src.layout,
                                    created, op);
    // Parameter gradients come back with the normalized dims' shape.
    const auto param_plain = layout::plain_desc(trailing_dims(g), f32, MKC_LAYOUT_CHANNELS_FIRST);
    const dnnl::memory::desc vec({g.cols}, f32, tag::a);
    std::unique_ptr<Handler::PlainResult> dscale, dshift;
    if (scale && diff_scale)
        dscale = std::make_unique<Handler::PlainResult>(scope, *entry, DNNL_ARG_DIFF_SCALE,
                                                        diff_scale, param_plain, vec, op);
    if (shift && diff_shift)
        dshift = std::make_unique<Handler::PlainResult>(scope, *entry, DNNL_ARG_DIFF_SHIFT,
                                                        diff_shift, param_plain, vec, op);
    execute_layer_norm_backward(scope, *entry, g, stats, x.data, scale_data, shift_data, dy.data,
                                dx ? dx->data : nullptr, dscale ? dscale->data() : nullptr,
                                dshift ? dshift->data() : nullptr);
    Handler::publish(created, diff_src);
    if (dscale) dscale->finish();
    if (dshift) dshift->finish();
}

std::vector<ValueDesc> LayerNormBackwardOp::infer(const Attrs &attrs, const ValueDesc &src,
                                                  const ValueDesc *scale, const ValueDesc *shift,
                                                  const ValueDesc &diff_dst) {
    const LayerNormGeometry g = check_layer_norm_backward(attrs.p, src, scale, shift, diff_dst);
    check_plain_vectors(scale, shift, "layer_norm_backward");
    const ValueDesc param = plain_value(MKC_DTYPE_F32, MKC_LAYOUT_CHANNELS_FIRST, trailing_dims(g));
    return {plain_value(src.dtype, src.layout, src.dims), scale ? param : ValueDesc{},
            shift ? param : ValueDesc{}};
}

Prepared LayerNormBackwardOp::prepare(const CacheScope &scope, const Attrs &attrs,
                                      const char *name, const ValueDesc &src,
                                      const ValueDesc *scale, const ValueDesc *shift,
                                      const ValueDesc &diff_dst) {
    const char *op = "layer_norm_backward";
    const LayerNormGeometry g = check_layer_norm_backward(attrs.p, src, scale, shift, diff_dst);
    name = gradient_name(attrs.p, name);
    auto plan = std::make_shared<LayerNormGradient>();
    plan->g = g;
    const Dims key_dims{g.rows, g.cols};
    plan->forward = gradient_forward(scope, attrs.p, name, key_dims, g, src, scale, shift);
    check_plain_vectors(scale, shift, op);
    plan->backward = prepare_layer_norm_backward(scope, attrs.p, name, key_dims, g, src,
                                                 scale != nullptr, shift != nullptr,
                                                 *plan->forward);
    // The parameter gradients are written straight into their plain bytes.
    const dnnl::memory::desc vec({g.cols}, f32, tag::a);
    require((!scale || plan->backward->arg_desc(DNNL_ARG_DIFF_SCALE) == vec) &&
                (!shift || plan->backward->arg_desc(DNNL_ARG_DIFF_SHIFT) == vec),
            op, ": internal: the parameter gradients are not plain");
    const LayerNormEntry &fwd = *plan->forward;
    const ValueDesc param = plain_value(MKC_DTYPE_F32, MKC_LAYOUT_CHANNELS_FIRST, trailing_dims(g));
    return {plan,
            {fwd.x_plain, scale ? scale->desc : empty_desc(), shift ? shift->desc : empty_desc(),
             fwd.x_plain},
            {{src.dtype, src.layout, src.dims, fwd.x_plain}, scale ? param : ValueDesc{},
             shift ? param : ValueDesc{}}};
}

void LayerNormBackwardOp::run(const CacheScope &scope, PrimitiveEntry &entry,
                              const Buffers &buffers) {
    auto &plan = static_cast<LayerNormGradient &>(entry);
    const void *x = buffers.in[0], *scale = buffers.in[1], *shift = buffers.in[2];
    const LayerNormStatistics stats =
        layer_norm_statistics(scope, *plan.forward, plan.g, x, scale, shift);
    execute_layer_norm_backward(scope, *plan.backward, plan.g, stats, x, scale, shift,
                                buffers.in[3], buffers.out[0], buffers.out[1], buffers.out[2]);
}

} // namespace mkc::ops
