// Normalizations: layer_norm (over trailing dims), batch_norm (inference with
// running statistics, or training forward with batch statistics and a
// momentum update of the running ones), and LRN across channels.
#include <atomic>
#include <optional>
#include <string>

#include "common/engine.hpp"
#include "common/error.hpp"
#include "handler/handler.hpp"
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
struct BatchNormEntry : PrimitiveEntry {
    dnnl::batch_normalization_forward::primitive_desc pd;
    std::atomic<bool> transferred{false}; // training: left for the grad op
};
struct LrnEntry : PrimitiveEntry {
    dnnl::lrn_forward::primitive_desc pd;
};

// A 1-D float tensor of `n` values, named `what` in messages.
void check_vector(const Tensor *t, int64_t n, const char *op, const char *what) {
    if (!t) return;
    require(t->dtype == MKC_DTYPE_F32 && t->dims.size() == 1 && t->dims[0] == n, op, ": ", what,
            " must be a float32 vector of ", n, " values");
}

} // namespace

namespace {

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
    handler.sign_float(p.epsilon);
    handler.sign(training ? 1 : 0);
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
void execute_layer_norm(LayerNormEntry &entry, const void *x, const Tensor *scale,
                        const Tensor *shift, void *y, void *mean, void *variance,
                        ThreadState &state) {
    Handler::Execution exec(entry, state);
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
class LayerNormCall : public CallWords<2 + 3 * (1 + MKC_MAX_NDIMS)> {
public:
    LayerNormCall(const mkc_layer_norm_params &p, const Tensor &src, const Tensor *scale,
                  const Tensor *shift) {
        const auto vector = [](const Tensor *t) {
            return t ? int64_t(t->dtype) << 8 | t->layout : int64_t(0xff);
        };
        add(kind_word(OpKind::layer_norm) | int64_t(src.dtype) << 32 | int64_t(src.layout) << 24 |
            vector(scale) << 12 | vector(shift));
        add(bits(p.epsilon) << 32 | static_cast<uint32_t>(p.begin_norm_axis));
        add_dims(src.dims);
        seal(reinterpret_cast<uintptr_t>(p.name));
        if (scale) add_dims(scale->dims);
        if (shift) add_dims(shift->dims);
    }
};

} // namespace

void layer_norm(const mkc_layer_norm_params &p, const Tensor &src, const Tensor *scale,
                const Tensor *shift, mkc_tensor **dst) {
    ThreadState &state = thread_state();
    std::optional<Handler> handler;
    std::optional<LayerNormGeometry> g;
    const auto acquire = [&](BlobCache::HitTicket &ticket, bool &hit) {
        g.emplace(layer_norm_geometry("layer_norm", p, src, scale, shift));
        handler.emplace("layer_norm", p.name, "layer_norm", nullptr, Dims{g->rows, g->cols});
        auto e = acquire_layer_norm(*handler, p, *g, src, scale, shift, p.training);
        handler->report_hit(ticket, hit);
        return e;
    };
    // An inference call this thread made before, whose entry the cache still
    // holds, skips the checks, geometry, key and lookup.
    const std::shared_ptr<void> blob = remembered_inference_entry<LayerNormEntry>(
        p.training, state, LayerNormCall(p, src, scale, shift), p.name,
        [](const LayerNormEntry &) { return true; }, acquire);
    auto &entry = *static_cast<LayerNormEntry *>(blob.get());
    // src, scale, shift and dst are all used as plain bytes; the entry holds
    // their expected plain descriptors, matched once per tensor.
    std::unique_ptr<Tensor> holder, created;
    const Tensor &x = Handler::plain_input(entry, DNNL_ARG_SRC, src, entry.x_plain, holder);
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
    execute_layer_norm(entry, x.data, scale, shift, y.data, mean.get(), variance.get(), state);
    Handler::publish(created, dst);
}

void layer_norm_backward(const mkc_layer_norm_params &p, const Tensor &src, const Tensor *scale,
                         const Tensor *shift, const Tensor &diff_dst, mkc_tensor **diff_src,
                         mkc_tensor **diff_scale, mkc_tensor **diff_shift) {
    const char *op = "layer_norm_backward";
    const LayerNormGeometry g = layer_norm_geometry(op, p, src, scale, shift);
    if (!(diff_dst.dtype == MKC_DTYPE_F32 && caller_dims(diff_dst) == g.xc))
        fail(MKC_STATUS_INVALID_ARGUMENT, op,
             ": diff_dst must be float32 with src's shape ", shape_text(g.xc));
    require(!diff_scale || scale, op, ": diff_scale needs scale (the forward used none)");
    require(!diff_shift || shift, op, ": diff_shift needs shift (the forward used none)");
    const Dims key_dims{g.rows, g.cols};
    const char *name = p.name && p.name[0] ? p.name : "layer_norm";

    Handler forward("layer_norm", name, name, nullptr, key_dims);
    auto fwd = acquire_layer_norm(forward, p, g, src, scale, shift, true);
    check_plain_vectors(*fwd, scale, shift, op);

    const bool params_grad = scale || shift;
    Handler handler("layer_norm", name, name, "bwd", key_dims);
    handler.sign(OpKind::layer_norm_backward);
    handler.sign(src.dims);
    handler.sign(src.layout);
    handler.sign(g.rows);
    handler.sign(scale ? 1 : 0);
    handler.sign(shift ? 1 : 0);
    handler.sign_float(p.epsilon);
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
    const Tensor &x = Handler::plain_input(*fwd, DNNL_ARG_SRC, src, fwd->x_plain, hx);
    const Tensor &dy = Handler::plain_input(*fwd, DNNL_ARG_DST, diff_dst,
                                            layout::plain_desc(src.dims, f32, src.layout), hdy);
    // The statistics of this very src, recomputed: ones a forward left
    // could only be matched to src's values by reading all of them, which
    // costs as much as computing them (see Transfer).
    std::shared_ptr<void> mean = allocate(g.rows * sizeof(float), false);
    std::shared_ptr<void> variance = allocate(g.rows * sizeof(float), false);
    {
        auto y = allocate(g.rows * g.cols * sizeof(float), false);
        execute_layer_norm(*fwd, x.data, scale, shift, y.get(), mean.get(), variance.get(),
                           thread_state());
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
        dscale = std::make_unique<Handler::PlainResult>(*entry, DNNL_ARG_DIFF_SCALE, diff_scale,
                                                        param_plain, vec, op);
    if (shift && diff_shift)
        dshift = std::make_unique<Handler::PlainResult>(*entry, DNNL_ARG_DIFF_SHIFT, diff_shift,
                                                        param_plain, vec, op);
    if ((scale && !dscale) || (shift && !dshift))
        param_scratch = allocate(2 * g.cols * sizeof(float), false); // [scale | shift]
    {
        Handler::Execution exec(*entry);
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

namespace {

void sign_batch_norm(Handler &handler, float epsilon, bool scale, bool shift, bool training) {
    handler.sign(OpKind::batch_norm);
    handler.sign(training ? 1 : 0);
    handler.sign(scale ? 1 : 0);
    handler.sign(shift ? 1 : 0);
    handler.sign_float(epsilon);
}

std::shared_ptr<BatchNormEntry> acquire_batch_norm(Handler &handler, float epsilon,
                                                   const Tensor &src, bool scale, bool shift,
                                                   bool training) {
    const int64_t c = src.dims[1];
    sign_batch_norm(handler, epsilon, scale, shift, training);
    handler.sign_layout(src, DNNL_ARG_SRC);
    return handler.acquire_primitive<BatchNormEntry>([&] {
        auto e = std::make_shared<BatchNormEntry>();
        flags f = training ? flags::none : flags::use_global_stats;
        if (scale) f |= flags::use_scale;
        if (shift) f |= flags::use_shift;
        e->pd = dnnl::batch_normalization_forward::primitive_desc(
            cpu_engine(),
            training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
            src.desc, src.desc, epsilon, f, user_scratchpad_attr());
        e->primitive = dnnl::batch_normalization_forward(e->pd);
        const dnnl::memory::desc vec({c}, f32, tag::a);
        std::vector<std::pair<int, dnnl::memory::desc>> args = {
            {DNNL_ARG_SRC, e->pd.src_desc()}, {DNNL_ARG_DST, e->pd.dst_desc()},
            {DNNL_ARG_MEAN, vec}, {DNNL_ARG_VARIANCE, vec}};
        if (scale) args.push_back({DNNL_ARG_SCALE, vec});
        if (shift) args.push_back({DNNL_ARG_SHIFT, vec});
        if (training && e->pd.workspace_desc().get_size() > 0)
            args.push_back({DNNL_ARG_WORKSPACE, e->pd.workspace_desc()});
        e->set_args(args);
        e->add_scratchpad(e->pd);
        return e;
    });
}

} // namespace

namespace {

void check_batch_norm(const mkc_batch_norm_params &p, const Tensor &src, const Tensor *mean,
                      const Tensor *variance, const Tensor *scale, const Tensor *shift,
                      const Tensor *batch_mean, const Tensor *batch_variance) {
    const char *op = "batch_norm";
    require(src.dtype == MKC_DTYPE_F32, op, ": src must be float32");
    require(p.epsilon >= 0.f, op, ": epsilon must be >= 0");
    const Dims &x = onednn_dims(src);
    require(x.size() >= 2 && x.size() <= 5, op, ": src must have rank 2..5 (N, C, ...), got ",
            x.size());
    const int64_t c = x[1];
    const bool training = p.training != 0;
    require(training || (mean && variance), op,
            ": inference needs the running mean and variance");
    check_vector(mean, c, op, "mean");
    check_vector(variance, c, op, "variance");
    check_vector(scale, c, op, "scale");
    check_vector(shift, c, op, "shift");
    check_vector(batch_mean, c, op, "batch_mean");
    check_vector(batch_variance, c, op, "batch_variance");
    if (training)
        require(p.momentum >= 0.f && p.momentum <= 1.f, op, ": momentum must be in [0, 1]");
}

// What the thread's argument cache knows an inference batch_norm by (with
// the name's text): epsilon, the data_format asked for, src's dtype, caller
// layout and dims, and which vectors are given with their dtypes and dims
// (the batch statistics too: unused in inference, but checked).
// src's exact layout is checked against the entry's on a hit.
class BatchNormCall : public CallWords<2 + 1 + MKC_MAX_NDIMS + 6 * (2 + MKC_MAX_NDIMS)> {
public:
    BatchNormCall(const mkc_batch_norm_params &p, const Tensor &src,
                  std::initializer_list<const Tensor *> vectors) {
        add(kind_word(OpKind::batch_norm) | int64_t(src.dtype) << 32 | src.layout);
        add(bits(p.epsilon) << 32 | static_cast<uint32_t>(p.data_format));
        add_dims(src.dims);
        seal(reinterpret_cast<uintptr_t>(p.name));
        for (const Tensor *v : vectors) {
            add(v ? v->dtype : -1);
            if (v) add_dims(v->dims);
        }
    }
};

} // namespace

void batch_norm(const mkc_batch_norm_params &p, const Tensor &src, Tensor *mean,
                Tensor *variance, const Tensor *scale, const Tensor *shift, mkc_tensor **dst,
                mkc_tensor *batch_mean, mkc_tensor *batch_variance) {
    const char *op = "batch_norm";
    const bool training = p.training != 0;
    ThreadState &state = thread_state();
    const mkc_layout data_format =
        layout::resolve(state, p.data_format, static_cast<int>(src.dims.size()));
    std::optional<Handler> handler; // training: leaves the descriptor through it
    const auto acquire = [&](BlobCache::HitTicket &ticket, bool &hit) {
        check_batch_norm(p, src, mean, variance, scale, shift, batch_mean, batch_variance);
        handler.emplace(op, p.name, training ? "batch_norm:train" : "batch_norm", nullptr,
                        src.dims);
        auto e = acquire_batch_norm(*handler, p.epsilon, src, scale != nullptr,
                                    shift != nullptr, training);
        handler->report_hit(ticket, hit);
        return e;
    };
    // An inference call this thread made before, whose entry the cache still
    // holds and whose src is laid out as then, skips the checks, key and
    // lookup.
    const std::shared_ptr<void> blob = remembered_inference_entry<BatchNormEntry>(
        training, state,
        BatchNormCall(p, src, {mean, variance, scale, shift, batch_mean, batch_variance}), p.name,
        [&](const BatchNormEntry &e) { return e.takes_as_is(src, DNNL_ARG_SRC); }, acquire);
    auto *entry = static_cast<BatchNormEntry *>(blob.get());
    const int64_t c = src.dims[1];
    if (training && !entry->transferred.exchange(true)) {
        // The descriptor (the same every call) for the grad op;
        // the statistics travel as the caller's batch_mean/batch_variance.
        auto t = std::make_shared<Transfer>();
        t->forward = std::shared_ptr<PrimitiveEntry>(blob, entry);
        handler->leave_transfer(t);
    }
    Handler::Output out = Handler::prepare_output(dst, *entry, DNNL_ARG_DST, data_format,
                                                  MKC_DTYPE_F32, op);
    // Training writes the batch statistics; they go to the caller's tensors
    // when given, else to temporaries.
    std::shared_ptr<void> stat_mean, stat_var, workspace;
    void *bm = nullptr, *bv = nullptr;
    if (training) {
        bm = batch_mean ? batch_mean->data : (stat_mean = allocate(c * 4, false)).get();
        bv = batch_variance ? batch_variance->data : (stat_var = allocate(c * 4, false)).get();
    }
    const bool has_workspace = entry->has_arg(DNNL_ARG_WORKSPACE);
    {
        Handler::Execution exec(*entry, state);
        exec.input(DNNL_ARG_SRC, src);
        if (training) {
            exec.raw(DNNL_ARG_MEAN, bm);
            exec.raw(DNNL_ARG_VARIANCE, bv);
            if (has_workspace) {
                workspace = allocate(entry->arg_desc(DNNL_ARG_WORKSPACE).get_size(), false);
                exec.raw(DNNL_ARG_WORKSPACE, workspace.get());
            }
        } else {
            exec.input(DNNL_ARG_MEAN, *mean);
            exec.input(DNNL_ARG_VARIANCE, *variance);
        }
        if (scale) exec.input(DNNL_ARG_SCALE, *scale);
        if (shift) exec.input(DNNL_ARG_SHIFT, *shift);
        exec.output(DNNL_ARG_DST, out.data);
        exec.run();
    }
    Handler::finish_output(out, dst);
    if (training) {
        // running = momentum * running + (1 - momentum) * batch (PaddlePaddle's
        // convention; the batch variance is the biased one).
        const float m = p.momentum;
        auto update = [&](Tensor *running, const void *batch) {
            if (!running) return;
            float *r = static_cast<float *>(running->data);
            const float *b = static_cast<const float *>(batch);
            for (int64_t i = 0; i < c; ++i) r[i] = m * r[i] + (1.f - m) * b[i];
        };
        update(mean, bm);
        update(variance, bv);
    }
    layout::set_target(state, data_format);
}

void batch_norm_backward(const mkc_batch_norm_params &p, const Tensor &src, const Tensor &mean,
                         const Tensor &variance, const Tensor *scale, const Tensor *shift,
                         const Tensor &diff_dst, mkc_tensor **diff_src, mkc_tensor **diff_scale,
                         mkc_tensor **diff_shift) {
    const char *op = "batch_norm_backward";
    require(src.dtype == MKC_DTYPE_F32 && diff_dst.dtype == MKC_DTYPE_F32, op,
            ": src and diff_dst must be float32");
    require(p.epsilon >= 0.f, op, ": epsilon must be >= 0");
    const Dims &x = onednn_dims(src);
    require(x.size() >= 2 && x.size() <= 5, op, ": src must have rank 2..5 (N, C, ...), got ",
            x.size());
    require(diff_dst.dims == src.dims, op, ": diff_dst must have src's shape");
    const int64_t c = x[1];
    check_vector(&mean, c, op, "mean");
    check_vector(&variance, c, op, "variance");
    check_vector(scale, c, op, "scale");
    check_vector(shift, c, op, "shift");
    require(!diff_scale || scale, op, ": diff_scale needs scale (the forward used none)");
    require(!diff_shift || shift, op, ": diff_shift needs shift (the forward used none)");
    const mkc_layout data_format = layout::resolve(p.data_format, static_cast<int>(x.size()));
    const char *name = p.name && p.name[0] ? p.name : "batch_norm:train";

    Handler handler(op, name, name, "bwd", x);
    handler.sign(OpKind::batch_norm_backward);
    handler.sign(scale ? 1 : 0);
    handler.sign(shift ? 1 : 0);
    handler.sign_float(p.epsilon);
    handler.sign_layout(src, DNNL_ARG_SRC);
    auto entry = handler.acquire_primitive<PrimitiveEntry>([&] {
        std::shared_ptr<BatchNormEntry> fwd;
        {
            Handler forward(op, name, name, nullptr, x);
            sign_batch_norm(forward, p.epsilon, scale, shift, true);
            if (auto t = forward.find_transfer())
                fwd = std::static_pointer_cast<BatchNormEntry>(t->forward);
        }
        flags f = flags::none;
        if (scale) f |= flags::use_scale;
        if (shift) f |= flags::use_shift;
        dnnl::batch_normalization_forward::primitive_desc hint =
            fwd && fwd->pd.src_desc() == src.desc
                ? fwd->pd
                : dnnl::batch_normalization_forward::primitive_desc(
                      cpu_engine(), dnnl::prop_kind::forward_training, src.desc, src.desc,
                      p.epsilon, f, user_scratchpad_attr());
        dnnl::batch_normalization_backward::primitive_desc pd(
            cpu_engine(),
            scale || shift ? dnnl::prop_kind::backward : dnnl::prop_kind::backward_data,
            src.desc, src.desc, src.desc, p.epsilon, f, hint, user_scratchpad_attr());
        auto e = std::make_shared<PrimitiveEntry>();
        e->primitive = dnnl::batch_normalization_backward(pd);
        std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE,
                                 DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC};
        if (scale) args.insert(args.end(), {DNNL_ARG_SCALE, DNNL_ARG_DIFF_SCALE});
        if (shift) args.push_back(DNNL_ARG_DIFF_SHIFT);
        e->set_args(pd, args);
        return e;
    });
    Handler::Output out;
    std::shared_ptr<void> dx_scratch;
    if (diff_src)
        out = Handler::prepare_output(diff_src, *entry, DNNL_ARG_DIFF_SRC, data_format,
                                      MKC_DTYPE_F32, op);
    else
        dx_scratch = allocate(entry->arg_desc(DNNL_ARG_DIFF_SRC).get_size(), false);
    const dnnl::memory::desc vec({c}, f32, tag::a);
    std::unique_ptr<Handler::PlainResult> dscale, dshift;
    std::shared_ptr<void> param_scratch = allocate(2 * c * sizeof(float), false);
    if (diff_scale)
        dscale = std::make_unique<Handler::PlainResult>(*entry, DNNL_ARG_DIFF_SCALE, diff_scale,
                                                        vec, vec, op);
    if (diff_shift)
        dshift = std::make_unique<Handler::PlainResult>(*entry, DNNL_ARG_DIFF_SHIFT, diff_shift,
                                                        vec, vec, op);
    {
        Handler::Execution exec(*entry);
        exec.input(DNNL_ARG_SRC, src);
        exec.input(DNNL_ARG_MEAN, mean);
        exec.input(DNNL_ARG_VARIANCE, variance);
        exec.input(DNNL_ARG_DIFF_DST, diff_dst);
        exec.output(DNNL_ARG_DIFF_SRC, diff_src ? out.data : dx_scratch.get());
        float *scratch = static_cast<float *>(param_scratch.get());
        if (scale) {
            exec.input(DNNL_ARG_SCALE, *scale);
            exec.output(DNNL_ARG_DIFF_SCALE, dscale ? dscale->data() : scratch);
        }
        if (shift) exec.output(DNNL_ARG_DIFF_SHIFT, dshift ? dshift->data() : scratch + c);
        exec.run();
    }
    if (diff_src) Handler::finish_output(out, diff_src);
    if (dscale) dscale->finish();
    if (dshift) dshift->finish();
    layout::set_target(data_format);
}

namespace {

const char *check_lrn(const mkc_lrn_params &p, const Tensor &src, const char *op) {
    require(src.dtype == MKC_DTYPE_F32, op, ": src must be float32");
    require(src.dims.size() >= 3 && src.dims.size() <= 5, op,
            ": src must have rank 3..5 (N, C, ...), got ", src.dims.size());
    require(p.size >= 1 && p.size <= 1 << 20, op, ": size must be >= 1, got ", p.size);
    require(p.k > 0.f, op, ": k must be > 0");
    return op;
}

void sign_lrn(Handler &handler, const mkc_lrn_params &p, bool training) {
    handler.sign(OpKind::lrn);
    handler.sign(p.size);
    handler.sign_float(p.alpha);
    handler.sign_float(p.beta);
    handler.sign_float(p.k);
    handler.sign(training ? 1 : 0);
}

dnnl::lrn_forward::primitive_desc lrn_descriptor(const mkc_lrn_params &p, const Tensor &src,
                                                 bool training) {
    return dnnl::lrn_forward::primitive_desc(
        cpu_engine(),
        training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
        dnnl::algorithm::lrn_across_channels, src.desc, src.desc, p.size, p.alpha, p.beta, p.k,
        user_scratchpad_attr());
}

std::shared_ptr<LrnEntry> acquire_lrn(Handler &handler, const mkc_lrn_params &p,
                                      const Tensor &src, bool training) {
    sign_lrn(handler, p, training);
    handler.sign_layout(src, DNNL_ARG_SRC);
    return handler.acquire_primitive<LrnEntry>([&] {
        auto e = std::make_shared<LrnEntry>();
        e->pd = lrn_descriptor(p, src, training);
        e->primitive = dnnl::lrn_forward(e->pd);
        std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_DST};
        if (e->pd.workspace_desc().get_size() > 0) args.push_back(DNNL_ARG_WORKSPACE);
        e->set_args(e->pd, args);
        return e;
    });
}

} // namespace

namespace {

// What the thread's argument cache knows an inference LRN by (with the
// name's text): size, alpha, beta, k, the data_format asked for, src's
// dtype, caller layout and dims. src's exact layout is checked against the
// entry's on a hit.
class LrnCall : public CallWords<4 + 1 + MKC_MAX_NDIMS> {
public:
    LrnCall(const mkc_lrn_params &p, const Tensor &src) {
        add(kind_word(OpKind::lrn) | int64_t(src.dtype) << 32 | src.layout);
        add(p.size);
        add(bits(p.alpha) << 32 | bits(p.beta));
        add(bits(p.k) << 32 | static_cast<uint32_t>(p.data_format));
        add_dims(src.dims);
        seal(reinterpret_cast<uintptr_t>(p.name));
    }
};

} // namespace

void lrn(const mkc_lrn_params &p, const Tensor &src, mkc_tensor **dst) {
    const char *op = "lrn";
    ThreadState &state = thread_state();
    std::optional<Handler> handler; // training: leaves the workspace through it
    // An inference call this thread made before, whose entry the cache still
    // holds and whose src is laid out as then, skips the checks, key and
    // lookup.
    const std::shared_ptr<void> blob = remembered_inference_entry<LrnEntry>(
        p.training, state, LrnCall(p, src), p.name,
        [&](const LrnEntry &e) { return e.takes_as_is(src, DNNL_ARG_SRC); },
        [&](BlobCache::HitTicket &ticket, bool &hit) {
            check_lrn(p, src, op);
            handler.emplace(op, p.name, ("lrn:" + std::to_string(p.size)).c_str(), nullptr,
                            src.dims);
            auto e = acquire_lrn(*handler, p, src, p.training);
            handler->report_hit(ticket, hit);
            return e;
        });
    auto &entry = *static_cast<LrnEntry *>(blob.get());
    const mkc_layout data_format =
        layout::resolve(state, p.data_format, static_cast<int>(src.dims.size()));
    if (p.training) {
        // The descriptor goes to the grad op (the workspace it recomputes).
        auto t = std::make_shared<Transfer>();
        t->forward = std::shared_ptr<PrimitiveEntry>(blob, &entry);
        Handler::Output out = Handler::prepare_output(dst, entry, DNNL_ARG_DST, data_format,
                                                      MKC_DTYPE_F32, op);
        std::shared_ptr<void> workspace;
        Handler::run_training_forward(entry, src, out.data, workspace);
        Handler::finish_output(out, dst);
        handler->leave_transfer(t);
    } else {
        Handler::run_src_dst(entry, src, dst, data_format, op, state);
    }
    layout::set_target(state, data_format);
}

void lrn_backward(const mkc_lrn_params &p, const Tensor &src, const Tensor &diff_dst,
                  mkc_tensor **diff_src) {
    const char *op = check_lrn(p, src, "lrn_backward");
    require(diff_dst.dtype == MKC_DTYPE_F32 && diff_dst.dims == src.dims, op,
            ": diff_dst must be float32 with src's shape");
    const mkc_layout data_format = layout::resolve(p.data_format, static_cast<int>(src.dims.size()));
    const std::string default_name = "lrn:" + std::to_string(p.size);
    const char *name = p.name && p.name[0] ? p.name : default_name.c_str();

    Handler forward("lrn", name, name, nullptr, src.dims);
    sign_lrn(forward, p, true);
    std::shared_ptr<Transfer> t = forward.find_transfer();

    Handler handler("lrn", name, name, "bwd", src.dims);
    handler.sign(OpKind::lrn_backward);
    handler.sign(p.size);
    handler.sign_float(p.alpha);
    handler.sign_float(p.beta);
    handler.sign_float(p.k);
    handler.sign_layout(src, DNNL_ARG_SRC);
    auto entry = handler.acquire_primitive<PrimitiveEntry>([&] {
        const auto hint =
            t ? std::static_pointer_cast<LrnEntry>(t->forward)->pd : lrn_descriptor(p, src, true);
        dnnl::lrn_backward::primitive_desc pd(cpu_engine(), dnnl::algorithm::lrn_across_channels,
                                              src.desc, hint.dst_desc(), src.desc, p.size,
                                              p.alpha, p.beta, p.k, hint, user_scratchpad_attr());
        auto e = std::make_shared<PrimitiveEntry>();
        e->primitive = dnnl::lrn_backward(pd);
        std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC};
        if (hint.workspace_desc().get_size() > 0) args.push_back(DNNL_ARG_WORKSPACE);
        e->set_args(pd, args);
        return e;
    });
    const auto workspace = Handler::workspace_for(*entry, src, [&] {
        Handler again("lrn", name, name, nullptr, src.dims); // this thread's training forward
        return std::static_pointer_cast<PrimitiveEntry>(acquire_lrn(again, p, src, true));
    }, op);
    Handler::Output out = Handler::prepare_output(diff_src, *entry, DNNL_ARG_DIFF_SRC,
                                                  data_format, MKC_DTYPE_F32, op);
    {
        Handler::Execution exec(*entry);
        exec.input(DNNL_ARG_SRC, src);
        exec.input(DNNL_ARG_DIFF_DST, diff_dst);
        if (workspace) exec.raw(DNNL_ARG_WORKSPACE, workspace.get());
        exec.output(DNNL_ARG_DIFF_SRC, out.data);
        exec.run();
    }
    Handler::finish_output(out, diff_src);
    layout::set_target(data_format);
}

} // namespace mkc::ops
