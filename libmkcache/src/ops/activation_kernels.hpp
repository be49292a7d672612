// The activations computed by our own kernel instead of oneDNN's eltwise:
// those whose oneDNN kernel loses accuracy somewhere in the float32 domain
// (log near 1, exp and the functions built on it where the result is tiny
// or denormal, elu's exp(x) - 1 near 0, gelu and mish on the negative
// side). Each element is evaluated in double and rounded once to float, so
// the result is within about half an ulp of the exact value everywhere;
// the loops are written so the compiler vectorizes them, and a large array
// is split over the OpenMP threads oneDNN's kernels use.
#pragma once

#include <cstdint>

#include <oneapi/dnnl/dnnl.hpp>

#include "mkcache/mkcache.h"

namespace mkc::ops {

// Whether `kind` runs on activation_kernel rather than oneDNN's eltwise.
bool own_activation_kernel(mkc_activation_kind kind);

// dst[i] = kind(src[i]) for n floats, with the parameters alpha and beta as
// mkc_activation takes them; dst may be src.
void activation_kernel(mkc_activation_kind kind, float alpha, float beta, const float *src,
                       float *dst, int64_t n);

// The kernel on a value's whole buffer arranged as `desc` (padding
// included), then the padding of a blocked arrangement set back to zero,
// as every oneDNN primitive leaves it.
void activation_kernel(mkc_activation_kind kind, float alpha, float beta,
                       const dnnl::memory::desc &desc, const float *src, float *dst);

// The same for gradients: whether the gradient of `kind` runs on
// activation_backward_kernel (tanh's too: its forward is accurate in
// oneDNN, its derivative 1 - tanh^2 is not where tanh nears 1), and
// diff_src = diff_dst * kind'(src) on buffers arranged as `desc`, padding
// set back to zero; diff_src may be either input.
bool own_activation_backward_kernel(mkc_activation_kind kind);
void activation_backward_kernel(mkc_activation_kind kind, float alpha, float beta,
                                const dnnl::memory::desc &desc, const float *src,
                                const float *diff_dst, float *diff_src);

} // namespace mkc::ops
