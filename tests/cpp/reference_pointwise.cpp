// The element-wise reference kernels (activation, binary, softmax) against
// the eager operators, on odd shapes in both layouts.
#include <cmath>

#include "internal_test.hpp"
#include "reference_check.hpp"
#include "ops/ops.hpp"
#include "reference/kernels.hpp"

namespace mkc::test {
namespace {

struct Shape {
    Dims dims; // oneDNN order
    mkc_layout layout;
};
const Shape kShapes[] = {
    {{2, 19, 3, 5}, MKC_LAYOUT_CHANNELS_FIRST},  {{3, 7, 5, 4}, MKC_LAYOUT_CHANNELS_LAST},
    {{2, 5, 7}, MKC_LAYOUT_CHANNELS_LAST},       {{5, 33}, MKC_LAYOUT_CHANNELS_FIRST},
    {{1, 6, 2, 3, 4}, MKC_LAYOUT_CHANNELS_LAST},
};

// Tolerances, |got - want| <= rel |want| + abs: the reference rounds each
// double result once, oneDNN computes in float.
//   - relu, clip, abs, square, sqrt: one correctly rounded operation (or
//     none): 1e-6 relative (~8 ulps), no absolute floor.
//   - hardswish: x (alpha x + beta) evaluated in float cancels where the
//     factor crosses 0: 1e-6 relative over a 1e-6 absolute floor.
//   - elu, gelu, tanh, sigmoid, swish, mish, exp: oneDNN's polynomial
//     approximations, 1e-5 relative; the 1e-6 absolute floor covers the
//     results near 0 (gelu and mish for negative x, elu near 0), whose
//     relative error no float evaluation keeps small.
//   - log: oneDNN's approximation is accurate in absolute rather than
//     relative terms near x = 1 (a few 1e-6 where the result crosses 0, as
//     measured on a dense grid over (0, 8]): 1e-5 relative over a 5e-6
//     absolute floor.
struct Kind {
    mkc_activation_kind kind;
    float alpha, beta;
    bool positive; // defined on x >= 0 only (sqrt, log): fed |x|
    double rel, abs;
};
const Kind kKinds[] = {
    {MKC_ACTIVATION_RELU, 0.f, 0.f, false, 1e-6, 0},
    {MKC_ACTIVATION_RELU, 0.1f, 0.f, false, 1e-6, 0},
    {MKC_ACTIVATION_ELU, 0.7f, 0.f, false, 1e-5, 1e-6},
    {MKC_ACTIVATION_GELU_ERF, 0.f, 0.f, false, 1e-5, 1e-6},
    {MKC_ACTIVATION_GELU_TANH, 0.f, 0.f, false, 1e-5, 1e-6},
    {MKC_ACTIVATION_TANH, 0.f, 0.f, false, 1e-5, 1e-6},
    {MKC_ACTIVATION_SIGMOID, 0.f, 0.f, false, 1e-5, 1e-6},
    {MKC_ACTIVATION_SWISH, 1.f, 0.f, false, 1e-5, 1e-6},
    {MKC_ACTIVATION_SWISH, 1.7f, 0.f, false, 1e-5, 1e-6},
    {MKC_ACTIVATION_HARDSWISH, 1.f / 6, 0.5f, false, 1e-6, 1e-6},
    {MKC_ACTIVATION_HARDSWISH, 0.2f, 0.4f, false, 1e-6, 1e-6},
    {MKC_ACTIVATION_MISH, 0.f, 0.f, false, 1e-5, 1e-6},
    {MKC_ACTIVATION_CLIP, -0.3f, 0.6f, false, 1e-6, 0},
    {MKC_ACTIVATION_CLIP, 0.f, 6.f, false, 1e-6, 0},
    {MKC_ACTIVATION_SQRT, 0.f, 0.f, true, 1e-6, 0},
    {MKC_ACTIVATION_ABS, 0.f, 0.f, false, 1e-6, 0},
    {MKC_ACTIVATION_EXP, 0.f, 0.f, false, 1e-5, 1e-6},
    {MKC_ACTIVATION_LOG, 0.f, 0.f, true, 1e-5, 5e-6},
    {MKC_ACTIVATION_SQUARE, 0.f, 0.f, false, 1e-6, 0},
};

TEST(reference_activation_matches_eager_for_every_kind) {
    unsigned seed = 11;
    for (const Shape &s : kShapes) {
        for (const Kind &k : kKinds) {
            auto src = tensor(s.dims, s.layout, seed++);
            // [-4, 4] reaches the saturating parts of tanh, sigmoid and gelu.
            if (k.positive)
                rescale(*src, 4.f, 1e-3f, true);
            else
                rescale(*src, 4.f);
            mkc_tensor *dst = nullptr;
            ops::activation(thread_state().scope, k.kind, k.alpha, k.beta, nullptr, *src, &dst);
            const std::vector<float> want = take_values(dst);
            const std::vector<float> x = values(*src);
            std::vector<float> got(x.size());
            reference::activation(k.kind, k.alpha, k.beta, x.data(), got.data(),
                                  static_cast<int64_t>(x.size()));
            CHECK(close_to(got, want, k.rel, k.abs,
                           "activation " + std::to_string(k.kind) + " a=" +
                               std::to_string(k.alpha) + " layout " + std::to_string(s.layout)));
            // The element function alone gives the same values.
            bool same = true;
            for (size_t i = 0; i < x.size(); ++i)
                same = same && reference::activate(k.kind, k.alpha, k.beta, x[i]) == got[i];
            CHECK(same);
            // In place (dst = src) gives the same values.
            std::vector<float> in_place = x;
            reference::activation(k.kind, k.alpha, k.beta, in_place.data(), in_place.data(),
                                  static_cast<int64_t>(in_place.size()));
            CHECK(max_rel_diff(in_place, got) == 0);
        }
    }
}

// Outside the domain of sqrt and log, and at 0, the kernels give what the
// eager operator gives (NaN, -inf, 0).
TEST(reference_activation_matches_eager_at_domain_edges) {
    auto src = tensor({3, 17});
    auto *p = static_cast<float *>(src->data);
    p[0] = 0.f;
    p[1] = -0.f;
    p[2] = -1.f;
    p[3] = 1.f;
    for (mkc_activation_kind kind : {MKC_ACTIVATION_SQRT, MKC_ACTIVATION_LOG}) {
        mkc_tensor *dst = nullptr;
        ops::activation(thread_state().scope, kind, 0, 0, nullptr, *src, &dst);
        const std::vector<float> want = take_values(dst);
        const std::vector<float> x = values(*src);
        std::vector<float> got(x.size());
        reference::activation(kind, 0, 0, x.data(), got.data(), static_cast<int64_t>(x.size()));
        CHECK(close_to(got, want, 1e-5, 5e-6, "activation edge " + std::to_string(kind)));
    }
}

TEST(reference_activation_none_is_the_identity) {
    auto src = tensor({2, 19, 3, 5});
    const std::vector<float> x = values(*src);
    std::vector<float> got(x.size());
    reference::activation(MKC_ACTIVATION_NONE, 0.5f, 2.f, x.data(), got.data(),
                          static_cast<int64_t>(x.size()));
    CHECK(max_rel_diff(got, x) == 0);
    CHECK(reference::activate(MKC_ACTIVATION_NONE, 0, 0, -3.25f) == -3.25f);
}

// ------------------------------------------------------------------ binary

struct BinaryCase {
    Dims a, b; // oneDNN order
    mkc_layout a_layout, b_layout;
};
const BinaryCase kBinaryCases[] = {
    // Same shape, both layouts.
    {{2, 19, 3, 5}, {2, 19, 3, 5}, MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_FIRST},
    {{3, 7, 5, 4}, {3, 7, 5, 4}, MKC_LAYOUT_CHANNELS_LAST, MKC_LAYOUT_CHANNELS_LAST},
    // Per-channel, in either layout's caller order.
    {{2, 19, 3, 5}, {19, 1, 1}, MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_FIRST},
    {{3, 7, 5, 4}, {7}, MKC_LAYOUT_CHANNELS_LAST, MKC_LAYOUT_CHANNELS_FIRST},
    // A scalar, and the last axis.
    {{2, 19, 3, 5}, {1}, MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_FIRST},
    {{2, 19, 3, 5}, {5}, MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_FIRST},
    // a is the broadcast side (the eager op swaps the operands).
    {{1, 19, 1, 1}, {2, 19, 3, 5}, MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_FIRST},
    {{5, 1}, {5, 33}, MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_FIRST},
    // Neither has the output's shape.
    {{2, 1, 3, 1}, {19, 1, 5}, MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_FIRST},
    {{5, 1}, {1, 33}, MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_FIRST},
    // Rank 2 with a row, rank 3.
    {{5, 33}, {33}, MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_FIRST},
    {{2, 5, 7}, {2, 1, 7}, MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_FIRST},
};

// Every kind is one float operation (or a compare): exact, but for div,
// which the eager op computes as 1 / (b / a) when it swaps a and b - two
// roundings - hence 1e-6 relative (~8 ulps).
TEST(reference_binary_matches_eager_for_every_kind_and_broadcast) {
    unsigned seed = 101;
    for (const BinaryCase &c : kBinaryCases) {
        for (mkc_binary_kind kind : {MKC_BINARY_ADD, MKC_BINARY_SUB, MKC_BINARY_MUL, MKC_BINARY_DIV,
                                     MKC_BINARY_MAX, MKC_BINARY_MIN}) {
            auto a = tensor(c.a, c.a_layout, seed++);
            auto b = tensor(c.b, c.b_layout, seed++);
            // Keep divisors away from 0: a quotient near a pole says nothing.
            if (kind == MKC_BINARY_DIV)
                rescale(*b, 1.f, 0.25f, true);
            mkc_tensor *dst = nullptr;
            ops::binary(thread_state().scope, kind, nullptr, *a, *b, &dst);
            const Dims dst_dims = caller_dims(*dst);
            const std::vector<float> want = take_values(dst);
            const std::vector<float> av = values(*a), bv = values(*b);
            std::vector<float> got(want.size());
            reference::binary(kind, caller_dims(*a), av.data(), caller_dims(*b), bv.data(),
                              dst_dims, got.data());
            const double rel = kind == MKC_BINARY_DIV ? 1e-6 : 0;
            CHECK(close_to(got, want, rel, 0,
                           "binary " + std::to_string(kind) + " case " +
                               std::to_string(&c - kBinaryCases)));
            // In place where a has dst's dims.
            if (caller_dims(*a) == dst_dims) {
                std::vector<float> in_place = av;
                reference::binary(kind, dst_dims, in_place.data(), caller_dims(*b), bv.data(),
                                  dst_dims, in_place.data());
                CHECK(max_rel_diff(in_place, got) == 0);
            }
        }
    }
}

// A hand-worked broadcast: [2, 1] + [3] is [2, 3] with rows and columns
// stretched.
TEST(reference_binary_broadcasts_as_numpy) {
    const float a[] = {10, 20};
    const float b[] = {1, 2, 3};
    std::vector<float> dst(6);
    reference::binary(MKC_BINARY_SUB, {2, 1}, a, {3}, b, {2, 3}, dst.data());
    CHECK((dst == std::vector<float>{9, 8, 7, 19, 18, 17}));
}

// ----------------------------------------------------------------- softmax

// Softmax sums `extent` exponentials: the error grows with the line's
// length, so 1e-6 relative per element of the axis (at least 4), over an
// absolute floor of 1e-7 for tiny probabilities. log-softmax subtracts the
// log of the sum, which oneDNN's log approximation carries with an absolute
// error of a few 1e-6 (see the activation tolerances): the same relative
// bound over log's 5e-6 absolute floor, which matters where a result is
// near 0 (the line's maximum when it dominates the sum).
TEST(reference_softmax_matches_eager_on_every_axis) {
    unsigned seed = 201;
    for (const Shape &s : kShapes) {
        for (bool log : {false, true}) {
            const int rank = static_cast<int>(s.dims.size());
            for (int axis = 0; axis < rank; ++axis) {
                auto src = tensor(s.dims, s.layout, seed++);
                rescale(*src, 6.f); // spread so the maximum matters
                mkc_tensor *dst = nullptr;
                ops::softmax(thread_state().scope, axis, log, nullptr, *src, &dst);
                const std::vector<float> want = take_values(dst);
                const Dims dims = caller_dims(*src);
                const std::vector<float> x = values(*src);
                std::vector<float> got(x.size());
                reference::softmax(dims, axis, log, x.data(), got.data());
                const double rel = 1e-6 * std::fmax(4.0, static_cast<double>(dims[axis]));
                CHECK(close_to(got, want, rel, log ? 5e-6 : 1e-7,
                               std::string(log ? "log_softmax" : "softmax") + " axis " +
                                   std::to_string(axis) + " layout " + std::to_string(s.layout)));
                std::vector<float> in_place = x;
                reference::softmax(dims, axis, log, in_place.data(), in_place.data());
                CHECK(max_rel_diff(in_place, got) == 0);
            }
        }
    }
}

// Each line sums to 1 (softmax) and its exponentials sum to 1 (log-softmax).
TEST(reference_softmax_lines_sum_to_one) {
    auto src = tensor({4, 9, 6});
    const std::vector<float> x = values(*src);
    for (bool log : {false, true}) {
        std::vector<float> y(x.size());
        reference::softmax({4, 9, 6}, 1, log, x.data(), y.data());
        double worst = 0;
        for (int o = 0; o < 4; ++o) {
            for (int i = 0; i < 6; ++i) {
                double sum = 0;
                for (int j = 0; j < 9; ++j) {
                    const double v = y[(o * 9 + j) * 6 + i];
                    sum += log ? std::exp(v) : v;
                }
                worst = std::fmax(worst, std::fabs(sum - 1));
            }
        }
        CHECK(worst < 1e-6);
    }
}

} // namespace
} // namespace mkc::test
