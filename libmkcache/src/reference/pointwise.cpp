// The element-wise reference kernels: activations, binary operators with
// broadcasting, and softmax. Each element is computed in double and rounded
// once to float, so the kernels stay an independent, accurate check of the
// eager operators.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/error.hpp"

#include "common/half_floats.hpp"
#include "reference/kernels.hpp"
#include "tensor/tensor.hpp"

namespace mkc::reference {

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Row-major strides of `dims` padded with leading 1s to `rank`, with 0 for
// every size-1 dim: stepping along a stretched dim rereads the same value.
Dims broadcast_strides(const Dims &dims, size_t rank) {
    Dims strides(rank, 0);
    int64_t step = 1;
    for (size_t i = 0; i < dims.size(); ++i) {
        const size_t from_end = dims.size() - 1 - i;
        const size_t axis = rank - 1 - i;
        const int64_t extent = dims[from_end];
        strides[axis] = extent == 1 ? 0 : step;
        step *= extent;
    }
    return strides;
}

// Where each element of a broadcast result reads each of N operands: the
// result's flat index taken apart axis by axis from the last.
template <size_t N> class Broadcast {
public:
    Broadcast(const Dims &dst, const std::array<const Dims *, N> &operands) : dst_(dst) {
        for (size_t k = 0; k < N; ++k)
            strides_[k] = broadcast_strides(*operands[k], dst.size());
        for (int64_t d : dst)
            total_ *= d;
    }
    int64_t total() const { return total_; }
    std::array<int64_t, N> at(int64_t i) const {
        std::array<int64_t, N> offset{};
        for (size_t axis = dst_.size(); axis-- > 0;) {
            const int64_t place = i % dst_[axis];
            i /= dst_[axis];
            for (size_t k = 0; k < N; ++k)
                offset[k] += place * strides_[k][axis];
        }
        return offset;
    }

private:
    const Dims &dst_;
    std::array<Dims, N> strides_;
    int64_t total_ = 1;
};

float apply(mkc_binary_kind kind, float a, float b) {
    switch (kind) {
    case MKC_BINARY_ADD:
        return a + b;
    case MKC_BINARY_SUB:
        return a - b;
    case MKC_BINARY_MUL:
        return a * b;
    case MKC_BINARY_DIV:
        return a / b;
    case MKC_BINARY_MAX:
        return a > b ? a : b;
    case MKC_BINARY_MIN:
        return a < b ? a : b;
    default:
        break;
    }
    return NAN; // infer refused any other kind
}

} // namespace

float activate(mkc_activation_kind kind, float alpha, float beta, float x) {
    const double v = x, a = alpha, b = beta;
    double y = v;
    switch (kind) {
    case MKC_ACTIVATION_NONE:
        break;
    case MKC_ACTIVATION_RELU:
        y = v > 0 ? v : a * v;
        break;
    case MKC_ACTIVATION_ELU:
        y = v > 0 ? v : a * std::expm1(v);
        break;
    case MKC_ACTIVATION_GELU_ERF:
        // 1 + erf(t) as erfc(-t): no cancellation where erf(t) is near -1.
        y = 0.5 * v * std::erfc(-v / std::sqrt(2.0));
        break;
    case MKC_ACTIVATION_GELU_TANH: {
        // The tanh approximation, u = sqrt(2 / pi) (x + 0.044715 x^3), with
        // 0.5 (1 + tanh(u)) as sigmoid(2u): no cancellation where tanh(u)
        // is near -1.
        const double sqrt_2_over_pi = 0.79788456080286535588;
        y = v * sigmoid(2.0 * sqrt_2_over_pi * (v + 0.044715 * v * v * v));
        break;
    }
    case MKC_ACTIVATION_TANH:
        y = std::tanh(v);
        break;
    case MKC_ACTIVATION_SIGMOID:
        y = sigmoid(v);
        break;
    case MKC_ACTIVATION_SWISH:
        y = v * sigmoid(a * v);
        break;
    case MKC_ACTIVATION_HARDSWISH:
        y = v * std::fmin(1.0, std::fmax(0.0, a * v + b));
        break;
    case MKC_ACTIVATION_MISH:
        y = v * std::tanh(std::log1p(std::exp(v)));
        break;
    case MKC_ACTIVATION_CLIP:
        y = std::fmin(std::fmax(v, a), b);
        break;
    case MKC_ACTIVATION_SQRT:
        y = std::sqrt(v);
        break;
    case MKC_ACTIVATION_ABS:
        y = std::fabs(v);
        break;
    case MKC_ACTIVATION_EXP:
        y = std::exp(v);
        break;
    case MKC_ACTIVATION_LOG:
        y = std::log(v);
        break;
    case MKC_ACTIVATION_SQUARE:
        y = v * v;
        break;
    case MKC_ACTIVATION_SOFTPLUS: {
        // max(t, 0) + log1p(exp(-|t|)): exp never overflows, and log1p
        // keeps the tiny values of a very negative t.
        const double t = a * v;
        y = (std::fmax(t, 0.0) + std::log1p(std::exp(-std::fabs(t)))) / a;
        break;
    }
    default: // infer refused any other kind
        y = NAN;
        break;
    }
    return static_cast<float>(y);
}

void activation(mkc_activation_kind kind, float alpha, float beta, const float *src, float *dst,
                int64_t n) {
    // Each element is read before it is written, so dst may be src.
    for (int64_t i = 0; i < n; ++i)
        dst[i] = activate(kind, alpha, beta, src[i]);
}

void binary(mkc_binary_kind kind, const Dims &a_dims, const float *a, const Dims &b_dims,
            const float *b, const Dims &dst_dims, float *dst) {
    // dst[i] is written after a's element at the same place is read, so dst
    // may be a when a has dst's dims.
    const Broadcast<2> walk(dst_dims, {&a_dims, &b_dims});
    for (int64_t i = 0; i < walk.total(); ++i) {
        const auto at = walk.at(i);
        dst[i] = apply(kind, a[at[0]], b[at[1]]);
    }
}

void expand(const Dims &src_dims, const void *src, const Dims &dst_dims, size_t bytes,
            void *dst) {
    const Broadcast<1> walk(dst_dims, {&src_dims});
    const auto *from = static_cast<const char *>(src);
    auto *to = static_cast<char *>(dst);
    const auto n = static_cast<int64_t>(bytes);
    for (int64_t i = 0; i < walk.total(); ++i)
        std::memcpy(to + i * n, from + walk.at(i)[0] * n, bytes);
}

namespace {

template <typename T> bool compared(mkc_compare_kind kind, T a, T b) {
    switch (kind) {
    case MKC_COMPARE_EQUAL: return a == b;
    case MKC_COMPARE_LESS: return a < b;
    case MKC_COMPARE_LESS_EQUAL: return a <= b;
    case MKC_COMPARE_GREATER: return a > b;
    default: return a >= b;
    }
}

template <typename T>
void compare_as(mkc_compare_kind kind, const Dims &a_dims, const T *a, const Dims &b_dims,
                const T *b, const Dims &dst_dims, uint8_t *dst) {
    const Broadcast<2> walk(dst_dims, {&a_dims, &b_dims});
    for (int64_t i = 0; i < walk.total(); ++i) {
        const auto at = walk.at(i);
        dst[i] = compared(kind, a[at[0]], b[at[1]]) ? 1 : 0;
    }
}

} // namespace

void compare(mkc_compare_kind kind, mkc_dtype dtype, const Dims &a_dims, const void *a,
             const Dims &b_dims, const void *b, const Dims &dst_dims, uint8_t *dst) {
    switch (dtype) {
    case MKC_DTYPE_S32:
        return compare_as(kind, a_dims, static_cast<const int32_t *>(a), b_dims,
                          static_cast<const int32_t *>(b), dst_dims, dst);
    case MKC_DTYPE_S64:
        return compare_as(kind, a_dims, static_cast<const int64_t *>(a), b_dims,
                          static_cast<const int64_t *>(b), dst_dims, dst);
    default:
        return compare_as(kind, a_dims, static_cast<const float *>(a), b_dims,
                          static_cast<const float *>(b), dst_dims, dst);
    }
}

void logical(mkc_logical_kind kind, const Dims &a_dims, const uint8_t *a, const Dims &b_dims,
             const uint8_t *b, const Dims &dst_dims, uint8_t *dst) {
    const Broadcast<2> walk(dst_dims, {&a_dims, &b_dims});
    for (int64_t i = 0; i < walk.total(); ++i) {
        const auto at = walk.at(i);
        const bool x = a[at[0]] != 0, y = b[at[1]] != 0;
        dst[i] = kind == MKC_LOGICAL_AND ? x && y : kind == MKC_LOGICAL_OR ? x || y
               : kind == MKC_LOGICAL_XOR ? x != y : !x;
    }
}

template <typename T>
void integer_binary(mkc_binary_kind kind, const Dims &a_dims, const T *a, const Dims &b_dims,
                    const T *b, const Dims &dst_dims, T *dst) {
    const Broadcast<2> walk(dst_dims, {&a_dims, &b_dims});
    if (kind == MKC_BINARY_DIV) {
        int64_t nb = 1;
        for (int64_t d : b_dims)
            nb *= d;
        for (int64_t i = 0; i < nb; ++i)
            if (b[i] == 0)
                fail(MKC_STATUS_INVALID_ARGUMENT, "integer_binary: a divisor is 0 (b's element ",
                     i, ")");
    }
    // Sums and products in unsigned arithmetic: they wrap, as the header
    // says, where the signed ones would be undefined.
    using U = std::make_unsigned_t<T>;
    for (int64_t i = 0; i < walk.total(); ++i) {
        const auto at = walk.at(i);
        const T x = a[at[0]], y = b[at[1]];
        switch (kind) {
        case MKC_BINARY_ADD: dst[i] = static_cast<T>(static_cast<U>(x) + static_cast<U>(y)); break;
        case MKC_BINARY_SUB: dst[i] = static_cast<T>(static_cast<U>(x) - static_cast<U>(y)); break;
        case MKC_BINARY_MUL: dst[i] = static_cast<T>(static_cast<U>(x) * static_cast<U>(y)); break;
        case MKC_BINARY_DIV:
            // The one quotient past T's range (the least value over -1)
            // wraps to itself.
            dst[i] = y == -1 ? static_cast<T>(U{0} - static_cast<U>(x)) : static_cast<T>(x / y);
            break;
        case MKC_BINARY_MAX: dst[i] = std::max(x, y); break;
        default: dst[i] = std::min(x, y); break;
        }
    }
}
template void integer_binary<int32_t>(mkc_binary_kind, const Dims &, const int32_t *, const Dims &,
                                      const int32_t *, const Dims &, int32_t *);
template void integer_binary<int64_t>(mkc_binary_kind, const Dims &, const int64_t *, const Dims &,
                                      const int64_t *, const Dims &, int64_t *);

void range(double start, double delta, int64_t n, mkc_dtype dtype, void *dst) {
    for (int64_t i = 0; i < n; ++i) {
        const double v = start + static_cast<double>(i) * delta;
        if (dtype == MKC_DTYPE_F32)
            static_cast<float *>(dst)[i] = static_cast<float>(v);
        else if (dtype == MKC_DTYPE_S32)
            static_cast<int32_t *>(dst)[i] = static_cast<int32_t>(v);
        else
            static_cast<int64_t *>(dst)[i] = static_cast<int64_t>(v);
    }
}

void where(const Dims &cond_dims, const uint8_t *cond, const Dims &x_dims, const float *x,
           const Dims &y_dims, const float *y, const Dims &dst_dims, float *dst) {
    const Broadcast<3> walk(dst_dims, {&cond_dims, &x_dims, &y_dims});
    for (int64_t i = 0; i < walk.total(); ++i) {
        const auto at = walk.at(i);
        dst[i] = cond[at[0]] ? x[at[1]] : y[at[2]];
    }
}

namespace {

// An element as double (every int32 and int64 up to 2^53 exactly).
double load(mkc_dtype dtype, const void *src, int64_t i) {
    switch (dtype) {
    case MKC_DTYPE_F32: return static_cast<const float *>(src)[i];
    case MKC_DTYPE_S32: return static_cast<const int32_t *>(src)[i];
    case MKC_DTYPE_S64: return static_cast<double>(static_cast<const int64_t *>(src)[i]);
    case MKC_DTYPE_S8: return static_cast<const int8_t *>(src)[i];
    case MKC_DTYPE_U8: return static_cast<const uint8_t *>(src)[i];
    case MKC_DTYPE_BF16: return float_from_bf16(static_cast<const uint16_t *>(src)[i]);
    case MKC_DTYPE_F16: return float_from_f16(static_cast<const uint16_t *>(src)[i]);
    default: return static_cast<const uint8_t *>(src)[i] != 0 ? 1.0 : 0.0;
    }
}

template <typename T> T truncated(double v) {
    if (std::isnan(v))
        return 0;
    const double lo = static_cast<double>(std::numeric_limits<T>::min());
    const double hi = static_cast<double>(std::numeric_limits<T>::max());
    if (v <= lo)
        return std::numeric_limits<T>::min();
    if (v >= hi)
        return std::numeric_limits<T>::max();
    return static_cast<T>(v); // toward zero
}

} // namespace

void store(mkc_dtype to, double v, void *dst, int64_t i) {
    // To the 16-bit floats through float32: rounding twice (to float32's 24
    // bits, then to 8 or 11) gives the correctly rounded result, as each
    // format's precision is at most half of float32's less one bit.
    switch (to) {
    case MKC_DTYPE_F32: static_cast<float *>(dst)[i] = static_cast<float>(v); break;
    case MKC_DTYPE_S32: static_cast<int32_t *>(dst)[i] = truncated<int32_t>(v); break;
    case MKC_DTYPE_S64: static_cast<int64_t *>(dst)[i] = truncated<int64_t>(v); break;
    case MKC_DTYPE_S8: static_cast<int8_t *>(dst)[i] = truncated<int8_t>(v); break;
    case MKC_DTYPE_U8: static_cast<uint8_t *>(dst)[i] = truncated<uint8_t>(v); break;
    case MKC_DTYPE_BF16:
        static_cast<uint16_t *>(dst)[i] = bf16_from_float(static_cast<float>(v));
        break;
    case MKC_DTYPE_F16:
        static_cast<uint16_t *>(dst)[i] = f16_from_float(static_cast<float>(v));
        break;
    default: static_cast<uint8_t *>(dst)[i] = v != 0.0 || std::isnan(v) ? 1 : 0; break;
    }
}

void cast(mkc_dtype from, const void *src, mkc_dtype to, void *dst, int64_t n) {
    if (from == to) { // every value kept exactly, int64 beyond 2^53 too
        std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(from));
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        if (from == MKC_DTYPE_S32 && to == MKC_DTYPE_S64) {
            static_cast<int64_t *>(dst)[i] = static_cast<const int32_t *>(src)[i];
            continue;
        }
        store(to, load(from, src, i), dst, i);
    }
}

void softmax(const Dims &dims, int axis, bool log, const float *src, float *dst) {
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; ++i)
        outer *= dims[i];
    for (size_t i = axis + 1; i < dims.size(); ++i)
        inner *= dims[i];
    const int64_t extent = dims[axis];

    for (int64_t o = 0; o < outer; ++o) {
        for (int64_t in = 0; in < inner; ++in) {
            // One line along the axis: its elements are `inner` apart.
            const int64_t base = o * extent * inner + in;
            double max = -INFINITY;
            for (int64_t j = 0; j < extent; ++j)
                max = std::fmax(max, src[base + j * inner]);
            double sum = 0;
            for (int64_t j = 0; j < extent; ++j)
                sum += std::exp(src[base + j * inner] - max);
            // The line's maximum and sum are known before any element is
            // written, so dst may be src.
            const double log_sum = std::log(sum);
            for (int64_t j = 0; j < extent; ++j) {
                const double shifted = src[base + j * inner] - max;
                dst[base + j * inner] =
                    static_cast<float>(log ? shifted - log_sum : std::exp(shifted) / sum);
            }
        }
    }
}

void erf(const float *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        dst[i] = static_cast<float>(std::erf(static_cast<double>(src[i])));
}

void round(const float *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        // Below 2^23, |x| + 2^23 lies in [2^23, 2^24), whose floats are the
        // integers: the sum rounds |x| to the nearest, ties to even (2^23 is
        // even), and taking 2^23 away again is exact. At 2^23 and past it
        // every float is an integer, kept as are infinities and NaN. The
        // sign goes back on last, so -0.4 gives -0 as rint does.
        const float x = src[i], a = std::fabs(x);
        dst[i] = a < 8388608.0f ? std::copysign((a + 8388608.0f) - 8388608.0f, x) : x;
    }
}

} // namespace mkc::reference
