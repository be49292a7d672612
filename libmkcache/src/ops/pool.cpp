// Max / average pooling over 2-D (NCHW/NHWC) and 3-D (NCDHW/NDHWC) inputs,
// global pooling and ceil mode (averages counting padding included: see
// Rescale). Runs on the input's layout (a blocked conv
// output stays blocked: oneDNN's fastest case).
//
// The eager calls and the phases (ops/pool.hpp) share the checks and the
// entries: templates over the value type (a tensor or a ValueDesc).
#include <algorithm>
#include <atomic>
#include <initializer_list>
#include <memory>
#include <mutex>
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
#include "ops/pool.hpp"
#include "ops/window_bounds.hpp"

namespace mkc::ops {

namespace {

// ceil_mode with the padding counted in the average: as PyTorch and ONNX,
// a window reaching past the end padding divides by the cells it covers up
// to that end (input and padding), not by the kernel's size. oneDNN knows
// only the kernel's size, so the primitive runs with the end padding
// stretched over the ceil-mode cells and each dim's last output slice
// (the only window that reaches past the padding) is then rescaled by
// kernel / covered, in place (a corner takes each of its dims' factors).
// The gradient scales diff_dst's slices the same way before the primitive
// spreads it, dividing by the kernel's size.
using Rescale = std::vector<std::shared_ptr<PrimitiveEntry>>;

struct PoolEntry : PrimitiveEntry {
    std::atomic<bool> transferred{false}; // training: left for the grad op
    Rescale rescale;                      // of dst
};

struct PoolBackwardEntry : PrimitiveEntry {
    // The training forward whose workspace (max pooling's indices) a phase
    // run computes first; set once, by the first prepare. The eager call
    // gets it through the cache on every call instead.
    std::once_flag forward_once;
    std::shared_ptr<PrimitiveEntry> forward;
    Rescale rescale; // of diff_dst
};

const char *pool_name(mkc_pool_kind kind) {
    switch (kind) {
    case MKC_POOL_MAX: return "max_pool";
    case MKC_POOL_AVG_INCLUDE_PAD: return "avg_pool";
    case MKC_POOL_AVG_EXCLUDE_PAD: return "avg_pool_exclude_pad";
    default: break;
    }
    fail(MKC_STATUS_INVALID_ARGUMENT, "pool: unsupported kind ", static_cast<int>(kind));
}

} // namespace

const char *pool_kind_name(mkc_pool_kind kind) { return pool_name(kind); }

namespace {

dnnl::algorithm pool_algorithm(mkc_pool_kind kind) {
    switch (kind) {
    case MKC_POOL_MAX: return dnnl::algorithm::pooling_max;
    case MKC_POOL_AVG_INCLUDE_PAD: return dnnl::algorithm::pooling_avg_include_padding;
    default: return dnnl::algorithm::pooling_avg_exclude_padding;
    }
}

} // namespace

namespace {

// data_format with TARGET read as `target`: the thread's target layout for
// a call, src's own layout for infer (which has no thread).
mkc_layout data_format_of(mkc_layout requested, mkc_layout target, int ndims) {
    return layout::resolve(requested == MKC_LAYOUT_TARGET ? target : requested, ndims);
}

// Everything pooling derives from its parameters and src.
struct PoolGeometry {
    const char *op;
    int k;
    mkc_layout data_format;
    Dims x, y, kernel, stride, pb, pe;
    Dims dilation; // oneDNN's: 0 for dense
    // Per dim, the cells the last window covers up to the caller's end
    // padding when ceil mode takes it past that (0: it does not, or the
    // padding is not counted): see Rescale.
    Dims last_covered;
    const char *default_name = "";
};

// The checks of every call but the inference forward's hit (`target`: what
// a TARGET data_format stands for).
template <typename V>
PoolGeometry pool_geometry(const mkc_pool_params &p, const V &src, mkc_layout target) {
    PoolGeometry g;
    const char *op = g.op = pool_name(p.kind);
    require_float_src(op, "src", src.dtype);
    g.x = onednn_dims(src);
    const Dims &x = g.x;
    const int rank = static_cast<int>(x.size());
    require(rank == 4 || rank == 5, op, ": src must be 4-D (N,C,H,W) or 5-D (N,C,D,H,W), got rank ",
            rank);
    const int k = g.k = rank - 2;
    g.data_format = data_format_of(p.data_format, target, rank);
    Dims kernel(k), stride(k), pb(k), pe(k), dilation(k, 0), extent(k), last_covered(k, 0),
        y = {x[0], x[1]};
    for (int i = 0; i < k; ++i) {
        const int64_t in = x[2 + i];
        int64_t d = 1;
        if (p.global) {
            kernel[i] = in;
            stride[i] = 1;
            pb[i] = pe[i] = 0;
        } else {
            kernel[i] = p.kernel[i];
            stride[i] = p.stride[i];
            d = p.dilation[i];
            pb[i] = p.pad_begin[i];
            pe[i] = p.pad_end[i];
            require(kernel[i] >= 1 && kernel[i] <= (int64_t(1) << 30), op,
                    ": kernel must be >= 1, got ", kernel[i]);
            require(stride[i] >= 1 && stride[i] <= (int64_t(1) << 30), op,
                    ": stride must be >= 1, got ", stride[i]);
            require(d >= 1 && d <= (int64_t(1) << 30), op, ": dilation must be >= 1, got ", d);
        }
        extent[i] = (kernel[i] - 1) * d + 1; // below 2^61: both factors are at most 2^30
        dilation[i] = d - 1;
        if (!p.global) {
            require(pb[i] >= 0 && pe[i] >= 0, op, ": padding must be >= 0");
            require(pb[i] < extent[i] && pe[i] < extent[i], op, ": padding (", pb[i], ", ",
                    pe[i], ") must be smaller than the kernel's extent (", extent[i], ")");
        }
        const int64_t span = in + pb[i] + pe[i] - extent[i];
        require(span >= 0, op, ": kernel (extent ", extent[i],
                ") is larger than the padded input (", in + pb[i] + pe[i],
                ") along spatial dim ", i);
        int64_t out = span / stride[i] + 1;
        if (p.ceil_mode && span % stride[i] != 0) {
            out += 1;
            // As PyTorch: the last window must start inside the input or the
            // begin padding.
            if ((out - 1) * stride[i] >= in + pb[i]) out -= 1;
            const int64_t overhang = (out - 1) * stride[i] + extent[i] - (in + pb[i] + pe[i]);
            if (overhang > 0) {
                // The taps of the last window up to the caller's end padding.
                const int64_t start = (out - 1) * stride[i] - pb[i];
                if (p.kind == MKC_POOL_AVG_INCLUDE_PAD)
                    last_covered[i] = std::min(kernel[i], (in + pe[i] - start + d - 1) / d);
                pe[i] += overhang;
            }
        }
        // A dense window always holds an input cell (its padding is
        // narrower than the kernel); a dilated one may fall between them.
        for (int64_t o = 0; d > 1 && o < out; ++o) {
            const int64_t start = o * stride[i] - pb[i];
            const int64_t first = start >= 0 ? 0 : (-start + d - 1) / d; // first tap inside
            require(first < kernel[i] && start + first * d < in, op, ": window ", o,
                    " along spatial dim ", i, " has no tap inside the input (dilation ", d,
                    ", padding ", pb[i], ")");
        }
        y.push_back(out);
    }
    check_result_dims(op, y, MKC_DTYPE_F32);
    WindowDim dims[3];
    for (int i = 0; i < k; ++i)
        dims[i] = {x[2 + i], pb[i], pe[i], stride[i], dilation[i] + 1, extent[i]};
    check_window_bounds(op, dims, k, x[1]);
    g.y = y;
    g.kernel = kernel;
    g.stride = stride;
    g.dilation = dilation;
    g.pb = pb;
    g.pe = pe;
    g.last_covered = last_covered;
    return g;
}

// The rescaling of `y` (dst, or diff_dst for the gradient) g asks for: one
// in-place scaling of each dim's last output slice.
Rescale rescale_entries(const PoolGeometry &g, const dnnl::memory::desc &y) {
    Rescale out;
    for (int i = 0; i < g.k; ++i) {
        if (g.last_covered[i] == 0) continue;
        Dims dims = g.y, offsets(g.y.size(), 0);
        dims[2 + i] = 1;
        offsets[2 + i] = g.y[2 + i] - 1;
        const dnnl::memory::desc slice = y.submemory_desc(dims, offsets);
        const float factor = static_cast<float>(static_cast<double>(g.kernel[i]) /
                                                static_cast<double>(g.last_covered[i]));
        dnnl::eltwise_forward::primitive_desc pd(
            cpu_engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_linear,
            slice, slice, factor, 0.f, user_scratchpad_attr());
        auto e = std::make_shared<PrimitiveEntry>();
        e->primitive = dnnl::eltwise_forward(pd);
        e->set_args(pd, {DNNL_ARG_SRC, DNNL_ARG_DST});
        out.push_back(std::move(e));
    }
    return out;
}

// Runs `rescale` on the bytes of the tensor it was built for, in place.
void run_rescale(const CacheScope &scope, const Rescale &rescale, void *data) {
    for (const auto &e : rescale) {
        Handler::Execution exec(*e, scope);
        exec.raw(DNNL_ARG_SRC, data);
        exec.raw(DNNL_ARG_DST, data);
        exec.run();
    }
}

// diff_dst as the gradient reads it: `data` itself, or (rescaled) a copy
// in `temporary`, converted from `have` when that is another layout.
const void *rescaled_diff_dst(const CacheScope &scope, const PoolBackwardEntry &e,
                              const dnnl::memory::desc &have, const void *data,
                              std::shared_ptr<void> &temporary) {
    if (e.rescale.empty()) return data;
    const dnnl::memory::desc &want = e.arg_desc(DNNL_ARG_DIFF_DST);
    temporary = allocate(want.get_size(), false);
    reorder(scope, have, data, want, temporary.get());
    run_rescale(scope, e.rescale, temporary.get());
    return temporary.get();
}

// The default name (valid until the thread's next call), formatted only
// when the caller gave none (`name`): every backward call computes the
// geometry.
void name_geometry(PoolGeometry &g, const mkc_pool_params &p, const char *name, bool training) {
    g.default_name =
        name && name[0] ? "" : default_attrs_name("pool", PoolAttrs(p, g.k + 2, training));
}

// The check of a gradient's diff_dst: src's dtype (the gradient is
// computed and returned in it) and the forward output's shape.
template <typename V>
void check_diff_dst(const PoolGeometry &g, const V &src, const V &diff_dst) {
    if (diff_dst.dtype != src.dtype)
        require_diff_dtype((std::string(g.op) + "_backward").c_str(), "diff_dst", diff_dst.dtype,
                           "src", src.dtype);
    if (!(diff_dst.dims == g.y))
        fail(MKC_STATUS_INVALID_ARGUMENT, g.op,
             "_backward: diff_dst must have the forward output's shape ", shape_text(g.y),
             " (oneDNN order), got ", shape_text(diff_dst.dims));
}

// The signature of the forward (a grad op signs the same, with training,
// to find what a training forward left it). The kernel and padding the
// global and ceil modes work out follow from these and src's dims (the key's).
void sign_forward(Handler &h, const mkc_pool_params &p, const PoolGeometry &g, bool training) {
    h.sign(OpKind::pooling);
    sign_attrs(h, PoolAttrs(p, g.k + 2, training));
}

template <typename V>
std::shared_ptr<PoolEntry> acquire_forward(Handler &h, const mkc_pool_params &p,
                                           const PoolGeometry &g, const V &src, bool training) {
    sign_forward(h, p, g, training);
    sign_input_layout(h, src, DNNL_ARG_SRC);
    if (src.dtype != MKC_DTYPE_F32) require_bf16_kernels(g.op);
    return h.acquire_primitive<PoolEntry>([&] {
        auto e = std::make_shared<PoolEntry>();
        const dnnl::memory::desc dst_md(g.y, onednn_float(src.dtype),
                                        dnnl::memory::format_tag::any);
        const auto pd = dnnl::pooling_forward::primitive_desc(
            cpu_engine(),
            training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
            pool_algorithm(p.kind), src.desc, dst_md, g.stride, g.kernel, g.dilation, g.pb,
            g.pe, user_scratchpad_attr());
        e->primitive = dnnl::pooling_forward(pd);
        std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_DST};
        if (pd.workspace_desc().get_size() > 0) args.push_back(DNNL_ARG_WORKSPACE);
        e->set_args(pd, args);
        e->rescale = rescale_entries(g, pd.dst_desc());
        return e;
    });
}

// A training forward's descriptor goes to the grad op through the cache
// (the indices of the maxima it recomputes: see Transfer). It is the same
// for every call: left once per entry, as storing it again would replace
// it and so make every thread's memos of recent hits forget theirs.
void leave_forward(Handler &h, const std::shared_ptr<PoolEntry> &entry) {
    if (entry->transferred.exchange(true)) return;
    auto t = std::make_shared<Transfer>();
    t->forward = entry;
    h.leave_transfer(t);
}

// The inference forward's entry through the handler (what the thread's
// argument cache skips).
template <typename V>
std::shared_ptr<PoolEntry> prepare_inference(const CacheScope &scope, const mkc_pool_params &p,
                                             const char *name, const V &src, mkc_layout target,
                                             BlobCache::HitTicket &ticket, bool &hit) {
    PoolGeometry g = pool_geometry(p, src, target);
    name_geometry(g, p, name, false);
    Handler handler(scope, g.op, name, g.default_name, nullptr, g.x);
    auto entry = acquire_forward(handler, p, g, src, false);
    handler.report_hit(ticket, hit);
    return entry;
}

// The gradient's entry (`name`: the caller's, else g's default), built on
// the training forward's descriptor when one was left for src's
// arrangement, else on one made here.
template <typename V>
std::shared_ptr<PoolBackwardEntry> prepare_backward(const CacheScope &scope,
                                                    const mkc_pool_params &p,
                                                    const PoolGeometry &g, const char *name,
                                                    const V &src) {
    Handler forward(scope, g.op, name, g.default_name, nullptr, g.x);
    sign_forward(forward, p, g, true);
    std::shared_ptr<Transfer> t = forward.find_transfer();

    if (src.dtype != MKC_DTYPE_F32)
        require_bf16_kernels((std::string(g.op) + "_backward").c_str());
    Handler handler(scope, g.op, name, g.default_name, "bwd", g.x);
    sign_forward(handler, p, g, true);
    handler.sign(OpKind::backward_data);
    sign_input_layout(handler, src, DNNL_ARG_SRC);
    return handler.acquire_primitive<PoolBackwardEntry>([&] {
        // A transfer is found by the attributes and dims alone: one a
        // forward on another arrangement of src left hints no primitive for
        // this one (its workspace differs).
        const PoolEntry *left = t ? static_cast<const PoolEntry *>(t->forward.get()) : nullptr;
        dnnl::pooling_forward::primitive_desc hint;
        if (left && left->arg_desc(DNNL_ARG_SRC) == src.desc)
            hint = descriptor_of<dnnl::pooling_forward::primitive_desc>(left->primitive);
        else hint = dnnl::pooling_forward::primitive_desc(
                 cpu_engine(), dnnl::prop_kind::forward_training, pool_algorithm(p.kind),
                 src.desc, dnnl::memory::desc(g.y, onednn_float(src.dtype),
                                              dnnl::memory::format_tag::any),
                 g.stride, g.kernel, g.dilation, g.pb, g.pe, user_scratchpad_attr());
        auto e = std::make_shared<PoolBackwardEntry>();
        dnnl::pooling_backward::primitive_desc pd(cpu_engine(), pool_algorithm(p.kind), src.desc,
                                                  hint.dst_desc(), g.stride, g.kernel,
                                                  g.dilation, g.pb, g.pe, hint,
                                                  user_scratchpad_attr());
        e->primitive = dnnl::pooling_backward(pd);
        std::vector<int> args = {DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC};
        if (hint.workspace_desc().get_size() > 0) args.push_back(DNNL_ARG_WORKSPACE);
        e->set_args(pd, args);
        e->rescale = rescale_entries(g, pd.diff_dst_desc());
        return e;
    });
}

// The message of a forward whose workspace is not the gradient's.
void check_workspace(const PrimitiveEntry &forward, const PrimitiveEntry &backward,
                     const char *op) {
    require(forward.arg_desc(DNNL_ARG_WORKSPACE) == backward.arg_desc(DNNL_ARG_WORKSPACE), op,
            "_backward: internal: the forward's workspace layout does not match the backward's");
}

// What the thread's argument cache knows an inference pooling by (with the
// name's text): src's type and shape, and the attributes. src's exact
// layout is checked against the entry's on a hit.
class PoolCall : public CallWords<2 + MKC_MAX_NDIMS + 5 + 4 * 3> {
public:
    PoolCall(const mkc_pool_params &p, const Tensor &src) {
        add(kind_word(OpKind::pooling) | src.dtype);
        add_dims(src.dims);
        seal(p.name);
        add_attrs(*this, PoolAttrs(p, static_cast<int>(src.dims.size()), false));
    }
};

} // namespace

ValueDesc PoolOp::infer(const Attrs &attrs, const ValueDesc &src) {
    const mkc_pool_params &p = attrs.p;
    // The inference call checks the layout first.
    if (!attrs.training)
        data_format_of(p.data_format, src.layout, static_cast<int>(src.dims.size()));
    const PoolGeometry g = pool_geometry(p, src, src.layout);
    return plain_value(src.dtype, g.data_format, g.y);
}

Prepared PoolOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                         const ValueDesc &src) {
    infer(attrs, src);
    PoolGeometry g = pool_geometry(attrs.p, src, scope.state->target_layout);
    name_geometry(g, attrs.p, name, attrs.training);
    Handler handler(scope, g.op, name, g.default_name, nullptr, g.x);
    auto entry = acquire_forward(handler, attrs.p, g, src, attrs.training);
    if (attrs.training) leave_forward(handler, entry);
    const dnnl::memory::desc &y = entry->arg_desc(DNNL_ARG_DST);
    return {entry, {src.desc}, {ValueDesc{src.dtype, g.data_format, y.get_dims(), y}}};
}

void PoolOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    // A training forward's workspace lives for this run only, as the eager
    // call's: the grad op computes its own.
    std::shared_ptr<void> workspace;
    {
        Handler::Execution exec(entry, scope);
        exec.raw(DNNL_ARG_SRC, const_cast<void *>(buffers.in[0])); // read only
        exec.output(DNNL_ARG_DST, buffers.out[0]);
        if (entry.has_arg(DNNL_ARG_WORKSPACE)) {
            workspace = allocate(entry.arg_desc(DNNL_ARG_WORKSPACE).get_size(), false);
            exec.raw(DNNL_ARG_WORKSPACE, workspace.get());
        }
        exec.run();
    }
    run_rescale(scope, static_cast<PoolEntry &>(entry).rescale, buffers.out[0]);
}

void pool(const CacheScope &scope, const mkc_pool_params &p, const Tensor &src, mkc_tensor **dst) {
    if (!p.training) {
        // Inference: a call this thread made before skips the geometry, the
        // default name, the signature and the key (mkc_pool_params reach
        // here checked only by the first call with these arguments).
        ThreadState &state = *scope.state;
        const mkc_layout data_format =
            layout::resolve(state, p.data_format, static_cast<int>(src.dims.size()));
        const std::shared_ptr<void> blob = remembered_entry<PoolEntry>(
            state, scope, PoolCall(p, src), p.name,
            [&](const PoolEntry &e) { return e.takes_as_is(src, DNNL_ARG_SRC); },
            [&](BlobCache::HitTicket &ticket, bool &hit) {
                return prepare_inference(scope, p, p.name, src, state.target_layout, ticket,
                                         hit);
            });
        auto &entry = *static_cast<PoolEntry *>(blob.get());
        if (entry.rescale.empty()) {
            Handler::run_src_dst(scope, entry, src, dst, data_format, pool_name(p.kind));
        } else {
            Handler::Output out = Handler::prepare_output(dst, entry, DNNL_ARG_DST, data_format,
                                                          src.dtype, pool_name(p.kind));
            {
                Handler::Execution exec(entry, scope);
                exec.input(DNNL_ARG_SRC, src);
                exec.output(DNNL_ARG_DST, out.data);
                exec.run();
            }
            run_rescale(scope, entry.rescale, out.data);
            Handler::finish_output(scope, out, dst);
        }
        layout::set_target(state, data_format);
        return;
    }
    PoolGeometry g = pool_geometry(p, src, layout::target());
    name_geometry(g, p, p.name, true);
    Handler handler(scope, g.op, p.name, g.default_name, nullptr, g.x);
    auto entry = acquire_forward(handler, p, g, src, true);
    {
        Handler::Output out = Handler::prepare_output(dst, *entry, DNNL_ARG_DST, g.data_format,
                                                      src.dtype, g.op);
        std::shared_ptr<void> workspace;
        Handler::run_training_forward(scope, *entry, src, out.data, workspace);
        run_rescale(scope, entry->rescale, out.data);
        Handler::finish_output(scope, out, dst);
    }
    leave_forward(handler, entry);
    layout::set_target(g.data_format);
}

ValueDesc PoolBackwardOp::infer(const Attrs &attrs, const ValueDesc &src,
                                const ValueDesc &diff_dst) {
    const PoolGeometry g = pool_geometry(attrs.p, src, src.layout); // the training forward's
    check_diff_dst(g, src, diff_dst);
    return plain_value(src.dtype, g.data_format, g.x);
}

Prepared PoolBackwardOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                                 const ValueDesc &src, const ValueDesc &diff_dst) {
    const mkc_pool_params &p = attrs.p;
    PoolGeometry g = pool_geometry(p, src, scope.state->target_layout);
    check_diff_dst(g, src, diff_dst);
    name_geometry(g, p, name, true);
    const char *key_name = name && name[0] ? name : g.default_name;
    auto entry = prepare_backward(scope, p, g, key_name, src);
    if (entry->has_arg(DNNL_ARG_WORKSPACE))
        std::call_once(entry->forward_once, [&] {
            Handler again(scope, g.op, key_name, g.default_name, nullptr, g.x);
            auto forward = acquire_forward(again, p, g, src, true);
            check_workspace(*forward, *entry, g.op);
            entry->forward = forward;
        });
    const dnnl::memory::desc &dx = entry->arg_desc(DNNL_ARG_DIFF_SRC);
    return {entry,
            {src.desc, entry->arg_desc(DNNL_ARG_DIFF_DST)},
            {ValueDesc{src.dtype, g.data_format, dx.get_dims(), dx}}};
}

void PoolBackwardOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    auto &e = static_cast<PoolBackwardEntry &>(entry);
    std::shared_ptr<void> workspace;
    if (e.has_arg(DNNL_ARG_WORKSPACE)) {
        // The indices of the maxima, from the training forward on src.
        PrimitiveEntry &forward = *e.forward;
        auto scratch_dst = allocate(forward.arg_desc(DNNL_ARG_DST).get_size(), false);
        workspace = allocate(forward.arg_desc(DNNL_ARG_WORKSPACE).get_size(), false);
        Handler::Execution exec(forward, scope);
        exec.raw(DNNL_ARG_SRC, const_cast<void *>(buffers.in[0])); // read only
        exec.output(DNNL_ARG_DST, scratch_dst.get());
        exec.raw(DNNL_ARG_WORKSPACE, workspace.get());
        exec.run();
    }
    std::shared_ptr<void> scaled;
    const void *dy = rescaled_diff_dst(scope, e, e.arg_desc(DNNL_ARG_DIFF_DST), buffers.in[1],
                                       scaled);
    Handler::Execution exec(e, scope);
    exec.raw(DNNL_ARG_DIFF_DST, const_cast<void *>(dy)); // read only
    if (workspace) exec.raw(DNNL_ARG_WORKSPACE, workspace.get());
    exec.output(DNNL_ARG_DIFF_SRC, buffers.out[0]);
    exec.run();
}

void pool_backward(const CacheScope &scope, const mkc_pool_params &p, const Tensor &src,
                   const Tensor &diff_dst, mkc_tensor **diff_src) {
    PoolGeometry g = pool_geometry(p, src, layout::target()); // the training forward's
    name_geometry(g, p, p.name, true);
    const std::string op = std::string(g.op) + "_backward";
    check_diff_dst(g, src, diff_dst);
    const char *name = p.name && p.name[0] ? p.name : g.default_name;
    auto entry = prepare_backward(scope, p, g, name, src);

    const auto workspace = Handler::workspace_for(
        scope, *entry, src,
        [&] {
            Handler again(scope, g.op, name, g.default_name, nullptr, g.x);
            return std::static_pointer_cast<PrimitiveEntry>(
                acquire_forward(again, p, g, src, true));
        },
        op.c_str());
    Handler::Output out = Handler::prepare_output(diff_src, *entry, DNNL_ARG_DIFF_SRC,
                                                  g.data_format, src.dtype, op.c_str());
    std::shared_ptr<void> scaled;
    const void *dy =
        rescaled_diff_dst(scope, *entry, diff_dst.desc, diff_dst.data, scaled);
    {
        Handler::Execution exec(*entry, scope);
        if (scaled) exec.raw(DNNL_ARG_DIFF_DST, const_cast<void *>(dy));
        else exec.input(DNNL_ARG_DIFF_DST, diff_dst);
        if (workspace) exec.raw(DNNL_ARG_WORKSPACE, workspace.get());
        exec.output(DNNL_ARG_DIFF_SRC, out.data);
        exec.run();
    }
    Handler::finish_output(scope, out, diff_src);
    layout::set_target(g.data_format);
}

} // namespace mkc::ops
