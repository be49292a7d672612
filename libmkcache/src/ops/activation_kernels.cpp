// Our own activation kernels (see activation_kernels.hpp): each function is
// evaluated in double from a float input, where a short polynomial leaves
// an error far below a float ulp, and rounded once. No step calls the C
// library, and every choice between cases is a select, so each loop
// vectorizes; it is compiled for AVX-512, AVX2 and the baseline, and the
// CPU picks one when the library is loaded.
#include "ops/activation_kernels.hpp"

#include <cmath>
#include <cstring>
#include <vector>

#include "common/serial.hpp"

namespace mkc::ops {

namespace {

#define MKC_INLINE inline __attribute__((always_inline))
#define MKC_CLONES __attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))

MKC_INLINE int64_t bits_of(double x) {
    int64_t b;
    std::memcpy(&b, &x, sizeof b);
    return b;
}

MKC_INLINE double from_bits(int64_t b) {
    double x;
    std::memcpy(&x, &b, sizeof x);
    return x;
}

// Adding this rounds a double below 2^51 in magnitude to an integer, which
// then sits in the sum's low bits.
constexpr double kRound = 0x1.8p52;

// exp(r) - 1 for |r| <= ln2 / 2: Taylor to r^11, whose remainder is below
// 1e-14 relative.
MKC_INLINE double expm1_small(double r) {
    double p = 1.0 / 39916800;
    p = p * r + 1.0 / 3628800;
    p = p * r + 1.0 / 362880;
    p = p * r + 1.0 / 40320;
    p = p * r + 1.0 / 5040;
    p = p * r + 1.0 / 720;
    p = p * r + 1.0 / 120;
    p = p * r + 1.0 / 24;
    p = p * r + 1.0 / 6;
    p = p * r + 0.5;
    return (p * r) * r + r;
}

// exp(x) for any x: 2^n exp(r) with r = x - n ln2. x is clamped to
// +-700, where 2^n is still a normal double and the result is far beyond
// float's range either way (NaN stays NaN).
MKC_INLINE double exp_double(double x) {
    constexpr double log2e = 1.4426950408889634074;
    constexpr double ln2_hi = 6.93147180369123816490e-01; // n ln2_hi is exact
    constexpr double ln2_lo = 1.90821492927058770002e-10;
    x = x > 700.0 ? 700.0 : x;
    x = x < -700.0 ? -700.0 : x;
    const double shifted = x * log2e + kRound;
    const double n = shifted - kRound;
    const double r = (x - n * ln2_hi) - n * ln2_lo;
    const double scale = from_bits((bits_of(shifted) + 1023 - bits_of(kRound)) << 52);
    return scale * (1.0 + expm1_small(r));
}

// exp(x) - 1: the polynomial itself near 0, where exp(x) - 1 would cancel;
// elsewhere the result is at least 0.29 in magnitude and the subtraction
// costs nothing.
MKC_INLINE double expm1_double(double x) {
    const double small = expm1_small(x);
    const double large = exp_double(x) - 1.0;
    return std::fabs(x) < 0.34657359027997264 ? small : large;
}

// log(x) for x > 0 finite (float's denormals are normal doubles): x = 2^e m
// with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m - 1) / (m + 1),
// |s| <= 0.172, whose series to s^15 leaves below 1e-13 relative; near 1
// (e = 0) the result is log m alone, with no cancellation.
MKC_INLINE double log_positive(double x) {
    constexpr double ln2 = 0.69314718055994530942;
    const int64_t b = bits_of(x);
    const int64_t exponent_bits = (b >> 52) - 1023;
    double m = from_bits((b & 0x000fffffffffffffLL) | 0x3ff0000000000000LL);
    const bool high = m > 1.4142135623730951;
    m = high ? m * 0.5 : m;
    // The exponent as a double through kRound's bits (an integer
    // conversion of 64-bit lanes would not vectorize without AVX-512).
    const double e = from_bits(bits_of(kRound) + exponent_bits + (high ? 1 : 0)) - kRound;
    const double s = (m - 1.0) / (m + 1.0);
    const double s2 = s * s;
    double p = 1.0 / 15;
    p = p * s2 + 1.0 / 13;
    p = p * s2 + 1.0 / 11;
    p = p * s2 + 1.0 / 9;
    p = p * s2 + 1.0 / 7;
    p = p * s2 + 1.0 / 5;
    p = p * s2 + 1.0 / 3;
    return e * ln2 + (2.0 * s + 2.0 * s * s2 * p);
}

MKC_INLINE double log_double(double x) {
    const double y = log_positive(x);
    // 0 -> -inf, inf -> inf, negative or NaN -> NaN.
    const double edge = x == 0 ? -INFINITY : (x == INFINITY ? INFINITY : NAN);
    return x > 0 && x < INFINITY ? y : edge;
}

MKC_INLINE double sigmoid_double(double x) { return 1.0 / (1.0 + exp_double(-x)); }

// erfc(z) for z >= 0 as t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), with P a
// Chebyshev series in t fitted on 0 <= z <= 12 (relative error below 2e-12);
// beyond, 0: erfc(12) is 1.4e-64, below any float gelu needs. z2 = z^2 is
// passed exactly.
MKC_INLINE double erfc_double(double z, double z2) {
    static constexpr double c[] = {
        -0.5659064103238112,     0.5640317929068857,     0.008736998253884593,
        -0.006827834330486966,   -0.00023329448978433388, 0.00020569643081703076,
        1.9792615164759294e-07,  -7.932617211576124e-06, 5.433546812219221e-07,
        3.005668822454167e-07,   -5.24424052217126e-08,  -8.50821739211784e-09,
        3.413229082107399e-09,   -2.9116531169472095e-12, -1.6252533799100903e-10,
        2.1721103147601098e-11,  4.709374620439541e-12,
    };
    const bool beyond = z > 12.0;
    z = beyond ? 12.0 : z;
    z2 = beyond ? 144.0 : z2;
    const double t = 1.0 / (1.0 + 0.5 * z);
    const double s = (7.0 * t - 4.0) / 3.0; // [1/7, 1] onto [-1, 1]
    double b1 = 0, b2 = 0;
    for (int k = 16; k >= 1; --k) {
        const double b0 = c[k] + 2.0 * s * b1 - b2;
        b2 = b1;
        b1 = b0;
    }
    return beyond ? 0.0 : t * exp_double(-z2 + (c[0] + s * b1 - b2));
}

// 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2): for x < 0 erfc of
// a positive argument, for x >= 0 2 - erfc(...) (no cancellation either way).
MKC_INLINE double gelu_erf_double(double x) {
    const double z = std::fabs(x) * 0.70710678118654752440;
    const double tail = erfc_double(z, 0.5 * x * x); // x^2 of a float is exact
    return 0.5 * x * (x < 0 ? tail : 2.0 - tail);
}

// The tanh form: 0.5 x (1 + tanh(u)) = x sigmoid(2u).
MKC_INLINE double gelu_tanh_double(double x) {
    constexpr double sqrt_2_over_pi = 0.79788456080286535588;
    return x * sigmoid_double(2.0 * sqrt_2_over_pi * (x + 0.044715 * x * x * x));
}

// x tanh(log(1 + e^x)) = x u (u + 2) / (u (u + 2) + 2) with u = e^x; beyond
// x = 20 the fraction is 1 in double (x clamped there so u^2 stays finite).
MKC_INLINE double mish_double(double x) {
    const double u = exp_double(x > 20.0 ? 20.0 : x);
    const double n = u * (u + 2.0);
    return x * (n / (n + 2.0));
}

// x f(x) with f(x) -> 0 as x -> -inf, where inf * (a tiny f) would give
// -inf: -0 there, the limit.
MKC_INLINE double vanishing(double x, double y) { return x == -INFINITY ? -0.0 : y; }

// One loop per kind, so the kind is decided once per call; `alpha` is the
// kind's parameter where it has one. Written out rather than through a
// lambda, which the compiler would not inline into the per-CPU clones.
#define MKC_ACTIVATION_LOOP(loop, expression)                                                    \
    MKC_CLONES void loop(const float *src, float *dst, int64_t n, double alpha) {               \
        (void)alpha;                                                                             \
        for (int64_t i = 0; i < n; ++i) {                                                        \
            const double x = src[i];                                                             \
            dst[i] = static_cast<float>(expression);                                             \
        }                                                                                        \
    }

MKC_ACTIVATION_LOOP(exp_loop, exp_double(x))
MKC_ACTIVATION_LOOP(log_loop, log_double(x))
MKC_ACTIVATION_LOOP(sigmoid_loop, sigmoid_double(x))
MKC_ACTIVATION_LOOP(swish_loop, std::fabs(x) == INFINITY && alpha * x < 0
                                    ? (x < 0 ? -0.0 : 0.0)
                                    : x * sigmoid_double(alpha * x))
MKC_ACTIVATION_LOOP(elu_loop, x > 0 ? x : alpha * expm1_double(x))
MKC_ACTIVATION_LOOP(gelu_erf_loop, vanishing(x, gelu_erf_double(x)))
MKC_ACTIVATION_LOOP(gelu_tanh_loop, vanishing(x, gelu_tanh_double(x)))
MKC_ACTIVATION_LOOP(mish_loop, vanishing(x, mish_double(x)))

#undef MKC_ACTIVATION_LOOP

// Sets every element of a blocked arrangement that lies beyond the value's
// dims (the padding of a blocked channel axis) to zero. The physical offset
// of a (padded) index is oneDNN's: the inner blocks, innermost last, then
// the outer strides.
void zero_padding(const dnnl::memory::desc &desc, float *data) {
    const auto dims = desc.get_dims();
    const auto padded = desc.get_padded_dims();
    if (dims == padded) return;
    const auto strides = desc.get_strides();
    const auto blocks = desc.get_inner_blks();
    const auto block_axes = desc.get_inner_idxs();
    const size_t rank = dims.size();
    std::vector<int64_t> index(rank, 0), pos(rank);
    for (;;) {
        bool in_padding = false;
        for (size_t d = 0; d < rank; ++d)
            in_padding = in_padding || index[d] >= dims[d];
        if (in_padding) {
            pos = index;
            int64_t offset = 0, step = 1;
            for (size_t k = blocks.size(); k-- > 0;) {
                const auto d = static_cast<size_t>(block_axes[k]);
                offset += (pos[d] % blocks[k]) * step;
                step *= blocks[k];
                pos[d] /= blocks[k];
            }
            for (size_t d = 0; d < rank; ++d)
                offset += pos[d] * strides[d];
            data[offset] = 0.0f;
        }
        size_t d = rank;
        while (d-- > 0 && ++index[d] == padded[d])
            index[d] = 0;
        if (d == static_cast<size_t>(-1)) break;
    }
}

} // namespace

bool own_activation_kernel(mkc_activation_kind kind) {
    switch (kind) {
    case MKC_ACTIVATION_ELU:
    case MKC_ACTIVATION_GELU_ERF:
    case MKC_ACTIVATION_GELU_TANH:
    case MKC_ACTIVATION_SIGMOID:
    case MKC_ACTIVATION_SWISH:
    case MKC_ACTIVATION_MISH:
    case MKC_ACTIVATION_EXP:
    case MKC_ACTIVATION_LOG:
        return true;
    default: // oneDNN's eltwise is accurate (or exact) for the others
        return false;
    }
}

namespace {

struct Job {
    mkc_activation_kind kind;
    double alpha;
    const float *src;
    float *dst;
};

void run_part(void *context, int64_t begin, int64_t end) {
    const Job &job = *static_cast<const Job *>(context);
    const float *src = job.src + begin;
    float *dst = job.dst + begin;
    const int64_t n = end - begin;
    const double alpha = job.alpha;
    switch (job.kind) {
    case MKC_ACTIVATION_ELU: elu_loop(src, dst, n, alpha); break;
    case MKC_ACTIVATION_GELU_ERF: gelu_erf_loop(src, dst, n, alpha); break;
    case MKC_ACTIVATION_GELU_TANH: gelu_tanh_loop(src, dst, n, alpha); break;
    case MKC_ACTIVATION_SIGMOID: sigmoid_loop(src, dst, n, alpha); break;
    case MKC_ACTIVATION_SWISH: swish_loop(src, dst, n, alpha); break;
    case MKC_ACTIVATION_MISH: mish_loop(src, dst, n, alpha); break;
    case MKC_ACTIVATION_EXP: exp_loop(src, dst, n, alpha); break;
    case MKC_ACTIVATION_LOG: log_loop(src, dst, n, alpha); break;
    default: break; // own_activation_kernel said no
    }
}

// Below this many elements waking the thread team costs more than it saves.
constexpr int64_t kParallelElements = 1 << 15;

} // namespace

void activation_kernel(mkc_activation_kind kind, float alpha, float, const float *src, float *dst,
                       int64_t n) {
    Job job{kind, alpha, src, dst};
    parallel_parts(n, kParallelElements, run_part, &job);
}

void activation_kernel(mkc_activation_kind kind, float alpha, float beta,
                       const dnnl::memory::desc &desc, const float *src, float *dst) {
    activation_kernel(kind, alpha, beta, src, dst,
                      static_cast<int64_t>(desc.get_size() / sizeof(float)));
    zero_padding(desc, dst);
}

} // namespace mkc::ops
