// Max / average pooling over 2-D (NCHW/NHWC) and 3-D (NCDHW/NDHWC) inputs,
// global pooling and ceil mode. Runs on the input's layout (a blocked conv
// output stays blocked: oneDNN's fastest case).
#include <string>

#include "common/engine.hpp"
#include "common/error.hpp"
#include "handler/handler.hpp"
#include "keys/keys.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

struct PoolEntry : PrimitiveEntry {
    dnnl::pooling_forward::primitive_desc pd;
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

dnnl::algorithm pool_algorithm(mkc_pool_kind kind) {
    switch (kind) {
    case MKC_POOL_MAX: return dnnl::algorithm::pooling_max;
    case MKC_POOL_AVG_INCLUDE_PAD: return dnnl::algorithm::pooling_avg_include_padding;
    default: return dnnl::algorithm::pooling_avg_exclude_padding;
    }
}

} // namespace

void pool(const mkc_pool_params &p, const Tensor &src, mkc_tensor **dst) {
    const char *op = pool_name(p.kind);
    require(src.dtype == MKC_DTYPE_F32, op, ": src must be float32");
    const Dims &x = onednn_dims(src);
    const int rank = static_cast<int>(x.size());
    require(rank == 4 || rank == 5, op, ": src must be 4-D (N,C,H,W) or 5-D (N,C,D,H,W), got rank ",
            rank);
    const int k = rank - 2;
    const mkc_layout data_format = layout::resolve(p.data_format, rank);
    Dims kernel(k), stride(k), pb(k), pe(k), y = {x[0], x[1]};
    for (int i = 0; i < k; ++i) {
        const int64_t in = x[2 + i];
        if (p.global) {
            kernel[i] = in;
            stride[i] = 1;
            pb[i] = pe[i] = 0;
        } else {
            kernel[i] = p.kernel[i];
            stride[i] = p.stride[i];
            pb[i] = p.pad_begin[i];
            pe[i] = p.pad_end[i];
            require(kernel[i] >= 1 && kernel[i] <= (int64_t(1) << 30), op,
                    ": kernel must be >= 1, got ", kernel[i]);
            require(stride[i] >= 1 && stride[i] <= (int64_t(1) << 30), op,
                    ": stride must be >= 1, got ", stride[i]);
            require(pb[i] >= 0 && pe[i] >= 0, op, ": padding must be >= 0");
            require(pb[i] < kernel[i] && pe[i] < kernel[i], op,
                    ": padding (", pb[i], ", ", pe[i], ") must be smaller than the kernel (",
                    kernel[i], ")");
        }
        const int64_t span = in + pb[i] + pe[i] - kernel[i];
        require(span >= 0, op, ": kernel (", kernel[i], ") is larger than the padded input (",
                in + pb[i] + pe[i], ") along spatial dim ", i);
        int64_t out = span / stride[i] + 1;
        if (p.ceil_mode && span % stride[i] != 0) {
            out += 1;
            // As PyTorch: the last window must start inside the input or the
            // begin padding.
            if ((out - 1) * stride[i] >= in + pb[i]) out -= 1;
            const int64_t overhang = (out - 1) * stride[i] + kernel[i] - (in + pb[i] + pe[i]);
            if (overhang > 0) {
                require(p.kind != MKC_POOL_AVG_INCLUDE_PAD, op,
                        ": ceil_mode with padding counted in the average is not supported "
                        "(the extra ceil-mode cells would be counted); use exclude-pad");
                pe[i] += overhang;
            }
        }
        y.push_back(out);
    }

    std::string default_name = op;
    if (p.global) default_name += ":global";
    else {
        default_name += ":k";
        keys::append_shape(default_name, kernel.data(), k);
        default_name += ":s";
        keys::append_shape(default_name, stride.data(), k);
        default_name += ":p";
        keys::append_shape(default_name, pb.data(), k);
        default_name += ',';
        keys::append_shape(default_name, pe.data(), k);
    }
    Handler handler(op, p.name, default_name, nullptr, x);
    handler.sign(6); // operator id
    handler.sign(p.kind);
    handler.sign(kernel);
    handler.sign(stride);
    handler.sign(pb);
    handler.sign(pe);
    handler.sign_layout(src, DNNL_ARG_SRC);
    auto entry = handler.acquire_primitive<PoolEntry>([&] {
        auto e = std::make_shared<PoolEntry>();
        const dnnl::memory::desc dst_md(y, dnnl::memory::data_type::f32,
                                        dnnl::memory::format_tag::any);
        e->pd = dnnl::pooling_forward::primitive_desc(
            cpu_engine(), dnnl::prop_kind::forward_inference, pool_algorithm(p.kind), src.desc,
            dst_md, stride, kernel, Dims(k, 0), pb, pe, user_scratchpad_attr());
        e->primitive = dnnl::pooling_forward(e->pd);
        e->set_args(e->pd, {DNNL_ARG_SRC, DNNL_ARG_DST});
        return e;
    });
    Handler::run_src_dst(*entry, src, dst, data_format, op);
    layout::set_target(data_format);
}

} // namespace mkc::ops
