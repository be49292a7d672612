// softmax / log_softmax along any axis, on the input's own layout.
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
struct SoftmaxEntry : PrimitiveEntry {
    dnnl::softmax_forward::primitive_desc pd;
};

// A softmax's attributes: the axis (also the key's suffix) and whether it
// is a log-softmax.
struct SoftmaxAttrs {
    int axis;
    bool log;
    template <typename V>
    void each(V &v) const {
        v.in_suffix("axis", axis);
        v.field("log", log);
    }
};

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


std::shared_ptr<SoftmaxEntry> acquire_softmax(const CacheScope &scope, int axis, bool log,
                                              const char *name, const Tensor &src,
                                              BlobCache::HitTicket &ticket, bool &hit) {
    const char *op = log ? "log_softmax" : "softmax";
    require(src.dtype == MKC_DTYPE_F32, op, ": src must be float32");
    const Dims &x = onednn_dims(src);
    const int n = static_cast<int>(x.size());
    require(axis >= -n && axis < n, op, ": axis ", axis, " is out of range for rank ", n);
    const int caller_axis = axis < 0 ? axis + n : axis;
    const int onednn_axis = layout::to_onednn_axis(caller_axis, n, src.layout);
    const SoftmaxAttrs attrs{caller_axis, log};
    const KeyText key = key_text("softmax", "", attrs);
    Handler handler(scope, op, name, key.name, key.suffix, x);
    handler.sign(OpKind::softmax);
    sign_attrs(handler, attrs); // with the layout signed below, the oneDNN axis
    handler.sign_layout(src, DNNL_ARG_SRC);
    auto entry = handler.acquire_primitive<SoftmaxEntry>([&] {
        auto e = std::make_shared<SoftmaxEntry>();
        e->pd = dnnl::softmax_forward::primitive_desc(
            cpu_engine(), dnnl::prop_kind::forward_inference,
            log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, src.desc,
            src.desc, onednn_axis, user_scratchpad_attr());
        e->primitive = dnnl::softmax_forward(e->pd);
        e->set_args(e->pd, {DNNL_ARG_SRC, DNNL_ARG_DST});
        return e;
    });
    handler.report_hit(ticket, hit);
    return entry;
}

} // namespace

void softmax(const CacheScope &scope, int axis, bool log, const char *name, const Tensor &src,
             mkc_tensor **dst) {
    // A call this thread made before, whose entry the cache still holds and
    // whose src is laid out as then, skips the checks, key and lookup.
    ThreadState &state = *scope.state;
    const std::shared_ptr<void> blob = remembered_entry<SoftmaxEntry>(
        state, scope, SoftmaxCall(SoftmaxAttrs{axis, log}, name, src), name,
        [&](const SoftmaxEntry &e) { return e.takes_as_is(src, DNNL_ARG_SRC); },
        [&](BlobCache::HitTicket &ticket, bool &hit) {
            return acquire_softmax(scope, axis, log, name, src, ticket, hit);
        });
    Handler::run_src_dst(scope, *static_cast<SoftmaxEntry *>(blob.get()), src, dst, src.layout,
                         log ? "log_softmax" : "softmax");
}

} // namespace mkc::ops

namespace mkc::ops {

void softmax_backward(const CacheScope &scope, int axis, bool log, const char *name,
                      const Tensor &dst, const Tensor &diff_dst, mkc_tensor **diff_src) {
    const char *op = log ? "log_softmax_backward" : "softmax_backward";
    require(dst.dtype == MKC_DTYPE_F32 && diff_dst.dtype == MKC_DTYPE_F32, op,
            ": dst and diff_dst must be float32");
    if (!(diff_dst.dims == dst.dims && diff_dst.layout == dst.layout))
        fail(MKC_STATUS_INVALID_ARGUMENT, op,
             ": diff_dst must have dst's shape ", shape_text(caller_dims(dst)), ", got ",
             shape_text(caller_dims(diff_dst)));
    const Dims &x = onednn_dims(dst);
    const int n = static_cast<int>(x.size());
    require(axis >= -n && axis < n, op, ": axis ", axis, " is out of range for rank ", n);
    const int caller_axis = axis < 0 ? axis + n : axis;
    const int onednn_axis = layout::to_onednn_axis(caller_axis, n, dst.layout);
    const auto alg = log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate;
    const SoftmaxAttrs attrs{caller_axis, log};
    const KeyText key = key_text("softmax", "bwd", attrs);
    Handler handler(scope, log ? "log_softmax" : "softmax", name, key.name, key.suffix, x);
    handler.sign(OpKind::softmax_backward);
    sign_attrs(handler, attrs); // with the layout signed below, the oneDNN axis
    handler.sign_layout(dst, DNNL_ARG_DST);
    auto entry = handler.acquire_primitive<PrimitiveEntry>([&] {
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
    Handler::run_two_inputs(scope, *entry, DNNL_ARG_DST, dst, DNNL_ARG_DIFF_DST, diff_dst,
                            DNNL_ARG_DIFF_SRC, diff_src, dst.layout, op);
}

} // namespace mkc::ops
