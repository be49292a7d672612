// LRN (local response normalisation) across channels, forward and backward.
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
const auto f32 = dnnl::memory::data_type::f32;

struct LrnEntry : PrimitiveEntry {
    dnnl::lrn_forward::primitive_desc pd;
    std::atomic<bool> transferred{false}; // training: left for the grad op
};

const char *check_lrn(const mkc_lrn_params &p, const Tensor &src, const char *op) {
    require(src.dtype == MKC_DTYPE_F32, op, ": src must be float32");
    require(src.dims.size() >= 3 && src.dims.size() <= 5, op,
            ": src must have rank 3..5 (N, C, ...), got ", src.dims.size());
    require(p.size >= 1 && p.size <= 1 << 20, op, ": size must be >= 1, got ", p.size);
    require(p.k > 0.f, op, ": k must be > 0");
    return op;
}

// An LRN's attributes; `training` set for the training forward and its
// grad op (which finds what it left under the same name).
struct LrnAttrs {
    LrnAttrs(const mkc_lrn_params &params, bool for_training)
        : p(params), training(for_training) {}
    const mkc_lrn_params &p;
    bool training;
    template <typename V>
    void each(V &v) const {
        v.field("size", p.size);
        v.field("a", p.alpha);
        v.field("b", p.beta);
        v.field("k", p.k);
        v.field("df", p.data_format);
        v.field("training", training);
    }
};

// The default name of an unnamed call (valid until the thread's next call).
const char *default_name(const LrnAttrs &attrs) { return default_attrs_name("lrn", attrs); }

void sign_lrn(Handler &handler, const mkc_lrn_params &p, bool training) {
    handler.sign(OpKind::lrn);
    sign_attrs(handler, LrnAttrs(p, training));
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
class LrnCall : public CallWords<7 + 1 + MKC_MAX_NDIMS> {
public:
    LrnCall(const mkc_lrn_params &p, const Tensor &src) {
        add(kind_word(OpKind::lrn) | int64_t(src.dtype) << 32 | src.layout);
        add_attrs(*this, LrnAttrs(p, p.training != 0));
        add_dims(src.dims);
        seal(p.name);
    }
};

} // namespace

void lrn(const CacheScope &scope, const mkc_lrn_params &p, const Tensor &src, mkc_tensor **dst) {
    const char *op = "lrn";
    ThreadState &state = *scope.state;
    std::optional<Handler> handler; // training: leaves the descriptor through it
    // An inference call this thread made before, whose entry the cache still
    // holds and whose src is laid out as then, skips the checks, key and
    // lookup.
    const std::shared_ptr<void> blob = remembered_inference_entry<LrnEntry>(
        p.training, state, scope, LrnCall(p, src), p.name,
        [&](const LrnEntry &e) { return e.takes_as_is(src, DNNL_ARG_SRC); },
        [&](BlobCache::HitTicket &ticket, bool &hit) {
            check_lrn(p, src, op);
            const bool named = p.name && p.name[0];
            handler.emplace(scope, op, p.name,
                            named ? nullptr : default_name(LrnAttrs(p, p.training != 0)), nullptr,
                            src.dims);
            auto e = acquire_lrn(*handler, p, src, p.training);
            handler->report_hit(ticket, hit);
            return e;
        });
    auto &entry = *static_cast<LrnEntry *>(blob.get());
    const mkc_layout data_format =
        layout::resolve(state, p.data_format, static_cast<int>(src.dims.size()));
    if (p.training) {
        Handler::Output out = Handler::prepare_output(dst, entry, DNNL_ARG_DST, data_format,
                                                      MKC_DTYPE_F32, op);
        std::shared_ptr<void> workspace;
        Handler::run_training_forward(scope, entry, src, out.data, workspace);
        Handler::finish_output(scope, out, dst);
        if (!entry.transferred.exchange(true)) {
            // The descriptor goes to the grad op (the workspace it
            // recomputes), once per entry: see pooling.
            auto t = std::make_shared<Transfer>();
            t->forward = std::shared_ptr<PrimitiveEntry>(blob, &entry);
            handler->leave_transfer(t);
        }
    } else {
        Handler::run_src_dst(scope, entry, src, dst, data_format, op);
    }
    layout::set_target(state, data_format);
}

void lrn_backward(const CacheScope &scope, const mkc_lrn_params &p, const Tensor &src,
                  const Tensor &diff_dst, mkc_tensor **diff_src) {
    const char *op = check_lrn(p, src, "lrn_backward");
    require(diff_dst.dtype == MKC_DTYPE_F32 && diff_dst.dims == src.dims, op,
            ": diff_dst must be float32 with src's shape");
    const mkc_layout data_format = layout::resolve(p.data_format, static_cast<int>(src.dims.size()));
    const LrnAttrs attrs(p, true); // the training forward's
    const char *name = p.name && p.name[0] ? p.name : default_name(attrs);

    Handler forward(scope, "lrn", name, name, nullptr, src.dims);
    sign_lrn(forward, p, true);
    std::shared_ptr<Transfer> t = forward.find_transfer();

    Handler handler(scope, "lrn", name, name, "bwd", src.dims);
    handler.sign(OpKind::lrn_backward);
    sign_attrs(handler, attrs);
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
    const auto workspace = Handler::workspace_for(
        scope, *entry, src,
        [&] {
            Handler again(scope, "lrn", name, name, nullptr,
                          src.dims); // this thread's training forward
            return std::static_pointer_cast<PrimitiveEntry>(acquire_lrn(again, p, src, true));
        },
        op);
    Handler::Output out = Handler::prepare_output(diff_src, *entry, DNNL_ARG_DIFF_SRC,
                                                  data_format, MKC_DTYPE_F32, op);
    {
        Handler::Execution exec(*entry, scope);
        exec.input(DNNL_ARG_SRC, src);
        exec.input(DNNL_ARG_DIFF_DST, diff_dst);
        if (workspace) exec.raw(DNNL_ARG_WORKSPACE, workspace.get());
        exec.output(DNNL_ARG_DIFF_SRC, out.data);
        exec.run();
    }
    Handler::finish_output(scope, out, diff_src);
    layout::set_target(data_format);
}

} // namespace mkc::ops
