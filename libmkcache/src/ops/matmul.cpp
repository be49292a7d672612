// linear (inner product: weights [out, in], converted once when constant)
// and batched matmul (transpose flags, broadcast batch dims), both with an
// optional bias and a fused activation.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <string>

#include "common/cpu_features.hpp"
#include "common/engine.hpp"
#include "common/error.hpp"
#include "common/handles.hpp"
#include "handler/handler.hpp"
#include "keys/keys.hpp"
#include "layout/layout.hpp"
#include "ops/attrs.hpp"
#include "ops/float_dtype.hpp"
#include "ops/matmul.hpp"
#include "ops/matmul_geometry.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

using tag = dnnl::memory::format_tag;
const auto f32 = dnnl::memory::data_type::f32;

struct LinearEntry : PrimitiveEntry {
    dnnl::memory::desc x_plain, y_md; // src as the caller has it; the result
    std::atomic<bool> transferred{false}; // training: left for the grad op
};
struct MatmulEntry : PrimitiveEntry {
    int addend_arg = 0; // the addend's argument (its post-op's SRC_1), 0: none
};

} // namespace

dnnl::primitive_attr activation_attr(mkc_activation_kind kind, float alpha, float beta,
                                     float scale, bool sum, const dnnl::memory::desc *addend,
                                     int *addend_arg) {
    dnnl::primitive_attr attr = user_scratchpad_attr();
    dnnl::post_ops ops;
    if (scale != 1.f) ops.append_eltwise(dnnl::algorithm::eltwise_linear, scale, 0.f);
    if (sum) ops.append_sum(1.f);
    if (addend) {
        *addend_arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(ops.len()) | DNNL_ARG_SRC_1;
        ops.append_binary(dnnl::algorithm::binary_add, *addend);
    }
    if (kind != MKC_ACTIVATION_NONE) ops.append_eltwise(activation_info(kind, alpha).alg, alpha, beta);
    if (ops.len() > 0) attr.set_post_ops(ops);
    return attr;
}

namespace {

struct LinearGeometry {
    Dims xc, w;
    mkc_dtype dtype;                  // src's and the weights' (and the result's)
    mkc_dtype b_dtype = MKC_DTYPE_F32; // the bias's, when there is one
    int64_t rows;
    const char *default_name; // a per-thread buffer: valid until the thread's next call
};

// The checks of a linear call (`bias`: whether it has one; its shape is
// checked by check_linear_bias) and its shapes.
template <typename V>
LinearGeometry linear_geometry(const char *op, const mkc_linear_params &p, const V &src,
                               const V &weights, bool bias, bool training) {
    LinearGeometry g;
    g.dtype = require_float_src(op, "src", src.dtype);
    require_same_float(op, "weights", weights.dtype, g.dtype);
    g.xc = caller_dims(src);
    g.w = onednn_dims(weights);
    const Dims &w = g.w;
    require(w.size() == 2, op, ": weights must be 2-D [out, in], got rank ", w.size());
    if (g.xc.back() != w[1])
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": src has ", g.xc.back(),
             " input features but weights expect ", w[1], " (weights shape ", shape_text(w), ")");
    if (p.activation != MKC_ACTIVATION_NONE) activation_info(p.activation, p.activation_alpha);
    require(!(p.sum && training), op, ": a sum (residual add) has no training forward");
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

template <typename V>
void check_linear_bias(LinearGeometry &g, const V *bias) {
    if (!bias) return;
    require_float_param("linear", "bias", bias->dtype);
    g.b_dtype = bias->dtype;
    const Dims &b = onednn_dims(*bias);
    require(b.size() == 1 && b[0] == g.w[0], "linear: bias must have shape [", g.w[0], "]");
}

// The forward's result, row-major with src's leading caller dims.
Dims linear_result_dims(const LinearGeometry &g) {
    Dims yc(g.xc.begin(), g.xc.end() - 1);
    yc.push_back(g.w[0]);
    return yc;
}

template <typename V>
void sign_linear(Handler &handler, const mkc_linear_params &p, const LinearGeometry &g,
                 const V &src, bool bias, bool training) {
    handler.sign(OpKind::linear);
    handler.sign_value(src.dims, src.dtype);
    handler.sign(src.layout);
    handler.sign_value(g.w, g.dtype);
    handler.sign(bias ? 1 + static_cast<int>(g.b_dtype) : 0);
    sign_attrs(handler, LinearAttrs(p, training));
}

dnnl::inner_product_forward::primitive_desc
linear_descriptor(const mkc_linear_params &p, const LinearGeometry &g, bool bias, bool training,
                  const dnnl::memory::desc &weights = dnnl::memory::desc()) {
    const Dims &w = g.w;
    const auto dt = onednn_float(g.dtype);
    const dnnl::memory::desc x_view({g.rows, w[1]}, dt, tag::ab),
        w_md = weights.is_zero() ? dnnl::memory::desc(w, dt, tag::any) : weights,
        y2_md({g.rows, w[0]}, dt, tag::ab);
    const auto attr =
        activation_attr(p.activation, p.activation_alpha, p.activation_beta, 1.f, p.sum != 0);
    const auto prop =
        training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    if (bias)
        return dnnl::inner_product_forward::primitive_desc(
            cpu_engine(), prop, x_view, w_md,
            dnnl::memory::desc({w[0]}, onednn_float(g.b_dtype), tag::a), y2_md, attr);
    return dnnl::inner_product_forward::primitive_desc(cpu_engine(), prop, x_view, w_md, y2_md,
                                                       attr);
}

// `make()`'s descriptor where oneDNN builds it with the kernel it chose for
// `chosen`, else `chosen`: an arrangement of the weights asked for by the
// caller only where it costs no change of kernel.
template <typename PD, typename Make> PD same_kernel_or(PD chosen, Make &&make) {
    try {
        PD other = make();
        if (std::string(other.impl_info_str()) == chosen.impl_info_str())
            return other;
    } catch (const dnnl::error &) {
        // no kernel reads them so
    }
    return chosen;
}

// The descriptor reading the weights arranged as `held` when oneDNN takes
// them so with the kernel it would choose for weights of its own
// arrangement; else that one.
dnnl::inner_product_forward::primitive_desc
linear_descriptor_reading(const mkc_linear_params &p, const LinearGeometry &g, bool bias,
                          bool training, const dnnl::memory::desc &held) {
    auto chosen = linear_descriptor(p, g, bias, training);
    if (held.is_zero() || chosen.weights_desc() == held)
        return chosen;
    return same_kernel_or(chosen, [&] { return linear_descriptor(p, g, bias, training, held); });
}

// The rows at which a layer's weights take the arrangement every input
// shape of a program shares (many_rows_weights, LinearOp::prepare_on).
constexpr int64_t kManyRows = 1024;

// The weights' arrangement oneDNN picks for this layer at many rows, where
// `g` has fewer (else none). A program converts its constant weights once
// for every input shape; the arrangement picked for many rows serves few
// rows as fast, where the one picked for few rows slows many.
dnnl::memory::desc many_rows_weights(const mkc_linear_params &p, const LinearGeometry &g,
                                     bool bias, bool training) {
    if (g.rows >= kManyRows)
        return {};
    LinearGeometry many = g;
    many.rows = kManyRows;
    return linear_descriptor(p, many, bias, training).weights_desc();
}

// The forward's entry (checked by linear_geometry and check_linear_bias).
// `held`: an arrangement the caller holds the weights in already, which the
// primitive reads where it can (see linear_descriptor_reading); empty:
// none.
template <typename V>
std::shared_ptr<LinearEntry> prepare_linear(const CacheScope &scope, const mkc_linear_params &p,
                                            const char *name, const LinearGeometry &g,
                                            const V &src, bool bias, bool training,
                                            const dnnl::memory::desc &held = {}) {
    const Dims &w = g.w;
    if (g.dtype != MKC_DTYPE_F32) require_bf16_kernels("linear");
    Handler handler(scope, "linear", name, g.default_name, nullptr, Dims{g.rows, w[1]});
    sign_linear(handler, p, g, src, bias, training);
    if (!held.is_zero()) handler.sign_layout(held);
    auto entry = handler.acquire_primitive<LinearEntry>([&] {
        auto e = std::make_shared<LinearEntry>();
        const auto pd = linear_descriptor_reading(p, g, bias, training, held);
        e->primitive = dnnl::inner_product_forward(pd);
        std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
        if (bias) args.push_back(DNNL_ARG_BIAS);
        e->set_args(pd, args);
        e->x_plain = layout::plain_desc(src.dims, onednn_float(g.dtype), src.layout);
        const Dims yc = linear_result_dims(g);
        // The result is row-major [rows, out]; the caller sees it with x's
        // leading dims.
        e->y_md = dnnl::memory::desc(yc, onednn_float(g.dtype), row_major_strides(yc));
        return e;
    });
    if (training && !entry->transferred.exchange(true)) {
        auto t = std::make_shared<Transfer>(); // forward -> backward: the descriptor
        t->forward = entry;
        handler.leave_transfer(t);
    }
    return entry;
}

} // namespace

ValueDesc LinearOp::infer(const Attrs &attrs, const ValueDesc &src, const ValueDesc &weights,
                          const ValueDesc *bias) {
    LinearGeometry g =
        linear_geometry("linear", attrs.p, src, weights, bias != nullptr, attrs.training);
    check_linear_bias(g, bias);
    return plain_value(g.dtype, MKC_LAYOUT_CHANNELS_FIRST, linear_result_dims(g));
}

Prepared LinearOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                           const ValueDesc &src, const ValueDesc &weights, const ValueDesc *bias) {
    LinearGeometry g =
        linear_geometry("linear", attrs.p, src, weights, bias != nullptr, attrs.training);
    check_linear_bias(g, bias);
    // Weights arriving arranged otherwise than plain (a program's copy
    // converted for an earlier input shape) are read as they are where the
    // primitive can; plain ones are asked for in the arrangement for many
    // rows, which later input shapes then share.
    const bool arranged = weights.desc != layout::plain_desc(weights.dims,
                                                             onednn_float(weights.dtype),
                                                             weights.layout);
    auto entry = prepare_linear(
        scope, attrs.p, name, g, src, bias != nullptr, attrs.training,
        arranged ? weights.desc : many_rows_weights(attrs.p, g, bias != nullptr, attrs.training));
    Prepared out{entry,
                 {entry->x_plain, entry->arg_desc(DNNL_ARG_WEIGHTS),
                  bias ? entry->arg_desc(DNNL_ARG_BIAS) : empty_desc()},
                 {},
                 {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS},
                 {DNNL_ARG_DST}};
    out.outputs.push_back({g.dtype, MKC_LAYOUT_CHANNELS_FIRST, entry->y_md.get_dims(),
                           entry->y_md});
    return out;
}

namespace {

// A linear layer whose rows run as two parts (LinearOp::prepare_as_matmul's
// `row_parts`): rows [0, first_rows) on the entry's own primitive, the rest
// on `rest`'s, each reading its rows' bytes of src and writing its rows of
// dst (rows are independent in the product, the bias, the residual and the
// activation alike).
struct RowPartsEntry : PrimitiveEntry {
    std::shared_ptr<PrimitiveEntry> rest;
    int64_t first_rows = 0, rest_rows = 0;
    size_t in_row_bytes = 0, out_row_bytes = 0;
};

} // namespace

std::string linear_row_parts(const PrimitiveEntry &entry) {
    const auto *parts = dynamic_cast<const RowPartsEntry *>(&entry);
    return parts ? std::to_string(parts->first_rows) + "+" + std::to_string(parts->rest_rows)
                 : std::string();
}

Prepared LinearOp::prepare_on(const CacheScope &scope, const Attrs &attrs, const char *name,
                              const ValueDesc &src, const ValueDesc &weights,
                              const ValueDesc *bias, LinearKernel kernel, bool row_parts) {
    LinearGeometry g =
        linear_geometry("linear", attrs.p, src, weights, bias != nullptr, attrs.training);
    check_linear_bias(g, bias);
    require(!attrs.training, "linear: a training forward runs as an inner product only");
    if (g.dtype != MKC_DTYPE_F32) require_bf16_kernels("linear");
    const Dims &w = g.w; // [out, in]
    const auto dt = onednn_float(g.dtype);
    const bool conv = kernel == LinearKernel::conv1x1;
    const int64_t first_rows = g.rows / kRowPart * kRowPart;
    const auto attr = activation_attr(attrs.p.activation, attrs.p.activation_alpha,
                                      attrs.p.activation_beta, 1.f, attrs.p.sum != 0);
    const dnnl::memory::desc bias_md =
        !bias ? dnnl::memory::desc()
              : conv ? dnnl::memory::desc({w[0]}, onednn_float(g.b_dtype), tag::a)
                     : dnnl::memory::desc({1, w[0]}, onednn_float(g.b_dtype), tag::ab);
    // The weights as the primitive takes them: [in, out] for the matmul,
    // [out, in, 1, 1] for the convolution.
    const Dims kernel_weights = conv ? Dims{w[0], w[1], 1, 1} : Dims{w[1], w[0]};
    // The convolution sees the rows as the width of one image in channels-
    // last order: [1, in, 1, rows] over the same bytes as [rows, in].
    auto descriptor = [&](int64_t rows,
                          const dnnl::memory::desc &weights_md) -> dnnl::primitive_desc {
        if (conv) {
            const dnnl::memory::desc x({1, w[1], 1, rows}, dt, tag::acdb),
                y({1, w[0], 1, rows}, dt, tag::acdb);
            return dnnl::convolution_forward::primitive_desc(
                cpu_engine(), dnnl::prop_kind::forward_inference,
                dnnl::algorithm::convolution_direct, x, weights_md, bias_md, y, {1, 1}, {0, 0},
                {0, 0}, attr);
        }
        const dnnl::memory::desc x({rows, w[1]}, dt, tag::ab), y({rows, w[0]}, dt, tag::ab);
        return bias ? dnnl::matmul::primitive_desc(cpu_engine(), x, weights_md, bias_md, y, attr)
                    : dnnl::matmul::primitive_desc(cpu_engine(), x, weights_md, y, attr);
    };
    const dnnl::memory::desc any_weights(kernel_weights, dt, tag::any);
    // The convolution's weights as a program holds them already (converted
    // for an earlier input shape), in the kernel's dims; else none.
    dnnl::memory::desc held;
    if (conv && weights.desc != layout::plain_desc(weights.dims, dt, weights.layout)) {
        try {
            held = weights.desc.reshape(kernel_weights);
        } catch (const dnnl::error &) {
            // an arrangement no [out, in, 1, 1] view has: asked for anew
        }
    }
    // The descriptor for `rows` with the weights in the arrangement oneDNN
    // picks for them.
    auto chosen = [&](int64_t rows) {
        auto pd = descriptor(rows, any_weights);
        if (conv) {
            // The convolution's pick depends on the rows: weights already
            // held in another arrangement are read as they are where the
            // kernel stays the same, else asked for in the arrangement
            // picked at many rows, which later input shapes then share.
            dnnl::memory::desc want = held;
            if (want.is_zero() && rows < kManyRows)
                want = descriptor(kManyRows, any_weights).weights_desc();
            if (!want.is_zero() && want != pd.weights_desc())
                pd = same_kernel_or(pd, [&] { return descriptor(rows, want); });
        } else if (pd.weights_desc().get_inner_nblks() == 0 && w[0] % 64 == 0) {
            // Plain [in, out] weights (the gemm kernels): rows a multiple
            // of 256 bytes apart make the kernel's loads of successive rows
            // meet in the same cache sets, so the rows are spaced further.
            const Dims padded{w[0] + 16, 1};
            pd = same_kernel_or(pd, [&] {
                return descriptor(rows, dnnl::memory::desc(kernel_weights, dt, padded));
            });
        }
        return pd;
    };
    // Parts only where they share something: oneDNN's brgemm kernels are
    // generated per row count, its gemm kernels (below AVX-512) serve any
    // rows from code made once, so their primitives are small already.
    std::optional<dnnl::primitive_desc> first_pd;
    if (row_parts && first_rows > 0 && first_rows < g.rows)
        first_pd = chosen(first_rows);
    const bool in_parts =
        first_pd && std::string(first_pd->impl_info_str()).rfind("brg", 0) == 0;
    // Its own key (the suffix): the inner product of the same name and
    // shapes is another entry, and so is the same layer on another kernel
    // or in row parts.
    const char *suffix = conv ? (in_parts ? "conv1x1_parts" : "conv1x1")
                              : (in_parts ? "matmul_parts" : "matmul");
    Handler handler(scope, "linear", name, g.default_name, suffix, Dims{g.rows, w[1]});
    sign_linear(handler, attrs.p, g, src, bias != nullptr, false);
    if (!held.is_zero()) handler.sign_layout(held);
    std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
    if (bias) args.push_back(DNNL_ARG_BIAS);
    std::shared_ptr<PrimitiveEntry> entry;
    if (in_parts) {
        entry = handler.acquire_primitive<RowPartsEntry>([&] {
            auto e = std::make_shared<RowPartsEntry>();
            const auto &pd = *first_pd;
            e->primitive = dnnl::primitive(pd);
            e->set_args(pd, args);
            // The rest as a layer of that many rows would have it (the one
            // primitive oneDNN's cache holds for it), unless its weights
            // come in another arrangement: both parts read one copy.
            auto rest_pd = chosen(g.rows - first_rows);
            if (rest_pd.weights_desc() != pd.weights_desc())
                rest_pd = descriptor(g.rows - first_rows, pd.weights_desc());
            e->rest = std::make_shared<PrimitiveEntry>();
            e->rest->primitive = dnnl::primitive(rest_pd);
            e->rest->set_args(rest_pd, args);
            e->first_rows = first_rows;
            e->rest_rows = g.rows - first_rows;
            const size_t size = dnnl::memory::data_type_size(dt);
            e->in_row_bytes = static_cast<size_t>(w[1]) * size;
            e->out_row_bytes = static_cast<size_t>(w[0]) * size;
            e->bytes = std::max(e->scratchpad_bytes, e->rest->scratchpad_bytes);
            return e;
        });
    } else {
        entry = handler.acquire_primitive<PrimitiveEntry>([&] {
            auto e = std::make_shared<PrimitiveEntry>();
            const auto pd = chosen(g.rows);
            e->primitive = dnnl::primitive(pd);
            e->set_args(pd, args);
            return e;
        });
    }
    // The caller holds the weights as [out, in] and the bias as [out]: the
    // same bytes as the kernel's weights and bias, described in the
    // caller's dims.
    const dnnl::memory::desc &kernel_md = entry->arg_desc(DNNL_ARG_WEIGHTS);
    const Dims yc = linear_result_dims(g);
    Prepared out{entry,
                 {layout::plain_desc(src.dims, dt, src.layout),
                  conv ? kernel_md.reshape(w) : kernel_md.permute_axes({1, 0}),
                  bias ? dnnl::memory::desc({w[0]}, onednn_float(g.b_dtype), tag::a)
                       : empty_desc()},
                 {},
                 {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS},
                 {DNNL_ARG_DST}};
    if (in_parts) {
        // Two executions: run() does the step.
        out.in_args.clear();
        out.out_args.clear();
    }
    out.outputs.push_back(
        {g.dtype, MKC_LAYOUT_CHANNELS_FIRST, yc, dnnl::memory::desc(yc, dt, row_major_strides(yc))});
    return out;
}

void LinearOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    // Plain [..., in] bytes are the [rows, in] the primitive reads.
    run_bound(scope, entry, buffers, {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS},
              {DNNL_ARG_DST});
    if (auto *parts = dynamic_cast<RowPartsEntry *>(&entry)) {
        // The rest: the same weights and bias, the rows after the first part.
        const void *in[3] = {static_cast<const char *>(buffers.in[0]) +
                                 parts->first_rows * parts->in_row_bytes,
                             buffers.in[1], buffers.in[2]};
        void *out[1] = {static_cast<char *>(buffers.out[0]) +
                        parts->first_rows * parts->out_row_bytes};
        run_bound(scope, *parts->rest, Buffers{in, out, buffers.weights_checked},
                  {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS}, {DNNL_ARG_DST});
    }
}

void linear(const CacheScope &scope, const mkc_linear_params &p, const Tensor &src,
            const Tensor &weights, const Tensor *bias, mkc_tensor **dst) {
    LinearGeometry g = linear_geometry("linear", p, src, weights, bias, p.training != 0);
    check_linear_bias(g, bias);
    if (p.sum) {
        // The residual is read in place: it must already be the result's
        // plain row-major bytes.
        require(*dst != nullptr, "linear: sum (accumulate into dst) needs an existing dst");
        const Tensor &r = **dst;
        require(r.dtype == g.dtype && caller_dims(r) == linear_result_dims(g) &&
                    r.desc == dnnl::memory::desc(linear_result_dims(g), onednn_float(g.dtype),
                                                 row_major_strides(linear_result_dims(g))),
                "linear: the residual (dst) must be ", dtype_name(g.dtype),
                " (src's dtype), plain row-major, of shape ", shape_text(linear_result_dims(g)));
    }
    auto entry = prepare_linear(scope, p, p.name, g, src, bias, p.training != 0);
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

namespace {

// The checks of a linear layer's gradient: those of the training forward
// (with or without `bias`), and diff_dst's shape.
template <typename V>
LinearGeometry check_linear_backward(const char *op, const mkc_linear_params &p, const V &src,
                                     const V &weights, const V &diff_dst, bool bias) {
    require(p.activation == MKC_ACTIVATION_NONE, op,
            ": a fused activation has no backward; run the activation as its own op");
    const LinearGeometry g = linear_geometry(op, p, src, weights, bias, true); // the forward's
    const Dims yc = linear_result_dims(g);
    require_diff_dtype(op, "diff_dst", diff_dst.dtype, "src", g.dtype);
    if (!(caller_dims(diff_dst) == yc))
        fail(MKC_STATUS_INVALID_ARGUMENT, op,
             ": diff_dst must have the forward output's shape ", shape_text(yc),
             ", got ", shape_text(caller_dims(diff_dst)));
    return g;
}

// What the gradient primitives are built from: the training forward's
// descriptor, as the forward left it under the same name (or made anew).
template <typename V>
dnnl::inner_product_forward::primitive_desc linear_hint(const CacheScope &scope,
                                                        const mkc_linear_params &p,
                                                        const std::string &name,
                                                        const Dims &key_dims,
                                                        const LinearGeometry &g, const V &src,
                                                        bool bias) {
    LinearGeometry with_bias = g;
    const auto left = find_with_either_bias(g.dtype, bias, [&](mkc_dtype b) {
        with_bias.b_dtype = b;
        Handler forward(scope, "linear", name.c_str(), name.c_str(), nullptr, key_dims);
        sign_linear(forward, p, with_bias, src, bias, true);
        return forward.find_transfer();
    });
    if (left)
        return descriptor_of<dnnl::inner_product_forward::primitive_desc>(
            left->forward->primitive);
    return linear_descriptor(p, g, bias, true);
}

// The gradients' entries (`key_dims`: {rows, in}, made once per call; the
// descriptors only on a miss).
template <typename V>
std::shared_ptr<LinearEntry> prepare_linear_backward_data(const CacheScope &scope,
                                                          const mkc_linear_params &p,
                                                          const std::string &name,
                                                          const Dims &key_dims,
                                                          const LinearGeometry &g, const V &src,
                                                          bool bias) {
    const Dims &w = g.w;
    if (g.dtype != MKC_DTYPE_F32) require_bf16_kernels("linear_backward");
    Handler handler(scope, "linear", name.c_str(), name.c_str(), "bwd_data", key_dims);
    sign_linear(handler, p, g, src, bias, true);
    handler.sign(OpKind::backward_data);
    return handler.acquire_primitive<LinearEntry>([&] {
        // In the forward's data dtype: diff_src bfloat16 for bfloat16 data.
        const auto dt = onednn_float(g.dtype);
        const dnnl::memory::desc x2({g.rows, w[1]}, dt, tag::ab),
            y2({g.rows, w[0]}, dt, tag::ab);
        auto fwd = linear_hint(scope, p, name, key_dims, g, src, bias);
        dnnl::inner_product_backward_data::primitive_desc pd(
            cpu_engine(), x2, dnnl::memory::desc(w, dt, tag::any), y2, fwd,
            user_scratchpad_attr());
        auto e = std::make_shared<LinearEntry>();
        e->primitive = dnnl::inner_product_backward_data(pd);
        e->set_args(pd, {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC});
        e->x_plain = layout::plain_desc(src.dims, dt, src.layout);
        e->y_md = y2;
        return e;
    });
}

template <typename V>
std::shared_ptr<LinearEntry> prepare_linear_backward_weights(const CacheScope &scope,
                                                             const mkc_linear_params &p,
                                                             const std::string &name,
                                                             const Dims &key_dims,
                                                             const LinearGeometry &g, const V &src,
                                                             bool bias) {
    const Dims &w = g.w;
    if (g.dtype != MKC_DTYPE_F32) require_bf16_kernels("linear_backward");
    Handler handler(scope, "linear", name.c_str(), name.c_str(), "bwd_weights", key_dims);
    sign_linear(handler, p, g, src, bias, true);
    handler.sign(OpKind::backward_weights);
    return handler.acquire_primitive<LinearEntry>([&] {
        // src and diff_dst in the forward's data dtype; the weights and bias
        // gradients always float32 (oneDNN accumulates in float32).
        const auto dt = onednn_float(g.dtype);
        const dnnl::memory::desc x2({g.rows, w[1]}, dt, tag::ab),
            y2({g.rows, w[0]}, dt, tag::ab);
        auto fwd = linear_hint(scope, p, name, key_dims, g, src, bias);
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
        e->x_plain = layout::plain_desc(src.dims, dt, src.layout);
        e->y_md = y2;
        return e;
    });
}

std::string gradient_name(const mkc_linear_params &p, const char *name, const LinearGeometry &g) {
    if (name && name[0]) return name;
    return p.name && p.name[0] ? p.name : g.default_name;
}

} // namespace

ValueDesc LinearBackwardDataOp::infer(const Attrs &attrs, const ValueDesc &src,
                                      const ValueDesc &weights, const ValueDesc &diff_dst) {
    check_linear_backward("linear_backward", attrs.p, src, weights, diff_dst, false);
    return plain_value(src.dtype, src.layout, src.dims);
}

Prepared LinearBackwardDataOp::prepare(const CacheScope &scope, const Attrs &attrs,
                                       const char *name, bool with_bias, const ValueDesc &src,
                                       const ValueDesc &weights, const ValueDesc &diff_dst) {
    const LinearGeometry g =
        check_linear_backward("linear_backward", attrs.p, src, weights, diff_dst, with_bias);
    auto entry = prepare_linear_backward_data(scope, attrs.p, gradient_name(attrs.p, name, g),
                                              Dims{g.rows, g.w[1]}, g, src, with_bias);
    Prepared out{entry,
                 {empty_desc(), entry->arg_desc(DNNL_ARG_WEIGHTS),
                  layout::plain_desc(diff_dst.dims, onednn_float(g.dtype), diff_dst.layout)},
                 {}};
    out.outputs.push_back({g.dtype, src.layout, src.dims, entry->x_plain});
    return out;
}

void LinearBackwardDataOp::run(const CacheScope &scope, PrimitiveEntry &entry,
                               const Buffers &buffers) {
    // src (port 0) is not read.
    run_bound(scope, entry, Buffers{buffers.in + 1, buffers.out},
              {DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST}, {DNNL_ARG_DIFF_SRC});
}

std::vector<ValueDesc> LinearBackwardWeightsOp::infer(const Attrs &attrs, bool with_bias,
                                                      const ValueDesc &src,
                                                      const ValueDesc &weights,
                                                      const ValueDesc &diff_dst) {
    const LinearGeometry g =
        check_linear_backward("linear_backward", attrs.p, src, weights, diff_dst, with_bias);
    std::vector<ValueDesc> out{plain_value(MKC_DTYPE_F32, MKC_LAYOUT_CHANNELS_FIRST, g.w)};
    if (with_bias) out.push_back(plain_value(MKC_DTYPE_F32, MKC_LAYOUT_CHANNELS_FIRST, {g.w[0]}));
    return out;
}

Prepared LinearBackwardWeightsOp::prepare(const CacheScope &scope, const Attrs &attrs,
                                          const char *name, bool with_bias, const ValueDesc &src,
                                          const ValueDesc &weights, const ValueDesc &diff_dst) {
    const LinearGeometry g =
        check_linear_backward("linear_backward", attrs.p, src, weights, diff_dst, with_bias);
    auto entry = prepare_linear_backward_weights(scope, attrs.p, gradient_name(attrs.p, name, g),
                                                 Dims{g.rows, g.w[1]}, g, src, with_bias);
    Prepared out{entry,
                 {entry->x_plain, empty_desc(),
                  layout::plain_desc(diff_dst.dims, onednn_float(g.dtype), diff_dst.layout)},
                 {}};
    const dnnl::memory::desc &dw = entry->arg_desc(DNNL_ARG_DIFF_WEIGHTS);
    out.outputs.push_back({MKC_DTYPE_F32, MKC_LAYOUT_CHANNELS_FIRST, g.w, dw});
    if (with_bias)
        out.outputs.push_back({MKC_DTYPE_F32, MKC_LAYOUT_CHANNELS_FIRST, Dims{g.w[0]},
                               entry->arg_desc(DNNL_ARG_DIFF_BIAS)});
    return out;
}

void LinearBackwardWeightsOp::run(const CacheScope &scope, PrimitiveEntry &entry,
                                  const Buffers &buffers) {
    // weights (port 1) are not read.
    const void *in[] = {buffers.in[0], buffers.in[2]};
    void *out[] = {buffers.out[0], entry.has_arg(DNNL_ARG_DIFF_BIAS) ? buffers.out[1] : nullptr};
    run_bound(scope, entry, Buffers{in, out}, {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST},
              {DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS});
}

void linear_backward(const CacheScope &scope, const mkc_linear_params &p, const Tensor &src,
                     const Tensor &weights, const Tensor &diff_dst, mkc_tensor **diff_src,
                     mkc_tensor **diff_weights, mkc_tensor **diff_bias) {
    const char *op = "linear_backward";
    const bool bias = diff_bias != nullptr;
    const LinearGeometry g = check_linear_backward(op, p, src, weights, diff_dst, bias);
    const Dims &w = g.w;
    const std::string name = gradient_name(p, nullptr, g);
    const Dims key_dims{g.rows, w[1]};
    std::unique_ptr<Tensor> hx, hdy;
    const Tensor &dy = row_major(scope, diff_dst, hdy); // the [rows, out] the primitives want

    if (diff_src) {
        auto entry = prepare_linear_backward_data(scope, p, name, key_dims, g, src, bias);
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
        auto entry = prepare_linear_backward_weights(scope, p, name, key_dims, g, src, bias);
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

template <typename V>
MatmulGeometry matmul_geometry(const mkc_matmul_params &p, const V &a, const V &b, const V *bias,
                               const V *addend = nullptr) {
    const mkc_dtype dtype = require_float_src("matmul", "a", a.dtype);
    require_same_float("matmul", "b", b.dtype, dtype);
    if (bias) require_float_param("matmul", "bias", bias->dtype);
    require(std::isfinite(p.scale), "matmul: scale must be finite, got ", p.scale);
    if (addend) require_same_float("matmul", "addend", addend->dtype, dtype);
    MatmulGeometry g =
        matmul_shapes("matmul", p.transpose_a != 0, p.transpose_b != 0, a, b, bias, addend);
    g.dtype = dtype;
    if (bias) g.b_dtype = bias->dtype;
    if (p.activation != MKC_ACTIVATION_NONE) activation_info(p.activation, p.activation_alpha);
    return g;
}

} // namespace

namespace {

// How the primitive sees its arguments' bytes: a and b with their strides
// (transposes swap the last two), the result row-major unless other
// strides are asked for, the bias as a row broadcast over the result's
// rank.
struct MatmulViews {
    MatmulViews(const MatmulGeometry &g, const Dims *y_strides = nullptr)
        : a(g.ac, onednn_float(g.dtype), g.a_strides), b(g.bc, onednn_float(g.dtype), g.b_strides),
          y(g.yc, onednn_float(g.dtype), y_strides ? *y_strides : row_major_strides(g.yc)),
          bias(bias_view(g)),
          addend(g.addend.empty() ? empty_desc()
                                  : dnnl::memory::desc(g.addend, onednn_float(g.dtype),
                                                       row_major_strides(g.addend))) {}
    dnnl::memory::desc a, b, y, bias, addend;

private:
    static dnnl::memory::desc bias_view(const MatmulGeometry &g) {
        const size_t n = static_cast<size_t>(g.n);
        Dims dims(n, 1);
        dims[n - 1] = g.yc[n - 1];
        return dnnl::memory::desc(dims, onednn_float(g.b_dtype), row_major_strides(dims));
    }
};

std::shared_ptr<MatmulEntry> prepare_matmul(const CacheScope &scope, const mkc_matmul_params &p,
                                            const char *name, const MatmulGeometry &g,
                                            const MatmulViews &v, bool bias, bool y_strided) {
    const MatmulAttrs attrs{p};
    thread_local std::string default_name;
    default_name = bias ? "matmul:bias" : "matmul";
    append_attrs_name(default_name, attrs);
    Handler handler(scope, "matmul", name, default_name.c_str(), nullptr, g.ac);
    handler.sign(OpKind::matmul);
    handler.sign_value(v.a);
    handler.sign_value(v.b);
    handler.sign(bias ? 1 + static_cast<int>(g.b_dtype) : 0);
    sign_attrs(handler, attrs);
    handler.sign_layout(v.a);
    handler.sign_layout(v.b);
    handler.sign(y_strided ? 1 : 0);
    if (y_strided) handler.sign_layout(v.y);
    const bool addend = !g.addend.empty();
    handler.sign(addend ? 1 : 0);
    if (addend) handler.sign_layout(v.addend);
    if (g.dtype != MKC_DTYPE_F32) require_bf16_kernels("matmul");
    return handler.acquire_primitive<MatmulEntry>([&] {
        auto e = std::make_shared<MatmulEntry>();
        const auto attr =
            activation_attr(p.activation, p.activation_alpha, p.activation_beta, p.scale, false,
                            addend ? &v.addend : nullptr, &e->addend_arg);
        const auto pd =
            bias ? dnnl::matmul::primitive_desc(cpu_engine(), v.a, v.b, v.bias, v.y, attr)
                 : dnnl::matmul::primitive_desc(cpu_engine(), v.a, v.b, v.y, attr);
        e->primitive = dnnl::matmul(pd);
        std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
        if (bias) args.push_back(DNNL_ARG_BIAS);
        if (e->addend_arg) args.push_back(e->addend_arg);
        e->set_args(pd, args);
        return e;
    });
}

} // namespace

ValueDesc MatmulOp::infer(const Attrs &attrs, const ValueDesc &a, const ValueDesc &b,
                          const ValueDesc *bias, const ValueDesc *addend) {
    const MatmulGeometry g = matmul_geometry(attrs.p, a, b, bias, addend);
    return plain_value(g.dtype, MKC_LAYOUT_CHANNELS_FIRST, g.yc);
}

Prepared MatmulOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                           const ValueDesc &a, const ValueDesc &b, const ValueDesc *bias,
                           const ValueDesc *addend, const Dims *y_strides) {
    const MatmulGeometry g = matmul_geometry(attrs.p, a, b, bias, addend);
    require(!y_strides || y_strides->size() == g.yc.size(), "matmul: the result's strides have ",
            y_strides ? y_strides->size() : 0, " entries for rank ", g.yc.size());
    const MatmulViews v(g, y_strides);
    auto entry = prepare_matmul(scope, attrs.p, name, g, v, bias != nullptr, y_strides != nullptr);
    // Each input's bytes as they are when strided, else row-major in its
    // caller order (a bias: [N]; an addend: its own dims, which the
    // primitive reads broadcast).
    Prepared out{entry,
                 {operand_takes(a), operand_takes(b),
                  bias ? layout::plain_desc(bias->dims, onednn_float(bias->dtype), bias->layout)
                       : empty_desc()},
                 {},
                 {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS},
                 {DNNL_ARG_DST}};
    if (addend) {
        out.takes.push_back(
            layout::plain_desc(addend->dims, onednn_float(addend->dtype), addend->layout));
        out.in_args.push_back(entry->addend_arg);
    }
    out.outputs.push_back({g.dtype, MKC_LAYOUT_CHANNELS_FIRST, g.yc, v.y});
    return out;
}

void MatmulOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    const int addend = static_cast<MatmulEntry &>(entry).addend_arg;
    if (addend) {
        Handler::Execution exec(entry, scope);
        exec.raw(DNNL_ARG_SRC, const_cast<void *>(buffers.in[0])); // read only
        exec.raw(DNNL_ARG_WEIGHTS, const_cast<void *>(buffers.in[1]));
        if (buffers.in[2]) exec.raw(DNNL_ARG_BIAS, const_cast<void *>(buffers.in[2]));
        exec.raw(addend, const_cast<void *>(buffers.in[3]));
        exec.output(DNNL_ARG_DST, buffers.out[0]);
        exec.run();
        return;
    }
    run_bound(scope, entry, buffers, {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS},
              {DNNL_ARG_DST});
}

void matmul(const CacheScope &scope, const mkc_matmul_params &p, const Tensor &a_in,
            const Tensor &b_in, const Tensor *bias, mkc_tensor **dst) {
    matmul_geometry(p, a_in, b_in, bias); // checks before any conversion
    std::unique_ptr<Tensor> ha, hb;
    const Tensor &a = row_major(scope, a_in, ha);
    const Tensor &b = row_major(scope, b_in, hb);
    const MatmulGeometry g = matmul_geometry(p, a, b, bias);
    const MatmulViews v(g);
    auto entry = prepare_matmul(scope, p, p.name, g, v, bias != nullptr, false);
    Handler::Output out = Handler::prepare_output(dst, *entry, DNNL_ARG_DST,
                                                  MKC_LAYOUT_CHANNELS_FIRST, g.dtype, "matmul");
    {
        Handler::Execution exec(*entry, scope);
        exec.input(DNNL_ARG_SRC, a, &v.a);
        exec.input(DNNL_ARG_WEIGHTS, b, &v.b);
        if (bias) exec.input(DNNL_ARG_BIAS, *bias, &v.bias);
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
    require(!diff_bias || bias, op, ": diff_bias needs the forward's bias");
    const MatmulGeometry g = matmul_geometry(p, a, b, bias); // checks the forward's shapes too
    const Dims &yc = g.yc;
    require_diff_dtype(op, "diff_dst", diff_dst.dtype, "a", g.dtype);
    if (!(caller_dims(diff_dst) == yc))
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": diff_dst must have the forward output's shape ",
             shape_text(yc), ", got ", shape_text(caller_dims(diff_dst)));
    // With op(X) = X or X^T and C = s (op(A) op(B) + bias):
    //   d op(A) = s dC op(B)^T,  d op(B) = s op(A)^T dC,  d bias = s sum(dC),
    // transposed back where A or B was read transposed; then summed over
    // the batch dims A or B was broadcast along. dA and dB have a's dtype
    // (bfloat16: each product and sum rounded once); dbias is float32, as
    // every parameter gradient: bfloat16 dC is widened (exactly) first.
    auto product = [&](const Tensor &x, bool tx, const Tensor &y, bool ty) {
        mkc_matmul_params q{};
        q.transpose_a = tx;
        q.transpose_b = ty;
        q.activation = MKC_ACTIVATION_NONE;
        q.scale = p.scale;
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
    if (diff_bias) {
        std::unique_ptr<Tensor> widened;
        if (diff_dst.dtype != MKC_DTYPE_F32) {
            widened = make_owned_tensor(layout::plain_desc(diff_dst.dims, f32, diff_dst.layout),
                                        diff_dst.layout, MKC_DTYPE_F32);
            reorder(scope, diff_dst.desc, diff_dst.data, widened->desc, widened->data);
        }
        reduce_sum_to(scope, widened ? *widened : diff_dst, *bias, p.scale, diff_bias, op);
    }
}

} // namespace mkc::ops
