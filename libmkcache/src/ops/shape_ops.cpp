// Operators that move data rather than compute: concat along any axis,
// transpose (any permutation), and conversion to a named layout (plain or
// oneDNN-blocked).
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/engine.hpp"
#include "common/error.hpp"
#include "common/handles.hpp"
#include "handler/handler.hpp"
#include "keys/keys.hpp"
#include "ops/attrs.hpp"
#include "ops/float_dtype.hpp"
#include "ops/ops.hpp"
#include "ops/shape_ops.hpp"

namespace mkc::ops {

namespace {

// The permutation (for memory::desc::permute_axes) that turns oneDNN-order
// axes into the caller's order.
std::vector<int> onednn_to_caller_perm(int n, mkc_layout layout) {
    std::vector<int> perm(n);
    for (int i = 0; i < n; ++i) perm[i] = i;
    if (layout == MKC_LAYOUT_CHANNELS_LAST && n >= 3) {
        perm[1] = n - 1;
        for (int i = 2; i < n; ++i) perm[i] = i - 1;
    }
    return perm;
}

// oneDNN numbers a primitive's sources below DNNL_ARG_MULTIPLE_DST: more
// inputs are joined in runs of that many, and the runs then joined.
constexpr int kMaxConcatSources = DNNL_ARG_MULTIPLE_DST - DNNL_ARG_MULTIPLE_SRC;

// The checks of a concat; the result's dims (oneDNN order) and the axis
// counted from the front, in the caller's and in oneDNN's order.
struct ConcatShape {
    Dims out;
    int caller_axis, onednn_axis;
};
template <typename V>
ConcatShape concat_shape(int axis, int n, const V *const *srcs) {
    require(n >= 1 && n <= 4096, "concat: needs 1..4096 inputs, got ", n);
    const V &first = *srcs[0];
    const int rank = static_cast<int>(first.dims.size());
    require(axis >= -rank && axis < rank, "concat: axis ", axis, " is out of range for rank ", rank);
    ConcatShape s;
    s.caller_axis = axis < 0 ? axis + rank : axis;
    s.onednn_axis = layout::to_onednn_axis(s.caller_axis, rank, first.layout);
    const int onednn_axis = s.onednn_axis;
    Dims &out = s.out;
    out = first.dims;
    out[onednn_axis] = 0;
    for (int i = 0; i < n; ++i) {
        const V &t = *srcs[i];
        require(is_float_dtype(t.dtype) && t.dtype == first.dtype, "concat: input ", i,
                " must be float32 or bfloat16, as input 0 (", dtype_name(first.dtype), ")");
        require(static_cast<int>(t.dims.size()) == rank, "concat: input ", i, " has rank ",
                t.dims.size(), ", input 0 has rank ", rank);
        require(rank < 3 || t.layout == first.layout, "concat: input ", i, " is ",
                layout::name(t.layout), " but input 0 is ", layout::name(first.layout));
        for (int d = 0; d < rank; ++d)
            require(d == onednn_axis || t.dims[d] == first.dims[d], "concat: input ", i,
                    " differs from input 0 outside the concat axis");
        if (__builtin_add_overflow(out[onednn_axis], t.dims[onednn_axis], &out[onednn_axis]))
            fail(MKC_STATUS_INVALID_ARGUMENT, "concat: the result is too large");
    }
    check_result_dims("concat", out, MKC_DTYPE_F32);
    return s;
}

// The entry joining `n` (at most kMaxConcatSources) checked srcs.
template <typename V>
std::shared_ptr<PrimitiveEntry> prepare_concat(const CacheScope &scope,
                                               const ConcatShape &shape, int n,
                                               const V *const *srcs, const char *name) {
    const V &first = *srcs[0];
    const ConcatAttrs attrs{shape.caller_axis};
    std::string default_name = "concat:" + std::to_string(n), suffix;
    append_attrs_name(default_name, attrs);
    attrs_suffix(suffix, "", attrs);
    Handler handler(scope, "concat", name, default_name.c_str(), suffix.c_str(), first.dims);
    handler.sign(OpKind::concat);
    sign_attrs(handler, attrs);
    handler.sign(shape.onednn_axis);
    handler.sign(n);
    // Every input's description (dims, type, layout) is part of what the
    // primitive was built for: signed in full for all of them (more than
    // the handler's fixed layout slots hold).
    std::vector<dnnl::memory::desc> src_mds;
    for (int i = 0; i < n; ++i) src_mds.push_back(srcs[i]->desc);
    for (int i = 0; i < n; ++i) handler.sign_value(src_mds[i]);
    return handler.acquire_primitive<PrimitiveEntry>([&] {
        auto e = std::make_shared<PrimitiveEntry>();
        const dnnl::memory::desc dst_md(shape.out, onednn_float(first.dtype),
                                        dnnl::memory::format_tag::any);
        const auto pd = dnnl::concat::primitive_desc(cpu_engine(), dst_md, shape.onednn_axis,
                                                     src_mds, user_scratchpad_attr());
        e->primitive = dnnl::concat(pd);
        std::vector<int> args;
        for (int i = 0; i < n; ++i) args.push_back(DNNL_ARG_MULTIPLE_SRC + i);
        args.push_back(DNNL_ARG_DST);
        e->set_args(pd, args);
        return e;
    });
}

std::vector<const ValueDesc *> pointers(const std::vector<ValueDesc> &values) {
    std::vector<const ValueDesc *> p;
    for (const ValueDesc &v : values) p.push_back(&v);
    return p;
}

} // namespace

ValueDesc ConcatOp::infer(const Attrs &attrs, const std::vector<ValueDesc> &srcs) {
    require(!srcs.empty(), "concat: needs 1..4096 inputs, got 0");
    const auto p = pointers(srcs);
    const ConcatShape shape = concat_shape(attrs.axis, static_cast<int>(p.size()), p.data());
    return plain_value(srcs[0].dtype, srcs[0].layout, shape.out);
}

Prepared ConcatOp::prepare(const CacheScope &scope, const Attrs &attrs, const char *name,
                           const std::vector<ValueDesc> &srcs) {
    require(!srcs.empty(), "concat: needs 1..4096 inputs, got 0");
    const auto p = pointers(srcs);
    const int n = static_cast<int>(p.size());
    const ConcatShape shape = concat_shape(attrs.axis, n, p.data());
    if (n > kMaxConcatSources)
        fail(MKC_STATUS_UNSUPPORTED, "concat: one step joins at most ", kMaxConcatSources,
             " inputs, got ", n, " (join them in runs)");
    auto entry = prepare_concat(scope, shape, n, p.data(), name);
    Prepared out{entry, {}, {arranged_as(srcs[0], entry->arg_desc(DNNL_ARG_DST))}, {},
                 {DNNL_ARG_DST}};
    for (size_t i = 0; i < srcs.size(); ++i) {
        out.takes.push_back(srcs[i].desc);
        out.in_args.push_back(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i));
    }
    return out;
}

void ConcatOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    Handler::Execution exec(entry, scope);
    const int n = static_cast<int>(entry.arg_ids.size()) - (entry.scratchpad_bytes > 0 ? 2 : 1);
    for (int i = 0; i < n; ++i)
        exec.raw(DNNL_ARG_MULTIPLE_SRC + i, const_cast<void *>(buffers.in[i]));
    exec.output(DNNL_ARG_DST, buffers.out[0]);
    exec.run();
}

void concat(const CacheScope &scope, int axis, int n, const Tensor *const *srcs, const char *name,
            mkc_tensor **dst) {
    require(n >= 1 && n <= 4096, "concat: needs 1..4096 inputs, got ", n);
    if (n > kMaxConcatSources) {
        std::vector<std::unique_ptr<Tensor>> runs;
        std::vector<const Tensor *> parts;
        for (int begin = 0; begin < n; begin += kMaxConcatSources) {
            mkc_tensor *part = nullptr;
            concat(scope, axis, std::min(kMaxConcatSources, n - begin), srcs + begin, nullptr,
                   &part);
            registry<Tensor>().remove(part); // internal: never handed out
            runs.emplace_back(part);
            parts.push_back(part);
        }
        concat(scope, axis, static_cast<int>(parts.size()), parts.data(), name, dst);
        return;
    }
    const ConcatShape shape = concat_shape(axis, n, srcs);
    auto entry = prepare_concat(scope, shape, n, srcs, name);
    Handler::Output result =
        Handler::prepare_output(dst, *entry, DNNL_ARG_DST, srcs[0]->layout, srcs[0]->dtype,
                                "concat");
    {
        Handler::Execution exec(*entry, scope);
        for (int i = 0; i < n; ++i) exec.input(DNNL_ARG_MULTIPLE_SRC + i, *srcs[i]);
        exec.output(DNNL_ARG_DST, result.data);
        exec.run();
    }
    Handler::finish_output(scope, result, dst);
}

namespace {

// A row-major result of dims `out` from src, and how it is written: src's
// bytes seen in its caller axis order (any layout) reordered into `view`,
// the result's bytes described with src's caller dims.
struct RowMajorCopy {
    Dims out;
    dnnl::memory::desc view, out_md, src_caller;
};

// `cd`: src's caller dims. Each descriptor is made in place: a default one
// would allocate too (oneDNN's empty descriptor), on every call.
template <typename V>
RowMajorCopy row_major_copy(const V &src, const Dims &cd, Dims out, const Dims &view_strides) {
    const auto dt = to_onednn(src.dtype);
    dnnl::memory::desc out_md(out, dt, row_major_strides(out));
    return {std::move(out), dnnl::memory::desc(cd, dt, view_strides), std::move(out_md),
            src.desc.permute_axes(
                onednn_to_caller_perm(static_cast<int>(src.dims.size()), src.layout))};
}

// Writes `copy` of src into *dst or a new tensor.
void write_row_major(const CacheScope &scope, const Tensor &src, const RowMajorCopy &copy,
                     mkc_tensor **dst, const char *op) {
    std::unique_ptr<Tensor> created;
    Tensor *y = *dst;
    if (!y) {
        created = make_owned_tensor(copy.out_md, MKC_LAYOUT_CHANNELS_FIRST, src.dtype);
        y = created.get();
    } else {
        require(y != &src, op, ": dst must not be src");
        require(y->dims == copy.out && y->desc == copy.out_md, op,
                ": dst must be a row-major tensor of the result's shape");
    }
    if (copy.src_caller == copy.view) std::memcpy(y->data, src.data, copy.out_md.get_size());
    else
        reorder(scope, copy.src_caller, src.data, copy.view, y->data);
    Handler::publish(created, dst);
}

// The phases of a row-major copy: one reorder into the view.
Prepared prepare_copy(const CacheScope &scope, const ValueDesc &src, const RowMajorCopy &copy) {
    Prepared p{reorder_entry(scope, copy.src_caller, copy.view), {src.desc}, {}, {DNNL_ARG_FROM},
               {DNNL_ARG_TO}};
    p.outputs.push_back({src.dtype, MKC_LAYOUT_CHANNELS_FIRST, copy.out, copy.out_md});
    return p;
}

template <typename V>
RowMajorCopy transpose_copy(int n, const int *perm, const V &src) {
    const int rank = static_cast<int>(src.dims.size());
    require(n == rank, "transpose: perm has ", n, " entries, src has rank ", rank);
    std::vector<bool> seen(rank, false);
    for (int i = 0; i < rank; ++i) {
        require(perm[i] >= 0 && perm[i] < rank && !seen[perm[i]],
                "transpose: perm must be a permutation of 0..", rank - 1);
        seen[perm[i]] = true;
    }
    const Dims cd = caller_dims(src);
    Dims out(rank);
    for (int i = 0; i < rank; ++i) out[i] = cd[perm[i]];
    // dst, row-major over `out`, described in src's caller axis order:
    // caller axis perm[i] lands at dst axis i.
    const Dims out_strides = row_major_strides(out);
    Dims view_strides(rank);
    for (int i = 0; i < rank; ++i) view_strides[perm[i]] = out_strides[i];
    return row_major_copy(src, cd, std::move(out), view_strides);
}

template <typename V>
RowMajorCopy reshape_copy(int ndims, const int64_t *dims, const V &src) {
    const char *op = "reshape";
    require(ndims >= 1 && ndims <= MKC_MAX_NDIMS, op, ": ndims must be 1..", MKC_MAX_NDIMS,
            ", got ", ndims);
    const Dims cd = caller_dims(src);
    int64_t count = 1, known = 1;
    int infer = -1;
    for (auto d : cd) count *= d;
    Dims out(dims, dims + ndims);
    for (int i = 0; i < ndims; ++i) {
        if (out[i] == -1) {
            require(infer < 0, op, ": only one dim may be -1");
            infer = i;
        } else {
            require(out[i] >= 1, op, ": dims must be >= 1 (or one -1), got ", out[i]);
            // Checked: a product that wraps around could equal src's count.
            if (__builtin_mul_overflow(known, out[i], &known) || known > count)
                fail(MKC_STATUS_INVALID_ARGUMENT, op, ": ", shape_text(out),
                     " holds more elements than src (", count, ")");
        }
    }
    if (infer >= 0) {
        if (!(known > 0 && count % known == 0))
            fail(MKC_STATUS_INVALID_ARGUMENT, op, ": cannot infer the -1 dim of ",
                 shape_text(out), " for ", count, " elements");
        out[infer] = count / known;
        known *= out[infer];
    }
    if (known != count)
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": ", shape_text(cd), " (", count,
             " elements) cannot be viewed as ", shape_text(out));
    // The values in the caller's row-major order, re-read with the new dims.
    return row_major_copy(src, cd, std::move(out), row_major_strides(cd));
}

// The arrangement a named format asks for, and the caller layout the
// result is labelled with.
struct NamedLayout {
    dnnl::memory::desc want;
    mkc_layout label;
};

template <typename V>
NamedLayout named_layout(const char *format, const V &src) {
    require(format != nullptr, "to_layout: format is NULL");
    const std::string f = format;
    const int rank = static_cast<int>(src.dims.size());
    using tag = dnnl::memory::format_tag;
    NamedLayout n{empty_desc(), src.layout};
    const auto dt = to_onednn(src.dtype);
    if (f == "NCHW" || f == "NCDHW" || f == "NCW" || f == "NC" || f == "plain") {
        n.want = layout::plain_desc(src.dims, dt, MKC_LAYOUT_CHANNELS_FIRST);
        n.label = MKC_LAYOUT_CHANNELS_FIRST;
    } else if (f == "NHWC" || f == "NDHWC" || f == "NWC") {
        require(rank >= 3, "to_layout: ", f, " needs rank >= 3");
        n.want = layout::plain_desc(src.dims, dt, MKC_LAYOUT_CHANNELS_LAST);
        n.label = MKC_LAYOUT_CHANNELS_LAST;
    } else if (f == "nChw8c" || f == "nChw16c" || f == "nCdhw8c" || f == "nCdhw16c") {
        const bool is3d = f[2] == 'd';
        require(rank == (is3d ? 5 : 4), "to_layout: ", f, " needs rank ", is3d ? 5 : 4);
        const bool b16 = f.find("16") != std::string::npos;
        n.want = dnnl::memory::desc(src.dims, dt,
                                    is3d ? (b16 ? tag::nCdhw16c : tag::nCdhw8c)
                                         : (b16 ? tag::nChw16c : tag::nChw8c));
    } else {
        fail(MKC_STATUS_INVALID_ARGUMENT, "to_layout: unknown format '", f,
             "' (NCHW, NHWC, NCDHW, NDHWC, nChw8c, nChw16c, nCdhw8c, nCdhw16c)");
    }
    return n;
}

void run_copy(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    run_reorder(scope, entry, buffers.in[0], buffers.out[0]);
}

} // namespace

ValueDesc TransposeOp::infer(const Attrs &attrs, const ValueDesc &src) {
    RowMajorCopy c = transpose_copy(attrs.n, attrs.perm, src);
    return {src.dtype, MKC_LAYOUT_CHANNELS_FIRST, std::move(c.out), c.out_md};
}

Prepared TransposeOp::prepare(const CacheScope &scope, const Attrs &attrs, const ValueDesc &src) {
    return prepare_copy(scope, src, transpose_copy(attrs.n, attrs.perm, src));
}

void TransposeOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    run_copy(scope, entry, buffers);
}

ValueDesc ReshapeOp::infer(const Attrs &attrs, const ValueDesc &src) {
    RowMajorCopy c = reshape_copy(attrs.ndims, attrs.dims, src);
    return {src.dtype, MKC_LAYOUT_CHANNELS_FIRST, std::move(c.out), c.out_md};
}

Prepared ReshapeOp::prepare(const CacheScope &scope, const Attrs &attrs, const ValueDesc &src) {
    return prepare_copy(scope, src, reshape_copy(attrs.ndims, attrs.dims, src));
}

void ReshapeOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    run_copy(scope, entry, buffers);
}

ValueDesc ToLayoutOp::infer(const Attrs &attrs, const ValueDesc &src) {
    const NamedLayout n = named_layout(attrs.format, src);
    return {src.dtype, n.label, src.dims, n.want};
}

Prepared ToLayoutOp::prepare(const CacheScope &scope, const Attrs &attrs, const ValueDesc &src) {
    const NamedLayout n = named_layout(attrs.format, src);
    return {reorder_entry(scope, src.desc, n.want),
            {src.desc},
            {{src.dtype, n.label, src.dims, n.want}},
            {DNNL_ARG_FROM},
            {DNNL_ARG_TO}};
}

void ToLayoutOp::run(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers) {
    run_copy(scope, entry, buffers);
}

void transpose(const CacheScope &scope, int n, const int *perm, const Tensor &src,
               mkc_tensor **dst) {
    write_row_major(scope, src, transpose_copy(n, perm, src), dst, "transpose");
}

void to_layout(const CacheScope &scope, const char *format, const Tensor &src, mkc_tensor **dst) {
    const NamedLayout n = named_layout(format, src);
    require(*dst == nullptr, "to_layout: always creates a new tensor (*dst must be NULL)");
    auto t = make_owned_tensor(n.want, n.label, src.dtype);
    if (src.desc == n.want) std::memcpy(t->data, src.data, n.want.get_size());
    else
        reorder(scope, src.desc, src.data, n.want, t->data);
    Handler::publish(t, dst);
}

void reshape(const CacheScope &scope, int ndims, const int64_t *dims, const Tensor &src,
             mkc_tensor **dst) {
    write_row_major(scope, src, reshape_copy(ndims, dims, src), dst, "reshape");
}

void concat_backward(const CacheScope &scope, int axis, int n, const Tensor *const *srcs,
                     const Tensor &diff_dst, mkc_tensor **diff_srcs) {
    const char *op = "concat_backward";
    require(n >= 1 && n <= 4096, op, ": needs 1..4096 inputs, got ", n);
    const Tensor &first = *srcs[0];
    const int rank = static_cast<int>(first.dims.size());
    require(axis >= -rank && axis < rank, op, ": axis ", axis, " is out of range for rank ", rank);
    const int caller_axis = axis < 0 ? axis + rank : axis;
    Dims out = caller_dims(first);
    out[caller_axis] = 0;
    for (int i = 0; i < n; ++i) {
        const Dims ci = caller_dims(*srcs[i]);
        require(static_cast<int>(ci.size()) == rank, op, ": input ", i, " has rank ", ci.size(),
                ", input 0 has rank ", rank);
        for (int d = 0; d < rank; ++d)
            require(d == caller_axis || ci[d] == out[d], op, ": input ", i,
                    " differs from input 0 outside the concat axis");
        if (__builtin_add_overflow(out[caller_axis], ci[caller_axis], &out[caller_axis]))
            fail(MKC_STATUS_INVALID_ARGUMENT, op, ": the concatenated shape is too large");
    }
    // The gradients are slices of diff_dst, in its dtype: the inputs'.
    require_float_src(op, "srcs[0]", first.dtype);
    for (int i = 1; i < n; ++i)
        require(srcs[i]->dtype == first.dtype, op, ": input ", i, " is ",
                dtype_name(srcs[i]->dtype), " but input 0 is ", dtype_name(first.dtype));
    require_diff_dtype(op, "diff_dst", diff_dst.dtype, "srcs[0]", first.dtype);
    if (!(caller_dims(diff_dst) == out))
        fail(MKC_STATUS_INVALID_ARGUMENT, op,
             ": diff_dst must have the concatenated shape ", shape_text(out), ", got ",
             shape_text(caller_dims(diff_dst)));
    for (int i = 0; i < n; ++i)
        require(!diff_srcs[i] || (diff_srcs[i]->dims == srcs[i]->dims &&
                                  diff_srcs[i]->dtype == first.dtype),
                op, ": diff_srcs[", i, "] must have the shape of srcs[", i, "] and its dtype");
    // Each gradient is a slice of diff_dst along the axis, read from a
    // row-major copy seen in caller order: the slice's dims with the copy's
    // strides, from the address where it starts (a desc without an offset,
    // which bfloat16's byte-exact copies need).
    std::unique_ptr<Tensor> holder;
    const Tensor &dy = row_major(scope, diff_dst, holder);
    const dnnl::memory::desc dy_caller =
        dy.desc.permute_axes(onednn_to_caller_perm(rank, dy.layout));
    const Dims dy_strides = dy_caller.get_strides();
    const size_t element = dnnl::memory::data_type_size(dy_caller.get_data_type());
    std::vector<std::unique_ptr<Tensor>> created(n);
    int64_t offset = 0;
    for (int i = 0; i < n; ++i) {
        const Tensor &src = *srcs[i];
        const Dims ci = caller_dims(src);
        const char *start = static_cast<const char *>(dy.data) +
                            static_cast<size_t>(offset * dy_strides[caller_axis]) * element;
        offset += ci[caller_axis];
        const dnnl::memory::desc slice(ci, dy_caller.get_data_type(), dy_strides);
        Tensor *t = diff_srcs[i];
        if (!t) {
            created[i] = make_owned_tensor(layout::plain_desc(src.dims, onednn_float(src.dtype),
                                                              src.layout),
                                           src.layout, src.dtype);
            t = created[i].get();
        }
        // The gradient's bytes seen in caller order (any layout).
        const dnnl::memory::desc t_caller =
            t->desc.permute_axes(onednn_to_caller_perm(rank, t->layout));
        reorder(scope, slice, start, t_caller, t->data);
    }
    for (int i = 0; i < n; ++i) Handler::publish(created[i], &diff_srcs[i]);
}

} // namespace mkc::ops
