// The activation the reference conv, linear and matmul apply after their
// sum (their fused post-op): a private stand-in for `activate` (kernels.hpp)
// while the element-wise kernels are written apart from these ones. The
// formulas are mkcache.h's (mkc_activation_kind), computed in double; once
// `activate` is built beside these kernels, the calls go to it and this
// header goes away.
#pragma once

#include <cmath>

#include "mkcache/mkcache.h"

namespace mkc::reference::stand_in {

inline float apply_activation(mkc_activation_kind kind, float alpha, float beta, float x) {
    const double v = x, a = alpha, b = beta;
    switch (kind) {
    case MKC_ACTIVATION_NONE:
        return x;
    case MKC_ACTIVATION_RELU:
        return static_cast<float>(v > 0 ? v : a * v);
    case MKC_ACTIVATION_ELU:
        return static_cast<float>(v > 0 ? v : a * std::expm1(v));
    case MKC_ACTIVATION_GELU_ERF:
        return static_cast<float>(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
    case MKC_ACTIVATION_GELU_TANH: {
        const double pi = 3.14159265358979323846;
        const double inner = std::sqrt(2.0 / pi) * (v + 0.044715 * v * v * v);
        return static_cast<float>(0.5 * v * (1.0 + std::tanh(inner)));
    }
    case MKC_ACTIVATION_TANH:
        return static_cast<float>(std::tanh(v));
    case MKC_ACTIVATION_SIGMOID:
        return static_cast<float>(1.0 / (1.0 + std::exp(-v)));
    case MKC_ACTIVATION_SWISH:
        return static_cast<float>(v / (1.0 + std::exp(-a * v)));
    case MKC_ACTIVATION_HARDSWISH: {
        const double gate = std::fmin(std::fmax(a * v + b, 0.0), 1.0);
        return static_cast<float>(v * gate);
    }
    case MKC_ACTIVATION_MISH:
        return static_cast<float>(v * std::tanh(std::log1p(std::exp(v))));
    case MKC_ACTIVATION_CLIP:
        return static_cast<float>(std::fmin(std::fmax(v, a), b));
    case MKC_ACTIVATION_SQRT:
        return static_cast<float>(std::sqrt(v));
    case MKC_ACTIVATION_ABS:
        return static_cast<float>(std::fabs(v));
    case MKC_ACTIVATION_EXP:
        return static_cast<float>(std::exp(v));
    case MKC_ACTIVATION_LOG:
        return static_cast<float>(std::log(v));
    case MKC_ACTIVATION_SQUARE:
        return static_cast<float>(v * v);
    default:
        break;
    }
    return x; // an operator's checks refuse any other kind before a kernel runs
}

} // namespace mkc::reference::stand_in
