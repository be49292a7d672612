// The reference linear and matmul against the eager operators: odd sizes,
// bias or none, fused activations; matmul's transposes, broadcast batch dims
// (a lower rank among them) and scale.
//
// Tolerance: the eager result sums the same K products (and the bias) in
// float32, in an order of its own, then scales: off by at most about
// (K + 2) * 2^-24 times the sum of the terms' magnitudes (the reference
// itself on absolute values), taken here as (K + 2) * 1e-7 of it, times the
// activation's steepest slope, plus the error of evaluating the activation
// (evaluation_error: one rounding for exact ones, oneDNN's own accuracy for
// its approximations of the others).
#include <cstdio>
#include <cstring>

#include "internal_test.hpp"
#include "ops/ops.hpp"
#include "reference/kernels.hpp"
#include "reference_check.hpp"

namespace mkc::test {
namespace {

struct LinearCase {
    Dims x; // [..., in]
    int64_t out;
    bool bias;
    mkc_activation_kind activation;
    float alpha, beta;
};

TEST(reference_linear_matches_eager) {
    const std::vector<LinearCase> cases = {
        {{3, 5, 19}, 7, true, MKC_ACTIVATION_NONE, 0.f, 0.f},
        {{3, 5, 19}, 7, false, MKC_ACTIVATION_NONE, 0.f, 0.f},
        {{13, 33}, 17, true, MKC_ACTIVATION_RELU, 0.f, 0.f},
        {{2, 3, 4, 70}, 45, false, MKC_ACTIVATION_GELU_ERF, 0.f, 0.f},
        {{1, 257}, 31, true, MKC_ACTIVATION_TANH, 0.f, 0.f},
        {{9, 1000}, 5, true, MKC_ACTIVATION_RELU, 0.2f, 0.f},
        {{6, 48}, 50, false, MKC_ACTIVATION_CLIP, -0.5f, 0.5f},
        {{2, 7, 21}, 3, true, MKC_ACTIVATION_GELU_TANH, 0.f, 0.f},
    };
    for (size_t index = 0; index < cases.size(); ++index) {
        const LinearCase &c = cases[index];
        const int64_t in = c.x.back();
        int64_t rows = 1;
        for (size_t i = 0; i + 1 < c.x.size(); ++i)
            rows *= c.x[i];
        mkc_linear_params p;
        mkc_linear_params_init(&p);
        p.activation = c.activation;
        p.activation_alpha = c.alpha;
        p.activation_beta = c.beta;
        auto x = tensor(c.x, MKC_LAYOUT_CHANNELS_FIRST, 41);
        auto w = tensor({c.out, in}, MKC_LAYOUT_CHANNELS_FIRST, 42);
        auto b = c.bias ? tensor({c.out}, MKC_LAYOUT_CHANNELS_FIRST, 43) : nullptr;
        mkc_tensor *dst = nullptr;
        ops::linear(thread_state().scope, p, *x, *w, b.get(), &dst);
        const std::vector<float> got = take_values(dst);

        const std::vector<float> xv = values(*x), wv = values(*w);
        const std::vector<float> bv = b ? values(*b) : std::vector<float>{};
        std::vector<float> want(rows * c.out), mag(rows * c.out);
        reference::linear(rows, in, c.out, xv.data(), wv.data(), b ? bv.data() : nullptr,
                          c.activation, c.alpha, c.beta, want.data());
        const std::vector<float> bm = magnitudes(bv);
        reference::linear(rows, in, c.out, magnitudes(xv).data(), magnitudes(wv).data(),
                          b ? bm.data() : nullptr, MKC_ACTIVATION_NONE, 0.f, 0.f, mag.data());
        CHECK(within(got, want, mag, double(in + 2), c.activation, "linear", index));
    }
}

// Every activation kind fused into linear (one row: each output then has a
// bias of its own). An error of e before the activation moves the result by
// what f changes over [pre - e, pre + e]: the reference run with its bias
// moved by -e and +e says how much, without knowing f's slope. sqrt and log
// get positive sums (positive inputs).
TEST(reference_linear_fuses_every_activation) {
    struct Kind {
        mkc_activation_kind kind;
        float alpha, beta;
    };
    const std::vector<Kind> kinds = {
        {MKC_ACTIVATION_RELU, 0.f, 0.f},
        {MKC_ACTIVATION_RELU, 0.1f, 0.f},
        {MKC_ACTIVATION_ELU, 0.7f, 0.f},
        {MKC_ACTIVATION_GELU_ERF, 0.f, 0.f},
        {MKC_ACTIVATION_GELU_TANH, 0.f, 0.f},
        {MKC_ACTIVATION_TANH, 0.f, 0.f},
        {MKC_ACTIVATION_SIGMOID, 0.f, 0.f},
        {MKC_ACTIVATION_SWISH, 1.5f, 0.f},
        {MKC_ACTIVATION_HARDSWISH, 1.f / 6, 0.5f},
        {MKC_ACTIVATION_MISH, 0.f, 0.f},
        {MKC_ACTIVATION_CLIP, -0.3f, 0.4f},
        {MKC_ACTIVATION_SQRT, 0.f, 0.f},
        {MKC_ACTIVATION_ABS, 0.f, 0.f},
        {MKC_ACTIVATION_EXP, 0.f, 0.f},
        {MKC_ACTIVATION_LOG, 0.f, 0.f},
        {MKC_ACTIVATION_SQUARE, 0.f, 0.f},
    };
    const int64_t in = 16, out = 23;
    for (size_t index = 0; index < kinds.size(); ++index) {
        const Kind &k = kinds[index];
        const bool positive = k.kind == MKC_ACTIVATION_SQRT || k.kind == MKC_ACTIVATION_LOG;
        auto x = tensor({1, in}, MKC_LAYOUT_CHANNELS_FIRST, 61);
        auto w = tensor({out, in}, MKC_LAYOUT_CHANNELS_FIRST, 62);
        auto b = tensor({out}, MKC_LAYOUT_CHANNELS_FIRST, 63);
        std::vector<float> xv = values(*x), wv = values(*w), bv = values(*b);
        if (positive) {
            xv = magnitudes(xv);
            wv = magnitudes(wv);
            bv = magnitudes(bv);
            std::memcpy(x->data, xv.data(), xv.size() * sizeof(float));
            std::memcpy(w->data, wv.data(), wv.size() * sizeof(float));
            std::memcpy(b->data, bv.data(), bv.size() * sizeof(float));
        }
        mkc_linear_params p;
        mkc_linear_params_init(&p);
        p.activation = k.kind;
        p.activation_alpha = k.alpha;
        p.activation_beta = k.beta;
        mkc_tensor *dst = nullptr;
        ops::linear(thread_state().scope, p, *x, *w, b.get(), &dst);
        const std::vector<float> got = take_values(dst);

        std::vector<float> want(out), mag(out), low(out), high(out), bl(out), bh(out);
        reference::linear(1, in, out, xv.data(), wv.data(), bv.data(), k.kind, k.alpha, k.beta,
                          want.data());
        reference::linear(1, in, out, magnitudes(xv).data(), magnitudes(wv).data(),
                          magnitudes(bv).data(), MKC_ACTIVATION_NONE, 0.f, 0.f, mag.data());
        for (int64_t o = 0; o < out; ++o) {
            const float e = static_cast<float>((in + 2) * 1e-7 * mag[o]);
            bl[o] = bv[o] - e;
            bh[o] = bv[o] + e;
        }
        reference::linear(1, in, out, xv.data(), wv.data(), bl.data(), k.kind, k.alpha, k.beta,
                          low.data());
        reference::linear(1, in, out, xv.data(), wv.data(), bh.data(), k.kind, k.alpha, k.beta,
                          high.data());
        for (int64_t o = 0; o < out; ++o) {
            const double moved = std::fmax(std::fabs(double(low[o]) - want[o]),
                                           std::fabs(double(high[o]) - want[o]));
            const double bound = moved + evaluation_error(k.kind) * std::fabs(want[o]);
            const double d = std::fabs(double(got[o]) - want[o]);
            if (!(d <= bound)) {
                std::fprintf(stderr,
                             "activation kind %d (alpha %g): output %lld: eager %.9g, "
                             "reference %.9g, off by %g (bound %g)\n",
                             static_cast<int>(k.kind), k.alpha, static_cast<long long>(o), got[o],
                             want[o], d, bound);
                CHECK(d <= bound);
                break;
            }
        }
    }
}

struct MatmulCase {
    Dims a, b; // as stored: [..., K, M] for a transposed a, [..., N, K] for b
    bool ta, tb, bias;
    float scale;
    mkc_activation_kind activation;
};

TEST(reference_matmul_matches_eager) {
    const auto none = MKC_ACTIVATION_NONE;
    const std::vector<MatmulCase> cases = {
        {{2, 3, 5, 7}, {2, 3, 7, 4}, false, false, false, 1.f, none},
        {{3, 7, 5}, {7, 6}, true, false, true, 1.f, none},
        {{2, 1, 5, 9}, {3, 4, 9}, false, true, false, 1.f, none},
        {{2, 3, 11, 5}, {3, 13, 11}, true, true, true, 0.125f, MKC_ACTIVATION_GELU_ERF},
        {{5, 6}, {2, 3, 6, 7}, false, false, true, 1.f, MKC_ACTIVATION_RELU},
        {{4, 1, 3, 17}, {1, 5, 17, 19}, false, false, true, 0.5f, MKC_ACTIVATION_RELU},
        {{2, 9, 300}, {300, 33}, false, false, true, 1.f, none},
        {{3, 2, 40, 6}, {3, 1, 40, 17}, true, false, false, -1.5f, MKC_ACTIVATION_TANH},
        {{1, 16, 64}, {2, 16, 64}, false, true, true, 0.125f, none},
    };
    for (size_t index = 0; index < cases.size(); ++index) {
        const MatmulCase &c = cases[index];
        mkc_matmul_params p;
        mkc_matmul_params_init(&p);
        p.transpose_a = c.ta;
        p.transpose_b = c.tb;
        p.scale = c.scale;
        p.activation = c.activation;
        const int64_t K = c.ta ? c.a[c.a.size() - 2] : c.a.back();
        const int64_t N = c.tb ? c.b[c.b.size() - 2] : c.b.back();
        auto a = tensor(c.a, MKC_LAYOUT_CHANNELS_FIRST, 51);
        auto b = tensor(c.b, MKC_LAYOUT_CHANNELS_FIRST, 52);
        auto bias = c.bias ? tensor({N}, MKC_LAYOUT_CHANNELS_FIRST, 53) : nullptr;
        mkc_tensor *dst = nullptr;
        ops::matmul(thread_state().scope, p, *a, *b, bias.get(), &dst);
        const Dims y_dims = caller_dims(*dst);
        const std::vector<float> got = take_values(dst);

        const std::vector<float> av = values(*a), bv = values(*b);
        const std::vector<float> biasv = bias ? values(*bias) : std::vector<float>{};
        std::vector<float> want(got.size()), mag(got.size());
        reference::matmul(p, c.a, av.data(), c.b, bv.data(), bias ? biasv.data() : nullptr, y_dims,
                          want.data());
        mkc_matmul_params q = p;
        q.scale = std::fabs(p.scale);
        q.activation = none;
        const std::vector<float> bm = magnitudes(biasv);
        reference::matmul(q, c.a, magnitudes(av).data(), c.b, magnitudes(bv).data(),
                          bias ? bm.data() : nullptr, y_dims, mag.data());
        CHECK(within(got, want, mag, double(K + 2), c.activation, "matmul", index));
    }
}

// Broadcasting by hand: a [2, 1, 2, 2] against b [3, 2, 2] is every pair of
// a's two matrices with b's three, dst [2, 3, 2, 2].
TEST(reference_matmul_broadcasts_batch_dims) {
    mkc_matmul_params p;
    mkc_matmul_params_init(&p);
    const std::vector<float> a = {1, 0, 0, 1, 2, 0, 0, 2}; // I, 2I
    const std::vector<float> b = {1, 2, 3, 4, 0, 1, 1, 0, -1, 0, 0, 1};
    std::vector<float> y(2 * 3 * 4);
    reference::matmul(p, {2, 1, 2, 2}, a.data(), {3, 2, 2}, b.data(), nullptr, {2, 3, 2, 2},
                      y.data());
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j)
            for (int e = 0; e < 4; ++e)
                CHECK(y[(i * 3 + j) * 4 + e] == (i + 1) * b[j * 4 + e]);
}

} // namespace
} // namespace mkc::test
