// Operator cases of the benchmark suite beyond conv/relu (see
// bench_helper.cpp for the modes). Each case is described once: how to make
// its oneDNN primitive descriptor (for BARE and RECREATE) and how to call
// mkcache on the same problem with inputs already in the layout that
// primitive uses (for CACHED).
#include <cstring>
#include <deque>
#include <functional>
#include <unordered_map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "bench_common.hpp"
#include "mkcache/mkcache.h"

namespace mkcb {

namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

struct Spec {
    std::function<dnnl::primitive_desc()> make_pd;
    std::vector<int> args; // DNNL_ARG_* the primitive takes
    std::vector<Spec> then; // further primitives of the same case (e.g. backward weights)
};

// Created once, executed directly through the C API.
struct Bare : Bench {
    struct Stage {
        dnnl::primitive prim;
        std::vector<dnnl::memory> mems;
        std::vector<dnnl_exec_arg_t> args;
    };
    std::vector<Stage> stages;
    dnnl::stream stream{engine()};
    explicit Bare(const Spec &s) {
        add(s);
        for (const Spec &next : s.then) add(next);
    }
    void add(const Spec &s) {
        stages.emplace_back();
        Stage &st = stages.back();
        auto pd = s.make_pd();
        st.prim = dnnl::primitive(pd.get());
        st.mems.reserve(s.args.size());
        for (int a : s.args) {
            auto md = pd.query_md(dnnl::query::exec_arg_md, a);
            st.mems.emplace_back(md, engine());
            // The same values the cached side uses (no all-zero fast paths).
            const float value = a == DNNL_ARG_SRC || a == DNNL_ARG_DIFF_DST      ? 0.5f
                                : a == DNNL_ARG_WEIGHTS                           ? 0.01f
                                : a == DNNL_ARG_VARIANCE || a == DNNL_ARG_SCALE ? 1.f
                                                                                  : 0.f;
            if (a == DNNL_ARG_WORKSPACE) std::memset(st.mems.back().get_data_handle(), 0,
                                                     md.get_size());
            else {
                float *v = static_cast<float *>(st.mems.back().get_data_handle());
                for (size_t i = 0; i < md.get_size() / 4; ++i) v[i] = value;
            }
            st.args.push_back({a, st.mems.back().get()});
        }
    }
    void call() override {
        for (Stage &st : stages) {
            dnnl_primitive_execute(st.prim.get(), stream.get(), static_cast<int>(st.args.size()),
                                   st.args.data());
            dnnl_stream_wait(stream.get());
        }
    }
};

// Descriptor + primitive re-created every call (oneDNN's own cache serves
// the primitive), memory objects created around fixed buffers.
struct Recreate : Bench {
    std::vector<Spec> specs;
    std::vector<std::vector<std::vector<char>>> buffers; // per stage, per argument
    dnnl::stream stream{engine()};
    explicit Recreate(const Spec &s) {
        specs.push_back(s);
        specs.insert(specs.end(), s.then.begin(), s.then.end());
        for (const Spec &spec : specs) {
            auto pd = spec.make_pd();
            buffers.emplace_back();
            for (int a : spec.args)
                buffers.back().emplace_back(
                    pd.query_md(dnnl::query::exec_arg_md, a).get_size() + 64, 0);
        }
    }
    void call() override {
        for (size_t k = 0; k < specs.size(); ++k) {
            const Spec &spec = specs[k];
            auto pd = spec.make_pd();
            dnnl::primitive prim(pd.get());
            std::unordered_map<int, dnnl::memory> args;
            for (size_t i = 0; i < spec.args.size(); ++i)
                args.emplace(spec.args[i],
                             dnnl::memory(pd.query_md(dnnl::query::exec_arg_md, spec.args[i]),
                                          engine(), buffers[k][i].data()));
            prim.execute(stream, args);
            stream.wait();
        }
    }
};

// mkcache calls through the C ABI; the tensors are released at the end.
struct Cached : Bench {
    std::vector<std::unique_ptr<AlignedBuffer>> data;
    std::deque<mkc_tensor *> tensors; // slot() pointers stay valid as it grows
    std::function<void()> fn;
    ~Cached() override {
        for (auto *t : tensors) mkc_tensor_destroy(t);
    }
    mkc_tensor *wrap(const dims &d, float value, mkc_layout layout = MKC_LAYOUT_NCHW) {
        size_t n = 1;
        for (auto v : d) n *= static_cast<size_t>(v);
        data.push_back(std::make_unique<AlignedBuffer>(n, value));
        mkc_tensor *t = nullptr;
        check(mkc_tensor_wrap(MKC_DTYPE_F32, static_cast<int>(d.size()), d.data(), layout,
                              data.back()->data, &t));
        tensors.push_back(t);
        return t;
    }
    mkc_tensor *converted(mkc_tensor *plain, const char *format) {
        mkc_tensor *t = nullptr;
        check(mkc_tensor_to_layout(plain, format, &t));
        tensors.push_back(t);
        return t;
    }
    mkc_tensor **slot() {
        tensors.push_back(nullptr);
        return &tensors.back();
    }
    void call() override { fn(); }
};

// The channel block oneDNN's kernels use natively here: 16 with AVX-512, 8
// below (an nChw16c input on AVX2 falls back to a slow reference kernel).
bool block16(int64_t c) {
    return c % 16 == 0 && dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core;
}
const char *blocked(int64_t c) { return block16(c) ? "nChw16c" : "nChw8c"; }
tag blocked_tag(int64_t c) { return block16(c) ? tag::nChw16c : tag::nChw8c; }

// ---------------------------------------------------------------- the cases

Spec pool_spec(const std::vector<int64_t> &p) { // n, c, h, w, k, stride, pad
    const dims src = {p[0], p[1], p[2], p[3]};
    const int64_t oh = (p[2] + 2 * p[6] - p[4]) / p[5] + 1, ow = (p[3] + 2 * p[6] - p[4]) / p[5] + 1;
    return {[=] {
                return dnnl::pooling_forward::primitive_desc(
                    engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_max,
                    dnnl::memory::desc(src, dt::f32, blocked_tag(p[1])),
                    dnnl::memory::desc({p[0], p[1], oh, ow}, dt::f32, tag::any), {p[5], p[5]},
                    {p[4], p[4]}, {0, 0}, {p[6], p[6]}, {p[6], p[6]});
            },
            {DNNL_ARG_SRC, DNNL_ARG_DST}};
}

Spec lrn_spec(const std::vector<int64_t> &p) { // n, c, h, w, size
    const dnnl::memory::desc md({p[0], p[1], p[2], p[3]}, dt::f32, blocked_tag(p[1]));
    return {[=] {
                return dnnl::lrn_forward::primitive_desc(
                    engine(), dnnl::prop_kind::forward_inference,
                    dnnl::algorithm::lrn_across_channels, md, md, p[4], 1e-4f, 0.75f, 1.f);
            },
            {DNNL_ARG_SRC, DNNL_ARG_DST}};
}

Spec bnorm_spec(const std::vector<int64_t> &p) { // n, c, h, w
    const dnnl::memory::desc md({p[0], p[1], p[2], p[3]}, dt::f32, tag::abcd);
    using f = dnnl::normalization_flags;
    return {[=] {
                return dnnl::batch_normalization_forward::primitive_desc(
                    engine(), dnnl::prop_kind::forward_inference, md, md, 1e-5f,
                    f::use_global_stats | f::use_scale | f::use_shift);
            },
            {DNNL_ARG_SRC, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE, DNNL_ARG_SCALE, DNNL_ARG_SHIFT,
             DNNL_ARG_DST}};
}

Spec softmax_spec(const std::vector<int64_t> &p) { // 4 dims, softmax over the last
    const dnnl::memory::desc md({p[0], p[1], p[2], p[3]}, dt::f32, tag::abcd);
    return {[=] {
                return dnnl::softmax_forward::primitive_desc(
                    engine(), dnnl::prop_kind::forward_inference,
                    dnnl::algorithm::softmax_accurate, md, md, 3);
            },
            {DNNL_ARG_SRC, DNNL_ARG_DST}};
}

Spec add_spec(const std::vector<int64_t> &p) { // dims (rank 2 or 4), a + b of one shape
    const dnnl::memory::desc md(dims(p.begin(), p.end()), dt::f32,
                                p.size() == 2 ? tag::ab : tag::abcd);
    return {[=] {
                return dnnl::binary::primitive_desc(engine(), dnnl::algorithm::binary_add, md,
                                                    md, md);
            },
            {DNNL_ARG_SRC_0, DNNL_ARG_SRC_1, DNNL_ARG_DST}};
}

Spec linear_spec(const std::vector<int64_t> &p) { // m, k, n
    return {[=] {
                return dnnl::inner_product_forward::primitive_desc(
                    engine(), dnnl::prop_kind::forward_inference,
                    dnnl::memory::desc({p[0], p[1]}, dt::f32, tag::ab),
                    dnnl::memory::desc({p[2], p[1]}, dt::f32, tag::any),
                    dnnl::memory::desc({p[2]}, dt::f32, tag::a),
                    dnnl::memory::desc({p[0], p[2]}, dt::f32, tag::ab));
            },
            {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST}};
}

Spec gelu_spec(const std::vector<int64_t> &p) { // m, n
    const dnnl::memory::desc md({p[0], p[1]}, dt::f32, tag::ab);
    return {[=] {
                return dnnl::eltwise_forward::primitive_desc(
                    engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_gelu_erf,
                    md, md, 0.f, 0.f);
            },
            {DNNL_ARG_SRC, DNNL_ARG_DST}};
}

Spec lnorm_spec(const std::vector<int64_t> &p) { // m, n
    const dnnl::memory::desc md({p[0], p[1]}, dt::f32, tag::ab);
    using f = dnnl::normalization_flags;
    return {[=] {
                return dnnl::layer_normalization_forward::primitive_desc(
                    engine(), dnnl::prop_kind::forward_inference, md, md, 1e-5f,
                    f::use_scale | f::use_shift);
            },
            {DNNL_ARG_SRC, DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_DST}};
}

// conv2d backward: data and weights (with bias), the layouts oneDNN picks
// given the training forward as hint.
Spec conv_bwd_spec(const std::vector<int64_t> &p) { // n, ic, oc, h, w, k, stride, pad
    const int64_t n = p[0], ic = p[1], oc = p[2], h = p[3], w = p[4], k = p[5], s = p[6],
                  pad = p[7];
    const int64_t oh = (h + 2 * pad - k) / s + 1, ow = (w + 2 * pad - k) / s + 1;
    const dnnl::memory::desc x({n, ic, h, w}, dt::f32, tag::any), wt({oc, ic, k, k}, dt::f32,
                                                                      tag::any),
        b({oc}, dt::f32, tag::a), y({n, oc, oh, ow}, dt::f32, tag::any);
    const dims st = {s, s}, dil = {0, 0}, pd_ = {pad, pad};
    auto fwd = [=] {
        return dnnl::convolution_forward::primitive_desc(
            engine(), dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, x,
            wt, b, y, st, dil, pd_, pd_);
    };
    Spec data{[=] {
                  return dnnl::convolution_backward_data::primitive_desc(
                      engine(), dnnl::algorithm::convolution_direct, x, wt, y, st, dil, pd_, pd_,
                      fwd());
              },
              {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
              {}};
    Spec weights{[=] {
                     return dnnl::convolution_backward_weights::primitive_desc(
                         engine(), dnnl::algorithm::convolution_direct, x, wt, b, y, st, dil, pd_,
                         pd_, fwd());
                 },
                 {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS},
                 {}};
    data.then.push_back(weights);
    return data;
}

Spec pool_bwd_spec(const std::vector<int64_t> &p) { // n, c, h, w, k, stride, pad
    const dims src = {p[0], p[1], p[2], p[3]};
    const int64_t oh = (p[2] + 2 * p[6] - p[4]) / p[5] + 1, ow = (p[3] + 2 * p[6] - p[4]) / p[5] + 1;
    const dnnl::memory::desc x(src, dt::f32, blocked_tag(p[1]));
    return {[=] {
                dnnl::pooling_forward::primitive_desc fwd(
                    engine(), dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_max, x,
                    dnnl::memory::desc({p[0], p[1], oh, ow}, dt::f32, tag::any), {p[5], p[5]},
                    {p[4], p[4]}, {0, 0}, {p[6], p[6]}, {p[6], p[6]});
                return dnnl::pooling_backward::primitive_desc(
                    engine(), dnnl::algorithm::pooling_max, x, fwd.dst_desc(), {p[5], p[5]},
                    {p[4], p[4]}, {0, 0}, {p[6], p[6]}, {p[6], p[6]}, fwd);
            },
            {DNNL_ARG_DIFF_DST, DNNL_ARG_WORKSPACE, DNNL_ARG_DIFF_SRC},
            {}};
}

std::unique_ptr<Cached> cached_case(const std::string &op, const std::vector<int64_t> &p) {
    auto c = std::make_unique<Cached>();
    Cached *b = c.get();
    if (op == "max_pool") {
        mkc_tensor *x = b->converted(b->wrap({p[0], p[1], p[2], p[3]}, 0.5f), blocked(p[1]));
        mkc_pool_params pp;
        check(mkc_pool_params_init(&pp));
        pp.kernel[0] = pp.kernel[1] = p[4];
        pp.stride[0] = pp.stride[1] = p[5];
        pp.pad_begin[0] = pp.pad_begin[1] = pp.pad_end[0] = pp.pad_end[1] = p[6];
        pp.name = "bench_pool";
        mkc_tensor **y = b->slot();
        b->fn = [=] { mkc_pool(&pp, x, y); };
    } else if (op == "lrn") {
        mkc_tensor *x = b->converted(b->wrap({p[0], p[1], p[2], p[3]}, 0.5f), blocked(p[1]));
        mkc_lrn_params lp;
        check(mkc_lrn_params_init(&lp));
        lp.size = p[4];
        lp.name = "bench_lrn";
        mkc_tensor **y = b->slot();
        b->fn = [=] { mkc_lrn(&lp, x, y); };
    } else if (op == "batch_norm") {
        mkc_tensor *x = b->wrap({p[0], p[1], p[2], p[3]}, 0.5f);
        mkc_tensor *mean = b->wrap({p[1]}, 0.f), *var = b->wrap({p[1]}, 1.f),
                   *scale = b->wrap({p[1]}, 1.f), *shift = b->wrap({p[1]}, 0.f);
        mkc_batch_norm_params bp;
        check(mkc_batch_norm_params_init(&bp));
        bp.name = "bench_bn";
        mkc_tensor **y = b->slot();
        b->fn = [=] { mkc_batch_norm(&bp, x, mean, var, scale, shift, nullptr, nullptr, y); };
    } else if (op == "softmax") {
        mkc_tensor *x = b->wrap({p[0], p[1], p[2], p[3]}, 0.5f);
        mkc_tensor **y = b->slot();
        b->fn = [=] { mkc_softmax(-1, 0, "bench_softmax", x, y); };
    } else if (op == "add") {
        mkc_tensor *a = b->wrap(p, 0.5f), *addend = b->wrap(p, 0.25f);
        mkc_tensor **y = b->slot();
        b->fn = [=] { mkc_binary(MKC_BINARY_ADD, "bench_add", a, addend, y); };
    } else if (op == "linear") {
        mkc_tensor *x = b->wrap({p[0], p[1]}, 0.5f), *w = b->wrap({p[2], p[1]}, 0.01f),
                   *bias = b->wrap({p[2]}, 0.f);
        check(mkc_tensor_set_constant(w, 1));
        mkc_linear_params lp;
        check(mkc_linear_params_init(&lp));
        lp.name = "bench_linear";
        mkc_tensor **y = b->slot();
        b->fn = [=] { mkc_linear(&lp, x, w, bias, y); };
    } else if (op == "gelu") {
        mkc_tensor *x = b->wrap({p[0], p[1]}, 0.5f);
        mkc_tensor **y = b->slot();
        b->fn = [=] { mkc_activation(MKC_ACTIVATION_GELU_ERF, 0.f, 0.f, "bench_gelu", x, y); };
    } else if (op == "layer_norm") {
        mkc_tensor *x = b->wrap({p[0], p[1]}, 0.5f), *scale = b->wrap({p[1]}, 1.f),
                   *shift = b->wrap({p[1]}, 0.f);
        mkc_layer_norm_params lp;
        check(mkc_layer_norm_params_init(&lp));
        lp.name = "bench_ln";
        mkc_tensor **y = b->slot();
        b->fn = [=] { mkc_layer_norm(&lp, x, scale, shift, y); };
    } else if (op == "conv_bwd") {
        const int64_t n = p[0], ic = p[1], oc = p[2], h = p[3], w = p[4], k = p[5], s = p[6],
                      pad = p[7];
        const int64_t oh = (h + 2 * pad - k) / s + 1, ow = (w + 2 * pad - k) / s + 1;
        // Constant inputs: their conversion to the primitives' layouts happens
        // once, as for activations flowing between library ops.
        mkc_tensor *x = b->wrap({n, ic, h, w}, 0.5f), *wt = b->wrap({oc, ic, k, k}, 0.01f),
                   *bias = b->wrap({oc}, 0.f), *dy = b->wrap({n, oc, oh, ow}, 0.5f);
        for (mkc_tensor *t : {x, wt, dy}) check(mkc_tensor_set_constant(t, 1));
        mkc_conv_params cp;
        check(mkc_conv_params_init(&cp));
        cp.stride[0] = cp.stride[1] = s;
        cp.pad_begin[0] = cp.pad_begin[1] = cp.pad_end[0] = cp.pad_end[1] = pad;
        cp.training = 1;
        cp.name = "bench_conv_bwd";
        check(mkc_conv2d(&cp, x, wt, bias, b->slot())); // leaves its descriptor
        mkc_tensor **dx = b->slot(), **dw = b->slot(), **db = b->slot();
        b->fn = [=] { mkc_conv2d_backward(&cp, x, wt, dy, dx, dw, db); };
    } else if (op == "max_pool_bwd") {
        const int64_t oh = (p[2] + 2 * p[6] - p[4]) / p[5] + 1,
                      ow = (p[3] + 2 * p[6] - p[4]) / p[5] + 1;
        mkc_tensor *x = b->converted(b->wrap({p[0], p[1], p[2], p[3]}, 0.5f), blocked(p[1]));
        mkc_tensor *dy = b->converted(b->wrap({p[0], p[1], oh, ow}, 0.5f), blocked(p[1]));
        mkc_pool_params pp;
        check(mkc_pool_params_init(&pp));
        pp.kernel[0] = pp.kernel[1] = p[4];
        pp.stride[0] = pp.stride[1] = p[5];
        pp.pad_begin[0] = pp.pad_begin[1] = pp.pad_end[0] = pp.pad_end[1] = p[6];
        pp.training = 1;
        pp.name = "bench_pool_bwd";
        check(mkc_pool(&pp, x, b->slot())); // leaves its indices for x
        mkc_tensor **dx = b->slot();
        b->fn = [=] { mkc_pool_backward(&pp, x, dy, dx); };
    } else {
        return nullptr;
    }
    b->fn(); // builds the entry and the output tensor
    return c;
}

Spec spec_of(const std::string &op, const std::vector<int64_t> &p) {
    if (op == "max_pool" && p.size() == 7) return pool_spec(p);
    if (op == "lrn" && p.size() == 5) return lrn_spec(p);
    if (op == "batch_norm" && p.size() == 4) return bnorm_spec(p);
    if (op == "softmax" && p.size() == 4) return softmax_spec(p);
    if (op == "add" && (p.size() == 2 || p.size() == 4)) return add_spec(p);
    if (op == "linear" && p.size() == 3) return linear_spec(p);
    if (op == "gelu" && p.size() == 2) return gelu_spec(p);
    if (op == "layer_norm" && p.size() == 2) return lnorm_spec(p);
    if (op == "conv_bwd" && p.size() == 8) return conv_bwd_spec(p);
    if (op == "max_pool_bwd" && p.size() == 7) return pool_bwd_spec(p);
    throw std::runtime_error("unknown op or parameter count: " + op);
}

} // namespace

std::unique_ptr<Bench> make_op_bench(const std::string &op, int mode,
                                     const std::vector<int64_t> &params) {
    switch (mode) {
    case BARE: return std::make_unique<Bare>(spec_of(op, params));
    case RECREATE: return std::make_unique<Recreate>(spec_of(op, params));
    case CACHED: {
        spec_of(op, params); // validates
        return cached_case(op, params);
    }
    default: throw std::runtime_error("mode not available for " + op);
    }
}

} // namespace mkcb
