// layer_norm: normalisation over the trailing dims, with optional scale and
// shift, forward and backward.
#include <atomic>
#include <optional>
#include <string>

#include "common/engine.hpp"
#include "common/error.hpp"
#include "handler/handler.hpp"
#include "ops/attrs.hpp"
#include "ops/call_words.hpp"
#include "keys/keys.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

using tag = dnnl::memory::format_tag;
using flags = dnnl::normalization_flags;
const auto f32 = dnnl::memory::data_type::f32;

struct LayerNormEntry : PrimitiveEntry {
    dnnl::layer_normalization_forward::primitive_desc pd;
    dnnl::memory::desc x_plain, scale_plain, shift_plain; // src (= dst), scale, shift
};

// A layer_norm's attributes; `training` set for the training forward and
// its grad op.
struct LayerNormAttrs {
    LayerNormAttrs(const mkc_layer_norm_params &params, bool for_training)
        : p(params), training(for_training) {}
    const mkc_layer_norm_params &p;
    bool training;
    template <typename V>
    void each(V &v) const {
        v.field("axis", p.begin_norm_axis);
        v.field("eps", p.epsilon);
        v.field("training", training);
    }
};

// The default name of an unnamed call (valid until the thread's next call).
const char *default_name(const LayerNormAttrs &attrs) { return default_attrs_name("layer_norm", attrs); }

struct LayerNormGeometry {
    Dims xc;            // caller dims of src
    int axis;           // first normalized caller axis
    int64_t rows, cols; // src seen as [rows, cols]
};

LayerNormGeometry layer_norm_geometry(const char *op, const mkc_layer_norm_params &p,
                                      const Tensor &src, const Tensor *scale,
                                      const Tensor *shift) {
    require(src.dtype == MKC_DTYPE_F32, op, ": src must be float32");
    require(p.epsilon >= 0.f, op, ": epsilon must be >= 0");
    LayerNormGeometry g;
    g.xc = caller_dims(src);
    const int n = static_cast<int>(g.xc.size());
    require(p.begin_norm_axis >= -n && p.begin_norm_axis < n, op, ": begin_norm_axis ",
            p.begin_norm_axis, " is out of range for rank ", n);
    g.axis = p.begin_norm_axis < 0 ? p.begin_norm_axis + n : p.begin_norm_axis;
    g.rows = g.cols = 1;
    for (int i = 0; i < n; ++i) (i < g.axis ? g.rows : g.cols) *= g.xc[i];
    for (const Tensor *v : {scale, shift}) {
        if (!v) continue;
        int64_t count = 1;
        for (auto d : v->dims) count *= d;
        require(v->dtype == MKC_DTYPE_F32 && count == g.cols, op, ": ",
                v == scale ? "scale" : "shift", " must hold ", g.cols,
                " float32 values (one per normalized element)");
    }
    return g;
}

std::shared_ptr<LayerNormEntry> acquire_layer_norm(Handler &handler,
                                                   const mkc_layer_norm_params &p,
                                                   const LayerNormGeometry &g, const Tensor &src,
                                                   const Tensor *scale, const Tensor *shift,
                                                   bool training) {
    handler.sign(OpKind::layer_norm);
    handler.sign(src.dims);
    handler.sign(src.layout);
    handler.sign(g.rows);
    handler.sign(scale ? static_cast<int64_t>(scale->dims.size()) : -1);
    handler.sign(shift ? static_cast<int64_t>(shift->dims.size()) : -1);
    sign_attrs(handler, LayerNormAttrs(p, training));
    return handler.acquire_primitive<LayerNormEntry>([&] {
        auto e = std::make_shared<LayerNormEntry>();
        const dnnl::memory::desc x2({g.rows, g.cols}, f32, tag::ab), vec({g.cols}, f32, tag::a),
            stat({g.rows}, f32, tag::a);
        flags f = flags::none;
        if (scale) f |= flags::use_scale;
        if (shift) f |= flags::use_shift;
        e->pd = dnnl::layer_normalization_forward::primitive_desc(
            cpu_engine(),
            training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference, x2,
            x2, p.epsilon, f, user_scratchpad_attr());
        e->primitive = dnnl::layer_normalization_forward(e->pd);
        std::vector<std::pair<int, dnnl::memory::desc>> args = {{DNNL_ARG_SRC, x2},
                                                                {DNNL_ARG_DST, x2}};
        if (scale) args.push_back({DNNL_ARG_SCALE, vec});
        if (shift) args.push_back({DNNL_ARG_SHIFT, vec});
        if (training) {
            args.push_back({DNNL_ARG_MEAN, stat});
            args.push_back({DNNL_ARG_VARIANCE, stat});
        }
        e->set_args(args);
        e->x_plain = layout::plain_desc(src.dims, f32, src.layout);
        if (scale) e->scale_plain = layout::plain_desc(scale->dims, f32, scale->layout);
        if (shift) e->shift_plain = layout::plain_desc(shift->dims, f32, shift->layout);
        e->add_scratchpad(e->pd);
        return e;
    });
}

// Runs the forward on plain src bytes; training writes the statistics.
void execute_layer_norm(const CacheScope &scope, LayerNormEntry &entry, const void *x,
                        const Tensor *scale, const Tensor *shift, void *y, void *mean,
                        void *variance) {
    Handler::Execution exec(entry, scope);
    exec.raw(DNNL_ARG_SRC, const_cast<void *>(x)); // plain src is the [rows, cols] it wants
    if (scale) exec.raw(DNNL_ARG_SCALE, scale->data);
    if (shift) exec.raw(DNNL_ARG_SHIFT, shift->data);
    if (mean) {
        exec.raw(DNNL_ARG_MEAN, mean);
        exec.raw(DNNL_ARG_VARIANCE, variance);
    }
    exec.output(DNNL_ARG_DST, y);
    exec.run();
}

void check_plain_vectors(const LayerNormEntry &entry, const Tensor *scale, const Tensor *shift,
                         const char *op) {
    require(!scale || entry.matches(*scale, DNNL_ARG_SCALE, entry.scale_plain), op,
            ": scale must be plain (row-major)");
    require(!shift || entry.matches(*shift, DNNL_ARG_SHIFT, entry.shift_plain), op,
            ": shift must be plain (row-major)");
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

void layer_norm(const CacheScope &scope, const mkc_layer_norm_params &p, const Tensor &src,
                const Tensor *scale, const Tensor *shift, mkc_tensor **dst) {
    ThreadState &state = *scope.state;
    std::optional<Handler> handler;
    std::optional<LayerNormGeometry> g;
    const auto acquire = [&](BlobCache::HitTicket &ticket, bool &hit) {
        g.emplace(layer_norm_geometry("layer_norm", p, src, scale, shift));
        const bool named = p.name && p.name[0];
        handler.emplace(scope, "layer_norm", p.name,
                        named ? nullptr : default_name(LayerNormAttrs(p, p.training != 0)),
                        nullptr, Dims{g->rows, g->cols});
        auto e = acquire_layer_norm(*handler, p, *g, src, scale, shift, p.training);
        handler->report_hit(ticket, hit);
        return e;
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
    execute_layer_norm(scope, entry, x.data, scale, shift, y.data, mean.get(), variance.get());
    Handler::publish(created, dst);
}

void layer_norm_backward(const CacheScope &scope, const mkc_layer_norm_params &p, const Tensor &src,
                         const Tensor *scale, const Tensor *shift, const Tensor &diff_dst,
                         mkc_tensor **diff_src, mkc_tensor **diff_scale, mkc_tensor **diff_shift) {
    const char *op = "layer_norm_backward";
    const LayerNormGeometry g = layer_norm_geometry(op, p, src, scale, shift);
    if (!(diff_dst.dtype == MKC_DTYPE_F32 && caller_dims(diff_dst) == g.xc))
        fail(MKC_STATUS_INVALID_ARGUMENT, op,
             ": diff_dst must be float32 with src's shape ", shape_text(g.xc));
    require(!diff_scale || scale, op, ": diff_scale needs scale (the forward used none)");
    require(!diff_shift || shift, op, ": diff_shift needs shift (the forward used none)");
    const Dims key_dims{g.rows, g.cols};
    const LayerNormAttrs attrs(p, true); // the training forward's
    const char *name = p.name && p.name[0] ? p.name : default_name(attrs);

    Handler forward(scope, "layer_norm", name, name, nullptr, key_dims);
    auto fwd = acquire_layer_norm(forward, p, g, src, scale, shift, true);
    check_plain_vectors(*fwd, scale, shift, op);

    const bool params_grad = scale || shift;
    Handler handler(scope, "layer_norm", name, name, "bwd", key_dims);
    handler.sign(OpKind::layer_norm_backward);
    handler.sign(src.dims);
    handler.sign(src.layout);
    handler.sign(g.rows);
    handler.sign(scale ? 1 : 0);
    handler.sign(shift ? 1 : 0);
    sign_attrs(handler, attrs);
    auto entry = handler.acquire_primitive<PrimitiveEntry>([&] {
        const dnnl::memory::desc x2({g.rows, g.cols}, f32, tag::ab);
        flags f = flags::none;
        if (scale) f |= flags::use_scale;
        if (shift) f |= flags::use_shift;
        dnnl::layer_normalization_backward::primitive_desc pd(
            cpu_engine(), params_grad ? dnnl::prop_kind::backward : dnnl::prop_kind::backward_data,
            x2, x2, x2, p.epsilon, f, fwd->pd, user_scratchpad_attr());
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

    std::unique_ptr<Tensor> hx, hdy;
    const Tensor &x = Handler::plain_input(scope, *fwd, DNNL_ARG_SRC, src, fwd->x_plain, hx);
    const Tensor &dy = Handler::plain_input(scope, *fwd, DNNL_ARG_DST, diff_dst,
                                            layout::plain_desc(src.dims, f32, src.layout), hdy);
    // The statistics of this very src, recomputed: ones a forward left
    // could only be matched to src's values by reading all of them, which
    // costs as much as computing them (see Transfer).
    std::shared_ptr<void> mean = allocate(g.rows * sizeof(float), false);
    std::shared_ptr<void> variance = allocate(g.rows * sizeof(float), false);
    {
        auto y = allocate(g.rows * g.cols * sizeof(float), false);
        execute_layer_norm(scope, *fwd, x.data, scale, shift, y.get(), mean.get(), variance.get());
    }
    std::unique_ptr<Tensor> created;
    Tensor *dx = nullptr;
    std::shared_ptr<void> dx_scratch;
    if (diff_src)
        dx = &Handler::plain_output(*entry, DNNL_ARG_DIFF_SRC, diff_src, fwd->x_plain, src.layout,
                                    created, op);
    else
        dx_scratch = allocate(g.rows * g.cols * sizeof(float), false);
    // Parameter gradients come back with the normalized dims' shape.
    const Dims trailing(g.xc.begin() + g.axis, g.xc.end());
    const auto param_plain = layout::plain_desc(trailing, f32, MKC_LAYOUT_CHANNELS_FIRST);
    const dnnl::memory::desc vec({g.cols}, f32, tag::a);
    std::unique_ptr<Handler::PlainResult> dscale, dshift;
    std::shared_ptr<void> param_scratch;
    if (scale && diff_scale)
        dscale = std::make_unique<Handler::PlainResult>(scope, *entry, DNNL_ARG_DIFF_SCALE,
                                                        diff_scale, param_plain, vec, op);
    if (shift && diff_shift)
        dshift = std::make_unique<Handler::PlainResult>(scope, *entry, DNNL_ARG_DIFF_SHIFT,
                                                        diff_shift, param_plain, vec, op);
    if ((scale && !dscale) || (shift && !dshift))
        param_scratch = allocate(2 * g.cols * sizeof(float), false); // [scale | shift]
    {
        Handler::Execution exec(*entry, scope);
        exec.raw(DNNL_ARG_SRC, x.data);
        exec.raw(DNNL_ARG_MEAN, mean.get());
        exec.raw(DNNL_ARG_VARIANCE, variance.get());
        exec.raw(DNNL_ARG_DIFF_DST, dy.data);
        exec.output(DNNL_ARG_DIFF_SRC, dx ? dx->data : dx_scratch.get());
        if (scale) {
            exec.raw(DNNL_ARG_SCALE, scale->data);
            exec.output(DNNL_ARG_DIFF_SCALE, dscale ? dscale->data() : param_scratch.get());
        }
        if (shift) exec.raw(DNNL_ARG_SHIFT, shift->data);
        if (shift)
            exec.output(DNNL_ARG_DIFF_SHIFT, dshift ? dshift->data()
                                                    : static_cast<float *>(param_scratch.get()) +
                                                          g.cols);
        exec.run();
    }
    Handler::publish(created, diff_src);
    if (dscale) dscale->finish();
    if (dshift) dshift->finish();
}

} // namespace mkc::ops
