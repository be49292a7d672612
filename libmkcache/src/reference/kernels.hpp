// The reference kernels: every forward operator in plain, portable C++ -
// clear loops, one thread, sums accumulated in double. A program runs them
// where its `reference` implementation is chosen for a node (the fallback
// where oneDNN refuses a case, and an independent check of oneDNN's
// results); they know nothing of oneDNN, the cache or tensors.
//
// Conventions shared by every kernel:
//   - float32 data, plain and dense: row-major over the dims as given, which
//     are the caller's order (as the value's layout label lays them out:
//     [N, C, H, W] for NCHW, [N, H, W, C] for NHWC);
//   - `channels_last` says where a channel axis is for the operators that
//     have one (conv, pool, batch_norm, lrn): last, else axis 1;
//   - shapes are valid (the operator's infer checked them) and the
//     destination's dims are given as infer gave them;
//   - a destination never overlaps a source unless the kernel says it may.
// The semantics are mkcache's eager operators' (mkcache.h), which the tests
// check each kernel against.
#pragma once

#include <cstdint>
#include <vector>

#include "common/dims.hpp"
#include "mkcache/mkcache.h"

namespace mkc::reference {

// ------------------------------------------------------------ element-wise

// f(x) of an activation kind with its alpha and beta (mkcache.h,
// mkc_activation_kind); NONE is the identity.
float activate(mkc_activation_kind kind, float alpha, float beta, float x);

// dst[i] = activate(src[i]) for n elements; dst may be src.
void activation(mkc_activation_kind kind, float alpha, float beta, const float *src, float *dst,
                int64_t n);

// dst[i] = erf(src[i]) for n elements; dst may be src.
void erf(const float *src, float *dst, int64_t n);

// dst[i] = src[i] rounded to the nearest integer, ties to even, for n
// elements; dst may be src.
void round(const float *src, float *dst, int64_t n);

// dst = src broadcast to dst_dims (numpy's rule), `bytes` per element.
void expand(const Dims &src_dims, const void *src, const Dims &dst_dims, size_t bytes, void *dst);

// dst = a (kind) b on integers of type T (int32_t or int64_t) with numpy
// broadcasting, wrapping on overflow; DIV truncates toward zero and throws
// INVALID_ARGUMENT on a zero divisor before writing anything.
template <typename T>
void integer_binary(mkc_binary_kind kind, const Dims &a_dims, const T *a, const Dims &b_dims,
                    const T *b, const Dims &dst_dims, T *dst);

// dst[i] = start + i * delta for i < n, computed in double, as `dtype`
// (F32, S32 or S64).
void range(double start, double delta, int64_t n, mkc_dtype dtype, void *dst);

// dst = a (kind) b on bytes holding 0 or 1, broadcast as numpy; NOT reads
// a alone (b is then a again).
void logical(mkc_logical_kind kind, const Dims &a_dims, const uint8_t *a, const Dims &b_dims,
             const uint8_t *b, const Dims &dst_dims, uint8_t *dst);

// dst = a (kind) b with numpy broadcasting, one byte (0 or 1) per element;
// a and b of `dtype` (F32, S32 or S64).
void compare(mkc_compare_kind kind, mkc_dtype dtype, const Dims &a_dims, const void *a,
             const Dims &b_dims, const void *b, const Dims &dst_dims, uint8_t *dst);

// dst = cond ? x : y element by element with numpy broadcasting of the
// three (cond one byte per element, 0 or not).
void where(const Dims &cond_dims, const uint8_t *cond, const Dims &x_dims, const float *x,
           const Dims &y_dims, const float *y, const Dims &dst_dims, float *dst);

// dst = src converted element by element from `from` to `to` (mkc_dtype
// values): floats to integers truncated toward zero (saturated at the
// integer's range; NaN to 0), to bool "not zero", bool to 0 or 1, to
// bfloat16 and float16 rounded to the nearest, ties to even.
void cast(mkc_dtype from, const void *src, mkc_dtype to, void *dst, int64_t n);
// dst[i] = v converted to `to` by cast's rules.
void store(mkc_dtype to, double v, void *dst, int64_t i);

// 8-bit quantization of `n` elements (ONNX's QuantizeLinear): dst (`to`,
// U8 or S8) = saturate(round_half_even(src / scale[c]) + zero_point[c]),
// c the element's index along the axis: `channels` scales (1: one for
// all), `inner` elements past the axis; zero_point of `to`'s type or null.
void quantize(const float *src, const float *scale, const void *zero_point, int64_t channels,
              int64_t inner, int64_t n, mkc_dtype to, void *dst);
// Its inverse (DequantizeLinear): dst = (src - zero_point[c]) * scale[c],
// src and zero_point of `from` (U8, S8 or S32).
void dequantize(mkc_dtype from, const void *src, const float *scale, const void *zero_point,
                int64_t channels, int64_t inner, int64_t n, float *dst);

// dst = a (op) b with numpy broadcasting: a's and b's dims right-aligned
// against dst's, size-1 dims stretched. dst may be a when a has dst's dims.
void binary(mkc_binary_kind kind, const Dims &a_dims, const float *a, const Dims &b_dims,
            const float *b, const Dims &dst_dims, float *dst);

// Softmax (or log-softmax) along `axis` (0 <= axis < rank); max-subtracted.
// dst may be src.
void softmax(const Dims &dims, int axis, bool log, const float *src, float *dst);

// ---------------------------------------------------------- normalisation

// Over the trailing dims from `begin_axis` (0 <= begin_axis < rank): (x -
// mean) / sqrt(biased variance + epsilon), times scale plus shift (each
// null or holding one value per normalised element). dst may be src.
void layer_norm(const Dims &dims, int begin_axis, float epsilon, const float *src,
                const float *scale, const float *shift, float *dst);

// Inference: per channel c, (x - mean[c]) / sqrt(variance[c] + epsilon) *
// scale[c] + shift[c] (scale, shift may be null: 1, 0). dst may be src.
void batch_norm(const Dims &dims, bool channels_last, float epsilon, const float *src,
                const float *mean, const float *variance, const float *scale, const float *shift,
                float *dst);

// Across channels: dst = src / (k + alpha / size * sum of src^2 over
// channels c - (size-1)/2 .. c + size/2, clipped at the edges)^beta - the
// eager mkcache.lrn's window (ONNX's): `size` channels, centred on c for an
// odd size, one more above c than below for an even one.
void lrn(const Dims &dims, bool channels_last, int64_t size, float alpha, float beta, float k,
         const float *src, float *dst);

// ---------------------------------------------------------------- spatial

// Max or average pooling (p.kind) over 1..3 spatial dims (from src's rank),
// with p's kernel, stride and padding (p.global: the whole extent); the
// output's dims as infer gave them (ceil_mode included). Padding cells never
// win a max; an average excludes or includes them as p.kind says.
void pool(const mkc_pool_params &p, bool channels_last, const Dims &src_dims, const float *src,
          const Dims &dst_dims, float *dst);

// Convolution (or its transpose, `transposed`) over 1..3 spatial dims with
// p's stride, padding, dilation (1 = dense), groups and output padding;
// weights [O, I/groups, k...] ([I, O/groups, k...] transposed), always
// channels-first; bias [O] or null. p.sum: dst holds the residual on entry
// and the result is added to it; then p's activation.
void conv(const mkc_conv_params &p, bool transposed, bool channels_last, const Dims &src_dims,
          const float *src, const Dims &weights_dims, const float *weights, const float *bias,
          const Dims &dst_dims, float *dst);

// ------------------------------------------------------------------ dense

// y [rows, out] = x [rows, in] @ weights [out, in]^T + bias [out] (null:
// none), then the activation.
void linear(int64_t rows, int64_t in, int64_t out, const float *x, const float *weights,
            const float *bias, mkc_activation_kind activation, float alpha, float beta, float *y);

// dst = activation(p.scale * (op(a) @ op(b) + bias) + addend) with op the
// transposes p asks for on the last two dims and numpy broadcasting of the
// batch dims (a lower rank gets leading 1s); bias [N] or null; the addend
// (null: none) broadcast into dst, its dims `addend_dims`.
void matmul(const mkc_matmul_params &p, const Dims &a_dims, const float *a, const Dims &b_dims,
            const float *b, const float *bias, const Dims &dst_dims, float *dst,
            const Dims *addend_dims = nullptr, const float *addend = nullptr);

// ----------------------------------------------------------------- shapes

// The sources joined along `axis` (0 <= axis < rank), in order.
void concat(int axis, const std::vector<Dims> &dims, const std::vector<const float *> &srcs,
            float *dst);

// dst's axis i is src's axis perm[i]; elements of `element_size` bytes.
void transpose(const Dims &dims, const std::vector<int> &perm, size_t element_size,
               const void *src, void *dst);

// ---------------------------------------------------------------- gather

// out = data's slices along `axis` (0 <= axis < rank) picked by `indices`
// (int32, or int64 when `int64`; negative ones count from the end), as
// ONNX's Gather, `bytes` per element. Throws INVALID_ARGUMENT (mkc::Error)
// naming an index out of range before writing anything.
void gather(const Dims &data_dims, const void *data, int axis, const Dims &index_dims,
            const void *indices, bool int64, size_t bytes, void *out);

// ONNX's GatherElements: out has index_dims (of data's rank, each at most
// data's dim off `axis`); out[p] = data[p with p[axis] = indices[p]].
// Errors as gather's.
void gather_elements(const Dims &data_dims, const void *data, int axis, const Dims &index_dims,
                     const void *indices, bool int64, size_t bytes, void *out);

// ONNX's GatherND with `batch_dims` leading batch dims: each of indices'
// rows of k coordinates picks a slice of data's last r - batch_dims - k
// dims within its batch. Errors as gather's.
void gather_nd(const Dims &data_dims, const void *data, int batch_dims, const Dims &index_dims,
               const void *indices, bool int64, size_t bytes, void *out);

// out[i...] = src[start[a] + i[a] * step[a], ...] for every axis a (dims as
// given; an axis not sliced has start 0, step 1), `bytes` per element.
void slice(const Dims &src_dims, const void *src, const Dims &start, const Dims &step,
           const Dims &out_dims, size_t bytes, void *out);

// out = src grown along each axis a by begin[a] elements before it and
// end[a] after it (negative: removed, before any is added; what is left of
// every axis is at least one element, and REFLECT adds at most that many
// minus one on a side), the added ones filled by `mode` (mkcache.h,
// mkc_pad_mode) - CONSTANT with the element at `fill` - `bytes` per element.
void pad(mkc_pad_mode mode, const Dims &src_dims, const void *src, const Dims &begin,
         const Dims &end, const void *fill, size_t bytes, void *out);

// ---------------------------------------------------------------- resize

// ONNX's Resize of float32 src to out_dims (mkcache.h, mkc_resize_params:
// its mode, coordinates, nearest, cubic_coeff_a, exclude_outside and
// antialias, checked by the caller): `lengths[a]` is the extent axis a's
// coordinates are mapped with (the result's dim when sizes are given,
// src's dim times the scale when scales are: the two differ where the
// product is not whole). Computed in double, one axis at a time.
void resize(const mkc_resize_params &params, const Dims &src_dims, const float *src,
            const std::vector<double> &lengths, const Dims &out_dims, float *out);

// ---------------------------------------------------------------- reduce

// The sum, mean, max or min of src (caller dims `dims`) over the axes in
// `axes` (a bit per axis; every bit set: all), written row-major over the
// dims that are left (the same bytes whether the reduced ones are kept as
// 1s or dropped). NaNs propagate through max and min.
void reduce(mkc_reduce_kind kind, const Dims &dims, uint32_t axes, const float *src, float *dst);

} // namespace mkc::reference
