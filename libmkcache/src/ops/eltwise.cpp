// Element-wise activations. They run on whatever layout their input is in
// (a conv output in nChw16c stays nChw16c), so a chain performs no reorder.
#include <charconv>
#include <string>

#include "common/cpu_features.hpp"
#include "common/engine.hpp"
#include "common/serial.hpp"
#include "common/error.hpp"
#include "handler/handler.hpp"
#include "keys/keys.hpp"
#include "ops/activation.hpp"
#include "ops/activation_kernels.hpp"
#include "ops/attrs.hpp"
#include "ops/call_words.hpp"
#include "ops/float_dtype.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

struct EltwiseEntry : PrimitiveEntry {
    int64_t elements = 0; // built serially when small, and so run (SerialRegion)
    // The kinds oneDNN's kernel gets wrong somewhere run on our own
    // (activation_kernels.hpp): the entry then holds the arrangements
    // alone, and no primitive.
    bool own_kernel = false;
    ActivationAttrs attrs{};

    // dst = the activation of src, both arranged as the entry's src.
    void run_own(const void *src, void *dst) const {
        activation_kernel(attrs.kind, attrs.alpha, attrs.beta, arg_desc(DNNL_ARG_SRC),
                          static_cast<const float *>(src), static_cast<float *>(dst));
    }
};

struct EltwiseBackwardEntry : PrimitiveEntry {
    int64_t elements = 0;
    // As the forward's: the kinds whose oneDNN gradient is inaccurate run
    // on our own kernel, and the entry holds no primitive.
    bool own_kernel = false;
    ActivationAttrs attrs{};

    // diff_src from src and diff_dst, all arranged as the entry's src.
    void run_own(const void *src, const void *diff_dst, void *diff_src) const {
        activation_backward_kernel(attrs.kind, attrs.alpha, attrs.beta, arg_desc(DNNL_ARG_SRC),
                                   static_cast<const float *>(src),
                                   static_cast<const float *>(diff_dst),
                                   static_cast<float *>(diff_src));
    }
};

} // namespace

ActivationInfo activation_info(mkc_activation_kind kind, float alpha) {
    using a = dnnl::algorithm;
    // softplus divides by alpha (and oneDNN's kernel too).
    require(kind != MKC_ACTIVATION_SOFTPLUS || alpha > 0,
            "activation: softplus takes alpha > 0, got ", alpha);
    switch (kind) {
    case MKC_ACTIVATION_RELU: return {a::eltwise_relu, "relu"};
    case MKC_ACTIVATION_ELU: return {a::eltwise_elu, "elu"};
    case MKC_ACTIVATION_GELU_ERF: return {a::eltwise_gelu_erf, "gelu"};
    case MKC_ACTIVATION_GELU_TANH: return {a::eltwise_gelu_tanh, "gelu_tanh"};
    case MKC_ACTIVATION_TANH: return {a::eltwise_tanh, "tanh"};
    case MKC_ACTIVATION_SIGMOID: return {a::eltwise_logistic, "sigmoid"};
    case MKC_ACTIVATION_SWISH: return {a::eltwise_swish, "swish"};
    case MKC_ACTIVATION_HARDSWISH: return {a::eltwise_hardswish, "hardswish"};
    case MKC_ACTIVATION_MISH: return {a::eltwise_mish, "mish"};
    case MKC_ACTIVATION_CLIP: return {a::eltwise_clip_v2, "clip"};
    case MKC_ACTIVATION_SQRT: return {a::eltwise_sqrt, "sqrt"};
    case MKC_ACTIVATION_ABS: return {a::eltwise_abs, "abs"};
    case MKC_ACTIVATION_EXP: return {a::eltwise_exp, "exp"};
    case MKC_ACTIVATION_LOG: return {a::eltwise_log, "log"};
    case MKC_ACTIVATION_SQUARE: return {a::eltwise_square, "square"};
    case MKC_ACTIVATION_SOFTPLUS: return {a::eltwise_soft_relu, "softplus"};
    default: break;
    }
    fail(MKC_STATUS_INVALID_ARGUMENT, "activation: unsupported kind ", static_cast<int>(kind));
}

const char *activation_name(mkc_activation_kind kind) {
    return kind == MKC_ACTIVATION_NONE ? "" : activation_info(kind, 1.f).name;
}

namespace {

// What the thread's argument cache knows an activation by (with the name's
// text): its attributes, the caller's layout and the shape. src's exact
// layout is checked against the entry's on a hit.
class ActivationCall : public CallWords<4 + 1 + MKC_MAX_NDIMS> {
public:
    ActivationCall(const ActivationAttrs &a, const char *name, const Tensor &src) {
        add(kind_word(OpKind::activation) | int64_t(src.dtype) << 32 | src.layout);
        add_attrs(*this, a);
        add_dims(src.dims);
        seal(name);
    }
};

// The checks every call makes (an unknown kind is refused when the entry
// is built).
template <typename V>
void check_activation(const V &src) {
    require_float_src("activation", "src", src.dtype);
}

template <typename V>
std::shared_ptr<EltwiseEntry> prepare_activation(const CacheScope &scope,
                                                 const ActivationAttrs &attrs, const char *name,
                                                 const V &src, BlobCache::HitTicket &ticket,
                                                 bool &hit) {
    const ActivationInfo a = activation_info(attrs.kind, attrs.alpha);
    const Dims &x = onednn_dims(src);
    const KeyText key = key_text("", "", attrs);
    Handler handler(scope, "activation", name, key.name, key.suffix, x);
    handler.sign(OpKind::activation);
    sign_attrs(handler, attrs);
    sign_input_layout(handler, src, DNNL_ARG_SRC);
    if (src.dtype != MKC_DTYPE_F32) require_bf16_kernels("activation");

    auto entry = handler.acquire_primitive<EltwiseEntry>([&] {
        auto e = std::make_shared<EltwiseEntry>();
        const auto pd = dnnl::eltwise_forward::primitive_desc(
            cpu_engine(), dnnl::prop_kind::forward_inference, a.alg, src.desc, src.desc,
            attrs.alpha, attrs.beta, user_scratchpad_attr());
        e->own_kernel = src.dtype == MKC_DTYPE_F32 && own_activation_kernel(attrs.kind);
        e->attrs = attrs;
        if (!e->own_kernel) e->primitive = dnnl::eltwise_forward(pd);
        e->set_args(pd, {DNNL_ARG_SRC, DNNL_ARG_DST});
        e->elements = element_count(src);
        return e;
    });
    handler.report_hit(ticket, hit);
    return entry;
}

} // namespace

ValueDesc ActivationOp::infer(const Attrs &attrs, const ValueDesc &src) {
    check_activation(src);
    activation_info(attrs.kind, attrs.alpha); // validates the kind
    return src;
}

Prepared ActivationOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                               const ValueDesc &src) {
    infer(attrs, src);
    const SerialRegion serial(element_count(src));
    BlobCache::HitTicket ticket;
    bool hit = false;
    auto entry = prepare_activation(scope, attrs, name, src, ticket, hit);
    Prepared out{entry, {src.desc}, {arranged_as(src, entry->arg_desc(DNNL_ARG_DST))}};
    if (!entry->own_kernel) { // a primitive a program may bind and execute itself
        out.in_args = {DNNL_ARG_SRC};
        out.out_args = {DNNL_ARG_DST};
        out.serial_elements = entry->elements;
    }
    return out;
}

void ActivationOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    auto &e = static_cast<EltwiseEntry &>(entry);
    if (e.own_kernel) return e.run_own(buffers.in[0], buffers.out[0]);
    const SerialRegion serial(e.elements);
    run_bound(scope, entry, buffers, {DNNL_ARG_SRC}, {DNNL_ARG_DST});
}

void activation(const CacheScope &scope, mkc_activation_kind kind, float alpha, float beta,
                const char *name, const Tensor &src, mkc_tensor **dst) {
    check_activation(src);
    const SerialRegion serial(element_count(src)); // built and run alike
    // A call this thread made before, whose entry the cache still holds and
    // whose src is laid out as then, skips the key, signature and lookup.
    ThreadState &state = *scope.state;
    const ActivationAttrs attrs{kind, alpha, beta};
    const std::shared_ptr<void> blob = remembered_entry<EltwiseEntry>(
        state, scope, ActivationCall(attrs, name, src), name,
        [&](const EltwiseEntry &e) { return e.takes_as_is(src, DNNL_ARG_SRC); },
        [&](BlobCache::HitTicket &ticket, bool &hit) {
            return prepare_activation(scope, attrs, name, src, ticket, hit);
        });
    auto &entry = *static_cast<EltwiseEntry *>(blob.get());
    if (!entry.own_kernel)
        return Handler::run_src_dst(scope, entry, src, dst, src.layout, "activation");
    // src is arranged as the entry's (its hit check says so); dst may be src.
    Handler::Output out =
        Handler::prepare_output(dst, entry, DNNL_ARG_DST, src.layout, src.dtype, "activation");
    entry.run_own(src.data, out.data);
    Handler::finish_output(scope, out, dst);
}

} // namespace mkc::ops

namespace mkc::ops {

namespace {

template <typename V>
void check_activation_backward(const V &src, const V &diff_dst) {
    const char *op = "activation_backward";
    // The gradient has src's dtype (bfloat16 training keeps it bfloat16).
    require_float_src(op, "src", src.dtype);
    require_diff_dtype(op, "diff_dst", diff_dst.dtype, "src", src.dtype);
    if (!(diff_dst.dims == src.dims && diff_dst.layout == src.layout))
        fail(MKC_STATUS_INVALID_ARGUMENT, op,
             ": diff_dst must have src's shape ", shape_text(caller_dims(src)), ", got ",
             shape_text(caller_dims(diff_dst)));
}

template <typename V>
std::shared_ptr<EltwiseBackwardEntry>
prepare_activation_backward(const CacheScope &scope, const ActivationAttrs &attrs, const char *name,
                            const V &src) {
    const ActivationInfo a = activation_info(attrs.kind, attrs.alpha);
    const KeyText key = key_text("", "bwd", attrs);
    Handler handler(scope, "activation", name, key.name, key.suffix, onednn_dims(src));
    handler.sign(OpKind::activation_backward);
    sign_attrs(handler, attrs);
    sign_input_layout(handler, src, DNNL_ARG_SRC);
    if (src.dtype != MKC_DTYPE_F32) require_bf16_kernels("activation_backward");
    return handler.acquire_primitive<EltwiseBackwardEntry>([&] {
        // Element-wise ops choose no layout: the hint is made here (no
        // transfer needed); the gradient is computed from src.
        dnnl::eltwise_forward::primitive_desc hint(cpu_engine(), dnnl::prop_kind::forward_training,
                                                   a.alg, src.desc, src.desc, attrs.alpha,
                                                   attrs.beta, user_scratchpad_attr());
        dnnl::eltwise_backward::primitive_desc pd(cpu_engine(), a.alg, src.desc, src.desc,
                                                  src.desc, attrs.alpha, attrs.beta, hint,
                                                  user_scratchpad_attr());
        auto e = std::make_shared<EltwiseBackwardEntry>();
        e->own_kernel = src.dtype == MKC_DTYPE_F32 && own_activation_backward_kernel(attrs.kind);
        e->attrs = attrs;
        if (!e->own_kernel) e->primitive = dnnl::eltwise_backward(pd);
        e->set_args(pd, {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC});
        e->elements = element_count(src);
        return e;
    });
}

} // namespace

ValueDesc ActivationBackwardOp::infer(const Attrs &attrs, const ValueDesc &src,
                                      const ValueDesc &diff_dst) {
    check_activation_backward(src, diff_dst);
    activation_info(attrs.kind, attrs.alpha);
    return src;
}

Prepared ActivationBackwardOp::prepare(const CacheScope &scope, const Attrs &attrs,
                                       const char *name, const ValueDesc &src,
                                       const ValueDesc &diff_dst) {
    infer(attrs, src, diff_dst);
    const SerialRegion serial(element_count(src));
    auto entry = prepare_activation_backward(scope, attrs, name, src);
    Prepared out{entry,
                 {src.desc, entry->arg_desc(DNNL_ARG_DIFF_DST)},
                 {arranged_as(src, entry->arg_desc(DNNL_ARG_DIFF_SRC))}};
    if (!entry->own_kernel) { // a primitive a program may bind and execute itself
        out.in_args = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST};
        out.out_args = {DNNL_ARG_DIFF_SRC};
        out.serial_elements = entry->elements;
    }
    return out;
}

void ActivationBackwardOp::run(const CacheScope &scope, PrimitiveEntry &entry,
                               const Buffers &buffers) {
    auto &e = static_cast<EltwiseBackwardEntry &>(entry);
    if (e.own_kernel) return e.run_own(buffers.in[0], buffers.in[1], buffers.out[0]);
    const SerialRegion serial(e.elements);
    run_bound(scope, entry, buffers, {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST}, {DNNL_ARG_DIFF_SRC});
}

void activation_backward(const CacheScope &scope, mkc_activation_kind kind, float alpha, float beta,
                         const char *name, const Tensor &src, const Tensor &diff_dst,
                         mkc_tensor **diff_src) {
    check_activation_backward(src, diff_dst);
    const ActivationAttrs attrs{kind, alpha, beta};
    const SerialRegion serial(element_count(src));
    auto entry = prepare_activation_backward(scope, attrs, name, src);
    if (!entry->own_kernel)
        return Handler::run_two_inputs(scope, *entry, DNNL_ARG_SRC, src, DNNL_ARG_DIFF_DST,
                                       diff_dst, DNNL_ARG_DIFF_SRC, diff_src, src.layout,
                                       "activation_backward");
    // src is arranged as the entry's (it was built for it); diff_dst is
    // converted if it arrives otherwise, before the output is prepared (it
    // may be diff_dst itself, re-described).
    std::unique_ptr<Tensor> converted;
    const Tensor &dy = as_layout(scope, diff_dst, entry->arg_desc(DNNL_ARG_DIFF_DST), converted);
    Handler::Output out = Handler::prepare_output(diff_src, *entry, DNNL_ARG_DIFF_SRC, src.layout,
                                                  src.dtype, "activation_backward");
    entry->run_own(src.data, dy.data, out.data);
    Handler::finish_output(scope, out, diff_src);
}

} // namespace mkc::ops
