// The shape reference kernels (concat, transpose) against the eager
// operators. They only move values, so the results must be identical.
#include "internal_test.hpp"
#include "layout/layout.hpp"
#include "ops/ops.hpp"
#include "reference/kernels.hpp"

namespace mkc::test {
namespace {

struct ConcatCase {
    std::vector<Dims> dims; // oneDNN order; they differ only along some axis
    mkc_layout layout;
};
const ConcatCase kConcatCases[] = {
    {{{2, 19, 3, 5}, {2, 19, 3, 5}}, MKC_LAYOUT_CHANNELS_FIRST},
    {{{2, 7, 3, 5}, {2, 7, 3, 5}, {2, 7, 3, 5}}, MKC_LAYOUT_CHANNELS_FIRST},
    {{{3, 7, 5, 4}, {3, 7, 5, 4}}, MKC_LAYOUT_CHANNELS_LAST},
    {{{3, 5, 2, 4}, {3, 5, 2, 4}, {3, 5, 2, 4}}, MKC_LAYOUT_CHANNELS_LAST},
    {{{5, 33}, {5, 33}, {5, 33}}, MKC_LAYOUT_CHANNELS_FIRST},
    {{{2, 5, 7}, {2, 5, 7}}, MKC_LAYOUT_CHANNELS_LAST},
    {{{1, 6, 2, 3, 4}, {1, 6, 2, 3, 4}}, MKC_LAYOUT_CHANNELS_LAST},
};

// Every axis of every case, with the inputs' extents along it made unequal
// (1, 2, 3, ... added), so each source's block has its own length.
TEST(reference_concat_matches_eager_on_every_axis) {
    unsigned seed = 601;
    for (const ConcatCase &c : kConcatCases) {
        const int rank = static_cast<int>(c.dims[0].size());
        for (int axis = 0; axis < rank; ++axis) {
            std::vector<std::unique_ptr<Tensor>> inputs;
            std::vector<const Tensor *> pointers;
            for (size_t i = 0; i < c.dims.size(); ++i) {
                // The caller's axis as a oneDNN dim, to grow it there.
                Dims grown = layout::to_caller_order(c.dims[i], c.layout);
                grown[axis] += static_cast<int64_t>(i);
                inputs.push_back(
                    tensor(layout::to_onednn_order(grown, c.layout), c.layout, seed++));
                pointers.push_back(inputs.back().get());
            }
            mkc_tensor *dst = nullptr;
            ops::concat(thread_state().scope, axis, static_cast<int>(pointers.size()),
                        pointers.data(), nullptr, &dst);
            const std::vector<float> want = take_values(dst);

            std::vector<Dims> dims;
            std::vector<std::vector<float>> held;
            std::vector<const float *> srcs;
            for (const Tensor *t : pointers) {
                dims.push_back(caller_dims(*t));
                held.push_back(values(*t));
            }
            for (const auto &v : held)
                srcs.push_back(v.data());
            std::vector<float> got(want.size());
            reference::concat(axis, dims, srcs, got.data());
            CHECK(max_rel_diff(got, want) == 0);
        }
    }
}

struct TransposeCase {
    Dims dims; // oneDNN order
    mkc_layout layout;
    std::vector<int> perm; // over the caller's dims
};
const TransposeCase kTransposeCases[] = {
    {{5, 33}, MKC_LAYOUT_CHANNELS_FIRST, {1, 0}},
    {{5, 33}, MKC_LAYOUT_CHANNELS_FIRST, {0, 1}},
    {{2, 5, 7}, MKC_LAYOUT_CHANNELS_FIRST, {2, 0, 1}},
    {{2, 5, 7}, MKC_LAYOUT_CHANNELS_LAST, {1, 2, 0}},
    {{2, 19, 3, 5}, MKC_LAYOUT_CHANNELS_FIRST, {0, 2, 3, 1}},
    {{2, 19, 3, 5}, MKC_LAYOUT_CHANNELS_FIRST, {3, 1, 0, 2}},
    {{3, 7, 5, 4}, MKC_LAYOUT_CHANNELS_LAST, {0, 3, 1, 2}},
    {{3, 7, 5, 4}, MKC_LAYOUT_CHANNELS_LAST, {2, 1, 3, 0}},
    {{1, 6, 2, 3, 4}, MKC_LAYOUT_CHANNELS_LAST, {4, 2, 0, 3, 1}},
    {{2, 3, 1, 4, 5}, MKC_LAYOUT_CHANNELS_FIRST, {0, 1, 3, 4, 2}},
};

TEST(reference_transpose_matches_eager) {
    unsigned seed = 701;
    for (const TransposeCase &c : kTransposeCases) {
        auto src = tensor(c.dims, c.layout, seed++);
        mkc_tensor *dst = nullptr;
        ops::transpose(thread_state().scope, static_cast<int>(c.perm.size()), c.perm.data(), *src,
                       &dst);
        const std::vector<float> want = take_values(dst);
        const std::vector<float> x = values(*src);
        std::vector<float> got(x.size());
        reference::transpose(caller_dims(*src), c.perm, sizeof(float), x.data(), got.data());
        CHECK(max_rel_diff(got, want) == 0);
    }
}

// A hand-worked case: [2, 3] transposed, and joined to itself on axis 1.
TEST(reference_shapes_by_hand) {
    const float x[] = {1, 2, 3, 4, 5, 6};
    std::vector<float> t(6);
    reference::transpose({2, 3}, {1, 0}, sizeof(float), x, t.data());
    CHECK((t == std::vector<float>{1, 4, 2, 5, 3, 6}));
    std::vector<float> c(12);
    reference::concat(1, {{2, 3}, {2, 3}}, {x, x}, c.data());
    CHECK((c == std::vector<float>{1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}));
}

} // namespace
} // namespace mkc::test
