// The functions our activation kernels are made of (activation_kernels.cpp),
// on doubles from float inputs: exp, exp - 1, log, sigmoid and erfc with an
// error far below a float ulp (short polynomials suffice in double), and
// the activations built from them and their derivatives. No step calls the C library and every
// choice between cases is a select, so a loop of them vectorizes.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#define MKC_INLINE inline __attribute__((always_inline))

namespace mkc::ops::double_math {

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
    // In unsigned arithmetic: a NaN x gives a shift past int64's range
    // (the result is NaN whatever scale holds).
    const uint64_t exponent =
        static_cast<uint64_t>(bits_of(shifted)) + 1023u - static_cast<uint64_t>(bits_of(kRound));
    const double scale = from_bits(static_cast<int64_t>(exponent << 52));
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

// log(1 + u) for 0 <= u <= 1: below 2^-14 the series to u^4 (the rest is
// below u^5 / 5, far under a double ulp of u); above it log(1 + u), whose
// rounding of 1 + u costs at most 2^-53 / u relative, far under a float ulp.
MKC_INLINE double log1p_unit(double u) {
    const double series = u * (1.0 - u * (0.5 - u * (1.0 / 3.0 - u * 0.25)));
    return u < 0x1p-14 ? series : log_positive(1.0 + u);
}

// log(1 + e^(a x)) / a, a > 0, as max(t, 0) + log(1 + e^-|t|), t = a x:
// e^-|t| never overflows, and a very negative t keeps its tiny result.
MKC_INLINE double softplus_double(double x, double alpha) {
    const double t = alpha * x;
    const double y = (t > 0 ? t : 0.0) + log1p_unit(exp_double(-std::fabs(t)));
    return (t != t ? t : y) / alpha; // NaN stays NaN
}

// erfc(z) for z >= 0 as t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), with P a
// polynomial of degree 16 in s = (7t - 4) / 3 (the Chebyshev series fitted
// on 0 <= z <= 12, relative error below 2e-12, in powers of s), evaluated
// by Estrin's scheme: a chain of 16 dependent steps would leave the vector
// units waiting. Beyond z = 12, 0: erfc(12) is 1.4e-64, below any float gelu
// needs. z2 = z^2 is passed exactly.
MKC_INLINE double erfc_double(double z, double z2) {
    static constexpr double p[] = {
        -0.5748763016160815,    0.5856021047015761,     0.01932364334393634,
        -0.031907419112172965,  -0.0017648080515116431, 0.004319783189760415,
        -0.00020536397719033746, -0.0007041185281750653, 0.00016503444634885755,
        9.93266464615734e-05,   -5.507753221053635e-05, -6.67183781715295e-06,
        1.2653278770190826e-05, -1.3464707085556273e-06, -1.9486747190725987e-06,
        3.558785539702964e-07,  1.5431678756256287e-07,
    };
    const bool beyond = z > 12.0;
    z = beyond ? 12.0 : z;
    z2 = beyond ? 144.0 : z2;
    const double t = 1.0 / (1.0 + 0.5 * z);
    const double s = (7.0 * t - 4.0) * (1.0 / 3.0); // [1/7, 1] onto [-1, 1]
    const double s2 = s * s, s4 = s2 * s2, s8 = s4 * s4;
    const double q0 = (p[0] + p[1] * s) + (p[2] + p[3] * s) * s2;
    const double q1 = (p[4] + p[5] * s) + (p[6] + p[7] * s) * s2;
    const double q2 = (p[8] + p[9] * s) + (p[10] + p[11] * s) * s2;
    const double q3 = (p[12] + p[13] * s) + (p[14] + p[15] * s) * s2;
    const double poly = (q0 + q1 * s4) + (q2 + q3 * s4) * s8 + p[16] * (s8 * s8);
    return beyond ? 0.0 : t * exp_double(-z2 + poly);
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

// The derivatives, for the gradients. Where the activation is x f(x), the
// derivative's limits at +-inf are selected: the formula would meet
// inf * 0 there.
MKC_INLINE double at_infinities(double x, double below, double above, double y) {
    return std::fabs(x) == INFINITY ? (x > 0 ? above : below) : y;
}

// 1 - tanh(x)^2 = 4 / (e^x + e^-x)^2 (a sum: no cancellation as tanh -> 1).
MKC_INLINE double tanh_grad(double x) {
    const double c = exp_double(x) + exp_double(-x);
    return 4.0 / (c * c);
}

// d/dx log(1 + e^(a x)) / a = sigmoid(a x).
MKC_INLINE double softplus_grad(double x, double alpha) { return sigmoid_double(alpha * x); }

MKC_INLINE double sigmoid_grad(double x) { return sigmoid_double(x) * sigmoid_double(-x); }

MKC_INLINE double elu_grad(double x, double alpha) { return x > 0 ? 1.0 : alpha * exp_double(x); }

// d/dx x sigmoid(a x) = s + a x s (1 - s), s = sigmoid(a x), 1 - s = sigmoid(-a x).
MKC_INLINE double swish_grad(double x, double alpha) {
    const double ax = alpha * x;
    const double y = sigmoid_double(ax) * (1.0 + ax * sigmoid_double(-ax));
    // Its limits: 1 where a x -> +inf, 0 where a x -> -inf (0.5 for a = 0).
    return std::fabs(x) == INFINITY ? (ax > 0 ? 1.0 : (ax < 0 ? 0.0 : 0.5)) : y;
}

// Phi(x) + x phi(x), Phi through erfc as in gelu_erf_double.
MKC_INLINE double gelu_erf_grad(double x) {
    constexpr double inv_sqrt_2pi = 0.39894228040143267794;
    const double half_x2 = 0.5 * x * x;
    const double tail = erfc_double(std::fabs(x) * 0.70710678118654752440, half_x2);
    const double cdf = x < 0 ? 0.5 * tail : 1.0 - 0.5 * tail;
    return at_infinities(x, 0.0, 1.0, cdf + x * inv_sqrt_2pi * exp_double(-half_x2));
}

// d/dx x sigmoid(2u) = s + x s (1 - s) 2u', s = sigmoid(2u).
MKC_INLINE double gelu_tanh_grad(double x) {
    constexpr double k = 2.0 * 0.79788456080286535588; // 2 sqrt(2 / pi)
    const double u2 = k * (x + 0.044715 * x * x * x);
    const double du2 = k * (1.0 + 3.0 * 0.044715 * x * x);
    const double s = sigmoid_double(u2);
    return at_infinities(x, 0.0, 1.0, s + x * s * sigmoid_double(-u2) * du2);
}

// tanh(sp) + x (1 - tanh(sp)^2) sigmoid(x), sp = log(1 + e^x): with n =
// u (u + 2), u = e^x, tanh(sp) = n / (n + 2) and 1 - tanh(sp)^2 =
// 4 (n + 1) / (n + 2)^2. x is clamped at 300, where the second term is
// already 0 (its denominator overflows) and n still finite.
MKC_INLINE double mish_grad(double x) {
    const double u = exp_double(x > 300.0 ? 300.0 : x);
    const double n = u * (u + 2.0);
    const double m = n + 2.0;
    return at_infinities(x, 0.0, 1.0, n / m + x * (4.0 * (n + 1.0) / (m * m)) * sigmoid_double(x));
}

} // namespace mkc::ops::double_math
