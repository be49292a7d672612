// C ABI: backward (grad) operators. Every gradient output is optional (a
// NULL pointer: not computed) and follows the operators' in/out convention
// (*out NULL: a new tensor; else an existing one written into).
#include <initializer_list>
#include <string>
#include <vector>

#include "api/aliasing.hpp"
#include "api/eager_scope.hpp"
#include "api/guard.hpp"
#include "api/struct_size.hpp"
#include "ops/ops.hpp"

using namespace mkc;
using mkc::api::guard;
using mkc::api::sized_params;
using mkc::api::check_tensor_args;
using mkc::api::tensor_arg;
using mkc::api::write_result;

namespace {

// Validates an optional gradient output: a live tensor or NULL in *out,
// sharing no memory with any input (it is written while they are read).
// Messages name it "op: arg".
void check_grad_out(mkc_tensor **out, const char *op, const char *arg,
                    std::initializer_list<const mkc_tensor *> inputs) {
    if (out == nullptr || *out == nullptr) return;
    const Tensor &t = tensor_arg(*out, op, arg);
    require(!t.constant, op, ": ", arg, " is marked constant (its data must not change)");
    for (const mkc_tensor *in : inputs)
        if (in != nullptr && api::shares_memory(t, *in))
            fail(MKC_STATUS_INVALID_ARGUMENT, op, ": ", arg, " must not be one of the inputs ",
                 "(nor share memory with one)");
}

// Gradient outputs (already checked live) must not share memory either.
void check_grads_apart(const char *op,
                       std::initializer_list<std::pair<mkc_tensor **, const char *>> outs) {
    for (auto i = outs.begin(); i != outs.end(); ++i)
        for (auto j = i + 1; j != outs.end(); ++j)
            if (i->first && *i->first && j->first && *j->first &&
                api::shares_memory(**i->first, **j->first))
                fail(MKC_STATUS_INVALID_ARGUMENT, op, ": ", i->second, " and ", j->second,
                     " must not share memory");
}

void require_some(const char *op, std::initializer_list<mkc_tensor **> outs) {
    for (auto *o : outs)
        if (o) return;
    fail(MKC_STATUS_INVALID_ARGUMENT, op, ": no gradient requested (every output is NULL)");
}

mkc_status run_convolution_backward(const char *op, int k, bool transposed,
                                    const mkc_conv_params *params, const mkc_tensor *src,
                                    const mkc_tensor *weights, const mkc_tensor *diff_dst,
                                    mkc_tensor **diff_src, mkc_tensor **diff_weights,
                                    mkc_tensor **diff_bias) {
    return guard([&] {
        require(params != nullptr, op, ": params is NULL");
        mkc_conv_params older;
        const mkc_conv_params &p = sized_params(op, *params, older);
        check_tensor_args(op, {{src, "src"}, {weights, "weights"}, {diff_dst, "diff_dst"}});
        const Tensor &x = *src;
        const Tensor &w = *weights;
        const Tensor &dy = *diff_dst;
        require_some(op, {diff_src, diff_weights, diff_bias});
        for (auto [out, name] : {std::pair{diff_src, "diff_src"},
                                 std::pair{diff_weights, "diff_weights"},
                                 std::pair{diff_bias, "diff_bias"}})
            check_grad_out(out, op, name, {src, weights, diff_dst});
        check_grads_apart(op, {{diff_src, "diff_src"}, {diff_weights, "diff_weights"},
                               {diff_bias, "diff_bias"}});
        ops::convolution_backward(api::eager_scope(), op, k, transposed, p, x, w, dy, diff_src,
                                  diff_weights, diff_bias);
    });
}

} // namespace

extern "C" {

MKC_API mkc_status mkc_conv2d_backward(const mkc_conv_params *params, const mkc_tensor *src,
                                       const mkc_tensor *weights, const mkc_tensor *diff_dst,
                                       mkc_tensor **diff_src, mkc_tensor **diff_weights,
                                       mkc_tensor **diff_bias) {
    return run_convolution_backward("conv2d_backward", 2, false, params, src, weights, diff_dst,
                                    diff_src, diff_weights, diff_bias);
}

MKC_API mkc_status mkc_conv3d_backward(const mkc_conv_params *params, const mkc_tensor *src,
                                       const mkc_tensor *weights, const mkc_tensor *diff_dst,
                                       mkc_tensor **diff_src, mkc_tensor **diff_weights,
                                       mkc_tensor **diff_bias) {
    return run_convolution_backward("conv3d_backward", 3, false, params, src, weights, diff_dst,
                                    diff_src, diff_weights, diff_bias);
}

MKC_API mkc_status mkc_conv2d_transpose_backward(const mkc_conv_params *params,
                                                 const mkc_tensor *src,
                                                 const mkc_tensor *weights,
                                                 const mkc_tensor *diff_dst,
                                                 mkc_tensor **diff_src,
                                                 mkc_tensor **diff_weights,
                                                 mkc_tensor **diff_bias) {
    return run_convolution_backward("conv2d_transpose_backward", 2, true, params, src, weights,
                                    diff_dst, diff_src, diff_weights, diff_bias);
}

MKC_API mkc_status mkc_pool_backward(const mkc_pool_params *params, const mkc_tensor *src,
                                     const mkc_tensor *diff_dst, mkc_tensor **diff_src) {
    return guard([&] {
        const char *op = "pool_backward";
        require(params != nullptr, op, ": params is NULL");
        mkc_pool_params older;
        const mkc_pool_params &p = sized_params(op, *params, older);
        check_tensor_args(op, {{src, "src"}, {diff_dst, "diff_dst"}});
        const Tensor &x = *src;
        const Tensor &dy = *diff_dst;
        require_some(op, {diff_src});
        check_grad_out(diff_src, op, "diff_src", {src, diff_dst});
        ops::pool_backward(api::eager_scope(), p, x, dy, diff_src);
    });
}

MKC_API mkc_status mkc_activation_backward(mkc_activation_kind kind, float alpha, float beta,
                                           const char *name, const mkc_tensor *src,
                                           const mkc_tensor *diff_dst, mkc_tensor **diff_src) {
    return guard([&] {
        check_tensor_args("activation_backward", {{src, "src"}, {diff_dst, "diff_dst"}});
        const Tensor &x = *src;
        const Tensor &dy = *diff_dst;
        require_some("activation_backward", {diff_src});
        check_grad_out(diff_src, "activation_backward", "diff_src", {src});
        // In place over diff_dst when the gradient comes out in its layout.
        write_result(diff_src, {&x, &dy}, dy.desc == x.desc ? &dy : nullptr, false,
                     "activation_backward", [&](mkc_tensor **out) {
                         ops::activation_backward(api::eager_scope(), kind, alpha, beta, name, x,
                                                  dy, out);
                     });
    });
}

MKC_API mkc_status mkc_softmax_backward(int axis, int log, const char *name,
                                        const mkc_tensor *dst, const mkc_tensor *diff_dst,
                                        mkc_tensor **diff_src) {
    return guard([&] {
        check_tensor_args("softmax_backward", {{dst, "dst"}, {diff_dst, "diff_dst"}});
        const Tensor &y = *dst;
        const Tensor &dy = *diff_dst;
        require_some("softmax_backward", {diff_src});
        check_grad_out(diff_src, "softmax_backward", "diff_src", {dst, diff_dst});
        ops::softmax_backward(api::eager_scope(), axis, log != 0, name, y, dy, diff_src);
    });
}

MKC_API mkc_status mkc_linear_backward(const mkc_linear_params *params, const mkc_tensor *src,
                                       const mkc_tensor *weights, const mkc_tensor *diff_dst,
                                       mkc_tensor **diff_src, mkc_tensor **diff_weights,
                                       mkc_tensor **diff_bias) {
    return guard([&] {
        const char *op = "linear_backward";
        require(params != nullptr, op, ": params is NULL");
        mkc_linear_params older;
        const mkc_linear_params &p = sized_params(op, *params, older);
        check_tensor_args(op,
                          {{src, "src"}, {weights, "weights"}, {diff_dst, "diff_dst"}});
        const Tensor &x = *src;
        const Tensor &w = *weights;
        const Tensor &dy = *diff_dst;
        require_some(op, {diff_src, diff_weights, diff_bias});
        for (auto [out, what] : {std::pair{diff_src, "diff_src"},
                                 std::pair{diff_weights, "diff_weights"},
                                 std::pair{diff_bias, "diff_bias"}})
            check_grad_out(out, op, what, {src, weights, diff_dst});
        check_grads_apart(op, {{diff_src, "diff_src"}, {diff_weights, "diff_weights"},
                               {diff_bias, "diff_bias"}});
        ops::linear_backward(api::eager_scope(), p, x, w, dy, diff_src, diff_weights, diff_bias);
    });
}

MKC_API mkc_status mkc_layer_norm_backward(const mkc_layer_norm_params *params,
                                           const mkc_tensor *src, const mkc_tensor *scale,
                                           const mkc_tensor *shift, const mkc_tensor *diff_dst,
                                           mkc_tensor **diff_src, mkc_tensor **diff_scale,
                                           mkc_tensor **diff_shift) {
    return guard([&] {
        const char *op = "layer_norm_backward";
        require(params != nullptr, op, ": params is NULL");
        mkc_layer_norm_params older;
        const mkc_layer_norm_params &p = sized_params(op, *params, older);
        check_tensor_args(op, {{src, "src"},
                               {scale, "scale", true},
                               {shift, "shift", true},
                               {diff_dst, "diff_dst"}});
        const Tensor &x = *src;
        const Tensor &dy = *diff_dst;
        require_some(op, {diff_src, diff_scale, diff_shift});
        for (auto [out, what] : {std::pair{diff_src, "diff_src"},
                                 std::pair{diff_scale, "diff_scale"},
                                 std::pair{diff_shift, "diff_shift"}})
            check_grad_out(out, op, what, {src, scale, shift, diff_dst});
        check_grads_apart(op, {{diff_src, "diff_src"}, {diff_scale, "diff_scale"},
                               {diff_shift, "diff_shift"}});
        ops::layer_norm_backward(api::eager_scope(), p, x, scale, shift, dy, diff_src, diff_scale,
                                 diff_shift);
    });
}

MKC_API mkc_status mkc_batch_norm_backward(const mkc_batch_norm_params *params,
                                           const mkc_tensor *src, const mkc_tensor *mean,
                                           const mkc_tensor *variance, const mkc_tensor *scale,
                                           const mkc_tensor *shift, const mkc_tensor *diff_dst,
                                           mkc_tensor **diff_src, mkc_tensor **diff_scale,
                                           mkc_tensor **diff_shift) {
    return guard([&] {
        const char *op = "batch_norm_backward";
        require(params != nullptr, op, ": params is NULL");
        mkc_batch_norm_params older;
        const mkc_batch_norm_params &p = sized_params(op, *params, older);
        check_tensor_args(op, {{src, "src"},
                               {mean, "mean"},
                               {variance, "variance"},
                               {scale, "scale", true},
                               {shift, "shift", true},
                               {diff_dst, "diff_dst"}});
        const Tensor &x = *src;
        const Tensor &m = *mean;
        const Tensor &v = *variance;
        const Tensor &dy = *diff_dst;
        require_some(op, {diff_src, diff_scale, diff_shift});
        for (auto [out, what] : {std::pair{diff_src, "diff_src"},
                                 std::pair{diff_scale, "diff_scale"},
                                 std::pair{diff_shift, "diff_shift"}})
            check_grad_out(out, op, what, {src, mean, variance, scale, shift, diff_dst});
        check_grads_apart(op, {{diff_src, "diff_src"}, {diff_scale, "diff_scale"},
                               {diff_shift, "diff_shift"}});
        ops::batch_norm_backward(api::eager_scope(), p, x, m, v, scale, shift, dy, diff_src,
                                 diff_scale, diff_shift);
    });
}

MKC_API mkc_status mkc_lrn_backward(const mkc_lrn_params *params, const mkc_tensor *src,
                                    const mkc_tensor *diff_dst, mkc_tensor **diff_src) {
    return guard([&] {
        require(params != nullptr, "lrn_backward: params is NULL");
        mkc_lrn_params older;
        const mkc_lrn_params &p = sized_params("lrn_backward", *params, older);
        check_tensor_args("lrn_backward", {{src, "src"}, {diff_dst, "diff_dst"}});
        const Tensor &x = *src;
        const Tensor &dy = *diff_dst;
        require_some("lrn_backward", {diff_src});
        check_grad_out(diff_src, "lrn_backward", "diff_src", {src, diff_dst});
        ops::lrn_backward(api::eager_scope(), p, x, dy, diff_src);
    });
}

MKC_API mkc_status mkc_binary_backward(mkc_binary_kind kind, const char *name,
                                       const mkc_tensor *a, const mkc_tensor *b,
                                       const mkc_tensor *diff_dst, mkc_tensor **diff_a,
                                       mkc_tensor **diff_b) {
    return guard([&] {
        const char *op = "binary_backward";
        check_tensor_args(op, {{a, "a"}, {b, "b"}, {diff_dst, "diff_dst"}});
        const Tensor &ta = *a;
        const Tensor &tb = *b;
        const Tensor &dy = *diff_dst;
        require_some(op, {diff_a, diff_b});
        check_grad_out(diff_a, op, "diff_a", {a, b, diff_dst});
        check_grad_out(diff_b, op, "diff_b", {a, b, diff_dst});
        require(!diff_a || !diff_b || *diff_a == nullptr || *diff_a != *diff_b, op,
                ": diff_a and diff_b must be different tensors");
        check_grads_apart(op, {{diff_a, "diff_a"}, {diff_b, "diff_b"}});
        ops::binary_backward(api::eager_scope(), kind, name, ta, tb, dy, diff_a, diff_b);
    });
}

MKC_API mkc_status mkc_matmul_backward(const mkc_matmul_params *params, const mkc_tensor *a,
                                       const mkc_tensor *b, const mkc_tensor *bias,
                                       const mkc_tensor *diff_dst, mkc_tensor **diff_a,
                                       mkc_tensor **diff_b, mkc_tensor **diff_bias) {
    return guard([&] {
        const char *op = "matmul_backward";
        require(params != nullptr, op, ": params is NULL");
        mkc_matmul_params older;
        const mkc_matmul_params &p = sized_params(op, *params, older);
        check_tensor_args(op,
                          {{a, "a"}, {b, "b"}, {bias, "bias", true}, {diff_dst, "diff_dst"}});
        const Tensor &ta = *a;
        const Tensor &tb = *b;
        const Tensor &dy = *diff_dst;
        require_some(op, {diff_a, diff_b, diff_bias});
        for (auto [out, what] : {std::pair{diff_a, "diff_a"},
                                 std::pair{diff_b, "diff_b"},
                                 std::pair{diff_bias, "diff_bias"}})
            check_grad_out(out, op, what, {a, b, bias, diff_dst});
        check_grads_apart(op, {{diff_a, "diff_a"}, {diff_b, "diff_b"}, {diff_bias, "diff_bias"}});
        ops::matmul_backward(api::eager_scope(), p, ta, tb, bias, dy, diff_a, diff_b, diff_bias);
    });
}

MKC_API mkc_status mkc_concat_backward(int axis, int n, const mkc_tensor *const *srcs,
                                       const mkc_tensor *diff_dst, mkc_tensor **diff_srcs) {
    return guard([&] {
        const char *op = "concat_backward";
        require(srcs != nullptr, op, ": srcs is NULL");
        require(diff_srcs != nullptr, op, ": diff_srcs is NULL");
        require(n >= 1 && n <= 4096, op, ": needs 1..4096 inputs, got ", n);
        std::vector<const Tensor *> tensors;
        for (int i = 0; i < n; ++i) {
            const std::string what = "concat_backward: srcs[" + std::to_string(i) + "]";
            tensors.push_back(&tensor_arg(srcs[i], what.c_str()));
        }
        check_tensor_args(op, {{diff_dst, "diff_dst"}});
        const Tensor &dy = *diff_dst;
        for (int i = 0; i < n; ++i) {
            if (!diff_srcs[i]) continue;
            const std::string what = "concat_backward: diff_srcs[" + std::to_string(i) + "]";
            const Tensor &out = tensor_arg(diff_srcs[i], what.c_str());
            require(!api::shares_memory(out, dy), what, " must not be diff_dst");
            for (int j = 0; j < n; ++j)
                require(!api::shares_memory(out, *tensors[j]) &&
                            (j == i || !diff_srcs[j] || !api::shares_memory(out, *diff_srcs[j])),
                        what, " must be neither an input nor another output");
        }
        ops::concat_backward(api::eager_scope(), axis, n, tensors.data(), dy, diff_srcs);
    });
}

} // extern "C"
