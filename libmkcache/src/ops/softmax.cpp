// softmax / log_softmax along any axis, on the input's own layout.
#include <string>

#include "common/cpu_features.hpp"
#include "common/engine.hpp"
#include "common/error.hpp"
#include "handler/handler.hpp"
#include "ops/attrs.hpp"
#include "ops/call_words.hpp"
#include "ops/float_dtype.hpp"
#include "keys/keys.hpp"
#include "ops/ops.hpp"
#include "ops/softmax.hpp"

namespace mkc::ops {

namespace {
// What the thread's argument cache knows a softmax by (with the name's
// text): its attributes (the axis as given), src's dtype, caller layout and
// shape. src's exact layout is checked against the entry's on a hit.
class SoftmaxCall : public CallWords<3 + 1 + MKC_MAX_NDIMS> {
public:
    SoftmaxCall(const SoftmaxAttrs &a, const char *name, const Tensor &src) {
        add(kind_word(OpKind::softmax) | int64_t(src.dtype) << 16 | src.layout);
        add_attrs(*this, a);
        add_dims(src.dims);
        seal(name);
    }
};

const char *softmax_op(bool log) { return log ? "log_softmax" : "softmax"; }

// The checks of a forward call (made when its entry is looked up); the
// axis counted from the front.
template <typename V>
int check_softmax(const SoftmaxAttrs &given, const V &src) {
    const char *op = softmax_op(given.log);
    require_float_src(op, "src", src.dtype);
    const int n = static_cast<int>(onednn_dims(src).size());
    require(given.axis >= -n && given.axis < n, op, ": axis ", given.axis,
            " is out of range for rank ", n);
    return given.axis < 0 ? given.axis + n : given.axis;
}

template <typename V>
std::shared_ptr<PrimitiveEntry> prepare_softmax(const CacheScope &scope,
                                                const SoftmaxAttrs &given, const char *name,
                                                const V &src, BlobCache::HitTicket &ticket,
                                                bool &hit) {
    const int caller_axis = check_softmax(given, src);
    const bool log = given.log;
    const Dims &x = onednn_dims(src);
    const int n = static_cast<int>(x.size());
    const int onednn_axis = layout::to_onednn_axis(caller_axis, n, src.layout);
    const SoftmaxAttrs attrs{caller_axis, log};
    const KeyText key = key_text("softmax", "", attrs);
    Handler handler(scope, softmax_op(log), name, key.name, key.suffix, x);
    handler.sign(OpKind::softmax);
    sign_attrs(handler, attrs);
    // The axis as oneDNN counts it: the caller's axis depends on the layout
    // label, which the bytes' arrangement does not show (a channels-last
    // tensor may be stored channels-first).
    handler.sign(onednn_axis);
    sign_input_layout(handler, src, DNNL_ARG_SRC);
    if (src.dtype != MKC_DTYPE_F32) require_bf16_kernels(softmax_op(log));
    auto entry = handler.acquire_primitive<PrimitiveEntry>([&] {
        auto e = std::make_shared<PrimitiveEntry>();
        const auto pd = dnnl::softmax_forward::primitive_desc(
            cpu_engine(), dnnl::prop_kind::forward_inference,
            log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, src.desc,
            src.desc, onednn_axis, user_scratchpad_attr());
        e->primitive = dnnl::softmax_forward(pd);
        e->set_args(pd, {DNNL_ARG_SRC, DNNL_ARG_DST});
        return e;
    });
    handler.report_hit(ticket, hit);
    return entry;
}

} // namespace

ValueDesc SoftmaxOp::infer(const Attrs &attrs, const ValueDesc &src) {
    check_softmax(attrs, src);
    return src;
}

Prepared SoftmaxOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                            const ValueDesc &src) {
    BlobCache::HitTicket ticket;
    bool hit = false;
    auto entry = prepare_softmax(scope, attrs, name, src, ticket, hit);
    return {entry,
            {src.desc},
            {arranged_as(src, entry->arg_desc(DNNL_ARG_DST))},
            {DNNL_ARG_SRC},
            {DNNL_ARG_DST}};
}

void SoftmaxOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    run_bound(scope, entry, buffers, {DNNL_ARG_SRC}, {DNNL_ARG_DST});
}

void softmax(const CacheScope &scope, int axis, bool log, const char *name, const Tensor &src,
             mkc_tensor **dst) {
    // A call this thread made before, whose entry the cache still holds and
    // whose src is laid out as then, skips the checks, key and lookup.
    ThreadState &state = *scope.state;
    const SoftmaxAttrs attrs{axis, log};
    const std::shared_ptr<void> blob = remembered_entry<PrimitiveEntry>(
        state, scope, SoftmaxCall(attrs, name, src), name,
        [&](const PrimitiveEntry &e) { return e.takes_as_is(src, DNNL_ARG_SRC); },
        [&](BlobCache::HitTicket &ticket, bool &hit) {
            return prepare_softmax(scope, attrs, name, src, ticket, hit);
        });
    Handler::run_src_dst(scope, *static_cast<PrimitiveEntry *>(blob.get()), src, dst, src.layout,
                         softmax_op(log));
}

} // namespace mkc::ops

namespace mkc::ops {

namespace {

const char *softmax_backward_op(bool log) {
    return log ? "log_softmax_backward" : "softmax_backward";
}

// The checks of a backward call; the axis counted from the front.
template <typename V>
int check_softmax_backward(const SoftmaxAttrs &given, const V &dst, const V &diff_dst) {
    const char *op = softmax_backward_op(given.log);
    // The gradient has dst's dtype (bfloat16 training keeps it bfloat16).
    require_float_src(op, "dst", dst.dtype);
    require_diff_dtype(op, "diff_dst", diff_dst.dtype, "dst", dst.dtype);
    if (!(diff_dst.dims == dst.dims && diff_dst.layout == dst.layout))
        fail(MKC_STATUS_INVALID_ARGUMENT, op,
             ": diff_dst must have dst's shape ", shape_text(caller_dims(dst)), ", got ",
             shape_text(caller_dims(diff_dst)));
    const int n = static_cast<int>(onednn_dims(dst).size());
    require(given.axis >= -n && given.axis < n, op, ": axis ", given.axis,
            " is out of range for rank ", n);
    return given.axis < 0 ? given.axis + n : given.axis;
}

// The entry for checked arguments (`caller_axis` counted from the front).
template <typename V>
std::shared_ptr<PrimitiveEntry> prepare_softmax_backward(const CacheScope &scope, int caller_axis,
                                                         bool log, const char *name,
                                                         const V &dst) {
    const Dims &x = onednn_dims(dst);
    const int n = static_cast<int>(x.size());
    const int onednn_axis = layout::to_onednn_axis(caller_axis, n, dst.layout);
    const auto alg = log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate;
    const SoftmaxAttrs attrs{caller_axis, log};
    const KeyText key = key_text("softmax", "bwd", attrs);
    Handler handler(scope, softmax_op(log), name, key.name, key.suffix, x);
    handler.sign(OpKind::softmax_backward);
    sign_attrs(handler, attrs);
    // The axis as oneDNN counts it: the caller's axis depends on the layout
    // label, which the bytes' arrangement does not show (a channels-last
    // tensor may be stored channels-first).
    handler.sign(onednn_axis);
    sign_input_layout(handler, dst, DNNL_ARG_DST);
    if (dst.dtype != MKC_DTYPE_F32) require_bf16_kernels(softmax_backward_op(log));
    return handler.acquire_primitive<PrimitiveEntry>([&] {
        dnnl::softmax_forward::primitive_desc hint(cpu_engine(), dnnl::prop_kind::forward_training,
                                                   alg, dst.desc, dst.desc, onednn_axis,
                                                   user_scratchpad_attr());
        dnnl::softmax_backward::primitive_desc pd(cpu_engine(), alg, dst.desc, dst.desc,
                                                  dst.desc, onednn_axis, hint,
                                                  user_scratchpad_attr());
        auto e = std::make_shared<PrimitiveEntry>();
        e->primitive = dnnl::softmax_backward(pd);
        e->set_args(pd, {DNNL_ARG_DST, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC});
        return e;
    });
}

} // namespace

ValueDesc SoftmaxBackwardOp::infer(const Attrs &attrs, const ValueDesc &dst,
                                   const ValueDesc &diff_dst) {
    check_softmax_backward(attrs, dst, diff_dst);
    return dst; // the gradient is laid out as dst
}

Prepared SoftmaxBackwardOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                                    const ValueDesc &dst, const ValueDesc &diff_dst) {
    const int caller_axis = check_softmax_backward(attrs, dst, diff_dst);
    auto entry = prepare_softmax_backward(scope, caller_axis, attrs.log, name, dst);
    return {entry,
            {dst.desc, entry->arg_desc(DNNL_ARG_DIFF_DST)},
            {arranged_as(dst, entry->arg_desc(DNNL_ARG_DIFF_SRC))},
            {DNNL_ARG_DST, DNNL_ARG_DIFF_DST},
            {DNNL_ARG_DIFF_SRC}};
}

void SoftmaxBackwardOp::run(const CacheScope &scope, PrimitiveEntry &entry,
                            const Buffers &buffers) {
    run_bound(scope, entry, buffers, {DNNL_ARG_DST, DNNL_ARG_DIFF_DST}, {DNNL_ARG_DIFF_SRC});
}

void softmax_backward(const CacheScope &scope, int axis, bool log, const char *name,
                      const Tensor &dst, const Tensor &diff_dst, mkc_tensor **diff_src) {
    const int caller_axis = check_softmax_backward(SoftmaxAttrs{axis, log}, dst, diff_dst);
    auto entry = prepare_softmax_backward(scope, caller_axis, log, name, dst);
    Handler::run_two_inputs(scope, *entry, DNNL_ARG_DST, dst, DNNL_ARG_DIFF_DST, diff_dst,
                            DNNL_ARG_DIFF_SRC, diff_src, dst.layout, softmax_backward_op(log));
}

} // namespace mkc::ops
