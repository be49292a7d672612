// C ABI: operators.
#include <cstring>
#include <string>
#include <vector>

#include "api/aliasing.hpp"
#include "api/eager_scope.hpp"
#include "api/guard.hpp"
#include "api/struct_size.hpp"
#include "ops/ops.hpp"

using namespace mkc;
using mkc::api::guard;
using mkc::api::check_tensor_args;
using mkc::api::require_out;
using mkc::api::sized_params;
using mkc::api::tensor_arg;
using mkc::api::write_result;

namespace {

// Validates the in/out `dst` convention shared by every operator.
void check_dst(mkc_tensor **dst) {
    require_out(dst, "dst");
    if (*dst != nullptr) api::tensor_arg(*dst, "*dst");
}

} // namespace

extern "C" {

MKC_API mkc_status mkc_conv_params_init(mkc_conv_params *params) {
    return guard([&] {
        require_out(params, "params");
        *params = mkc_conv_params{};
        params->struct_size = sizeof(mkc_conv_params);
        for (int i = 0; i < 3; ++i) params->stride[i] = params->dilation[i] = 1;
        params->groups = 1;
        params->data_format = MKC_LAYOUT_NCHW;
        params->activation = MKC_ACTIVATION_NONE;
    });
}

namespace {
mkc_status run_convolution(const char *op, int k, bool transposed, const mkc_conv_params *params,
                           const mkc_tensor *src, const mkc_tensor *weights,
                           const mkc_tensor *bias, mkc_tensor **dst) {
    return guard([&] {
        require(params != nullptr, op, ": params is NULL");
        mkc_conv_params older;
        const mkc_conv_params &p = sized_params(op, *params, older);
        require_out(dst, "dst");
        check_tensor_args(op, {{src, "src"}, {weights, "weights"}, {bias, "bias", true},
                               {*dst, "*dst", true}});
        write_result(dst, {src, weights, bias}, nullptr, p.sum != 0, op, [&](mkc_tensor **out) {
            ops::convolution(api::eager_scope(), op, k, transposed, p, *src, *weights, bias, out);
        });
    });
}
} // namespace

MKC_API mkc_status mkc_conv2d(const mkc_conv_params *params, const mkc_tensor *src,
                              const mkc_tensor *weights, const mkc_tensor *bias,
                              mkc_tensor **dst) {
    return run_convolution("conv2d", 2, false, params, src, weights, bias, dst);
}

MKC_API mkc_status mkc_conv3d(const mkc_conv_params *params, const mkc_tensor *src,
                              const mkc_tensor *weights, const mkc_tensor *bias,
                              mkc_tensor **dst) {
    return run_convolution("conv3d", 3, false, params, src, weights, bias, dst);
}

MKC_API mkc_status mkc_conv2d_transpose(const mkc_conv_params *params, const mkc_tensor *src,
                                        const mkc_tensor *weights, const mkc_tensor *bias,
                                        mkc_tensor **dst) {
    return run_convolution("conv2d_transpose", 2, true, params, src, weights, bias, dst);
}

MKC_API mkc_status mkc_activation(mkc_activation_kind kind, float alpha, float beta,
                                  const char *name, const mkc_tensor *src, mkc_tensor **dst) {
    return guard([&] {
        require_out(dst, "dst");
        check_tensor_args("activation", {{src, "src"}, {*dst, "*dst", true}});
        write_result(dst, {src}, src, false, "activation", [&](mkc_tensor **out) {
            ops::activation(api::eager_scope(), kind, alpha, beta, name, *src, out);
        });
    });
}

namespace {

// The fast path's tensors: per thread, re-described only when the shape
// changes, so a repeated call builds nothing (no descriptor, no handle).
struct PlainViews {
    Tensor src, dst;
    int ndims = 0;
    int64_t dims[MKC_MAX_NDIMS] = {};
};

PlainViews &plain_views(int ndims, const int64_t *dims) {
    thread_local PlainViews v;
    if (v.ndims != ndims || std::memcmp(v.dims, dims, sizeof(int64_t) * ndims) != 0) {
        check_dims("dims", ndims, dims, MKC_DTYPE_F32);
        const Dims d(dims, dims + ndims);
        const auto desc = layout::plain_desc(d, dnnl::memory::data_type::f32,
                                             MKC_LAYOUT_CHANNELS_FIRST);
        set_desc(v.src, desc);
        set_desc(v.dst, desc);
        v.ndims = ndims;
        std::memcpy(v.dims, dims, sizeof(int64_t) * ndims);
    }
    return v;
}

void activation_plain(const char *op, const mkc_activation_call *call, const float *src,
                      float *dst) {
    if (call == nullptr || src == nullptr || dst == nullptr)
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": call, src and dst must not be NULL");
    if (call->struct_size != sizeof(mkc_activation_call))
        api::check_struct_size(op, api::Sized<mkc_activation_call>::rule, call->struct_size);
    if (call->ndims < 1 || call->ndims > MKC_MAX_NDIMS)
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": ndims must be 1..", MKC_MAX_NDIMS, ", got ",
             call->ndims);
    PlainViews &v = plain_views(call->ndims, call->dims);
    const size_t nbytes = v.src.desc.get_size();
    const auto s0 = reinterpret_cast<uintptr_t>(src), d0 = reinterpret_cast<uintptr_t>(dst);
    if (s0 != d0 && s0 < d0 + nbytes && d0 < s0 + nbytes)
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": dst must be src itself or not overlap it");
    v.src.data = const_cast<float *>(src);
    v.dst.data = dst;
    mkc_tensor *out = &v.dst;
    ops::activation(api::eager_scope(), call->kind, call->alpha, call->beta, call->name, v.src,
                    &out);
}

} // namespace

MKC_API mkc_status mkc_activation_plain(const mkc_activation_call *call, const float *src,
                                        float *dst) {
    return guard([&] { activation_plain("activation_plain", call, src, dst); });
}

MKC_API mkc_status mkc_activation_plain_ref(const mkc_activation_call *call,
                                            const float *const *src_ref, float *const *dst_ref) {
    return guard([&] {
        if (src_ref == nullptr || dst_ref == nullptr)
            fail(MKC_STATUS_INVALID_ARGUMENT,
                 "activation_plain_ref: src_ref and dst_ref must not be NULL");
        activation_plain("activation_plain_ref", call, *src_ref, *dst_ref);
    });
}

MKC_API mkc_status mkc_softmax(int axis, int log, const char *name, const mkc_tensor *src,
                               mkc_tensor **dst) {
    return guard([&] {
        const Tensor &x = tensor_arg(src, "softmax: src");
        check_dst(dst);
        write_result(dst, {&x}, &x, false, "softmax", [&](mkc_tensor **out) {
            ops::softmax(api::eager_scope(), axis, log != 0, name, x, out);
        });
    });
}

MKC_API mkc_status mkc_binary(mkc_binary_kind kind, const char *name, const mkc_tensor *a,
                              const mkc_tensor *b, mkc_tensor **dst) {
    return guard([&] {
        const Tensor &ta = tensor_arg(a, "binary: a");
        const Tensor &tb = tensor_arg(b, "binary: b");
        check_dst(dst);
        // The operand of the result's shape is the one written over in place
        // (a when both are: b is then only read).
        const Tensor *in_place =
            *dst != nullptr && (*dst)->data == tb.data && ta.dims != tb.dims ? &tb : &ta;
        write_result(dst, {&ta, &tb}, in_place, false, "binary", [&](mkc_tensor **out) {
            ops::binary(api::eager_scope(), kind, name, ta, tb, out);
        });
    });
}

MKC_API mkc_status mkc_pool_params_init(mkc_pool_params *params) {
    return guard([&] {
        require_out(params, "params");
        *params = mkc_pool_params{};
        params->struct_size = sizeof(mkc_pool_params);
        params->kind = MKC_POOL_MAX;
        for (int i = 0; i < 3; ++i)
            params->kernel[i] = params->stride[i] = params->dilation[i] = 1;
        params->data_format = MKC_LAYOUT_NCHW;
    });
}

MKC_API mkc_status mkc_pool(const mkc_pool_params *params, const mkc_tensor *src,
                            mkc_tensor **dst) {
    return guard([&] {
        require(params != nullptr, "pool: params is NULL");
        mkc_pool_params older;
        const mkc_pool_params &p = sized_params("pool", *params, older);
        const Tensor &x = tensor_arg(src, "pool: src");
        check_dst(dst);
        write_result(dst, {&x}, nullptr, false, "pool",
                     [&](mkc_tensor **out) { ops::pool(api::eager_scope(), p, x, out); });
    });
}

MKC_API mkc_status mkc_linear_params_init(mkc_linear_params *params) {
    return guard([&] {
        require_out(params, "params");
        *params = mkc_linear_params{};
        params->struct_size = sizeof(mkc_linear_params);
    });
}

MKC_API mkc_status mkc_linear(const mkc_linear_params *params, const mkc_tensor *src,
                              const mkc_tensor *weights, const mkc_tensor *bias,
                              mkc_tensor **dst) {
    return guard([&] {
        require(params != nullptr, "linear: params is NULL");
        mkc_linear_params older;
        const mkc_linear_params &p = sized_params("linear", *params, older);
        const Tensor &x = tensor_arg(src, "linear: src");
        const Tensor &w = tensor_arg(weights, "linear: weights");
        const Tensor *b = bias ? &tensor_arg(bias, "linear: bias") : nullptr;
        check_dst(dst);
        write_result(dst, {&x, &w, b}, nullptr, false, "linear",
                     [&](mkc_tensor **out) { ops::linear(api::eager_scope(), p, x, w, b, out); });
    });
}

MKC_API mkc_status mkc_matmul_params_init(mkc_matmul_params *params) {
    return guard([&] {
        require_out(params, "params");
        *params = mkc_matmul_params{};
        params->struct_size = sizeof(mkc_matmul_params);
        params->scale = 1.f;
    });
}

MKC_API mkc_status mkc_matmul(const mkc_matmul_params *params, const mkc_tensor *a,
                              const mkc_tensor *b, const mkc_tensor *bias, mkc_tensor **dst) {
    return guard([&] {
        require(params != nullptr, "matmul: params is NULL");
        mkc_matmul_params older;
        const mkc_matmul_params &p = sized_params("matmul", *params, older);
        const Tensor &ta = tensor_arg(a, "matmul: a");
        const Tensor &tb = tensor_arg(b, "matmul: b");
        const Tensor *tbias = bias ? &tensor_arg(bias, "matmul: bias") : nullptr;
        check_dst(dst);
        write_result(dst, {&ta, &tb, tbias}, nullptr, false, "matmul", [&](mkc_tensor **out) {
            ops::matmul(api::eager_scope(), p, ta, tb, tbias, out);
        });
    });
}

MKC_API mkc_status mkc_layer_norm_params_init(mkc_layer_norm_params *params) {
    return guard([&] {
        require_out(params, "params");
        *params = mkc_layer_norm_params{};
        params->struct_size = sizeof(mkc_layer_norm_params);
        params->begin_norm_axis = -1;
        params->epsilon = 1e-5f;
    });
}

MKC_API mkc_status mkc_layer_norm(const mkc_layer_norm_params *params, const mkc_tensor *src,
                                  const mkc_tensor *scale, const mkc_tensor *shift,
                                  mkc_tensor **dst) {
    return guard([&] {
        require(params != nullptr, "layer_norm: params is NULL");
        mkc_layer_norm_params older;
        const mkc_layer_norm_params &p = sized_params("layer_norm", *params, older);
        require_out(dst, "dst");
        check_tensor_args("layer_norm", {{src, "src"}, {scale, "scale", true},
                                         {shift, "shift", true}, {*dst, "*dst", true}});
        write_result(dst, {src, scale, shift}, src, false, "layer_norm", [&](mkc_tensor **out) {
            ops::layer_norm(api::eager_scope(), p, *src, scale, shift, out);
        });
    });
}

MKC_API mkc_status mkc_batch_norm_params_init(mkc_batch_norm_params *params) {
    return guard([&] {
        require_out(params, "params");
        *params = mkc_batch_norm_params{};
        params->struct_size = sizeof(mkc_batch_norm_params);
        params->epsilon = 1e-5f;
        params->momentum = 0.9f;
        params->data_format = MKC_LAYOUT_NCHW;
    });
}

MKC_API mkc_status mkc_batch_norm(const mkc_batch_norm_params *params, const mkc_tensor *src,
                                  mkc_tensor *mean, mkc_tensor *variance,
                                  const mkc_tensor *scale, const mkc_tensor *shift,
                                  mkc_tensor *batch_mean, mkc_tensor *batch_variance,
                                  mkc_tensor **dst) {
    return guard([&] {
        require(params != nullptr, "batch_norm: params is NULL");
        mkc_batch_norm_params older;
        const mkc_batch_norm_params &p = sized_params("batch_norm", *params, older);
        require_out(dst, "dst");
        check_tensor_args("batch_norm",
                          {{src, "src"}, {mean, "mean", true}, {variance, "variance", true},
                           {scale, "scale", true}, {shift, "shift", true},
                           {batch_mean, "batch_mean", true},
                           {batch_variance, "batch_variance", true}, {*dst, "*dst", true}});
        if (p.training) {
            for (const mkc_tensor *running : {mean, variance})
                require(running == nullptr || !running->constant,
                        "batch_norm: training updates mean and variance, but one is marked "
                        "constant (its data must not change)");
            // Statistics written by the call, each apart from every other tensor.
            const api::NamedTensor written[] = {{mean, "mean"},
                                                {variance, "variance"},
                                                {batch_mean, "batch_mean"},
                                                {batch_variance, "batch_variance"}};
            for (size_t i = 0; i < 4; ++i) {
                api::require_separate(written[i].tensor, "batch_norm", written[i].name,
                                      {{src, "src"}, {scale, "scale"}, {shift, "shift"}});
                for (size_t j = i + 1; j < 4; ++j)
                    api::require_separate(written[i].tensor, "batch_norm", written[i].name,
                                          {written[j]});
            }
        }
        write_result(dst, {src, mean, variance, scale, shift, batch_mean, batch_variance}, src,
                     false, "batch_norm", [&](mkc_tensor **out) {
                         ops::batch_norm(api::eager_scope(), p, *src, mean, variance, scale, shift,
                                         out, batch_mean, batch_variance);
                     });
    });
}

MKC_API mkc_status mkc_lrn_params_init(mkc_lrn_params *params) {
    return guard([&] {
        require_out(params, "params");
        *params = mkc_lrn_params{};
        params->struct_size = sizeof(mkc_lrn_params);
        params->size = 5;
        params->alpha = 1e-4f;
        params->beta = 0.75f;
        params->k = 1.f;
        params->data_format = MKC_LAYOUT_NCHW;
    });
}

MKC_API mkc_status mkc_lrn(const mkc_lrn_params *params, const mkc_tensor *src,
                           mkc_tensor **dst) {
    return guard([&] {
        require(params != nullptr, "lrn: params is NULL");
        mkc_lrn_params older;
        const mkc_lrn_params &p = sized_params("lrn", *params, older);
        const Tensor &x = tensor_arg(src, "lrn: src");
        check_dst(dst);
        write_result(dst, {&x}, nullptr, false, "lrn",
                     [&](mkc_tensor **out) { ops::lrn(api::eager_scope(), p, x, out); });
    });
}

MKC_API mkc_status mkc_concat(int axis, int n, const mkc_tensor *const *srcs, const char *name,
                              mkc_tensor **dst) {
    return guard([&] {
        require(srcs != nullptr, "concat: srcs is NULL");
        require(n >= 1 && n <= 4096, "concat: needs 1..4096 inputs, got ", n);
        std::vector<const Tensor *> inputs;
        for (int i = 0; i < n; ++i) {
            const std::string what = "concat: srcs[" + std::to_string(i) + "]";
            inputs.push_back(&tensor_arg(srcs[i], what.c_str()));
        }
        check_dst(dst);
        write_result(dst, inputs.data(), inputs.size(), nullptr, false, "concat",
                     [&](mkc_tensor **out) {
                         ops::concat(api::eager_scope(), axis, n, inputs.data(), name, out);
                     });
    });
}

MKC_API mkc_status mkc_transpose(int n, const int *perm, const mkc_tensor *src,
                                 mkc_tensor **dst) {
    return guard([&] {
        require(perm != nullptr || n == 0, "transpose: perm is NULL");
        const Tensor &x = tensor_arg(src, "transpose: src");
        check_dst(dst);
        write_result(dst, {&x}, nullptr, false, "transpose", [&](mkc_tensor **out) {
            ops::transpose(api::eager_scope(), n, perm, x, out);
        });
    });
}

MKC_API mkc_status mkc_tensor_to_layout(const mkc_tensor *src, const char *format,
                                        mkc_tensor **dst) {
    return guard([&] {
        const Tensor &x = tensor_arg(src, "to_layout: src");
        require_out(dst, "dst");
        ops::to_layout(api::eager_scope(), format, x, dst);
    });
}

MKC_API mkc_status mkc_reshape(const mkc_tensor *src, int ndims, const int64_t *dims,
                               mkc_tensor **dst) {
    return guard([&] {
        const Tensor &x = tensor_arg(src, "reshape: src");
        require(dims != nullptr, "reshape: dims is NULL");
        check_dst(dst);
        write_result(dst, {&x}, nullptr, false, "reshape", [&](mkc_tensor **out) {
            ops::reshape(api::eager_scope(), ndims, dims, x, out);
        });
    });
}

} // extern "C"
