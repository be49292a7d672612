// layer_norm's phases: infer and check on descriptions, prepare in a
// program's scope and run on raw buffers, against the eager calls.
#include "internal_test.hpp"
#include "ops/layer_norm.hpp"
#include "ops/ops.hpp"

namespace mkc::test {
namespace {

using ops::LayerNormAttrs;
using ops::LayerNormBackwardOp;
using ops::LayerNormOp;

mkc_layer_norm_params params(int axis, float epsilon = 1e-5f, bool training = false,
                             const char *name = nullptr) {
    mkc_layer_norm_params p{};
    p.struct_size = sizeof p;
    p.begin_norm_axis = axis;
    p.epsilon = epsilon;
    p.training = training;
    p.name = name;
    return p;
}

mkc_tensor *eager_layer_norm(const mkc_layer_norm_params &p, const Tensor &src,
                             const Tensor *scale, const Tensor *shift) {
    mkc_tensor *dst = nullptr;
    ops::layer_norm(thread_state().scope, p, src, scale, shift, &dst);
    return dst;
}

// Shapes with the normalized count: odd sizes, NCHW and NHWC, axes from the
// front and the back.
struct Shape {
    Dims dims;
    mkc_layout layout;
    int axis;
    Dims params; // scale's and shift's dims
};
const Shape kShapes[] = {
    {{3, 7, 5}, MKC_LAYOUT_CHANNELS_FIRST, -1, {5}},
    {{2, 19, 3, 5}, MKC_LAYOUT_CHANNELS_FIRST, 1, {19, 3, 5}},
    {{2, 19, 3, 5}, MKC_LAYOUT_CHANNELS_LAST, 2, {95}}, // caller [2, 3, 5, 19]
    {{4, 13, 2, 3}, MKC_LAYOUT_CHANNELS_LAST, -1, {13}},
    {{5, 9}, MKC_LAYOUT_CHANNELS_FIRST, 0, {5, 9}},
};

TEST(layer_norm_phases_match_eager) {
    const CacheScope scope = program_scope(0x1a7e);
    unsigned seed = 1;
    for (const Shape &s : kShapes) {
        auto src = tensor(s.dims, s.layout, seed++);
        auto scale = tensor(s.params, MKC_LAYOUT_CHANNELS_FIRST, seed++);
        auto shift = tensor(s.params, MKC_LAYOUT_CHANNELS_FIRST, seed++);
        for (bool training : {false, true}) {
            for (int with = 0; with < 4; ++with) {
                const Tensor *sc = with & 1 ? scale.get() : nullptr;
                const Tensor *sh = with & 2 ? shift.get() : nullptr;
                const mkc_layer_norm_params p = params(s.axis, 1e-3f, training, "ln");
                const LayerNormAttrs attrs(p, training);
                ops::ValueDesc hs, hh;
                const ops::ValueDesc in = ops::describe(*src);
                const ops::ValueDesc out =
                    LayerNormOp::infer(attrs, in, described(sc, hs), described(sh, hh));
                mkc_tensor *dst = eager_layer_norm(p, *src, sc, sh);
                CHECK(out.dims == dst->dims && out.layout == dst->layout && out.desc == dst->desc);
                const ops::Prepared prep = LayerNormOp::prepare(scope, attrs, "ln", in,
                                                                described(sc, hs),
                                                                described(sh, hh));
                CHECK(prep.takes.at(1).is_zero() == !sc && prep.takes.at(2).is_zero() == !sh);
                CHECK(prep.outputs.at(0).desc == dst->desc);
                const auto got = run_some(scope, prep, {src.get(), sc, sh}, {true},
                                          LayerNormOp::run);
                CHECK(max_rel_diff(got.at(0), take_values(dst)) == 0);
            }
        }
    }
}

// Only the rank of scale and shift is signed: a call whose plain scale has
// other dims of the same count finds the entry another one built (its plain
// arrangement that of the other dims), and is computed all the same, by the
// eager calls as by the phases.
TEST(layer_norm_takes_a_scale_of_other_dims) {
    const CacheScope scope = program_scope(0x1a80);
    auto src = tensor({2, 4, 5}, MKC_LAYOUT_CHANNELS_FIRST, 7);
    auto scale45 = tensor({4, 5}, MKC_LAYOUT_CHANNELS_FIRST, 8);
    auto scale54 = zeros({5, 4});
    std::memcpy(scale54->data, scale45->data, 20 * sizeof(float)); // the same values
    for (bool training : {false, true}) {
        const mkc_layer_norm_params p = params(1, 1e-5f, training, "ln_dims");
        const LayerNormAttrs attrs(p, training);
        const auto want = take_values(eager_layer_norm(p, *src, scale45.get(), nullptr));
        const ops::ValueDesc x = ops::describe(*src), s45 = ops::describe(*scale45),
                             s54 = ops::describe(*scale54);
        LayerNormOp::prepare(scope, attrs, "ln_dims", x, &s45, nullptr);
        for (int repeat = 0; repeat < 2; ++repeat) {
            const ops::Verdict v = error_of([&] {
                CHECK(max_rel_diff(take_values(eager_layer_norm(p, *src, scale54.get(), nullptr)),
                                   want) == 0);
            });
            CHECK(v.ok());
        }
        const ops::Prepared prep = LayerNormOp::prepare(scope, attrs, "ln_dims", x, &s54, nullptr);
        CHECK(prep.takes.at(1) == scale54->desc);
        const auto got = run_some(scope, prep, {src.get(), scale54.get(), nullptr}, {true},
                                  LayerNormOp::run);
        CHECK(max_rel_diff(got.at(0), want) == 0);

        // The gradient's training forward is found the same way.
        const mkc_layer_norm_params pt = params(1, 1e-5f, true, "ln_dims");
        auto dy = tensor({2, 4, 5}, MKC_LAYOUT_CHANNELS_FIRST, 9);
        mkc_tensor *dx45 = nullptr, *dx54 = nullptr;
        ops::layer_norm_backward(thread_state().scope, pt, *src, scale45.get(), nullptr, *dy,
                                 &dx45, nullptr, nullptr);
        const ops::Verdict bv = error_of([&] {
            ops::layer_norm_backward(thread_state().scope, pt, *src, scale54.get(), nullptr, *dy,
                                     &dx54, nullptr, nullptr);
        });
        CHECK(bv.ok());
        if (bv.ok()) CHECK(max_rel_diff(take_values(dx54), take_values(dx45)) == 0);
    }
}

TEST(layer_norm_matches_a_reference) {
    const CacheScope scope = program_scope(0x1a7f);
    auto src = tensor({4, 6}, MKC_LAYOUT_CHANNELS_FIRST, 3);
    auto scale = tensor({6}, MKC_LAYOUT_CHANNELS_FIRST, 4);
    const mkc_layer_norm_params p = params(-1, 1e-5f);
    ops::ValueDesc hs;
    const ops::Prepared prep = LayerNormOp::prepare(scope, LayerNormAttrs(p, false), nullptr,
                                                    ops::describe(*src),
                                                    described(scale.get(), hs), nullptr);
    const auto got =
        run_some(scope, prep, {src.get(), scale.get(), nullptr}, {true}, LayerNormOp::run).at(0);
    const auto x = values(*src), g = values(*scale);
    std::vector<float> want(x.size());
    for (int r = 0; r < 4; ++r) {
        double mean = 0, var = 0;
        for (int c = 0; c < 6; ++c) mean += x[r * 6 + c] / 6.0;
        for (int c = 0; c < 6; ++c) var += (x[r * 6 + c] - mean) * (x[r * 6 + c] - mean) / 6.0;
        for (int c = 0; c < 6; ++c)
            want[r * 6 + c] = float((x[r * 6 + c] - mean) / std::sqrt(var + 1e-5) * g[c]);
    }
    CHECK(max_rel_diff(got, want) <= 1e-5);
}

TEST(layer_norm_check_gives_the_eager_message) {
    auto src = tensor({2, 16, 3});
    auto ok = tensor({3}), wrong = tensor({4}), wide = tensor({16, 3});
    auto odd = tensor({2, 16, 3});
    odd->dtype = MKC_DTYPE_F16;
    // 48 values arranged nChw16c: the right count, not plain.
    auto not_plain = blocked(*tensor({1, 48, 1, 1}));
    struct Case {
        mkc_layer_norm_params p;
        const Tensor *src, *scale, *shift;
    };
    for (const Case &c : {Case{params(-1, -1.f), src.get(), nullptr, nullptr},
                          Case{params(3), src.get(), nullptr, nullptr},
                          Case{params(-4), src.get(), ok.get(), nullptr},
                          Case{params(-1), odd.get(), nullptr, nullptr},
                          Case{params(-1), src.get(), wrong.get(), nullptr},
                          Case{params(-1), src.get(), nullptr, wide.get()},
                          Case{params(1), src.get(), not_plain.get(), nullptr},
                          Case{params(1), src.get(), wide.get(), not_plain.get()}}) {
        ops::ValueDesc hs, hh;
        const ops::Verdict v = ops::check<LayerNormOp>(
            LayerNormAttrs(c.p, false), ops::describe(*c.src), described(c.scale, hs),
            described(c.shift, hh));
        const ops::Verdict eager = error_of(
            [&] { mkc_tensor_destroy(eager_layer_norm(c.p, *c.src, c.scale, c.shift)); });
        CHECK(!v.ok() && v.status == eager.status);
        CHECK_EQ_TEXT(v.reason, eager.reason);
    }
    ops::ValueDesc hs;
    CHECK(ops::check<LayerNormOp>(LayerNormAttrs(params(1), false), ops::describe(*src),
                                  described(wide.get(), hs), nullptr)
              .ok());
}

TEST(layer_norm_backward_phases_match_eager) {
    const CacheScope scope = program_scope(0x1a80);
    unsigned seed = 50;
    for (const Shape &s : kShapes) {
        auto src = tensor(s.dims, s.layout, seed++);
        auto diff_dst = tensor(s.dims, s.layout, seed++);
        auto scale = tensor(s.params, MKC_LAYOUT_CHANNELS_FIRST, seed++);
        auto shift = tensor(s.params, MKC_LAYOUT_CHANNELS_FIRST, seed++);
        for (int with = 0; with < 4; ++with) {
            const Tensor *sc = with & 1 ? scale.get() : nullptr;
            const Tensor *sh = with & 2 ? shift.get() : nullptr;
            const mkc_layer_norm_params p = params(s.axis, 1e-4f, true, "lnb");
            const LayerNormAttrs attrs(p, true);
            mkc_tensor *dx = nullptr, *dg = nullptr, *db = nullptr;
            ops::layer_norm_backward(thread_state().scope, p, *src, sc, sh, *diff_dst, &dx,
                                     sc ? &dg : nullptr, sh ? &db : nullptr);
            ops::ValueDesc hs, hh;
            const auto x = ops::describe(*src), dy = ops::describe(*diff_dst);
            const std::vector<ops::ValueDesc> out = LayerNormBackwardOp::infer(
                attrs, x, described(sc, hs), described(sh, hh), dy);
            CHECK(out.at(0).dims == dx->dims && out[0].layout == dx->layout &&
                  out[0].desc == dx->desc);
            CHECK(!sc || (out.at(1).dims == dg->dims && out[1].layout == dg->layout &&
                          out[1].desc == dg->desc));
            CHECK(!sh || (out.at(2).dims == db->dims && out[2].layout == db->layout &&
                          out[2].desc == db->desc));
            CHECK(sc || out.at(1).desc.is_zero());
            CHECK(sh || out.at(2).desc.is_zero());
            const ops::Prepared prep = LayerNormBackwardOp::prepare(
                scope, attrs, "lnb", x, described(sc, hs), described(sh, hh), dy);
            const std::vector<const Tensor *> in{src.get(), sc, sh, diff_dst.get()};
            const auto got = run_some(scope, prep, in, {true, sc != nullptr, sh != nullptr},
                                      LayerNormBackwardOp::run);
            const auto want_dx = take_values(dx);
            CHECK(max_rel_diff(got.at(0), want_dx) == 0);
            if (sc) CHECK(max_rel_diff(got.at(1), take_values(dg)) == 0);
            if (sh) CHECK(max_rel_diff(got.at(2), take_values(db)) == 0);
            // diff_src alone, and the parameter gradients alone.
            CHECK(max_rel_diff(run_some(scope, prep, in, {true, false, false},
                                        LayerNormBackwardOp::run)
                                   .at(0),
                               want_dx) == 0);
            if (sc) {
                const auto params_only = run_some(scope, prep, in, {false, true, false},
                                                  LayerNormBackwardOp::run);
                CHECK(max_rel_diff(params_only.at(1), got[1]) == 0);
            }
        }
    }
}

TEST(layer_norm_backward_check_gives_the_eager_message) {
    auto src = tensor({2, 5, 3}), dy = tensor({2, 5, 3}), wrong_dy = tensor({2, 3, 5});
    auto scale = tensor({3}), wrong = tensor({5});
    struct Case {
        mkc_layer_norm_params p;
        const Tensor *scale, *diff_dst;
    };
    for (const Case &c : {Case{params(-1), scale.get(), wrong_dy.get()},
                          Case{params(-1), wrong.get(), dy.get()},
                          Case{params(5), nullptr, dy.get()},
                          Case{params(-1, -0.5f), nullptr, dy.get()}}) {
        ops::ValueDesc hs;
        const ops::Verdict v = ops::check<LayerNormBackwardOp>(
            LayerNormAttrs(c.p, true), ops::describe(*src), described(c.scale, hs), nullptr,
            ops::describe(*c.diff_dst));
        const ops::Verdict eager = error_of([&] {
            mkc_tensor *dx = nullptr;
            ops::layer_norm_backward(thread_state().scope, c.p, *src, c.scale, nullptr,
                                     *c.diff_dst, &dx, nullptr, nullptr);
            mkc_tensor_destroy(dx);
        });
        CHECK(!v.ok() && v.status == eager.status);
        CHECK_EQ_TEXT(v.reason, eager.reason);
    }
}

} // namespace
} // namespace mkc::test
