// C ABI: backward (grad) operators. Every gradient output is optional (a
// NULL pointer: not computed) and follows the operators' in/out convention
// (*out NULL: a new tensor; else an existing one written into).
#include <initializer_list>
#include <string>

#include "api/guard.hpp"
#include "ops/ops.hpp"

using namespace mkc;
using mkc::api::guard;
using mkc::api::tensor_arg;

namespace {

// Validates an optional gradient output: a live tensor or NULL in *out, and
// never one of the inputs (it is written while they are read).
void check_grad_out(mkc_tensor **out, const std::string &what,
                    std::initializer_list<const mkc_tensor *> inputs) {
    if (out == nullptr) return;
    if (*out != nullptr) tensor_arg(*out, ("*" + what).c_str());
    for (const mkc_tensor *in : inputs)
        require(*out == nullptr || *out != in, what, " must not be one of the inputs");
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
        const std::string o(op);
        require(params != nullptr, op, ": params is NULL");
        const Tensor &x = tensor_arg(src, (o + ": src").c_str());
        const Tensor &w = tensor_arg(weights, (o + ": weights").c_str());
        const Tensor &dy = tensor_arg(diff_dst, (o + ": diff_dst").c_str());
        require_some(op, {diff_src, diff_weights, diff_bias});
        for (auto [out, name] : {std::pair{diff_src, ": diff_src"},
                                 std::pair{diff_weights, ": diff_weights"},
                                 std::pair{diff_bias, ": diff_bias"}})
            check_grad_out(out, o + name, {src, weights, diff_dst});
        ops::convolution_backward(op, k, transposed, *params, x, w, dy, diff_src, diff_weights,
                                  diff_bias);
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

} // extern "C"
