// batch_norm: inference with running statistics, or a training forward with
// batch statistics and a momentum update of the running ones; backward.
#include <atomic>
#include <optional>
#include <string>

#include "common/cpu_features.hpp"
#include "common/engine.hpp"
#include "common/error.hpp"
#include "handler/handler.hpp"
#include "ops/attrs.hpp"
#include "ops/batch_norm.hpp"
#include "ops/call_words.hpp"
#include "ops/float_dtype.hpp"
#include "keys/keys.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

using tag = dnnl::memory::format_tag;
using flags = dnnl::normalization_flags;
const auto f32 = dnnl::memory::data_type::f32;

struct BatchNormEntry : PrimitiveEntry {
    std::atomic<bool> transferred{false}; // training: left for the grad op
    // What a run on buffers needs besides its arguments (all signed).
    int64_t channels = 0;
    float momentum = 0.f;
    bool training = false;
};

// A 1-D float tensor of `n` values, named `what` in messages.
template <typename V>
void check_vector(const V *t, int64_t n, const char *op, const char *what) {
    if (!t) return;
    require(t->dtype == MKC_DTYPE_F32 && t->dims.size() == 1 && t->dims[0] == n, op, ": ", what,
            " must be a float32 vector of ", n, " values");
}

// The default name of an unnamed call (valid until the thread's next call).
const char *default_name(const BatchNormAttrs &attrs) { return default_attrs_name("batch_norm", attrs); }

void sign_batch_norm(Handler &handler, const BatchNormAttrs &attrs, bool scale, bool shift) {
    handler.sign(OpKind::batch_norm);
    handler.sign(scale ? 1 : 0);
    handler.sign(shift ? 1 : 0);
    sign_attrs(handler, attrs);
}

template <typename V>
std::shared_ptr<BatchNormEntry> acquire_batch_norm(Handler &handler, const BatchNormAttrs &attrs,
                                                   const V &src, bool scale, bool shift) {
    const int64_t c = src.dims[1];
    const bool training = attrs.training;
    const float epsilon = attrs.p.epsilon;
    sign_batch_norm(handler, attrs, scale, shift);
    sign_input_layout(handler, src, DNNL_ARG_SRC);
    if (src.dtype != MKC_DTYPE_F32) require_bf16_kernels("batch_norm");
    return handler.acquire_primitive<BatchNormEntry>([&] {
        auto e = std::make_shared<BatchNormEntry>();
        flags f = training ? flags::none : flags::use_global_stats;
        if (scale) f |= flags::use_scale;
        if (shift) f |= flags::use_shift;
        const auto pd = dnnl::batch_normalization_forward::primitive_desc(
            cpu_engine(),
            training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
            src.desc, src.desc, epsilon, f, user_scratchpad_attr());
        e->primitive = dnnl::batch_normalization_forward(pd);
        // The statistics, scale and shift stay float32 for bfloat16 data.
        const dnnl::memory::desc vec({c}, f32, tag::a);
        std::vector<std::pair<int, dnnl::memory::desc>> args = {
            {DNNL_ARG_SRC, pd.src_desc()}, {DNNL_ARG_DST, pd.dst_desc()},
            {DNNL_ARG_MEAN, vec}, {DNNL_ARG_VARIANCE, vec}};
        if (scale) args.push_back({DNNL_ARG_SCALE, vec});
        if (shift) args.push_back({DNNL_ARG_SHIFT, vec});
        if (training && pd.workspace_desc().get_size() > 0)
            args.push_back({DNNL_ARG_WORKSPACE, pd.workspace_desc()});
        e->set_args(args);
        e->add_scratchpad(pd);
        e->channels = c;
        e->momentum = attrs.p.momentum;
        e->training = training;
        return e;
    });
}

// The forward's entry under `name` (or the attributes' default name). A
// training forward leaves its descriptor for the grad op, once per entry.
template <typename V>
std::shared_ptr<BatchNormEntry> prepare_batch_norm(const CacheScope &scope,
                                                   const BatchNormAttrs &attrs, const char *name,
                                                   const V &src, bool scale, bool shift,
                                                   BlobCache::HitTicket &ticket, bool &hit) {
    const bool named = name && name[0];
    Handler handler(scope, "batch_norm", name, named ? nullptr : default_name(attrs), nullptr,
                    src.dims);
    auto e = acquire_batch_norm(handler, attrs, src, scale, shift);
    handler.report_hit(ticket, hit);
    if (attrs.training && !e->transferred.exchange(true)) {
        // The descriptor (the same every call) for the grad op; the
        // statistics travel as the caller's batch_mean/batch_variance.
        auto t = std::make_shared<Transfer>();
        t->forward = e;
        handler.leave_transfer(t);
    }
    return e;
}

// data_format with TARGET read as `target`: the thread's target layout for
// a call, src's own layout for infer (which has no thread).
mkc_layout data_format_of(mkc_layout requested, mkc_layout target, int ndims) {
    return layout::resolve(requested == MKC_LAYOUT_TARGET ? target : requested, ndims);
}

// running = momentum * running + (1 - momentum) * batch (PaddlePaddle's
// convention; the batch variance is the biased one), into `out` (which may
// be `running`).
void update_running(float momentum, int64_t c, const void *running, const void *batch,
                    void *out) {
    const float *r = static_cast<const float *>(running);
    const float *b = static_cast<const float *>(batch);
    float *o = static_cast<float *>(out);
    for (int64_t i = 0; i < c; ++i) o[i] = momentum * r[i] + (1.f - momentum) * b[i];
}

} // namespace

namespace {

template <typename V>
void check_batch_norm(const mkc_batch_norm_params &p, bool training, const V &src,
                      const V *mean, const V *variance, const V *scale, const V *shift,
                      const V *batch_mean, const V *batch_variance) {
    const char *op = "batch_norm";
    require_float_src(op, "src", src.dtype);
    require(p.epsilon >= 0.f, op, ": epsilon must be >= 0");
    const Dims &x = onednn_dims(src);
    require(x.size() >= 2 && x.size() <= 5, op, ": src must have rank 2..5 (N, C, ...), got ",
            x.size());
    const int64_t c = x[1];
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
class BatchNormCall : public CallWords<5 + 1 + MKC_MAX_NDIMS + 6 * (2 + MKC_MAX_NDIMS)> {
public:
    BatchNormCall(const mkc_batch_norm_params &p, const Tensor &src,
                  std::initializer_list<const Tensor *> vectors) {
        add(kind_word(OpKind::batch_norm) | int64_t(src.dtype) << 32 | src.layout);
        add_attrs(*this, BatchNormAttrs(p, p.training != 0));
        add_dims(src.dims);
        seal(p.name);
        for (const Tensor *v : vectors) {
            add(v ? v->dtype : -1);
            if (v) add_dims(v->dims);
        }
    }
};

// The forward's outputs: dst (arranged as `dst_desc`, labelled
// data_format); training adds the batch statistics and the running ones'
// update (of those given).
std::vector<ValueDesc> batch_norm_outputs(bool training, mkc_layout data_format,
                                          const ValueDesc &src, const dnnl::memory::desc &dst_desc,
                                          const ValueDesc *mean, const ValueDesc *variance) {
    std::vector<ValueDesc> out{{src.dtype, data_format, src.dims, dst_desc}};
    if (training) {
        const ValueDesc vec = plain_value(MKC_DTYPE_F32, MKC_LAYOUT_CHANNELS_FIRST, {src.dims[1]});
        out.insert(out.end(), {vec, vec, mean ? vec : ValueDesc{}, variance ? vec : ValueDesc{}});
    }
    return out;
}

} // namespace

std::vector<ValueDesc> BatchNormOp::infer(const Attrs &attrs, const ValueDesc &src,
                                          const ValueDesc *mean, const ValueDesc *variance,
                                          const ValueDesc *scale, const ValueDesc *shift) {
    const mkc_layout data_format =
        data_format_of(attrs.p.data_format, src.layout, static_cast<int>(src.dims.size()));
    check_batch_norm<ValueDesc>(attrs.p, attrs.training, src, mean, variance, scale, shift,
                                nullptr, nullptr);
    return batch_norm_outputs(attrs.training, data_format, src, src.desc, mean, variance);
}

Prepared BatchNormOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                              const ValueDesc &src, const ValueDesc *mean,
                              const ValueDesc *variance, const ValueDesc *scale,
                              const ValueDesc *shift) {
    const mkc_layout data_format =
        layout::resolve(*scope.state, attrs.p.data_format, static_cast<int>(src.dims.size()));
    check_batch_norm<ValueDesc>(attrs.p, attrs.training, src, mean, variance, scale, shift,
                                nullptr, nullptr);
    BlobCache::HitTicket ticket;
    bool hit = false;
    auto entry = prepare_batch_norm(scope, attrs, name, src, scale != nullptr, shift != nullptr,
                                    ticket, hit);
    const dnnl::memory::desc &vec = entry->arg_desc(DNNL_ARG_MEAN);
    Prepared out{entry,
                 {entry->arg_desc(DNNL_ARG_SRC), mean ? vec : empty_desc(),
                  variance ? vec : empty_desc(),
                  scale ? entry->arg_desc(DNNL_ARG_SCALE) : empty_desc(),
                  shift ? entry->arg_desc(DNNL_ARG_SHIFT) : empty_desc()},
                 batch_norm_outputs(attrs.training, data_format, src,
                                    entry->arg_desc(DNNL_ARG_DST), mean, variance)};
    if (!attrs.training) { // training also updates the running statistics: run()'s
        out.in_args = {DNNL_ARG_SRC, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE, DNNL_ARG_SCALE,
                       DNNL_ARG_SHIFT};
        out.out_args = {DNNL_ARG_DST};
    }
    return out;
}

void BatchNormOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    auto &e = static_cast<BatchNormEntry &>(entry);
    const int64_t c = e.channels;
    std::vector<std::shared_ptr<void>> scratch; // for what is not asked for
    const auto or_scratch = [&](void *data, int arg) {
        if (data) return data;
        scratch.push_back(allocate(e.arg_desc(arg).get_size(), false));
        return scratch.back().get();
    };
    const auto in = [&](int port) { return const_cast<void *>(buffers.in[port]); }; // only read
    void *batch_mean = nullptr, *batch_variance = nullptr;
    {
        Handler::Execution exec(e, scope);
        exec.raw(DNNL_ARG_SRC, in(0));
        if (e.training) {
            batch_mean = or_scratch(buffers.out[1], DNNL_ARG_MEAN);
            batch_variance = or_scratch(buffers.out[2], DNNL_ARG_VARIANCE);
            exec.raw(DNNL_ARG_MEAN, batch_mean);
            exec.raw(DNNL_ARG_VARIANCE, batch_variance);
            if (e.has_arg(DNNL_ARG_WORKSPACE))
                exec.raw(DNNL_ARG_WORKSPACE, or_scratch(nullptr, DNNL_ARG_WORKSPACE));
        } else {
            exec.raw(DNNL_ARG_MEAN, in(1));
            exec.raw(DNNL_ARG_VARIANCE, in(2));
        }
        if (buffers.in[3]) exec.raw(DNNL_ARG_SCALE, in(3));
        if (buffers.in[4]) exec.raw(DNNL_ARG_SHIFT, in(4));
        exec.output(DNNL_ARG_DST, or_scratch(buffers.out[0], DNNL_ARG_DST));
        exec.run();
    }
    if (!e.training) return;
    if (buffers.in[1] && buffers.out[3])
        update_running(e.momentum, c, buffers.in[1], batch_mean, buffers.out[3]);
    if (buffers.in[2] && buffers.out[4])
        update_running(e.momentum, c, buffers.in[2], batch_variance, buffers.out[4]);
}

void batch_norm(const CacheScope &scope, const mkc_batch_norm_params &p, const Tensor &src,
                Tensor *mean, Tensor *variance, const Tensor *scale, const Tensor *shift,
                mkc_tensor **dst, mkc_tensor *batch_mean, mkc_tensor *batch_variance) {
    const char *op = "batch_norm";
    const bool training = p.training != 0;
    ThreadState &state = *scope.state;
    const mkc_layout data_format =
        layout::resolve(state, p.data_format, static_cast<int>(src.dims.size()));
    const auto acquire = [&](BlobCache::HitTicket &ticket, bool &hit) {
        check_batch_norm<Tensor>(p, training, src, mean, variance, scale, shift, batch_mean,
                                 batch_variance);
        // A training call leaves the descriptor for the grad op there.
        return prepare_batch_norm(scope, BatchNormAttrs(p, training), p.name, src,
                                  scale != nullptr, shift != nullptr, ticket, hit);
    };
    // An inference call this thread made before, whose entry the cache still
    // holds and whose src is laid out as then, skips the checks, key and
    // lookup.
    const std::shared_ptr<void> blob = remembered_inference_entry<BatchNormEntry>(
        training, state, scope,
        BatchNormCall(p, src, {mean, variance, scale, shift, batch_mean, batch_variance}), p.name,
        [&](const BatchNormEntry &e) { return e.takes_as_is(src, DNNL_ARG_SRC); }, acquire);
    auto *entry = static_cast<BatchNormEntry *>(blob.get());
    const int64_t c = src.dims[1];
    Handler::Output out = Handler::prepare_output(dst, *entry, DNNL_ARG_DST, data_format,
                                                  src.dtype, op);
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
        Handler::Execution exec(*entry, scope);
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
    Handler::finish_output(scope, out, dst);
    if (training) {
        if (mean) update_running(p.momentum, c, mean->data, bm, mean->data);
        if (variance) update_running(p.momentum, c, variance->data, bv, variance->data);
    }
    layout::set_target(state, data_format);
}

namespace {

// The checks of a gradient call (those of its diff outputs aside); C.
template <typename V>
int64_t check_batch_norm_backward(const mkc_batch_norm_params &p, const V &src, const V &mean,
                                  const V &variance, const V *scale, const V *shift,
                                  const V &diff_dst) {
    const char *op = "batch_norm_backward";
    // diff_src has src's dtype; the statistics, scale and shift and their
    // gradients are float32.
    require_float_src(op, "src", src.dtype);
    require_diff_dtype(op, "diff_dst", diff_dst.dtype, "src", src.dtype);
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
    return c;
}

// The gradient's entry, its primitive hinted by the descriptor the training
// forward left (if it did, for src's arrangement).
template <typename V>
std::shared_ptr<PrimitiveEntry> prepare_batch_norm_backward(const CacheScope &scope,
                                                            const mkc_batch_norm_params &p,
                                                            const char *name, const V &src,
                                                            bool scale, bool shift) {
    const char *op = "batch_norm_backward";
    const Dims &x = onednn_dims(src);
    const BatchNormAttrs attrs(p, true); // the training forward's
    name = name && name[0] ? name : default_name(attrs);

    if (src.dtype != MKC_DTYPE_F32) require_bf16_kernels(op);
    Handler handler(scope, op, name, name, "bwd", x);
    handler.sign(OpKind::batch_norm_backward);
    handler.sign(scale ? 1 : 0);
    handler.sign(shift ? 1 : 0);
    sign_attrs(handler, attrs);
    sign_input_layout(handler, src, DNNL_ARG_SRC);
    return handler.acquire_primitive<PrimitiveEntry>([&] {
        std::shared_ptr<BatchNormEntry> fwd;
        {
            Handler forward(scope, op, name, name, nullptr, x);
            sign_batch_norm(forward, attrs, scale, shift);
            if (auto t = forward.find_transfer())
                fwd = std::static_pointer_cast<BatchNormEntry>(t->forward);
        }
        flags f = flags::none;
        if (scale) f |= flags::use_scale;
        if (shift) f |= flags::use_shift;
        dnnl::batch_normalization_forward::primitive_desc hint =
            fwd && fwd->arg_desc(DNNL_ARG_SRC) == src.desc
                ? descriptor_of<dnnl::batch_normalization_forward::primitive_desc>(fwd->primitive)
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
}

} // namespace

void batch_norm_backward(const CacheScope &scope, const mkc_batch_norm_params &p, const Tensor &src,
                         const Tensor &mean, const Tensor &variance, const Tensor *scale,
                         const Tensor *shift, const Tensor &diff_dst, mkc_tensor **diff_src,
                         mkc_tensor **diff_scale, mkc_tensor **diff_shift) {
    const char *op = "batch_norm_backward";
    const int64_t c =
        check_batch_norm_backward(p, src, mean, variance, scale, shift, diff_dst);
    require(!diff_scale || scale, op, ": diff_scale needs scale (the forward used none)");
    require(!diff_shift || shift, op, ": diff_shift needs shift (the forward used none)");
    const mkc_layout data_format =
        layout::resolve(p.data_format, static_cast<int>(src.dims.size()));
    auto entry =
        prepare_batch_norm_backward(scope, p, p.name, src, scale != nullptr, shift != nullptr);
    Handler::Output out;
    std::shared_ptr<void> dx_scratch;
    if (diff_src)
        out = Handler::prepare_output(diff_src, *entry, DNNL_ARG_DIFF_SRC, data_format,
                                      src.dtype, op);
    else
        dx_scratch = allocate(entry->arg_desc(DNNL_ARG_DIFF_SRC).get_size(), false);
    const dnnl::memory::desc vec({c}, f32, tag::a);
    std::unique_ptr<Handler::PlainResult> dscale, dshift;
    std::shared_ptr<void> param_scratch = allocate(2 * c * sizeof(float), false);
    if (diff_scale)
        dscale = std::make_unique<Handler::PlainResult>(scope, *entry, DNNL_ARG_DIFF_SCALE,
                                                        diff_scale, vec, vec, op);
    if (diff_shift)
        dshift = std::make_unique<Handler::PlainResult>(scope, *entry, DNNL_ARG_DIFF_SHIFT,
                                                        diff_shift, vec, vec, op);
    {
        Handler::Execution exec(*entry, scope);
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
    if (diff_src) Handler::finish_output(scope, out, diff_src);
    if (dscale) dscale->finish();
    if (dshift) dshift->finish();
    layout::set_target(data_format);
}

std::vector<ValueDesc> BatchNormBackwardOp::infer(const Attrs &attrs, const ValueDesc &src,
                                                  const ValueDesc &mean,
                                                  const ValueDesc &variance,
                                                  const ValueDesc *scale, const ValueDesc *shift,
                                                  const ValueDesc &diff_dst) {
    const int64_t c =
        check_batch_norm_backward(attrs.p, src, mean, variance, scale, shift, diff_dst);
    const mkc_layout data_format =
        data_format_of(attrs.p.data_format, src.layout, static_cast<int>(src.dims.size()));
    const ValueDesc vec = plain_value(MKC_DTYPE_F32, MKC_LAYOUT_CHANNELS_FIRST, {c});
    // The gradient is arranged as src (the primitive is built on it).
    return {{src.dtype, data_format, src.dims, src.desc}, scale ? vec : ValueDesc{},
            shift ? vec : ValueDesc{}};
}

Prepared BatchNormBackwardOp::prepare(const CacheScope &scope, const Attrs &attrs,
                                      const char *name, const ValueDesc &src,
                                      const ValueDesc &mean, const ValueDesc &variance,
                                      const ValueDesc *scale, const ValueDesc *shift,
                                      const ValueDesc &diff_dst) {
    const int64_t c =
        check_batch_norm_backward(attrs.p, src, mean, variance, scale, shift, diff_dst);
    const mkc_layout data_format =
        layout::resolve(*scope.state, attrs.p.data_format, static_cast<int>(src.dims.size()));
    auto entry = prepare_batch_norm_backward(scope, attrs.p, name, src, scale != nullptr,
                                             shift != nullptr);
    // The parameter gradients are written straight into their plain bytes.
    const ValueDesc vec = plain_value(MKC_DTYPE_F32, MKC_LAYOUT_CHANNELS_FIRST, {c});
    require((!scale || entry->arg_desc(DNNL_ARG_DIFF_SCALE) == vec.desc) &&
                (!shift || entry->arg_desc(DNNL_ARG_DIFF_SHIFT) == vec.desc),
            "batch_norm_backward: internal: the parameter gradients are not plain");
    return {entry,
            {entry->arg_desc(DNNL_ARG_SRC), entry->arg_desc(DNNL_ARG_MEAN),
             entry->arg_desc(DNNL_ARG_VARIANCE),
             scale ? entry->arg_desc(DNNL_ARG_SCALE) : empty_desc(), empty_desc(),
             entry->arg_desc(DNNL_ARG_DIFF_DST)},
            {{src.dtype, data_format, src.dims, entry->arg_desc(DNNL_ARG_DIFF_SRC)},
             scale ? vec : ValueDesc{}, shift ? vec : ValueDesc{}}};
}

void BatchNormBackwardOp::run(const CacheScope &scope, PrimitiveEntry &entry,
                              const Buffers &buffers) {
    std::vector<std::shared_ptr<void>> scratch; // for what is not asked for
    const auto or_scratch = [&](void *data, int arg) {
        if (data) return data;
        scratch.push_back(allocate(entry.arg_desc(arg).get_size(), false));
        return scratch.back().get();
    };
    const auto in = [&](int port) { return const_cast<void *>(buffers.in[port]); }; // only read
    Handler::Execution exec(entry, scope);
    exec.raw(DNNL_ARG_SRC, in(0));
    exec.raw(DNNL_ARG_MEAN, in(1));
    exec.raw(DNNL_ARG_VARIANCE, in(2));
    exec.raw(DNNL_ARG_DIFF_DST, in(5));
    exec.output(DNNL_ARG_DIFF_SRC, or_scratch(buffers.out[0], DNNL_ARG_DIFF_SRC));
    if (entry.has_arg(DNNL_ARG_SCALE)) {
        exec.raw(DNNL_ARG_SCALE, in(3));
        exec.output(DNNL_ARG_DIFF_SCALE, or_scratch(buffers.out[1], DNNL_ARG_DIFF_SCALE));
    }
    if (entry.has_arg(DNNL_ARG_DIFF_SHIFT))
        exec.output(DNNL_ARG_DIFF_SHIFT, or_scratch(buffers.out[2], DNNL_ARG_DIFF_SHIFT));
    exec.run();
}

} // namespace mkc::ops
