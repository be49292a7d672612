// Normalizations: layer_norm (over trailing dims), batch_norm (inference with
// running statistics, or training forward with batch statistics and a
// momentum update of the running ones), and LRN across channels.
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

void layer_norm(const mkc_layer_norm_params &p, const Tensor &src, const Tensor *scale,
                const Tensor *shift, mkc_tensor **dst) {
    require(src.dtype == MKC_DTYPE_F32, "layer_norm: src must be float32");
    require(p.epsilon >= 0.f, "layer_norm: epsilon must be >= 0");
    const Dims xc = caller_dims(src);
    const int n = static_cast<int>(xc.size());
    require(p.begin_norm_axis >= -n && p.begin_norm_axis < n, "layer_norm: begin_norm_axis ",
            p.begin_norm_axis, " is out of range for rank ", n);
    const int axis = p.begin_norm_axis < 0 ? p.begin_norm_axis + n : p.begin_norm_axis;
    int64_t rows = 1, cols = 1;
    for (int i = 0; i < n; ++i) (i < axis ? rows : cols) *= xc[i];
    for (const Tensor *v : {scale, shift}) {
        if (!v) continue;
        int64_t count = 1;
        for (auto d : v->dims) count *= d;
        require(v->dtype == MKC_DTYPE_F32 && count == cols, "layer_norm: ",
                v == scale ? "scale" : "shift", " must hold ", cols,
                " float32 values (one per normalized element)");
    }
    Handler handler("layer_norm", p.name, "layer_norm", nullptr, Dims{rows, cols});
    handler.sign(9); // operator id
    handler.sign(src.dims);
    handler.sign(src.layout);
    handler.sign(rows);
    handler.sign(scale ? static_cast<int64_t>(scale->dims.size()) : -1);
    handler.sign(shift ? static_cast<int64_t>(shift->dims.size()) : -1);
    handler.sign_float(p.epsilon);
    auto entry = handler.acquire_primitive<LayerNormEntry>([&] {
        auto e = std::make_shared<LayerNormEntry>();
        const dnnl::memory::desc x2({rows, cols}, f32, tag::ab), vec({cols}, f32, tag::a);
        flags f = flags::none;
        if (scale) f |= flags::use_scale;
        if (shift) f |= flags::use_shift;
        e->pd = dnnl::layer_normalization_forward::primitive_desc(
            cpu_engine(), dnnl::prop_kind::forward_inference, x2, x2, p.epsilon, f,
            user_scratchpad_attr());
        e->primitive = dnnl::layer_normalization_forward(e->pd);
        std::vector<std::pair<int, dnnl::memory::desc>> args = {{DNNL_ARG_SRC, x2},
                                                                {DNNL_ARG_DST, x2}};
        if (scale) args.push_back({DNNL_ARG_SCALE, vec});
        if (shift) args.push_back({DNNL_ARG_SHIFT, vec});
        e->set_args(args);
        e->x_plain = layout::plain_desc(src.dims, f32, src.layout);
        if (scale) e->scale_plain = layout::plain_desc(scale->dims, f32, scale->layout);
        if (shift) e->shift_plain = layout::plain_desc(shift->dims, f32, shift->layout);
        e->add_scratchpad(e->pd);
        return e;
    });
    // src, scale, shift and dst are all used as plain bytes; the entry holds
    // their expected plain descriptors, matched once per tensor.
    std::unique_ptr<Tensor> holder, created;
    const Tensor &x = Handler::plain_input(*entry, DNNL_ARG_SRC, src, entry->x_plain, holder);
    require(!scale || entry->matches(*scale, DNNL_ARG_SCALE, entry->scale_plain),
            "layer_norm: scale must be plain (row-major)");
    require(!shift || entry->matches(*shift, DNNL_ARG_SHIFT, entry->shift_plain),
            "layer_norm: shift must be plain (row-major)");
    Tensor &y = Handler::plain_output(*entry, DNNL_ARG_DST, dst, entry->x_plain, src.layout,
                                      created, "layer_norm");
    {
        Handler::Execution exec(*entry);
        exec.raw(DNNL_ARG_SRC, x.data); // plain src is the [rows, cols] the primitive wants
        if (scale) exec.raw(DNNL_ARG_SCALE, scale->data);
        if (shift) exec.raw(DNNL_ARG_SHIFT, shift->data);
        exec.output(DNNL_ARG_DST, y.data);
        exec.run();
    }
    Handler::publish(created, dst);
}

void batch_norm(const mkc_batch_norm_params &p, const Tensor &src, Tensor *mean,
                Tensor *variance, const Tensor *scale, const Tensor *shift, mkc_tensor **dst,
                mkc_tensor *batch_mean, mkc_tensor *batch_variance) {
    const char *op = "batch_norm";
    require(src.dtype == MKC_DTYPE_F32, op, ": src must be float32");
    require(p.epsilon >= 0.f, op, ": epsilon must be >= 0");
    const Dims &x = onednn_dims(src);
    require(x.size() >= 2 && x.size() <= 5, op, ": src must have rank 2..5 (N, C, ...), got ",
            x.size());
    const int64_t c = x[1];
    const mkc_layout data_format = layout::resolve(p.data_format, static_cast<int>(x.size()));
    const bool training = p.training != 0;
    require(training || (mean && variance), op,
            ": inference needs the running mean and variance");
    check_vector(mean, c, op, "mean");
    check_vector(variance, c, op, "variance");
    check_vector(scale, c, op, "scale");
    check_vector(shift, c, op, "shift");
    check_vector(batch_mean, c, op, "batch_mean");
    check_vector(batch_variance, c, op, "batch_variance");
    if (training) require(p.momentum >= 0.f && p.momentum <= 1.f, op, ": momentum must be in [0, 1]");

    Handler handler(op, p.name, training ? "batch_norm:train" : "batch_norm", nullptr, x);
    handler.sign(10); // operator id
    handler.sign(training ? 1 : 0);
    handler.sign(scale ? 1 : 0);
    handler.sign(shift ? 1 : 0);
    handler.sign_float(p.epsilon);
    handler.sign_layout(src, DNNL_ARG_SRC);
    auto entry = handler.acquire_primitive<BatchNormEntry>([&] {
        auto e = std::make_shared<BatchNormEntry>();
        flags f = training ? flags::none : flags::use_global_stats;
        if (scale) f |= flags::use_scale;
        if (shift) f |= flags::use_shift;
        e->pd = dnnl::batch_normalization_forward::primitive_desc(
            cpu_engine(),
            training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
            src.desc, src.desc, p.epsilon, f, user_scratchpad_attr());
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
    bool has_workspace = false;
    for (int id : entry->arg_ids) has_workspace |= id == DNNL_ARG_WORKSPACE;
    {
        Handler::Execution exec(*entry);
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
    layout::set_target(data_format);
}

void lrn(const mkc_lrn_params &p, const Tensor &src, mkc_tensor **dst) {
    const char *op = "lrn";
    require(src.dtype == MKC_DTYPE_F32, op, ": src must be float32");
    const Dims &x = onednn_dims(src);
    require(x.size() >= 3 && x.size() <= 5, op, ": src must have rank 3..5 (N, C, ...), got ",
            x.size());
    require(p.size >= 1 && p.size <= 1 << 20, op, ": size must be >= 1, got ", p.size);
    require(p.k > 0.f, op, ": k must be > 0");
    const mkc_layout data_format = layout::resolve(p.data_format, static_cast<int>(x.size()));
    Handler handler(op, p.name, "lrn:" + std::to_string(p.size), nullptr, x);
    handler.sign(11); // operator id
    handler.sign(p.size);
    handler.sign_float(p.alpha);
    handler.sign_float(p.beta);
    handler.sign_float(p.k);
    handler.sign_layout(src, DNNL_ARG_SRC);
    auto entry = handler.acquire_primitive<LrnEntry>([&] {
        auto e = std::make_shared<LrnEntry>();
        e->pd = dnnl::lrn_forward::primitive_desc(
            cpu_engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::lrn_across_channels,
            src.desc, src.desc, p.size, p.alpha, p.beta, p.k, user_scratchpad_attr());
        e->primitive = dnnl::lrn_forward(e->pd);
        e->set_args(e->pd, {DNNL_ARG_SRC, DNNL_ARG_DST});
        return e;
    });
    Handler::run_src_dst(*entry, src, dst, data_format, op);
    layout::set_target(data_format);
}

} // namespace mkc::ops
