// Binary element-wise ops with numpy broadcasting. oneDNN broadcasts only
// its second source, so: the operand with the output's shape becomes src0
// (swapping a and b when needed: sub and div then fix the order with a
// post-op), the other is viewed with size-1 dims in the output's oneDNN
// order, and when neither has the output's shape one side is expanded first.
#include <algorithm>
#include <cstring>
#include <string>

#include "common/engine.hpp"
#include "common/serial.hpp"
#include "common/error.hpp"
#include "handler/handler.hpp"
#include "ops/attrs.hpp"
#include "ops/call_words.hpp"
#include "keys/keys.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

struct BinaryEntry : PrimitiveEntry {
    dnnl::binary::primitive_desc pd;
    // What the full path worked out for the call that built the entry, for
    // calls through the argument cache (BinaryCall: the same words give the
    // same answers). b is src0 (a and b swapped):
    bool swapped = false;
    // src1 is seen through a broadcast view (its bytes re-described with the
    // output's rank), which needs it plain, as `src1_plain` says; otherwise
    // it is taken as the primitive's own SRC_1 layout.
    bool src1_viewed = false;
    dnnl::memory::desc src1_plain = empty_desc();
};

// A binary op's one attribute: its kind (also the key's suffix, a letter).
struct BinaryAttrs {
    mkc_binary_kind kind;
    template <typename V>
    void each(V &v) const {
        v.in_suffix("kind", kind);
    }
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

dnnl::memory::data_type f32() { return dnnl::memory::data_type::f32; }

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
bool broadcast_view(const Tensor &t, int n, mkc_layout out_layout, dnnl::memory::desc &view) {
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
    require(a.dtype == MKC_DTYPE_F32 && b.dtype == MKC_DTYPE_F32, info.name,
            ": a and b must be float32");
    const Dims ca = caller_dims(a), cb = caller_dims(b);
    const int n = static_cast<int>(std::max(ca.size(), cb.size()));
    const Dims pa = padded(ca, n), pb = padded(cb, n);
    Dims out(n);
    for (int i = 0; i < n; ++i) {
        if (pa[i] == pb[i] || pb[i] == 1) out[i] = pa[i];
        else if (pa[i] == 1) out[i] = pb[i];
        else
            fail(MKC_STATUS_INVALID_ARGUMENT, info.name, ": shapes ", shape_text(ca), " (a) and ",
                 shape_text(cb), " (b) do not broadcast (dim ", i, ": ", pa[i], " vs ", pb[i],
                 ")");
    }
    check_result_dims(info.name, out, MKC_DTYPE_F32);
    // src0 must have the output's shape; prefer a (so `a op= b` is in place).
    const bool a_full = pa == out && static_cast<int>(ca.size()) == n;
    const bool b_full = pb == out && static_cast<int>(cb.size()) == n;
    ops.src0 = &a;
    ops.src1 = &b;
    bool swapped = false;
    if (!a_full && b_full) {
        ops.src0 = &b;
        ops.src1 = &a;
        swapped = true;
    } else if (!a_full && !b_full) {
        // Expand a to the output's shape: zeros(out) + a.
        const mkc_layout lay = static_cast<int>(ca.size()) == n ? a.layout : MKC_LAYOUT_CHANNELS_FIRST;
        const Dims od = layout::to_onednn_order(out, lay);
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
    const Tensor &src1 = *ops.src1;
    const bool viewed = !(view == src1.desc);

    const SerialRegion serial(element_count(src0)); // built as binary_with() runs it
    const BinaryAttrs attrs{kind};
    const KeyText key = key_text("binary", "", attrs);
    Handler handler(scope, info.name, name, key.name, key.suffix, src0.dims);
    handler.sign(OpKind::binary);
    sign_attrs(handler, attrs);
    handler.sign(swapped ? 1 : 0);
    handler.sign_layout(src0, DNNL_ARG_SRC_0);
    handler.sign_layout(view);
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
        e->pd = dnnl::binary::primitive_desc(cpu_engine(), swapped ? info.mirrored : info.alg,
                                             src0.desc, view, src0.desc, attr);
        e->primitive = dnnl::binary(e->pd);
        e->set_args(e->pd, {DNNL_ARG_SRC_0, DNNL_ARG_SRC_1, DNNL_ARG_DST});
        e->swapped = swapped;
        e->src1_viewed = viewed;
        if (viewed) e->src1_plain = src1.desc;
        return e;
    });
    handler.report_hit(ticket, hit);
    // A call that made its own operands is not one to repeat blindly; nor
    // is one whose entry another call built with other operand roles (the
    // signature covers swapped and the view, so this is a safeguard).
    if (ops.expanded || ops.src1_copy || entry->swapped != swapped || entry->src1_viewed != viewed)
        hit = false;
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

void reduce_sum_to(const CacheScope &scope, const Tensor &full, const Tensor &like, float scale,
                   mkc_tensor **dst, const char *op) {
    const Dims fc = caller_dims(full), lc = caller_dims(like);
    const int n = static_cast<int>(fc.size());
    if (static_cast<int>(lc.size()) > n)
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": cannot reduce ", shape_text(fc), " to ",
             shape_text(lc));
    const Dims target = padded(lc, n);
    for (int i = 0; i < n; ++i)
        if (!(target[i] == fc[i] || target[i] == 1))
            fail(MKC_STATUS_INVALID_ARGUMENT, op, ": cannot reduce ", shape_text(fc),
                 " to ", shape_text(lc));
    std::unique_ptr<Tensor> holder;
    const Tensor &g = row_major(scope, full, holder); // row-major in caller order
    // Both sides described in caller order over their row-major bytes.
    const dnnl::memory::desc from(fc, f32(), row_major_strides(fc)),
        to(target, f32(), row_major_strides(target));
    auto result = make_owned_tensor(layout::plain_desc(like.dims, f32(), like.layout),
                                    like.layout, MKC_DTYPE_F32);
    Handler handler(scope, "reduce_sum", nullptr, "reduce_sum", nullptr, fc);
    handler.sign(OpKind::reduce_sum);
    handler.sign(target);
    handler.sign_float(scale);
    auto entry = handler.acquire_primitive<PrimitiveEntry>([&] {
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
    {
        Handler::Execution exec(*entry, scope);
        exec.raw(DNNL_ARG_SRC, g.data);
        exec.output(DNNL_ARG_DST, result->data);
        exec.run();
    }
    if (*dst) {
        Tensor &t = **dst;
        if (!(t.dims == result->dims && t.dtype == MKC_DTYPE_F32))
            fail(MKC_STATUS_INVALID_ARGUMENT, op,
                 ": the gradient output must have the shape ", shape_text(lc));
        reorder(scope, result->desc, result->data, t.desc, t.data);
        return;
    }
    Handler::publish(result, dst);
}

void binary_backward(const CacheScope &scope, mkc_binary_kind kind, const char *name,
                     const Tensor &a, const Tensor &b, const Tensor &diff_dst, mkc_tensor **diff_a,
                     mkc_tensor **diff_b) {
    const BinaryInfo info = binary_info(kind);
    const std::string op = std::string(info.name) + "_backward";
    (void)name; // the intermediates are plain binary ops: they share the forward ops' entries
    require(a.dtype == MKC_DTYPE_F32 && b.dtype == MKC_DTYPE_F32 &&
                diff_dst.dtype == MKC_DTYPE_F32,
            op, ": a, b and diff_dst must be float32");
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

    // Full-shape intermediates, released at the end of the call.
    std::vector<std::unique_ptr<Tensor>> temps;
    auto run = [&](const BinaryInfo &bi, mkc_binary_kind k, const Tensor &x,
                   const Tensor &y) -> const Tensor & {
        mkc_tensor *result = nullptr;
        binary_with(scope, bi, k, nullptr, x, y, &result); // shared with the forward ops
        temps.emplace_back(result);
        return *result;
    };
    auto mul = [&](const Tensor &x, const Tensor &y) -> const Tensor & {
        return run(binary_info(MKC_BINARY_MUL), MKC_BINARY_MUL, x, y);
    };
    // 2 where x > y, 1 where x == y, 0 elsewhere (a tie splits the gradient,
    // as PyTorch).
    auto wins = [&](const Tensor &x, const Tensor &y) -> const Tensor & {
        using alg = dnnl::algorithm;
        const Tensor &gt = run({alg::binary_gt, "greater", "GT", false, alg::binary_lt}, kGreater,
                               x, y);
        const Tensor &ge = run({alg::binary_ge, "greater_equal", "GE", false, alg::binary_le},
                               kGreaterEqual, x, y);
        return run(binary_info(MKC_BINARY_ADD), MKC_BINARY_ADD, gt, ge);
    };
    for (int side = 0; side < 2; ++side) {
        mkc_tensor **out_ptr = side == 0 ? diff_a : diff_b;
        if (!out_ptr) continue;
        const Tensor &self = side == 0 ? a : b, &other = side == 0 ? b : a;
        switch (kind) {
        case MKC_BINARY_ADD: reduce_sum_to(scope, diff_dst, self, 1.f, out_ptr, op.c_str()); break;
        case MKC_BINARY_SUB:
            reduce_sum_to(scope, diff_dst, self, side == 0 ? 1.f : -1.f, out_ptr, op.c_str());
            break;
        case MKC_BINARY_MUL:
            reduce_sum_to(scope, mul(diff_dst, other), self, 1.f, out_ptr, op.c_str());
            break;
        case MKC_BINARY_DIV: {
            // d(a/b)/da = 1/b; d(a/b)/db = -(a/b)/b
            const Tensor &q = run(binary_info(MKC_BINARY_DIV), MKC_BINARY_DIV, diff_dst, b);
            if (side == 0)
                reduce_sum_to(scope, q, a, 1.f, out_ptr, op.c_str());
            else
                reduce_sum_to(scope, run(binary_info(MKC_BINARY_DIV), MKC_BINARY_DIV, mul(q, a), b),
                              b, -1.f, out_ptr, op.c_str());
            break;
        }
        case MKC_BINARY_MAX:
        case MKC_BINARY_MIN: {
            const bool self_wins_when_greater = kind == MKC_BINARY_MAX;
            const Tensor &w = self_wins_when_greater ? wins(self, other) : wins(other, self);
            reduce_sum_to(scope, mul(diff_dst, w), self, 0.5f, out_ptr, op.c_str());
            break;
        }
        default: fail(MKC_STATUS_INVALID_ARGUMENT, op, ": unsupported kind");
        }
    }
}

} // namespace mkc::ops
