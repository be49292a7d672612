// LRN (local response normalisation) across channels, forward and backward.
//
// The window of channel c runs over channels c - (size-1)/2 .. c + size/2
// (clipped at the edges), `size` channels as ONNX's LRN: centred for an odd
// size, reaching one channel further up than down for an even one.
// oneDNN's LRN centres its window, and so sums only size - 1 channels for
// an even size: those run on a kernel of our own (WindowLrnEntry).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "common/engine.hpp"
#include "common/error.hpp"
#include "handler/handler.hpp"
#include "ops/attrs.hpp"
#include "ops/call_words.hpp"
#include "keys/keys.hpp"
#include "ops/lrn.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

using tag = dnnl::memory::format_tag;
const auto f32 = dnnl::memory::data_type::f32;

struct LrnEntry : PrimitiveEntry {
    std::atomic<bool> transferred{false}; // training: left for the grad op
};

template <typename V>
const char *check_lrn(const mkc_lrn_params &p, const V &src, const char *op) {
    require(src.dtype == MKC_DTYPE_F32, op, ": src must be float32, got ", dtype_name(src.dtype));
    require(src.dims.size() >= 3 && src.dims.size() <= 5, op,
            ": src must have rank 3..5 (N, C, ...), got ", src.dims.size());
    require(p.size >= 1 && p.size <= 1 << 20, op, ": size must be >= 1, got ", p.size);
    require(p.k > 0.f, op, ": k must be > 0");
    return op;
}

// The default name of an unnamed call (valid until the thread's next call).
const char *default_name(const LrnAttrs &attrs) { return default_attrs_name("lrn", attrs); }

// ------------------------------------------------------------ even sizes

// An even window's LRN: its forward (SRC -> DST) or gradient (SRC,
// DIFF_DST -> DIFF_SRC), every argument plain in src's caller layout. Made
// for each call or prepare (it holds no primitive), run by window_lrn_run.
struct WindowLrnEntry : PrimitiveEntry {
    bool backward = false;
    int64_t size = 0;
    float alpha = 0, beta = 0, k = 0;
    // The elements seen as [outer, channels, inner] around the channel axis.
    int64_t outer = 1, channels = 1, inner = 1;
};

bool onednn_window(const mkc_lrn_params &p) { return p.size % 2 != 0; }

template <typename V>
std::shared_ptr<WindowLrnEntry> window_lrn_entry(const mkc_lrn_params &p, const V &src,
                                                 bool backward) {
    auto e = std::make_shared<WindowLrnEntry>();
    e->backward = backward;
    e->size = p.size;
    e->alpha = p.alpha;
    e->beta = p.beta;
    e->k = p.k;
    const Dims &d = src.dims; // N, C, spatial...
    int64_t spatial = 1;
    for (size_t i = 2; i < d.size(); ++i) spatial *= d[i];
    const bool channels_last = src.layout == MKC_LAYOUT_CHANNELS_LAST;
    e->outer = channels_last ? d[0] * spatial : d[0];
    e->channels = d[1];
    e->inner = channels_last ? 1 : spatial;
    const dnnl::memory::desc plain = layout::plain_desc(d, f32, src.layout);
    if (backward)
        e->set_args(
            {{DNNL_ARG_SRC, plain}, {DNNL_ARG_DIFF_DST, plain}, {DNNL_ARG_DIFF_SRC, plain}});
    else
        e->set_args({{DNNL_ARG_SRC, plain}, {DNNL_ARG_DST, plain}});
    return e;
}

// y = x / d^beta with d = k + alpha / size * (the window's sum of x^2); its
// gradient dx_j = dy_j / d_j^beta - 2 alpha beta / size * x_j * (the sum,
// over the channels c whose window holds j, of dy_c x_c / d_c^(beta+1)).
// Sums in double, one [outer, inner] line of channels at a time.
void window_lrn_run(const WindowLrnEntry &e, const float *x, const float *dy, float *out) {
    const int64_t C = e.channels, inner = e.inner;
    const int64_t down = (e.size - 1) / 2, up = e.size / 2;
    const double scaled_alpha = double(e.alpha) / double(e.size), beta = e.beta;
    std::vector<double> d(C), t(e.backward ? C : 0);
    for (int64_t o = 0; o < e.outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
            const int64_t base = o * C * inner + i;
            const auto at = [&](int64_t c) { return base + c * inner; };
            for (int64_t c = 0; c < C; ++c) {
                double sum = 0;
                for (int64_t w = std::max<int64_t>(0, c - down); w <= std::min(C - 1, c + up);
                     ++w) {
                    const double v = x[at(w)];
                    sum += v * v;
                }
                d[c] = double(e.k) + scaled_alpha * sum;
            }
            if (!e.backward) {
                for (int64_t c = 0; c < C; ++c)
                    out[at(c)] = static_cast<float>(x[at(c)] / std::pow(d[c], beta));
                continue;
            }
            for (int64_t c = 0; c < C; ++c)
                t[c] = double(dy[at(c)]) * x[at(c)] / std::pow(d[c], beta + 1);
            for (int64_t j = 0; j < C; ++j) {
                double spread = 0;
                for (int64_t c = std::max<int64_t>(0, j - up); c <= std::min(C - 1, j + down); ++c)
                    spread += t[c];
                out[at(j)] = static_cast<float>(double(dy[at(j)]) / std::pow(d[j], beta) -
                                                2 * scaled_alpha * beta * x[at(j)] * spread);
            }
        }
}

// The eager even-window call: its inputs converted to the plain layout
// where they are not in it, the result written (or converted) into *out.
void window_lrn_call(const CacheScope &scope, const WindowLrnEntry &e, const Tensor &src,
                     const Tensor *diff_dst, mkc_tensor **out, mkc_layout data_format,
                     const char *op) {
    std::unique_ptr<Tensor> x_holder, dy_holder;
    const Tensor &x = as_layout(scope, src, e.arg_desc(DNNL_ARG_SRC), x_holder);
    const Tensor *dy =
        diff_dst ? &as_layout(scope, *diff_dst, e.arg_desc(DNNL_ARG_DIFF_DST), dy_holder)
                 : nullptr;
    Handler::Output result = Handler::prepare_output(
        out, e, e.backward ? DNNL_ARG_DIFF_SRC : DNNL_ARG_DST, data_format, MKC_DTYPE_F32, op);
    window_lrn_run(e, static_cast<const float *>(x.data),
                   dy ? static_cast<const float *>(dy->data) : nullptr,
                   static_cast<float *>(result.data));
    Handler::finish_output(scope, result, out);
}

void sign_lrn(Handler &handler, const mkc_lrn_params &p, bool training) {
    handler.sign(OpKind::lrn);
    sign_attrs(handler, LrnAttrs(p, training));
}

template <typename V>
dnnl::lrn_forward::primitive_desc lrn_descriptor(const mkc_lrn_params &p, const V &src,
                                                 bool training) {
    return dnnl::lrn_forward::primitive_desc(
        cpu_engine(),
        training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
        dnnl::algorithm::lrn_across_channels, src.desc, src.desc, p.size, p.alpha, p.beta, p.k,
        user_scratchpad_attr());
}

template <typename V>
std::shared_ptr<LrnEntry> acquire_lrn(Handler &handler, const mkc_lrn_params &p, const V &src,
                                      bool training) {
    sign_lrn(handler, p, training);
    sign_input_layout(handler, src, DNNL_ARG_SRC);
    return handler.acquire_primitive<LrnEntry>([&] {
        auto e = std::make_shared<LrnEntry>();
        const auto pd = lrn_descriptor(p, src, training);
        e->primitive = dnnl::lrn_forward(pd);
        std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_DST};
        if (pd.workspace_desc().get_size() > 0) args.push_back(DNNL_ARG_WORKSPACE);
        e->set_args(pd, args);
        return e;
    });
}

// The forward's entry under `name` (or the attributes' default name). A
// training forward leaves its descriptor for the grad op (the workspace it
// recomputes), once per entry: see pooling.
template <typename V>
std::shared_ptr<LrnEntry> prepare_lrn(const CacheScope &scope, const LrnAttrs &attrs,
                                      const char *name, const V &src,
                                      BlobCache::HitTicket &ticket, bool &hit) {
    const bool named = name && name[0];
    Handler handler(scope, "lrn", name, named ? nullptr : default_name(attrs), nullptr,
                    src.dims);
    auto e = acquire_lrn(handler, attrs.p, src, attrs.training);
    handler.report_hit(ticket, hit);
    if (attrs.training && !e->transferred.exchange(true)) {
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

// Executes a forward entry on buffers; a training one writes its workspace
// into a new buffer, returned (null if it takes none).
std::shared_ptr<void> run_lrn_forward(const CacheScope &scope, PrimitiveEntry &entry,
                                      const void *src, void *dst) {
    std::shared_ptr<void> workspace;
    Handler::Execution exec(entry, scope);
    exec.raw(DNNL_ARG_SRC, const_cast<void *>(src)); // only read
    exec.output(DNNL_ARG_DST, dst);
    if (entry.has_arg(DNNL_ARG_WORKSPACE)) {
        workspace = allocate(entry.arg_desc(DNNL_ARG_WORKSPACE).get_size(), false);
        exec.raw(DNNL_ARG_WORKSPACE, workspace.get());
    }
    exec.run();
    return workspace;
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

ValueDesc LrnOp::infer(const Attrs &attrs, const ValueDesc &src) {
    check_lrn(attrs.p, src, "lrn");
    const mkc_layout data_format =
        data_format_of(attrs.p.data_format, src.layout, static_cast<int>(src.dims.size()));
    if (!onednn_window(attrs.p)) // plain in src's caller layout
        return {MKC_DTYPE_F32, data_format, src.dims,
                layout::plain_desc(src.dims, f32, src.layout)};
    return {MKC_DTYPE_F32, data_format, src.dims, src.desc}; // arranged as src
}

Prepared LrnOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                        const ValueDesc &src) {
    check_lrn(attrs.p, src, "lrn");
    if (!onednn_window(attrs.p)) {
        auto e = window_lrn_entry(attrs.p, src, false);
        const mkc_layout data_format = layout::resolve(*scope.state, attrs.p.data_format,
                                                       static_cast<int>(src.dims.size()));
        const dnnl::memory::desc &plain = e->arg_desc(DNNL_ARG_SRC);
        return {e, {plain}, {{MKC_DTYPE_F32, data_format, src.dims, plain}}};
    }
    BlobCache::HitTicket ticket;
    bool hit = false;
    auto entry = prepare_lrn(scope, attrs, name, src, ticket, hit);
    const mkc_layout data_format =
        layout::resolve(*scope.state, attrs.p.data_format, static_cast<int>(src.dims.size()));
    Prepared out{entry,
                 {entry->arg_desc(DNNL_ARG_SRC)},
                 {{MKC_DTYPE_F32, data_format, src.dims, entry->arg_desc(DNNL_ARG_DST)}}};
    if (!entry->has_arg(DNNL_ARG_WORKSPACE)) { // a training forward's workspace: run()'s
        out.in_args = {DNNL_ARG_SRC};
        out.out_args = {DNNL_ARG_DST};
    }
    return out;
}

void LrnOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    if (const auto *e = dynamic_cast<const WindowLrnEntry *>(&entry)) {
        window_lrn_run(*e, static_cast<const float *>(buffers.in[0]), nullptr,
                       static_cast<float *>(buffers.out[0]));
        return;
    }
    run_lrn_forward(scope, entry, buffers.in[0], buffers.out[0]);
}

void lrn(const CacheScope &scope, const mkc_lrn_params &p, const Tensor &src, mkc_tensor **dst) {
    const char *op = "lrn";
    ThreadState &state = *scope.state;
    if (!onednn_window(p)) {
        check_lrn(p, src, op);
        const mkc_layout data_format =
            layout::resolve(state, p.data_format, static_cast<int>(src.dims.size()));
        window_lrn_call(scope, *window_lrn_entry(p, src, false), src, nullptr, dst, data_format,
                        op);
        layout::set_target(state, data_format);
        return;
    }
    // An inference call this thread made before, whose entry the cache still
    // holds and whose src is laid out as then, skips the checks, key and
    // lookup. A training call leaves the descriptor for the grad op there.
    const std::shared_ptr<void> blob = remembered_inference_entry<LrnEntry>(
        p.training, state, scope, LrnCall(p, src), p.name,
        [&](const LrnEntry &e) { return e.takes_as_is(src, DNNL_ARG_SRC); },
        [&](BlobCache::HitTicket &ticket, bool &hit) {
            check_lrn(p, src, op);
            return prepare_lrn(scope, LrnAttrs(p, p.training != 0), p.name, src, ticket, hit);
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
    } else {
        Handler::run_src_dst(scope, entry, src, dst, data_format, op);
    }
    layout::set_target(state, data_format);
}

namespace {

template <typename V>
const char *check_lrn_backward(const mkc_lrn_params &p, const V &src, const V &diff_dst) {
    const char *op = check_lrn(p, src, "lrn_backward");
    require(diff_dst.dtype == MKC_DTYPE_F32 && diff_dst.dims == src.dims, op,
            ": diff_dst must be float32 with src's shape");
    return op;
}

// The gradient's name: `name`, or the training forward's default.
const char *gradient_name(const mkc_lrn_params &p, const char *name) {
    return name && name[0] ? name : default_name(LrnAttrs(p, true));
}

// oneDNN 3.2 crashes generating its LRN gradient for dense channels-last
// 4-D data (the avx512 nhwc kernel) when the window holds one channel (size
// 1; even sizes, where it would round down, do not reach it). Such a
// gradient is prepared on plain channels-first bytes instead: its inputs are
// converted as any input in another arrangement, and diff_src comes out
// channels-first (labelled data_format as always). Only an N x 1 x 1 x 1
// src is both, and refused. oneDNN picks that kernel by src's exact strides
// (memory::desc's == also equates strides of size-1 dims, so it cannot
// tell).
template <typename V>
bool gradient_mishandles(const mkc_lrn_params &p, const V &src) {
    if (p.size != 1 || src.dims.size() != 4 ||
        src.desc.get_format_kind() != dnnl::memory::format_kind::blocked ||
        src.desc.get_inner_nblks() != 0)
        return false;
    const Dims &d = src.dims; // N, C, H, W
    return src.desc.get_strides() == Dims{d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
}

// src's description as the gradient reads it where it mishandles src's own;
// refuses the one shape channels-first does not help.
template <typename V>
ValueDesc channels_first(const mkc_lrn_params &p, const V &src) {
    ValueDesc v{src.dtype, src.layout, src.dims,
                layout::plain_desc(src.dims, f32, MKC_LAYOUT_CHANNELS_FIRST)};
    require(!gradient_mishandles(p, v), "lrn_backward: size ", p.size,
            " is not supported for a src of one channel and one pixel (oneDNN 3.2 crashes on it)");
    return v;
}

// The gradient's entry, its primitive hinted by the descriptor the training
// forward left (if it did, for src's arrangement).
template <typename V>
std::shared_ptr<PrimitiveEntry> prepare_lrn_backward(const CacheScope &scope,
                                                     const mkc_lrn_params &p, const char *name,
                                                     const V &src) {
    if (gradient_mishandles(p, src))
        return prepare_lrn_backward(scope, p, name, channels_first(p, src));
    Handler forward(scope, "lrn", name, name, nullptr, src.dims);
    sign_lrn(forward, p, true);
    std::shared_ptr<Transfer> t = forward.find_transfer();

    Handler handler(scope, "lrn", name, name, "bwd", src.dims);
    handler.sign(OpKind::lrn_backward);
    sign_attrs(handler, LrnAttrs(p, true)); // the training forward's
    sign_input_layout(handler, src, DNNL_ARG_SRC);
    return handler.acquire_primitive<PrimitiveEntry>([&] {
        // A transfer is found by the attributes and dims alone: a forward
        // that read src in another arrangement hints no primitive for this
        // one (oneDNN refuses it, or its workspace differs).
        const LrnEntry *left = t ? static_cast<const LrnEntry *>(t->forward.get()) : nullptr;
        const auto hint = left && left->arg_desc(DNNL_ARG_SRC) == src.desc
                              ? descriptor_of<dnnl::lrn_forward::primitive_desc>(left->primitive)
                              : lrn_descriptor(p, src, true);
        dnnl::lrn_backward::primitive_desc pd(cpu_engine(), dnnl::algorithm::lrn_across_channels,
                                              src.desc, hint.dst_desc(), src.desc, p.size,
                                              p.alpha, p.beta, p.k, hint, user_scratchpad_attr());
        auto e = std::make_shared<PrimitiveEntry>();
        e->primitive = dnnl::lrn_backward(pd);
        std::vector<int> args = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC};
        // The gradient's own: oneDNN's reference one takes no workspace,
        // even when the forward it is hinted with (a jit one) writes one.
        if (pd.workspace_desc().get_size() > 0) args.push_back(DNNL_ARG_WORKSPACE);
        e->set_args(pd, args);
        return e;
    });
}

// The training forward a gradient's workspace is computed with (this
// thread's, or the program's, under the gradient's name).
template <typename V>
std::shared_ptr<PrimitiveEntry> gradient_forward(const CacheScope &scope, const mkc_lrn_params &p,
                                                 const char *name, const V &src) {
    if (gradient_mishandles(p, src)) // as the gradient reads src
        return gradient_forward(scope, p, name, channels_first(p, src));
    Handler again(scope, "lrn", name, name, nullptr, src.dims);
    return acquire_lrn(again, p, src, true);
}

// What LrnBackwardOp::prepare hands out: the gradient's entry and, when it
// takes a workspace, the training forward's that computes it (each shared
// with the cache). Itself in no cache.
struct LrnGradient : PrimitiveEntry {
    std::shared_ptr<PrimitiveEntry> backward, forward;
};

} // namespace

void lrn_backward(const CacheScope &scope, const mkc_lrn_params &p, const Tensor &src,
                  const Tensor &diff_dst, mkc_tensor **diff_src) {
    const char *op = check_lrn_backward(p, src, diff_dst);
    const mkc_layout data_format =
        layout::resolve(p.data_format, static_cast<int>(src.dims.size()));
    if (!onednn_window(p)) {
        window_lrn_call(scope, *window_lrn_entry(p, src, true), src, &diff_dst, diff_src,
                        data_format, op);
        layout::set_target(data_format);
        return;
    }
    const char *name = gradient_name(p, p.name);
    auto entry = prepare_lrn_backward(scope, p, name, src);
    const auto workspace = Handler::workspace_for(
        scope, *entry, src, [&] { return gradient_forward(scope, p, name, src); }, op);
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

ValueDesc LrnBackwardOp::infer(const Attrs &attrs, const ValueDesc &src,
                               const ValueDesc &diff_dst) {
    check_lrn_backward(attrs.p, src, diff_dst);
    const mkc_layout data_format =
        data_format_of(attrs.p.data_format, src.layout, static_cast<int>(src.dims.size()));
    // Arranged as src, unless the gradient reads it channels-first (or,
    // for an even window, plain in src's caller layout).
    if (!onednn_window(attrs.p))
        return {MKC_DTYPE_F32, data_format, src.dims,
                layout::plain_desc(src.dims, f32, src.layout)};
    return {MKC_DTYPE_F32, data_format, src.dims,
            gradient_mishandles(attrs.p, src) ? channels_first(attrs.p, src).desc : src.desc};
}

Prepared LrnBackwardOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                                const ValueDesc &src, const ValueDesc &diff_dst) {
    const char *op = check_lrn_backward(attrs.p, src, diff_dst);
    const mkc_layout data_format =
        layout::resolve(*scope.state, attrs.p.data_format, static_cast<int>(src.dims.size()));
    if (!onednn_window(attrs.p)) {
        auto e = window_lrn_entry(attrs.p, src, true);
        const dnnl::memory::desc &plain = e->arg_desc(DNNL_ARG_SRC);
        return {e, {plain, plain}, {{MKC_DTYPE_F32, data_format, src.dims, plain}}};
    }
    name = gradient_name(attrs.p, name);
    auto plan = std::make_shared<LrnGradient>();
    plan->backward = prepare_lrn_backward(scope, attrs.p, name, src);
    const PrimitiveEntry &bwd = *plan->backward;
    if (bwd.has_arg(DNNL_ARG_WORKSPACE)) {
        plan->forward = gradient_forward(scope, attrs.p, name, src);
        require(plan->forward->arg_desc(DNNL_ARG_WORKSPACE) == bwd.arg_desc(DNNL_ARG_WORKSPACE),
                op, ": internal: the forward's workspace layout does not match the backward's");
    }
    return {plan,
            {bwd.arg_desc(DNNL_ARG_SRC), bwd.arg_desc(DNNL_ARG_DIFF_DST)},
            {{MKC_DTYPE_F32, data_format, src.dims, bwd.arg_desc(DNNL_ARG_DIFF_SRC)}}};
}

void LrnBackwardOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    if (const auto *e = dynamic_cast<const WindowLrnEntry *>(&entry)) {
        window_lrn_run(*e, static_cast<const float *>(buffers.in[0]),
                       static_cast<const float *>(buffers.in[1]),
                       static_cast<float *>(buffers.out[0]));
        return;
    }
    auto &plan = static_cast<LrnGradient &>(entry);
    std::shared_ptr<void> workspace;
    if (plan.forward) {
        auto scratch_dst = allocate(plan.forward->arg_desc(DNNL_ARG_DST).get_size(), false);
        workspace = run_lrn_forward(scope, *plan.forward, buffers.in[0], scratch_dst.get());
    }
    Handler::Execution exec(*plan.backward, scope);
    // The inputs are only read.
    exec.raw(DNNL_ARG_SRC, const_cast<void *>(buffers.in[0]));
    exec.raw(DNNL_ARG_DIFF_DST, const_cast<void *>(buffers.in[1]));
    if (workspace) exec.raw(DNNL_ARG_WORKSPACE, workspace.get());
    exec.output(DNNL_ARG_DIFF_SRC, buffers.out[0]);
    exec.run();
}

} // namespace mkc::ops
