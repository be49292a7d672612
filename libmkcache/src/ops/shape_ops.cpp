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
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

// A concat's one attribute: the axis (counted from the front; also the
// key's suffix).
struct ConcatAttrs {
    int axis;
    template <typename V>
    void each(V &v) const {
        v.in_suffix("axis", axis);
    }
};

struct ConcatEntry : PrimitiveEntry {
    dnnl::concat::primitive_desc pd;
};

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

} // namespace

void concat(const CacheScope &scope, int axis, int n, const Tensor *const *srcs, const char *name,
            mkc_tensor **dst) {
    require(n >= 1 && n <= 4096, "concat: needs 1..4096 inputs, got ", n);
    // oneDNN numbers a primitive's sources below DNNL_ARG_MULTIPLE_DST: more
    // inputs are joined in runs of that many, and the runs then joined.
    constexpr int kMaxSources = DNNL_ARG_MULTIPLE_DST - DNNL_ARG_MULTIPLE_SRC;
    if (n > kMaxSources) {
        std::vector<std::unique_ptr<Tensor>> runs;
        std::vector<const Tensor *> parts;
        for (int begin = 0; begin < n; begin += kMaxSources) {
            mkc_tensor *part = nullptr;
            concat(scope, axis, std::min(kMaxSources, n - begin), srcs + begin, nullptr, &part);
            registry<Tensor>().remove(part); // internal: never handed out
            runs.emplace_back(part);
            parts.push_back(part);
        }
        concat(scope, axis, static_cast<int>(parts.size()), parts.data(), name, dst);
        return;
    }
    const Tensor &first = *srcs[0];
    const int rank = static_cast<int>(first.dims.size());
    require(axis >= -rank && axis < rank, "concat: axis ", axis, " is out of range for rank ", rank);
    const int caller_axis = axis < 0 ? axis + rank : axis;
    const int onednn_axis = layout::to_onednn_axis(caller_axis, rank, first.layout);
    Dims out = first.dims;
    out[onednn_axis] = 0;
    for (int i = 0; i < n; ++i) {
        const Tensor &t = *srcs[i];
        require(t.dtype == MKC_DTYPE_F32, "concat: input ", i, " must be float32");
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
    const ConcatAttrs attrs{caller_axis};
    std::string default_name = "concat:" + std::to_string(n), suffix;
    append_attrs_name(default_name, attrs);
    attrs_suffix(suffix, "", attrs);
    Handler handler(scope, "concat", name, default_name.c_str(), suffix.c_str(), first.dims);
    handler.sign(OpKind::concat);
    sign_attrs(handler, attrs);
    handler.sign(onednn_axis);
    handler.sign(n);
    // Input layouts are part of what the primitive was built for; compare
    // them all (more than the handler's fixed slots hold).
    std::vector<dnnl::memory::desc> src_mds;
    for (int i = 0; i < n; ++i) src_mds.push_back(srcs[i]->desc);
    for (int i = 0; i < n; ++i) {
        handler.sign(srcs[i]->dims);
        handler.sign(src_mds[i].get_strides());
        handler.sign(src_mds[i].get_inner_blks());
        handler.sign(src_mds[i].get_inner_idxs());
    }
    auto entry = handler.acquire_primitive<ConcatEntry>([&] {
        auto e = std::make_shared<ConcatEntry>();
        const dnnl::memory::desc dst_md(out, dnnl::memory::data_type::f32,
                                        dnnl::memory::format_tag::any);
        e->pd = dnnl::concat::primitive_desc(cpu_engine(), dst_md, onednn_axis, src_mds,
                                             user_scratchpad_attr());
        e->primitive = dnnl::concat(e->pd);
        std::vector<int> args;
        for (int i = 0; i < n; ++i) args.push_back(DNNL_ARG_MULTIPLE_SRC + i);
        args.push_back(DNNL_ARG_DST);
        e->set_args(e->pd, args);
        return e;
    });
    Handler::Output result =
        Handler::prepare_output(dst, *entry, DNNL_ARG_DST, first.layout, MKC_DTYPE_F32, "concat");
    {
        Handler::Execution exec(*entry, scope);
        for (int i = 0; i < n; ++i) exec.input(DNNL_ARG_MULTIPLE_SRC + i, *srcs[i]);
        exec.output(DNNL_ARG_DST, result.data);
        exec.run();
    }
    Handler::finish_output(scope, result, dst);
}

namespace {

// Copies src, seen in the caller's axis order (any layout), through
// `dst_view` (the result's bytes described with src's caller dims) into a
// row-major tensor of dims `out`: *dst, or a new one.
void write_row_major(const CacheScope &scope, const Tensor &src, const dnnl::memory::desc &dst_view,
                     const Dims &out, mkc_tensor **dst, const char *op) {
    const dnnl::memory::desc src_caller = src.desc.permute_axes(
        onednn_to_caller_perm(static_cast<int>(src.dims.size()), src.layout));
    const dnnl::memory::desc out_md(out, to_onednn(src.dtype), row_major_strides(out));
    std::unique_ptr<Tensor> created;
    Tensor *y = *dst;
    if (!y) {
        created = make_owned_tensor(out_md, MKC_LAYOUT_CHANNELS_FIRST, src.dtype);
        y = created.get();
    } else {
        require(y != &src, op, ": dst must not be src");
        require(y->dims == out && y->desc == out_md, op,
                ": dst must be a row-major tensor of the result's shape");
    }
    if (src_caller == dst_view) std::memcpy(y->data, src.data, out_md.get_size());
    else
        reorder(scope, src_caller, src.data, dst_view, y->data);
    Handler::publish(created, dst);
}

} // namespace

void transpose(const CacheScope &scope, int n, const int *perm, const Tensor &src,
               mkc_tensor **dst) {
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
    write_row_major(scope, src, dnnl::memory::desc(cd, to_onednn(src.dtype), view_strides), out,
                    dst, "transpose");
}

void to_layout(const CacheScope &scope, const char *format, const Tensor &src, mkc_tensor **dst) {
    require(format != nullptr, "to_layout: format is NULL");
    const std::string f = format;
    const int rank = static_cast<int>(src.dims.size());
    using tag = dnnl::memory::format_tag;
    dnnl::memory::desc want = empty_desc();
    mkc_layout label = src.layout;
    const auto dt = to_onednn(src.dtype);
    if (f == "NCHW" || f == "NCDHW" || f == "NCW" || f == "NC" || f == "plain") {
        want = layout::plain_desc(src.dims, dt, MKC_LAYOUT_CHANNELS_FIRST);
        label = MKC_LAYOUT_CHANNELS_FIRST;
    } else if (f == "NHWC" || f == "NDHWC" || f == "NWC") {
        require(rank >= 3, "to_layout: ", f, " needs rank >= 3");
        want = layout::plain_desc(src.dims, dt, MKC_LAYOUT_CHANNELS_LAST);
        label = MKC_LAYOUT_CHANNELS_LAST;
    } else if (f == "nChw8c" || f == "nChw16c" || f == "nCdhw8c" || f == "nCdhw16c") {
        const bool is3d = f[2] == 'd';
        require(rank == (is3d ? 5 : 4), "to_layout: ", f, " needs rank ", is3d ? 5 : 4);
        const bool b16 = f.find("16") != std::string::npos;
        want = dnnl::memory::desc(src.dims, dt,
                                  is3d ? (b16 ? tag::nCdhw16c : tag::nCdhw8c)
                                       : (b16 ? tag::nChw16c : tag::nChw8c));
    } else {
        fail(MKC_STATUS_INVALID_ARGUMENT, "to_layout: unknown format '", f,
             "' (NCHW, NHWC, NCDHW, NDHWC, nChw8c, nChw16c, nCdhw8c, nCdhw16c)");
    }
    require(*dst == nullptr, "to_layout: always creates a new tensor (*dst must be NULL)");
    auto t = make_owned_tensor(want, label, src.dtype);
    if (src.desc == want) std::memcpy(t->data, src.data, want.get_size());
    else
        reorder(scope, src.desc, src.data, want, t->data);
    Handler::publish(t, dst);
}

void reshape(const CacheScope &scope, int ndims, const int64_t *dims, const Tensor &src,
             mkc_tensor **dst) {
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
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": ", shape_text(cd), " (", count, " elements) cannot be viewed as ",
             shape_text(out));
    // The values in the caller's row-major order, re-read with the new dims.
    write_row_major(scope, src, dnnl::memory::desc(cd, to_onednn(src.dtype), row_major_strides(cd)),
                    out, dst, op);
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
    if (!(diff_dst.dtype == MKC_DTYPE_F32 && caller_dims(diff_dst) == out))
        fail(MKC_STATUS_INVALID_ARGUMENT, op,
             ": diff_dst must have the concatenated shape ", shape_text(out), ", got ",
             shape_text(caller_dims(diff_dst)));
    for (int i = 0; i < n; ++i)
        require(!diff_srcs[i] || diff_srcs[i]->dims == srcs[i]->dims, op, ": diff_srcs[", i,
                "] must have the shape of srcs[", i, "]");
    // Each gradient is a slice of diff_dst along the axis, read from a
    // row-major copy seen in caller order (any offset is addressable).
    std::unique_ptr<Tensor> holder;
    const Tensor &dy = row_major(scope, diff_dst, holder);
    const dnnl::memory::desc dy_caller =
        dy.desc.permute_axes(onednn_to_caller_perm(rank, dy.layout));
    std::vector<std::unique_ptr<Tensor>> created(n);
    int64_t offset = 0;
    for (int i = 0; i < n; ++i) {
        const Tensor &src = *srcs[i];
        const Dims ci = caller_dims(src);
        Dims offsets(rank, 0);
        offsets[caller_axis] = offset;
        offset += ci[caller_axis];
        const dnnl::memory::desc slice = dy_caller.submemory_desc(ci, offsets);
        Tensor *t = diff_srcs[i];
        if (!t) {
            created[i] = make_owned_tensor(layout::plain_desc(src.dims, dnnl::memory::data_type::f32,
                                                              src.layout),
                                           src.layout, MKC_DTYPE_F32);
            t = created[i].get();
        }
        // The gradient's bytes seen in caller order (any layout).
        const dnnl::memory::desc t_caller =
            t->desc.permute_axes(onednn_to_caller_perm(rank, t->layout));
        reorder(scope, slice, dy.data, t_caller, t->data);
    }
    for (int i = 0; i < n; ++i) Handler::publish(created[i], &diff_srcs[i]);
}

} // namespace mkc::ops
