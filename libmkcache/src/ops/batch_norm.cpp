// batch_norm: inference with running statistics, or a training forward with
// batch statistics and a momentum update of the running ones; backward.
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

struct BatchNormEntry : PrimitiveEntry {
    dnnl::batch_normalization_forward::primitive_desc pd;
    std::atomic<bool> transferred{false}; // training: left for the grad op
};

// A 1-D float tensor of `n` values, named `what` in messages.
void check_vector(const Tensor *t, int64_t n, const char *op, const char *what) {
    if (!t) return;
    require(t->dtype == MKC_DTYPE_F32 && t->dims.size() == 1 && t->dims[0] == n, op, ": ", what,
            " must be a float32 vector of ", n, " values");
}

// A batch_norm's attributes; `training` set for the training forward and
// its grad op (which finds what it left under the same name).
struct BatchNormAttrs {
    BatchNormAttrs(const mkc_batch_norm_params &params, bool for_training)
        : p(params), training(for_training) {}
    const mkc_batch_norm_params &p;
    bool training;
    template <typename V>
    void each(V &v) const {
        v.field("eps", p.epsilon);
        v.field("m", p.momentum);
        v.field("df", p.data_format);
        v.field("training", training);
    }
};

// The default name of an unnamed call (valid until the thread's next call).
const char *default_name(const BatchNormAttrs &attrs) { return default_attrs_name("batch_norm", attrs); }

void sign_batch_norm(Handler &handler, const BatchNormAttrs &attrs, bool scale, bool shift) {
    handler.sign(OpKind::batch_norm);
    handler.sign(scale ? 1 : 0);
    handler.sign(shift ? 1 : 0);
    sign_attrs(handler, attrs);
}

std::shared_ptr<BatchNormEntry> acquire_batch_norm(Handler &handler, const BatchNormAttrs &attrs,
                                                   const Tensor &src, bool scale, bool shift) {
    const int64_t c = src.dims[1];
    const bool training = attrs.training;
    const float epsilon = attrs.p.epsilon;
    sign_batch_norm(handler, attrs, scale, shift);
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

} // namespace

void batch_norm(const CacheScope &scope, const mkc_batch_norm_params &p, const Tensor &src,
                Tensor *mean, Tensor *variance, const Tensor *scale, const Tensor *shift,
                mkc_tensor **dst, mkc_tensor *batch_mean, mkc_tensor *batch_variance) {
    const char *op = "batch_norm";
    const bool training = p.training != 0;
    ThreadState &state = *scope.state;
    const mkc_layout data_format =
        layout::resolve(state, p.data_format, static_cast<int>(src.dims.size()));
    std::optional<Handler> handler; // training: leaves the descriptor through it
    const auto acquire = [&](BlobCache::HitTicket &ticket, bool &hit) {
        check_batch_norm(p, src, mean, variance, scale, shift, batch_mean, batch_variance);
        const BatchNormAttrs attrs(p, training);
        const bool named = p.name && p.name[0];
        handler.emplace(scope, op, p.name, named ? nullptr : default_name(attrs), nullptr,
                        src.dims);
        auto e = acquire_batch_norm(*handler, attrs, src, scale != nullptr, shift != nullptr);
        handler->report_hit(ticket, hit);
        return e;
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

void batch_norm_backward(const CacheScope &scope, const mkc_batch_norm_params &p, const Tensor &src,
                         const Tensor &mean, const Tensor &variance, const Tensor *scale,
                         const Tensor *shift, const Tensor &diff_dst, mkc_tensor **diff_src,
                         mkc_tensor **diff_scale, mkc_tensor **diff_shift) {
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
    const BatchNormAttrs attrs(p, true); // the training forward's
    const char *name = p.name && p.name[0] ? p.name : default_name(attrs);

    Handler handler(scope, op, name, name, "bwd", x);
    handler.sign(OpKind::batch_norm_backward);
    handler.sign(scale ? 1 : 0);
    handler.sign(shift ? 1 : 0);
    sign_attrs(handler, attrs);
    handler.sign_layout(src, DNNL_ARG_SRC);
    auto entry = handler.acquire_primitive<PrimitiveEntry>([&] {
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

} // namespace mkc::ops
