// Operator entry points used by the C API shim. Arguments are already
// validated as live handles; the operators validate everything else. Each
// takes the cache scope its entries live in (the eager API's: the calling
// thread's context).
#pragma once

#include "mkcache/mkcache.h"
#include "common/cache_scope.hpp"
#include "tensor/tensor.hpp"

namespace mkc::ops {

// The oneDNN algorithm and a short name of an activation kind (throws for
// NONE, unknown kinds and an alpha the kind cannot take).
struct ActivationInfo {
    dnnl::algorithm alg;
    const char *name;
};
ActivationInfo activation_info(mkc_activation_kind kind, float alpha);

// conv2d (k = 2), conv3d (k = 3), conv2d_transpose (k = 2, transposed).
void convolution(const CacheScope &scope, const char *op, int k, bool transposed,
                 const mkc_conv_params &params, const Tensor &src, const Tensor &weights,
                 const Tensor *bias, mkc_tensor **dst);

// Gradients of a convolution (each output optional; diff_bias needs
// diff_weights).
void convolution_backward(const CacheScope &scope, const char *op, int k, bool transposed,
                          const mkc_conv_params &params, const Tensor &src, const Tensor &weights,
                          const Tensor &diff_dst, mkc_tensor **diff_src, mkc_tensor **diff_weights,
                          mkc_tensor **diff_bias);

void activation(const CacheScope &scope, mkc_activation_kind kind, float alpha, float beta,
                const char *name, const Tensor &src, mkc_tensor **dst);

// Softmax (or log-softmax) along `axis` of the caller's dims (negative
// counts from the end).
void softmax(const CacheScope &scope, int axis, bool log, const char *name, const Tensor &src,
             mkc_tensor **dst);

// a <kind> b with numpy broadcasting over the caller's dims order.
void binary(const CacheScope &scope, mkc_binary_kind kind, const char *name, const Tensor &a,
            const Tensor &b, mkc_tensor **dst);

void pool(const CacheScope &scope, const mkc_pool_params &params, const Tensor &src,
          mkc_tensor **dst);

void linear(const CacheScope &scope, const mkc_linear_params &params, const Tensor &src,
            const Tensor &weights, const Tensor *bias, mkc_tensor **dst);
void matmul(const CacheScope &scope, const mkc_matmul_params &params, const Tensor &a,
            const Tensor &b, const Tensor *bias, mkc_tensor **dst);

void layer_norm(const CacheScope &scope, const mkc_layer_norm_params &params, const Tensor &src,
                const Tensor *scale, const Tensor *shift, mkc_tensor **dst);
void batch_norm(const CacheScope &scope, const mkc_batch_norm_params &params, const Tensor &src,
                Tensor *mean, Tensor *variance, const Tensor *scale, const Tensor *shift,
                mkc_tensor **dst, mkc_tensor *batch_mean, mkc_tensor *batch_variance);
void lrn(const CacheScope &scope, const mkc_lrn_params &params, const Tensor &src,
         mkc_tensor **dst);

void concat(const CacheScope &scope, int axis, int n, const Tensor *const *srcs, const char *name,
            mkc_tensor **dst);
void transpose(const CacheScope &scope, int n, const int *perm, const Tensor &src,
               mkc_tensor **dst);
void to_layout(const CacheScope &scope, const char *format, const Tensor &src, mkc_tensor **dst);

// Backward (grad) operators; see mkcache.h for the conventions.
void pool_backward(const CacheScope &scope, const mkc_pool_params &params, const Tensor &src,
                   const Tensor &diff_dst, mkc_tensor **diff_src);
void activation_backward(const CacheScope &scope, mkc_activation_kind kind, float alpha, float beta,
                         const char *name, const Tensor &src, const Tensor &diff_dst,
                         mkc_tensor **diff_src);
void softmax_backward(const CacheScope &scope, int axis, bool log, const char *name,
                      const Tensor &dst, const Tensor &diff_dst, mkc_tensor **diff_src);
void linear_backward(const CacheScope &scope, const mkc_linear_params &params, const Tensor &src,
                     const Tensor &weights, const Tensor &diff_dst, mkc_tensor **diff_src,
                     mkc_tensor **diff_weights, mkc_tensor **diff_bias);
void layer_norm_backward(const CacheScope &scope, const mkc_layer_norm_params &params,
                         const Tensor &src, const Tensor *scale, const Tensor *shift,
                         const Tensor &diff_dst, mkc_tensor **diff_src, mkc_tensor **diff_scale,
                         mkc_tensor **diff_shift);
void batch_norm_backward(const CacheScope &scope, const mkc_batch_norm_params &params,
                         const Tensor &src, const Tensor &mean, const Tensor &variance,
                         const Tensor *scale, const Tensor *shift, const Tensor &diff_dst,
                         mkc_tensor **diff_src, mkc_tensor **diff_scale, mkc_tensor **diff_shift);
void lrn_backward(const CacheScope &scope, const mkc_lrn_params &params, const Tensor &src,
                  const Tensor &diff_dst, mkc_tensor **diff_src);
void binary_backward(const CacheScope &scope, mkc_binary_kind kind, const char *name,
                     const Tensor &a, const Tensor &b, const Tensor &diff_dst, mkc_tensor **diff_a,
                     mkc_tensor **diff_b);
void matmul_backward(const CacheScope &scope, const mkc_matmul_params &params, const Tensor &a,
                     const Tensor &b, const Tensor *bias, const Tensor &diff_dst,
                     mkc_tensor **diff_a, mkc_tensor **diff_b, mkc_tensor **diff_bias);
void concat_backward(const CacheScope &scope, int axis, int n, const Tensor *const *srcs,
                     const Tensor &diff_dst, mkc_tensor **diff_srcs);

// Sums `full` over the dims `like` was broadcast along (numpy rules, caller
// order) times `scale`, into a tensor of like's shape and layout label and
// full's dtype (bfloat16 summed in float32, rounded once).
void reduce_sum_to(const CacheScope &scope, const Tensor &full, const Tensor &like, float scale,
                   mkc_tensor **dst, const char *op);

// src's values in the caller's row-major order, with new dims (one may be -1).
void reshape(const CacheScope &scope, int ndims, const int64_t *dims, const Tensor &src,
             mkc_tensor **dst);

// Dense plain copy of `src` in `layout` (the reorder behind export).
void export_plain(const CacheScope &scope, const Tensor &src, mkc_layout layout, void *dst,
                  size_t dst_bytes);

} // namespace mkc::ops
