// Binary element-wise ops with numpy broadcasting. oneDNN broadcasts only
// its second source, so: the operand with the output's shape becomes src0
// (swapping a and b when needed: sub and div then fix the order with a
// post-op), the other is viewed with size-1 dims in the output's oneDNN
// order, and when neither has the output's shape one side is expanded first.
#include <algorithm>
#include <cstring>
#include <string>

#include "common/cpu_features.hpp"
#include "common/engine.hpp"
#include "common/serial.hpp"
#include "common/error.hpp"
#include "common/handles.hpp"
#include "handler/handler.hpp"
#include "ops/attrs.hpp"
#include "ops/binary.hpp"
#include "ops/call_words.hpp"
#include "ops/float_dtype.hpp"
#include "keys/keys.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

struct BinaryEntry : PrimitiveEntry {
    // What the full path worked out for the call that built the entry, for
    // calls through the argument cache (BinaryCall: the same words give the
    // same answers). b is src0 (a and b swapped):
    bool swapped = false;
    // src1 is seen through a broadcast view (its bytes re-described with the
    // output's rank), which needs it plain, as `src1_plain` says; otherwise
    // it is taken as the primitive's own SRC_1 layout.
    bool src1_viewed = false;
    dnnl::memory::desc src1_plain = empty_desc();
    int64_t elements = 0; // src0's: built serially when small, and so run (SerialRegion)
};

// What the thread's argument cache knows a binary call by (with the name's
// text): the kind, both operands' dtypes, caller layouts and shapes. Their
// exact layouts are checked against the entry's on a hit.
class BinaryCall : public CallWords<3 + 2 * (1 + MKC_MAX_NDIMS)> {
public:
    BinaryCall(const BinaryAttrs &attrs, const char *name, const Tensor &a, const Tensor &b) {
        add(kind_word(OpKind::binary) | a.dtype << 8 | b.dtype);
        add_attrs(*this, attrs);
        add(int64_t(a.layout) << 8 | b.layout);
        add_dims(a.dims);
        add_dims(b.dims);
        seal(name);
    }
};

struct BinaryInfo {
    dnnl::algorithm alg;
    const char *name;
    const char *suffix; // the key's in-place suffix ("M" for elementwise mul)
    bool commutative;
    dnnl::algorithm mirrored; // b op' a == a op b (comparisons); else alg
};

// Comparisons used by the maximum/minimum gradients (1.0 where true).
// Kinds outside the public enum: reachable only from inside the library.
constexpr auto kGreater = static_cast<mkc_binary_kind>(1001);
constexpr auto kGreaterEqual = static_cast<mkc_binary_kind>(1002);

BinaryInfo binary_info(mkc_binary_kind kind) {
    using a = dnnl::algorithm;
    switch (kind) {
    case MKC_BINARY_ADD: return {a::binary_add, "add", "A", true, a::binary_add};
    case MKC_BINARY_SUB: return {a::binary_sub, "sub", "S", false, a::binary_sub};
    case MKC_BINARY_MUL: return {a::binary_mul, "mul", "M", true, a::binary_mul};
    case MKC_BINARY_DIV: return {a::binary_div, "div", "D", false, a::binary_div};
    case MKC_BINARY_MAX: return {a::binary_max, "maximum", "X", true, a::binary_max};
    case MKC_BINARY_MIN: return {a::binary_min, "minimum", "N", true, a::binary_min};
    default: break;
    }
    fail(MKC_STATUS_INVALID_ARGUMENT, "binary: unsupported kind ", static_cast<int>(kind));
}

// binary_info() for the public kinds and the internal comparisons alike.
BinaryInfo any_binary_info(mkc_binary_kind kind) {
    using a = dnnl::algorithm;
    if (kind == kGreater) return {a::binary_gt, "greater", "GT", false, a::binary_lt};
    if (kind == kGreaterEqual) return {a::binary_ge, "greater_equal", "GE", false, a::binary_le};
    return binary_info(kind);
}

} // namespace

// The comparisons are internal kinds (the gradients of maximum and minimum).
const char *binary_letter(mkc_binary_kind kind) {
    return kind == kGreater ? "GT" : kind == kGreaterEqual ? "GE" : binary_info(kind).suffix;
}
const char *binary_name(mkc_binary_kind kind) {
    return kind == kGreater        ? "greater"
           : kind == kGreaterEqual ? "greater_equal"
                                   : binary_info(kind).name;
}

namespace {

// Caller-order dims padded with leading 1s to rank n.
Dims padded(const Dims &caller, int n) {
    Dims out(n - caller.size(), 1);
    out.insert(out.end(), caller.begin(), caller.end());
    return out;
}

// Caller-order dims and strides -> the output layout's oneDNN order.
Dims permute_to_onednn(const Dims &v, mkc_layout layout) {
    return layout::to_onednn_order(v, layout);
}

// `t` seen as an n-D tensor in `out_layout`'s oneDNN order, with its own
// dims (some 1). Needs t to be plain in its own caller order; returns false
// if it is not (blocked), so the caller converts it first.
template <typename V>
bool broadcast_view(const V &t, int n, mkc_layout out_layout, dnnl::memory::desc &view) {
    const int r = static_cast<int>(t.dims.size());
    if (r == n && (t.layout == out_layout || n < 3)) {
        view = t.desc;
        return true;
    }
    if (!(t.desc == layout::plain_desc(t.dims, to_onednn(t.dtype), t.layout))) return false;
    const Dims cd = padded(caller_dims(t), n);
    Dims strides(n, 1);
    for (int i = n - 2; i >= 0; --i) strides[i] = strides[i + 1] * cd[i + 1];
    view = dnnl::memory::desc(permute_to_onednn(cd, out_layout), to_onednn(t.dtype),
                              permute_to_onednn(strides, out_layout));
    return true;
}

// The output's shape (caller order, rank n) and which operands have it.
struct BinaryShape {
    int n;
    Dims out;
    bool a_full, b_full;
};

// The checks of a call (made when its entry is looked up).
template <typename V>
BinaryShape check_binary(const BinaryInfo &info, const V &a, const V &b) {
    require_float_src(info.name, "a", a.dtype);
    require_same_float(info.name, "b", b.dtype, a.dtype);
    const Dims ca = caller_dims(a), cb = caller_dims(b);
    BinaryShape s;
    s.n = static_cast<int>(std::max(ca.size(), cb.size()));
    const int n = s.n;
    const Dims pa = padded(ca, n), pb = padded(cb, n);
    s.out.resize(n);
    for (int i = 0; i < n; ++i) {
        if (pa[i] == pb[i] || pb[i] == 1) s.out[i] = pa[i];
        else if (pa[i] == 1) s.out[i] = pb[i];
        else
            fail(MKC_STATUS_INVALID_ARGUMENT, info.name, ": shapes ", shape_text(ca), " (a) and ",
                 shape_text(cb), " (b) do not broadcast (dim ", i, ": ", pa[i], " vs ", pb[i],
                 ")");
    }
    check_result_dims(info.name, s.out, MKC_DTYPE_F32);
    s.a_full = pa == s.out && static_cast<int>(ca.size()) == n;
    s.b_full = pb == s.out && static_cast<int>(cb.size()) == n;
    return s;
}

// When neither operand has the output's shape, a is expanded to it first
// (zeros + a): the expanded value's caller layout.
template <typename V>
mkc_layout expanded_layout(const V &a, int n) {
    return static_cast<int>(a.dims.size()) == n ? a.layout : MKC_LAYOUT_CHANNELS_FIRST;
}

// The entry for src0 (the output's shape) op src1 seen through `view`;
// `swapped`: src0 is b.
template <typename V>
std::shared_ptr<BinaryEntry> build_binary(const CacheScope &scope, const BinaryInfo &info,
                                          mkc_binary_kind kind, const char *name, const V &src0,
                                          const V &src1, const dnnl::memory::desc &view,
                                          bool swapped, BlobCache::HitTicket &ticket, bool &hit) {
    const bool viewed = !(view == src1.desc);
    const SerialRegion serial(element_count(src0)); // built as it is run
    const BinaryAttrs attrs{kind};
    const KeyText key = key_text("binary", "", attrs);
    Handler handler(scope, info.name, name, key.name, key.suffix, onednn_dims(src0));
    handler.sign(OpKind::binary);
    sign_attrs(handler, attrs);
    handler.sign(swapped ? 1 : 0);
    sign_input_layout(handler, src0, DNNL_ARG_SRC_0);
    handler.sign_layout(view);
    if (src0.dtype != MKC_DTYPE_F32) require_bf16_kernels(info.name);
    // A viewed src1 is read as its plain bytes (src1_plain): [1, 4] and
    // [1, 1, 4] broadcast to one view, but are not read alike.
    if (viewed) handler.sign_layout(src1.desc);
    auto entry = handler.acquire_primitive<BinaryEntry>([&] {
        auto e = std::make_shared<BinaryEntry>();
        dnnl::primitive_attr attr = user_scratchpad_attr();
        if (swapped && !info.commutative && info.mirrored == info.alg) {
            // We computed b op a; turn it into a op b.
            dnnl::post_ops post;
            if (kind == MKC_BINARY_SUB) post.append_eltwise(dnnl::algorithm::eltwise_linear, -1.f, 0.f);
            else post.append_eltwise(dnnl::algorithm::eltwise_pow, 1.f, -1.f); // 1 / (b / a)
            attr.set_post_ops(post);
        }
        const auto pd = dnnl::binary::primitive_desc(
            cpu_engine(), swapped ? info.mirrored : info.alg, src0.desc, view, src0.desc, attr);
        e->primitive = dnnl::binary(pd);
        e->set_args(pd, {DNNL_ARG_SRC_0, DNNL_ARG_SRC_1, DNNL_ARG_DST});
        e->swapped = swapped;
        e->src1_viewed = viewed;
        if (viewed) e->src1_plain = src1.desc;
        e->elements = element_count(src0);
        return e;
    });
    handler.report_hit(ticket, hit);
    // Not one to repeat blindly if another call built the entry with other
    // operand roles (the signature covers swapped and the view, so this is
    // a safeguard).
    if (entry->swapped != swapped || entry->src1_viewed != viewed) hit = false;
    return entry;
}

void binary_with(const CacheScope &scope, const BinaryInfo &info, mkc_binary_kind kind,
                 const char *name, const Tensor &a, const Tensor &b, mkc_tensor **dst);

} // namespace

void binary(const CacheScope &scope, mkc_binary_kind kind, const char *name, const Tensor &a,
            const Tensor &b, mkc_tensor **dst) {
    binary_with(scope, binary_info(kind), kind, name, a, b, dst);
}

namespace {

// The operands as the primitive takes them for one call: src0 has the
// output's shape, src1 is broadcast; `expanded`/`src1_copy` hold tensors
// made for this call (then it does not go into the argument cache).
struct Operands {
    const Tensor *src0, *src1;
    std::unique_ptr<Tensor> expanded, src1_copy;
};

std::shared_ptr<BinaryEntry> acquire_binary(const CacheScope &scope, const BinaryInfo &info,
                                            mkc_binary_kind kind, const char *name, const Tensor &a,
                                            const Tensor &b, Operands &ops,
                                            BlobCache::HitTicket &ticket, bool &hit) {
    const BinaryShape s = check_binary(info, a, b);
    const int n = s.n;
    // src0 must have the output's shape; prefer a (so `a op= b` is in place).
    ops.src0 = &a;
    ops.src1 = &b;
    bool swapped = false;
    if (!s.a_full && s.b_full) {
        ops.src0 = &b;
        ops.src1 = &a;
        swapped = true;
    } else if (!s.a_full && !s.b_full) {
        // Expand a to the output's shape: zeros(out) + a.
        const mkc_layout lay = expanded_layout(a, n);
        const Dims od = layout::to_onednn_order(s.out, lay);
        auto zeros = make_owned_tensor(layout::plain_desc(od, to_onednn(a.dtype), lay), lay, a.dtype);
        std::memset(zeros->data, 0, zeros->desc.get_size());
        mkc_tensor *result = zeros.get();
        binary(scope, MKC_BINARY_ADD, nullptr, *zeros, a, &result);
        ops.expanded = std::move(zeros);
        ops.src0 = ops.expanded.get();
    }
    const Tensor &src0 = *ops.src0;

    dnnl::memory::desc view = empty_desc();
    if (!broadcast_view(*ops.src1, n, src0.layout, view)) {
        ops.src1 = &row_major(scope, *ops.src1, ops.src1_copy);
        broadcast_view(*ops.src1, n, src0.layout, view);
    }
    auto entry = build_binary(scope, info, kind, name, src0, *ops.src1, view, swapped, ticket, hit);
    // A call that made its own operands is not one to repeat blindly.
    if (ops.expanded || ops.src1_copy) hit = false;
    return entry;
}

void binary_with(const CacheScope &scope, const BinaryInfo &info, mkc_binary_kind kind,
                 const char *name, const Tensor &a, const Tensor &b, mkc_tensor **dst) {
    // A call this thread made before, whose entry the cache still holds and
    // whose operands are laid out as then, skips the shapes, key and lookup.
    ThreadState &state = *scope.state;
    Operands ops;
    const std::shared_ptr<void> blob = remembered_entry<BinaryEntry>(
        state, scope, BinaryCall(BinaryAttrs{kind}, name, a, b), name,
        [&](const BinaryEntry &e) {
            const Tensor &s0 = e.swapped ? b : a, &s1 = e.swapped ? a : b;
            if (!e.takes_as_is(s0, DNNL_ARG_SRC_0) ||
                !(e.src1_viewed ? e.matches(s1, kPlainSrc1Check, e.src1_plain)
                                : e.takes_as_is(s1, DNNL_ARG_SRC_1)))
                return false;
            ops.src0 = &s0;
            ops.src1 = &s1;
            return true;
        },
        [&](BlobCache::HitTicket &ticket, bool &hit) {
            return acquire_binary(scope, info, kind, name, a, b, ops, ticket, hit);
        });
    auto &entry = *static_cast<BinaryEntry *>(blob.get());
    const Tensor &src0 = *ops.src0, &src1 = *ops.src1;
    const SerialRegion serial(element_count(src0)); // run as acquire_binary() built it
    Handler::Output result =
        Handler::prepare_output(dst, entry, DNNL_ARG_DST, src0.layout, src0.dtype, info.name);
    {
        Handler::Execution exec(entry, scope);
        exec.input(DNNL_ARG_SRC_0, src0);
        // src1's bytes as the primitive sees them (a broadcast view of a
        // plain tensor, or its own layout).
        exec.input(DNNL_ARG_SRC_1, src1, &entry.arg_desc(DNNL_ARG_SRC_1));
        exec.output(DNNL_ARG_DST, result.data);
        exec.run();
    }
    Handler::finish_output(scope, result, dst);
}

} // namespace

namespace {

// A binary op planned on descriptions: its entry, the one that expands a
// first when neither operand has the output's shape, the arrangement run
// reads a and b in, and the result's description.
struct BinaryPlan {
    std::shared_ptr<BinaryEntry> expand, main;
    dnnl::memory::desc takes_a = empty_desc(), takes_b = empty_desc();
    ValueDesc out;
};

// How `e` reads its src1: a viewed operand as its plain bytes, another in
// the primitive's own layout.
const dnnl::memory::desc &src1_takes(const BinaryEntry &e) {
    return e.src1_viewed ? e.src1_plain : e.arg_desc(DNNL_ARG_SRC_1);
}

// acquire_binary() on descriptions: operands that a call converts (a
// blocked src1 to be viewed) are taken converted instead, and the
// expansion's entry is kept for run.
BinaryPlan plan_binary(const CacheScope &scope, const BinaryInfo &info, mkc_binary_kind kind,
                       const char *name, const ValueDesc &a, const ValueDesc &b) {
    const BinaryShape s = check_binary(info, a, b);
    BinaryPlan plan;
    const ValueDesc *src0 = &a, *src1 = &b;
    bool swapped = false;
    ValueDesc expanded;
    if (!s.a_full && s.b_full) {
        src0 = &b;
        src1 = &a;
        swapped = true;
    } else if (!s.a_full && !s.b_full) {
        const mkc_layout lay = expanded_layout(a, s.n);
        expanded = plain_value(a.dtype, lay, layout::to_onednn_order(s.out, lay));
        // zeros + a, the zeros arranged as the expanded value they become.
        plan.expand =
            plan_binary(scope, binary_info(MKC_BINARY_ADD), MKC_BINARY_ADD, nullptr, expanded, a)
                .main;
        src0 = &expanded;
    }
    ValueDesc plain_src1;
    dnnl::memory::desc view = empty_desc();
    if (!broadcast_view(*src1, s.n, src0->layout, view)) {
        plain_src1 = plain_value(src1->dtype, src1->layout, src1->dims);
        src1 = &plain_src1;
        broadcast_view(*src1, s.n, src0->layout, view);
    }
    BlobCache::HitTicket ticket;
    bool hit = false;
    plan.main = build_binary(scope, info, kind, name, *src0, *src1, view, swapped, ticket, hit);
    const dnnl::memory::desc &full = plan.main->arg_desc(DNNL_ARG_SRC_0);
    const dnnl::memory::desc &broadcast = src1_takes(*plan.main);
    if (plan.expand) {
        plan.takes_a = src1_takes(*plan.expand);
        plan.takes_b = broadcast;
    } else {
        plan.takes_a = swapped ? broadcast : full;
        plan.takes_b = swapped ? full : broadcast;
    }
    plan.out = arranged_as(*src0, plan.main->arg_desc(DNNL_ARG_DST));
    return plan;
}

// One execution of `e` on a's and b's bytes (each as src1_takes() or the
// primitive's SRC_0 says).
void run_binary_entry(const CacheScope &scope, BinaryEntry &e, const void *a, const void *b,
                      void *dst) {
    const SerialRegion serial(e.elements);
    Handler::Execution exec(e, scope);
    // The primitive only reads its sources; memory objects take non-const
    // handles.
    exec.raw(DNNL_ARG_SRC_0, const_cast<void *>(e.swapped ? b : a));
    exec.raw(DNNL_ARG_SRC_1, const_cast<void *>(e.swapped ? a : b));
    exec.raw(DNNL_ARG_DST, dst);
    exec.run();
}

// A planned op's run: with `expand`, a goes into zeros of the output's
// shape first (in place, as the eager call expands it).
void run_binary_plan(const CacheScope &scope, BinaryEntry *expand, BinaryEntry &main,
                     const void *a, const void *b, void *dst) {
    if (!expand) {
        run_binary_entry(scope, main, a, b, dst);
        return;
    }
    const std::shared_ptr<void> full = allocate(expand->arg_desc(DNNL_ARG_DST).get_size(), true);
    run_binary_entry(scope, *expand, full.get(), a, full.get());
    run_binary_entry(scope, main, full.get(), b, dst);
}

// What BinaryOp::prepare hands out when a is expanded first: both entries
// (each shared with the cache). Itself in no cache.
struct BinaryExpansion : PrimitiveEntry {
    std::shared_ptr<BinaryEntry> expand, main;
};

} // namespace

ValueDesc BinaryOp::infer(const Attrs &attrs, const ValueDesc &a, const ValueDesc &b) {
    const BinaryShape s = check_binary(binary_info(attrs.kind), a, b);
    // The result is arranged as the operand with the output's shape.
    if (s.a_full) return a;
    if (s.b_full) return b;
    const mkc_layout lay = expanded_layout(a, s.n);
    return plain_value(a.dtype, lay, layout::to_onednn_order(s.out, lay));
}

Prepared BinaryOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                           const ValueDesc &a, const ValueDesc &b) {
    BinaryPlan plan = plan_binary(scope, binary_info(attrs.kind), attrs.kind, name, a, b);
    if (plan.expand) {
        auto both = std::make_shared<BinaryExpansion>();
        both->expand = plan.expand;
        both->main = plan.main;
        return {both, {plan.takes_a, plan.takes_b}, {plan.out}};
    }
    const BinaryEntry &e = *plan.main;
    return {plan.main,
            {plan.takes_a, plan.takes_b},
            {plan.out},
            {e.swapped ? DNNL_ARG_SRC_1 : DNNL_ARG_SRC_0, e.swapped ? DNNL_ARG_SRC_0 : DNNL_ARG_SRC_1},
            {DNNL_ARG_DST},
            e.elements};
}

void BinaryOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    if (auto *both = dynamic_cast<BinaryExpansion *>(&entry))
        run_binary_plan(scope, both->expand.get(), *both->main, buffers.in[0], buffers.in[1],
                        buffers.out[0]);
    else
        run_binary_entry(scope, static_cast<BinaryEntry &>(entry), buffers.in[0], buffers.in[1],
                         buffers.out[0]);
}

namespace {

// A reduction's shapes: full's caller dims, and like's padded to their rank.
struct ReduceShape {
    Dims from, to;
};

// reduce_sum_to's checks.
template <typename V>
ReduceShape check_reduce_sum_to(const V &full, const V &like, const char *op) {
    ReduceShape s;
    s.from = caller_dims(full);
    const Dims &fc = s.from;
    const Dims lc = caller_dims(like);
    const int n = static_cast<int>(fc.size());
    if (static_cast<int>(lc.size()) > n)
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": cannot reduce ", shape_text(fc), " to ",
             shape_text(lc));
    s.to = padded(lc, n);
    for (int i = 0; i < n; ++i)
        if (!(s.to[i] == fc[i] || s.to[i] == 1))
            fail(MKC_STATUS_INVALID_ARGUMENT, op, ": cannot reduce ", shape_text(fc),
                 " to ", shape_text(lc));
    return s;
}

// The reduction of caller dims `fc` to `target` (both row-major, of one
// float dtype: oneDNN sums bfloat16 in float32 and rounds once), times
// `scale`.
std::shared_ptr<PrimitiveEntry> prepare_reduce_sum(const CacheScope &scope, const Dims &fc,
                                                   const Dims &target, float scale,
                                                   mkc_dtype dtype) {
    // Both sides described in caller order over their row-major bytes.
    const auto dt = onednn_float(dtype);
    const dnnl::memory::desc from(fc, dt, row_major_strides(fc)),
        to(target, dt, row_major_strides(target));
    if (dtype != MKC_DTYPE_F32) require_bf16_kernels("reduce_sum");
    Handler handler(scope, "reduce_sum", nullptr, "reduce_sum", nullptr, fc);
    handler.sign(OpKind::reduce_sum);
    handler.sign_value(from);
    handler.sign_value(to);
    handler.sign_float(scale);
    return handler.acquire_primitive<PrimitiveEntry>([&] {
        dnnl::primitive_attr attr = user_scratchpad_attr();
        if (scale != 1.f) {
            dnnl::post_ops ops;
            ops.append_eltwise(dnnl::algorithm::eltwise_linear, scale, 0.f);
            attr.set_post_ops(ops);
        }
        auto e = std::make_shared<PrimitiveEntry>();
        if (target == fc) { // nothing to reduce: a (scaled) copy
            dnnl::eltwise_forward::primitive_desc pd(cpu_engine(),
                                                     dnnl::prop_kind::forward_inference,
                                                     dnnl::algorithm::eltwise_linear, from, to,
                                                     scale, 0.f, user_scratchpad_attr());
            e->primitive = dnnl::eltwise_forward(pd);
            e->set_args(pd, {DNNL_ARG_SRC, DNNL_ARG_DST});
        } else {
            dnnl::reduction::primitive_desc pd(cpu_engine(), dnnl::algorithm::reduction_sum, from,
                                               to, 0.f, 0.f, attr);
            e->primitive = dnnl::reduction(pd);
            e->set_args(pd, {DNNL_ARG_SRC, DNNL_ARG_DST});
        }
        return e;
    });
}

// Executes a reduction on row-major `full` into `dst` (plain, like's).
void run_reduce_sum(const CacheScope &scope, PrimitiveEntry &entry, const void *full, void *dst) {
    Handler::Execution exec(entry, scope);
    exec.raw(DNNL_ARG_SRC, const_cast<void *>(full)); // only read
    exec.output(DNNL_ARG_DST, dst);
    exec.run();
}

} // namespace

void reduce_sum_to(const CacheScope &scope, const Tensor &full, const Tensor &like, float scale,
                   mkc_tensor **dst, const char *op) {
    const ReduceShape shape = check_reduce_sum_to(full, like, op);
    std::unique_ptr<Tensor> holder;
    const Tensor &g = row_major(scope, full, holder); // row-major in caller order
    auto result = make_owned_tensor(layout::plain_desc(like.dims, onednn_float(full.dtype),
                                                       like.layout),
                                    like.layout, full.dtype);
    auto entry = prepare_reduce_sum(scope, shape.from, shape.to, scale, full.dtype);
    run_reduce_sum(scope, *entry, g.data, result->data);
    if (*dst) {
        Tensor &t = **dst;
        if (!(t.dims == result->dims && t.dtype == full.dtype))
            fail(MKC_STATUS_INVALID_ARGUMENT, op,
                 ": the gradient output must be ", dtype_name(full.dtype), " with the shape ",
                 shape_text(caller_dims(like)));
        reorder(scope, result->desc, result->data, t.desc, t.data);
        return;
    }
    Handler::publish(result, dst);
}

ValueDesc ReduceSumToOp::infer(const Attrs &attrs, const ValueDesc &full, const ValueDesc &like) {
    check_reduce_sum_to(full, like, attrs.op);
    return plain_value(full.dtype, like.layout, like.dims);
}

Prepared ReduceSumToOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *,
                                const ValueDesc &full, const ValueDesc &like) {
    const ReduceShape shape = check_reduce_sum_to(full, like, attrs.op);
    auto entry = prepare_reduce_sum(scope, shape.from, shape.to, attrs.scale, full.dtype);
    return {entry,
            {layout::plain_desc(full.dims, onednn_float(full.dtype), full.layout), empty_desc()},
            {plain_value(full.dtype, like.layout, like.dims)}};
}

void ReduceSumToOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    run_reduce_sum(scope, entry, buffers.in[0], buffers.out[0]);
}

namespace {

// The checks of a gradient call; the operator's name for messages.
template <typename V>
std::string check_binary_backward(mkc_binary_kind kind, const V &a, const V &b,
                                  const V &diff_dst) {
    const BinaryInfo info = binary_info(kind);
    std::string op = std::string(info.name) + "_backward";
    // The gradients have a's dtype (bfloat16 training keeps them bfloat16).
    require_float_src(op.c_str(), "a", a.dtype);
    require_same_float(op.c_str(), "b", b.dtype, a.dtype);
    require_diff_dtype(op.c_str(), "diff_dst", diff_dst.dtype, "a", a.dtype);
    const Dims ca = caller_dims(a), cb = caller_dims(b);
    const int n = static_cast<int>(std::max(ca.size(), cb.size()));
    const Dims pa = padded(ca, n), pb = padded(cb, n);
    Dims out(n);
    for (int i = 0; i < n; ++i) {
        if (!(pa[i] == pb[i] || pa[i] == 1 || pb[i] == 1))
            fail(MKC_STATUS_INVALID_ARGUMENT, op, ": shapes ", shape_text(ca),
                 " and ", shape_text(cb), " do not broadcast");
        out[i] = pa[i] == 1 ? pb[i] : pa[i];
    }
    if (caller_dims(diff_dst) != out)
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": diff_dst must have the broadcast shape ",
             shape_text(out), ", got ", shape_text(caller_dims(diff_dst)));
    return op;
}

// The gradient of `a <kind> b` for one side (0: a, 1: b), written once over
// `g`, which computes it on tensors (the eager call) or plans it on
// descriptions (the phases):
//   g.binary(kind, x, y)         x <kind> y at the broadcast shape (kind may
//                                be one of the internal comparisons);
//   g.reduce(full, like, scale)  full summed to like's shape, times scale:
//                                the side's gradient.
template <typename G>
void binary_gradient(G &g, mkc_binary_kind kind, int side, typename G::Value a,
                     typename G::Value b, typename G::Value diff_dst) {
    using Value = typename G::Value;
    const Value self = side == 0 ? a : b, other = side == 0 ? b : a;
    // 2 where x > y, 1 where x == y, 0 elsewhere (a tie splits the gradient,
    // as PyTorch).
    const auto wins = [&](Value x, Value y) {
        const Value gt = g.binary(kGreater, x, y);
        const Value ge = g.binary(kGreaterEqual, x, y);
        return g.binary(MKC_BINARY_ADD, gt, ge);
    };
    switch (kind) {
    case MKC_BINARY_ADD: g.reduce(diff_dst, self, 1.f); break;
    case MKC_BINARY_SUB: g.reduce(diff_dst, self, side == 0 ? 1.f : -1.f); break;
    case MKC_BINARY_MUL: g.reduce(g.binary(MKC_BINARY_MUL, diff_dst, other), self, 1.f); break;
    case MKC_BINARY_DIV: {
        // d(a/b)/da = 1/b; d(a/b)/db = -(a/b)/b
        const Value q = g.binary(MKC_BINARY_DIV, diff_dst, b);
        if (side == 0) {
            g.reduce(q, a, 1.f);
        } else {
            const Value qa = g.binary(MKC_BINARY_MUL, q, a);
            g.reduce(g.binary(MKC_BINARY_DIV, qa, b), b, -1.f);
        }
        break;
    }
    case MKC_BINARY_MAX:
    case MKC_BINARY_MIN: {
        const Value w = kind == MKC_BINARY_MAX ? wins(self, other) : wins(other, self);
        g.reduce(g.binary(MKC_BINARY_MUL, diff_dst, w), self, 0.5f);
        break;
    }
    default: fail(MKC_STATUS_INVALID_ARGUMENT, g.op, ": unsupported kind");
    }
}

// binary_gradient() on tensors: plain binary ops (sharing the forward ops'
// entries) and reduce_sum_to into the side's output.
struct TensorGradient {
    using Value = const Tensor *;
    const CacheScope &scope;
    const char *op;
    mkc_tensor **out = nullptr; // the side's gradient
    // Full-shape intermediates, released at the end of the call.
    std::vector<std::unique_ptr<Tensor>> temps;

    const Tensor *binary(mkc_binary_kind kind, const Tensor *x, const Tensor *y) {
        mkc_tensor *result = nullptr;
        binary_with(scope, any_binary_info(kind), kind, nullptr, *x, *y, &result);
        // Made as a caller's result, so registered: never handed out, it
        // must leave the registry before it goes (a fork would lock it).
        registry<Tensor>().remove(result);
        temps.emplace_back(result);
        return result;
    }
    void reduce(const Tensor *full, const Tensor *like, float scale) {
        reduce_sum_to(scope, *full, *like, scale, out, op);
    }
};

// One step of a planned gradient: a binary op or the final reduction of a
// side, reading values by slot (a, b, diff_dst, then each step's result).
struct GradientStep {
    int side;                               // whose gradient it computes
    BinaryPlan binary;                      // a binary op's entries, else none
    std::shared_ptr<PrimitiveEntry> reduce; // the side's reduction, else none
    int x = -1, y = -1, result = -1;        // slots read and written (binary only: y, result)
    dnnl::memory::desc x_takes = empty_desc(), y_takes = empty_desc(); // as each is read
};

// What BinaryBackwardOp::prepare hands out: the steps, their entries shared
// with the cache. Itself in no cache.
struct BinaryGradientPlan : PrimitiveEntry {
    std::vector<ValueDesc> slots; // each value's description as run holds it
    std::vector<GradientStep> steps;
};

// binary_gradient() on descriptions: the steps, their entries prepared.
struct PlannedGradient {
    using Value = int; // a slot
    const CacheScope &scope;
    const char *op;
    BinaryGradientPlan &plan;
    int side = 0;

    int binary(mkc_binary_kind kind, int x, int y) {
        GradientStep s;
        s.side = side;
        s.binary =
            plan_binary(scope, any_binary_info(kind), kind, nullptr, plan.slots[x], plan.slots[y]);
        s.x = x;
        s.y = y;
        s.x_takes = s.binary.takes_a;
        s.y_takes = s.binary.takes_b;
        s.result = static_cast<int>(plan.slots.size());
        plan.slots.push_back(s.binary.out);
        plan.steps.push_back(std::move(s));
        return plan.steps.back().result;
    }
    void reduce(int full, int like, float scale) {
        const ValueDesc &f = plan.slots[full];
        const ReduceShape shape = check_reduce_sum_to(f, plan.slots[like], op);
        GradientStep s;
        s.side = side;
        s.reduce = prepare_reduce_sum(scope, shape.from, shape.to, scale, f.dtype);
        s.x = full;
        s.x_takes = layout::plain_desc(f.dims, onednn_float(f.dtype), f.layout); // row-major
        plan.steps.push_back(std::move(s));
    }
};

} // namespace

void binary_backward(const CacheScope &scope, mkc_binary_kind kind, const char *name,
                     const Tensor &a, const Tensor &b, const Tensor &diff_dst, mkc_tensor **diff_a,
                     mkc_tensor **diff_b) {
    const std::string op = check_binary_backward(kind, a, b, diff_dst);
    (void)name; // the intermediates are plain binary ops: they share the forward ops' entries
    TensorGradient g{scope, op.c_str()};
    for (int side = 0; side < 2; ++side) {
        g.out = side == 0 ? diff_a : diff_b;
        if (g.out) binary_gradient(g, kind, side, &a, &b, &diff_dst);
    }
}

std::vector<ValueDesc> BinaryBackwardOp::infer(const Attrs &attrs, const ValueDesc &a,
                                               const ValueDesc &b, const ValueDesc &diff_dst) {
    check_binary_backward(attrs.kind, a, b, diff_dst);
    return {plain_value(a.dtype, a.layout, a.dims), plain_value(a.dtype, b.layout, b.dims)};
}

Prepared BinaryBackwardOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *,
                                   const ValueDesc &a, const ValueDesc &b,
                                   const ValueDesc &diff_dst) {
    const std::string op = check_binary_backward(attrs.kind, a, b, diff_dst);
    auto plan = std::make_shared<BinaryGradientPlan>();
    plan->slots = {a, b, diff_dst};
    PlannedGradient g{scope, op.c_str(), *plan};
    for (g.side = 0; g.side < 2; ++g.side) binary_gradient(g, attrs.kind, g.side, 0, 1, 2);
    return {plan,
            {a.desc, b.desc, diff_dst.desc},
            {plain_value(a.dtype, a.layout, a.dims), plain_value(a.dtype, b.layout, b.dims)}};
}

void BinaryBackwardOp::run(const CacheScope &scope, PrimitiveEntry &entry,
                           const Buffers &buffers) {
    const auto &plan = static_cast<const BinaryGradientPlan &>(entry);
    std::vector<const void *> data(plan.slots.size(), nullptr);
    for (int i = 0; i < 3; ++i) data[i] = buffers.in[i];
    std::vector<std::shared_ptr<void>> held; // intermediates and converted operands
    // A slot's bytes in the arrangement a step reads them in.
    const auto read = [&](int slot, const dnnl::memory::desc &want) {
        const ValueDesc &v = plan.slots[slot];
        if (v.desc == want) return data[slot];
        held.push_back(allocate(want.get_size(), false));
        reorder(scope, v.desc, data[slot], want, held.back().get());
        return static_cast<const void *>(held.back().get());
    };
    for (const GradientStep &s : plan.steps) {
        void *out = buffers.out[s.side];
        if (!out) continue; // that gradient is not asked for
        const void *x = read(s.x, s.x_takes);
        if (s.reduce) {
            run_reduce_sum(scope, *s.reduce, x, out);
            continue;
        }
        const void *y = read(s.y, s.y_takes);
        held.push_back(allocate(plan.slots[s.result].desc.get_size(), false));
        data[s.result] = held.back().get();
        run_binary_plan(scope, s.binary.expand.get(), *s.binary.main, x, y, held.back().get());
    }
}

} // namespace mkc::ops
