// The normalisation reference kernels (layer_norm, batch_norm, lrn) against
// the eager operators, on odd shapes in both layouts.
#include <cmath>

#include "internal_test.hpp"
#include "layout/layout.hpp"
#include "ops/ops.hpp"
#include "reference/kernels.hpp"
#include "reference_check.hpp"

namespace mkc::test {
namespace {

// Restores the thread's target layout (which batch_norm and lrn set) when a
// test ends, so the tests after it start from the default.
struct TargetGuard {
    ~TargetGuard() { layout::set_target(thread_state(), MKC_LAYOUT_CHANNELS_FIRST); }
};

struct Shape {
    Dims dims; // oneDNN order
    mkc_layout layout;
};

bool is_channels_last(const Tensor &t) { return t.layout == MKC_LAYOUT_CHANNELS_LAST; }

// -------------------------------------------------------------- layer_norm

const Shape kLayerNormShapes[] = {
    {{2, 19, 3, 5}, MKC_LAYOUT_CHANNELS_FIRST}, {{3, 7, 5, 4}, MKC_LAYOUT_CHANNELS_LAST},
    {{2, 5, 7}, MKC_LAYOUT_CHANNELS_LAST},      {{5, 33}, MKC_LAYOUT_CHANNELS_FIRST},
    {{3, 1, 40}, MKC_LAYOUT_CHANNELS_FIRST},
};

// The statistics are sums over the `cols` normalised elements: 1e-7 per
// element (relative, and absolute for results near 0), at least 2e-6 for
// the few roundings of the scale and shift.
TEST(reference_layer_norm_matches_eager) {
    unsigned seed = 301;
    for (const Shape &s : kLayerNormShapes) {
        auto src = tensor(s.dims, s.layout, seed++);
        rescale(*src, 3.f, 0.5f); // a mean away from 0
        const Dims dims = caller_dims(*src);
        const std::vector<float> x = values(*src);
        const int rank = static_cast<int>(dims.size());
        for (int axis = 0; axis < rank; ++axis) {
            int64_t cols = 1;
            for (int i = axis; i < rank; ++i)
                cols *= dims[i];
            auto scale = tensor({cols}, MKC_LAYOUT_CHANNELS_FIRST, seed++);
            auto shift = tensor({cols}, MKC_LAYOUT_CHANNELS_FIRST, seed++);
            const std::vector<float> scale_v = values(*scale), shift_v = values(*shift);
            for (int with = 0; with < 4; ++with) {
                const bool use_scale = with & 1, use_shift = with & 2;
                mkc_layer_norm_params p{};
                p.struct_size = sizeof p;
                p.begin_norm_axis = axis;
                p.epsilon = 1e-3f;
                mkc_tensor *dst = nullptr;
                ops::layer_norm(thread_state().scope, p, *src, use_scale ? scale.get() : nullptr,
                                use_shift ? shift.get() : nullptr, &dst);
                const std::vector<float> want = take_values(dst);
                std::vector<float> got(x.size());
                reference::layer_norm(dims, axis, p.epsilon, x.data(),
                                      use_scale ? scale_v.data() : nullptr,
                                      use_shift ? shift_v.data() : nullptr, got.data());
                const double tol = std::fmax(2e-6, 1e-7 * static_cast<double>(cols));
                CHECK(close_to(got, want, tol, tol,
                               "layer_norm axis " + std::to_string(axis) + " with " +
                                   std::to_string(with) + " layout " + std::to_string(s.layout)));
                std::vector<float> in_place = x;
                reference::layer_norm(dims, axis, p.epsilon, in_place.data(),
                                      use_scale ? scale_v.data() : nullptr,
                                      use_shift ? shift_v.data() : nullptr, in_place.data());
                CHECK(max_rel_diff(in_place, got) == 0);
            }
        }
    }
}

// A hand-worked row: [1, 2, 3, 4] has mean 2.5 and biased variance 1.25.
TEST(reference_layer_norm_uses_the_biased_variance) {
    const float x[] = {1, 2, 3, 4};
    std::vector<float> y(4);
    reference::layer_norm({1, 4}, 1, 0.f, x, nullptr, nullptr, y.data());
    const double inv_std = 1 / std::sqrt(1.25);
    CHECK(close_to(
        y,
        {float(-1.5 * inv_std), float(-0.5 * inv_std), float(0.5 * inv_std), float(1.5 * inv_std)},
        1e-7, 0, "layer_norm by hand"));
}

// -------------------------------------------------------------- batch_norm

const Shape kBatchNormShapes[] = {
    {{2, 19, 3, 5}, MKC_LAYOUT_CHANNELS_FIRST},   {{3, 7, 5, 4}, MKC_LAYOUT_CHANNELS_LAST},
    {{5, 13}, MKC_LAYOUT_CHANNELS_FIRST},         {{2, 3, 4}, MKC_LAYOUT_CHANNELS_LAST},
    {{2, 5, 3, 2, 3}, MKC_LAYOUT_CHANNELS_FIRST}, {{2, 6, 2, 3, 4}, MKC_LAYOUT_CHANNELS_LAST},
};

// Element-wise with per-channel constants: a few roundings, 1e-6 relative,
// and 1e-6 absolute where x - mean cancels.
TEST(reference_batch_norm_matches_eager) {
    const TargetGuard guard;
    unsigned seed = 401;
    for (const Shape &s : kBatchNormShapes) {
        auto src = tensor(s.dims, s.layout, seed++);
        const int64_t c = s.dims[1];
        auto mean = tensor({c}, MKC_LAYOUT_CHANNELS_FIRST, seed++);
        auto variance = tensor({c}, MKC_LAYOUT_CHANNELS_FIRST, seed++);
        rescale(*variance, 2.f, 0.05f, true);
        auto scale = tensor({c}, MKC_LAYOUT_CHANNELS_FIRST, seed++);
        auto shift = tensor({c}, MKC_LAYOUT_CHANNELS_FIRST, seed++);
        const std::vector<float> x = values(*src), mv = values(*mean), vv = values(*variance),
                                 sv = values(*scale), hv = values(*shift);
        for (int with = 0; with < 4; ++with) {
            const bool use_scale = with & 1, use_shift = with & 2;
            mkc_batch_norm_params p{};
            p.struct_size = sizeof p;
            p.epsilon = 1e-3f;
            p.momentum = 0.9f;
            p.data_format = s.layout;
            mkc_tensor *dst = nullptr;
            ops::batch_norm(thread_state().scope, p, *src, mean.get(), variance.get(),
                            use_scale ? scale.get() : nullptr, use_shift ? shift.get() : nullptr,
                            &dst, nullptr, nullptr);
            const std::vector<float> want = take_values(dst);
            const Dims dims = caller_dims(*src);
            std::vector<float> got(x.size());
            reference::batch_norm(dims, is_channels_last(*src), p.epsilon, x.data(), mv.data(),
                                  vv.data(), use_scale ? sv.data() : nullptr,
                                  use_shift ? hv.data() : nullptr, got.data());
            CHECK(close_to(got, want, 1e-6, 1e-6,
                           "batch_norm with " + std::to_string(with) + " shape " +
                               std::to_string(&s - kBatchNormShapes)));
            std::vector<float> in_place = x;
            reference::batch_norm(dims, is_channels_last(*src), p.epsilon, in_place.data(),
                                  mv.data(), vv.data(), use_scale ? sv.data() : nullptr,
                                  use_shift ? hv.data() : nullptr, in_place.data());
            CHECK(max_rel_diff(in_place, got) == 0);
        }
    }
}

// --------------------------------------------------------------------- lrn

mkc_lrn_params lrn_params(int64_t size, float alpha, float beta, float k, mkc_layout layout) {
    mkc_lrn_params p{};
    p.struct_size = sizeof p;
    p.size = size;
    p.alpha = alpha;
    p.beta = beta;
    p.k = k;
    p.data_format = layout;
    return p;
}

// Which channels the eager LRN sums for each output channel, read off its
// results: with channel j holding sqrt(2^j), alpha = size, beta = 1 and
// k = 1, dst[c] = src[c] / (1 + sum), so src[c] / dst[c] - 1 is the sum of
// 2^j over the window - a bit mask of its channels. That the masks come out
// as whole numbers also shows the sum is divided by `size` itself. The
// window is ONNX's: c - floor((size-1)/2) .. c + ceil((size-1)/2), clipped.
TEST(reference_lrn_window_is_the_eager_window) {
    const TargetGuard guard;
    for (mkc_layout layout : {MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_LAST}) {
        for (int64_t channels : {9, 20}) {
            for (int64_t size = 1; size <= 6; ++size) {
                auto src = tensor({1, channels, 1, 1}, layout);
                auto *p = static_cast<float *>(src->data);
                for (int64_t c = 0; c < channels; ++c)
                    p[c] = std::sqrt(std::ldexp(1.f, static_cast<int>(c)));
                mkc_tensor *dst = nullptr;
                ops::lrn(thread_state().scope, lrn_params(size, float(size), 1.f, 1.f, layout),
                         *src, &dst);
                const std::vector<float> y = take_values(dst);
                const int64_t down = (size - 1) / 2, up = size / 2;
                bool as_documented = true;
                for (int64_t c = 0; c < channels; ++c) {
                    const double sum = p[c] / double(y[c]) - 1;
                    const double mask = std::round(sum);
                    double want = 0;
                    for (int64_t w = std::max<int64_t>(0, c - down);
                         w <= std::min<int64_t>(channels - 1, c + up); ++w)
                        want += std::ldexp(1.0, static_cast<int>(w));
                    as_documented = as_documented && mask == want &&
                                    std::fabs(sum - mask) <= 1e-5 * std::fmax(1.0, mask);
                }
                CHECK(as_documented);
                // The reference kernel computes the same.
                std::vector<float> got(channels);
                reference::lrn({1, channels, 1, 1}, false, size, float(size), 1.f, 1.f, p,
                               got.data());
                CHECK(close_to(got, y, 1e-5, 0, "lrn window size " + std::to_string(size)));
            }
        }
    }
}

const Shape kLrnShapes[] = {
    {{2, 19, 3, 5}, MKC_LAYOUT_CHANNELS_FIRST},  {{3, 7, 5, 4}, MKC_LAYOUT_CHANNELS_LAST},
    {{2, 5, 7}, MKC_LAYOUT_CHANNELS_FIRST},      {{2, 5, 7}, MKC_LAYOUT_CHANNELS_LAST},
    {{1, 6, 2, 3, 4}, MKC_LAYOUT_CHANNELS_LAST}, {{2, 20, 3, 3}, MKC_LAYOUT_CHANNELS_FIRST},
};

// A sum of at most `size` squares and a power: oneDNN raises to beta through
// its exp and log approximations, so 1e-5 relative, with a 1e-6 absolute
// floor for results near 0. alpha is large enough that every channel of the
// window moves the result well beyond that.
TEST(reference_lrn_matches_eager_for_odd_and_even_sizes) {
    const TargetGuard guard;
    unsigned seed = 501;
    for (const Shape &s : kLrnShapes) {
        auto src = tensor(s.dims, s.layout, seed++);
        rescale(*src, 2.f);
        const Dims dims = caller_dims(*src);
        const std::vector<float> x = values(*src);
        for (int64_t size = 1; size <= 6; ++size) {
            for (const float beta : {0.75f, 1.f}) {
                const mkc_lrn_params p = lrn_params(size, 0.8f, beta, 1.5f, s.layout);
                mkc_tensor *dst = nullptr;
                ops::lrn(thread_state().scope, p, *src, &dst);
                const std::vector<float> want = take_values(dst);
                std::vector<float> got(x.size());
                reference::lrn(dims, is_channels_last(*src), size, p.alpha, p.beta, p.k, x.data(),
                               got.data());
                CHECK(close_to(got, want, 1e-5, 1e-6,
                               "lrn size " + std::to_string(size) + " beta " +
                                   std::to_string(beta) + " shape " +
                                   std::to_string(&s - kLrnShapes)));
            }
        }
    }
}

} // namespace
} // namespace mkc::test
