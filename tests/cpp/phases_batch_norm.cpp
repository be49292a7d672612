// batch_norm's phases: infer and check on descriptions, prepare in a
// program's scope and run on raw buffers, against the eager calls.
#include "internal_test.hpp"
#include "ops/batch_norm.hpp"
#include "ops/ops.hpp"

namespace mkc::test {
namespace {

using ops::BatchNormAttrs;
using ops::BatchNormBackwardOp;
using ops::BatchNormOp;

mkc_batch_norm_params params(mkc_layout data_format, bool training = false,
                             const char *name = nullptr, float epsilon = 1e-5f,
                             float momentum = 0.9f) {
    mkc_batch_norm_params p{};
    p.struct_size = sizeof p;
    p.epsilon = epsilon;
    p.momentum = momentum;
    p.training = training;
    p.data_format = data_format;
    p.name = name;
    return p;
}

// Positive values (variances).
std::unique_ptr<Tensor> positive(const Dims &dims, unsigned seed) {
    auto t = tensor(dims, MKC_LAYOUT_CHANNELS_FIRST, seed);
    auto *p = static_cast<float *>(t->data);
    for (int64_t i = 0; i < element_count(*t); ++i) p[i] = std::fabs(p[i]) + 0.25f;
    return t;
}

// A copy of a vector (the eager training call updates its running ones).
std::unique_ptr<Tensor> copy_of(const Tensor &t) {
    auto out = make_owned_tensor(t.desc, t.layout, t.dtype);
    std::memcpy(out->data, t.data, t.nbytes);
    return out;
}

// Restores the thread's target layout (which the eager calls and these
// tests set) when a test ends, so the tests after it start from the default.
struct TargetGuard {
    ~TargetGuard() { layout::set_target(thread_state(), MKC_LAYOUT_CHANNELS_FIRST); }
};

struct Inputs {
    std::unique_ptr<Tensor> src, mean, variance, scale, shift;
};
Inputs inputs(const Dims &dims, mkc_layout lay, unsigned seed, bool block = false) {
    Inputs in;
    in.src = tensor(dims, lay, seed);
    if (block) in.src = blocked(*in.src);
    in.mean = tensor({dims[1]}, MKC_LAYOUT_CHANNELS_FIRST, seed + 1);
    in.variance = positive({dims[1]}, seed + 2);
    in.scale = tensor({dims[1]}, MKC_LAYOUT_CHANNELS_FIRST, seed + 3);
    in.shift = tensor({dims[1]}, MKC_LAYOUT_CHANNELS_FIRST, seed + 4);
    return in;
}

struct Shape {
    Dims dims; // oneDNN order
    mkc_layout layout;
    bool blocked;
};
const Shape kShapes[] = {
    {{2, 19, 3, 5}, MKC_LAYOUT_CHANNELS_FIRST, false},
    {{3, 7, 5, 4}, MKC_LAYOUT_CHANNELS_LAST, false},
    {{2, 20, 3, 3}, MKC_LAYOUT_CHANNELS_FIRST, true},
    {{5, 13}, MKC_LAYOUT_CHANNELS_FIRST, false},
    {{2, 3, 4}, MKC_LAYOUT_CHANNELS_LAST, false},
    {{2, 5, 3, 2, 3}, MKC_LAYOUT_CHANNELS_FIRST, false},
};

TEST(batch_norm_inference_phases_match_eager) {
    const TargetGuard guard;
    const CacheScope scope = program_scope(0xb9);
    unsigned seed = 1;
    for (const Shape &s : kShapes) {
        Inputs in = inputs(s.dims, s.layout, seed += 10, s.blocked);
        for (mkc_layout df :
             {MKC_LAYOUT_TARGET, MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_LAST}) {
            for (int with = 0; with < 4; ++with) {
                const Tensor *sc = with & 1 ? in.scale.get() : nullptr;
                const Tensor *sh = with & 2 ? in.shift.get() : nullptr;
                const mkc_batch_norm_params p = params(df, false, "bn");
                const BatchNormAttrs attrs(p, false);
                ops::ValueDesc hm, hv, hs, hh;
                const auto x = ops::describe(*in.src);
                const ops::ValueDesc *m = described(in.mean.get(), hm),
                                     *v = described(in.variance.get(), hv),
                                     *g = described(sc, hs), *b = described(sh, hh);
                // TARGET: infer reads src's own layout, the eager call the
                // thread's target, set to it here.
                layout::set_target(thread_state(), in.src->layout);
                const std::vector<ops::ValueDesc> out = BatchNormOp::infer(attrs, x, m, v, g, b);
                mkc_tensor *dst = nullptr;
                ops::batch_norm(thread_state().scope, p, *in.src, in.mean.get(),
                                in.variance.get(), sc, sh, &dst, nullptr, nullptr);
                CHECK(out.size() == 1);
                CHECK(out.at(0).dims == dst->dims && out[0].layout == dst->layout &&
                      out[0].desc == dst->desc);
                layout::set_target(thread_state(), in.src->layout);
                const ops::Prepared prep = BatchNormOp::prepare(scope, attrs, "bn", x, m, v, g, b);
                CHECK(prep.outputs.at(0).layout == dst->layout);
                CHECK(prep.takes.at(0) == in.src->desc);
                const auto got = run_some(
                    scope, prep,
                    {in.src.get(), in.mean.get(), in.variance.get(), sc, sh}, {true},
                    BatchNormOp::run);
                CHECK(max_rel_diff(got.at(0), take_values(dst)) == 0);
            }
        }
    }
}

TEST(batch_norm_matches_a_reference) {
    const CacheScope scope = program_scope(0xba);
    Inputs in = inputs({4, 3}, MKC_LAYOUT_CHANNELS_FIRST, 7);
    const mkc_batch_norm_params p = params(MKC_LAYOUT_CHANNELS_FIRST, false, nullptr, 1e-3f);
    ops::ValueDesc hm, hv, hs, hh;
    const ops::Prepared prep = BatchNormOp::prepare(
        scope, BatchNormAttrs(p, false), nullptr, ops::describe(*in.src),
        described(in.mean.get(), hm), described(in.variance.get(), hv),
        described(in.scale.get(), hs), described(in.shift.get(), hh));
    const auto got = run_some(scope, prep,
                              {in.src.get(), in.mean.get(), in.variance.get(), in.scale.get(),
                               in.shift.get()},
                              {true}, BatchNormOp::run)
                         .at(0);
    const auto x = values(*in.src), m = values(*in.mean), v = values(*in.variance),
               g = values(*in.scale), b = values(*in.shift);
    std::vector<float> want(x.size());
    for (int n = 0; n < 4; ++n)
        for (int c = 0; c < 3; ++c)
            want[n * 3 + c] =
                float((x[n * 3 + c] - double(m[c])) / std::sqrt(double(v[c]) + 1e-3) * g[c] + b[c]);
    CHECK(max_rel_diff(got, want) <= 1e-5);
}

TEST(batch_norm_check_gives_the_eager_message) {
    const TargetGuard guard;
    auto src = tensor({2, 6, 3, 3}), low_rank = tensor({6});
    auto vec = tensor({6}), short_vec = tensor({5}), matrix = tensor({6, 1});
    auto odd = tensor({2, 6, 3, 3});
    odd->dtype = MKC_DTYPE_F16;
    const auto f = MKC_LAYOUT_CHANNELS_FIRST;
    struct Case {
        mkc_batch_norm_params p;
        const Tensor *src, *mean, *variance, *scale, *shift;
    };
    for (const Case &c :
         {Case{params(f), src.get(), nullptr, nullptr, nullptr, nullptr},
          Case{params(f), src.get(), vec.get(), nullptr, nullptr, nullptr},
          Case{params(f, false, nullptr, -1.f), src.get(), vec.get(), vec.get(), nullptr, nullptr},
          Case{params(f), low_rank.get(), vec.get(), vec.get(), nullptr, nullptr},
          Case{params(f), odd.get(), vec.get(), vec.get(), nullptr, nullptr},
          Case{params(f), src.get(), short_vec.get(), vec.get(), nullptr, nullptr},
          Case{params(f), src.get(), vec.get(), vec.get(), matrix.get(), nullptr},
          Case{params(f), src.get(), vec.get(), vec.get(), vec.get(), short_vec.get()},
          Case{params(static_cast<mkc_layout>(7)), src.get(), vec.get(), vec.get(), nullptr,
               nullptr},
          Case{params(f, true, nullptr, 1e-5f, 1.5f), src.get(), nullptr, nullptr, nullptr,
               nullptr},
          Case{params(f, true), src.get(), short_vec.get(), nullptr, nullptr, nullptr}}) {
        ops::ValueDesc hm, hv, hs, hh;
        const ops::Verdict v = ops::check<BatchNormOp>(
            BatchNormAttrs(c.p, c.p.training != 0), ops::describe(*c.src),
            described(c.mean, hm), described(c.variance, hv), described(c.scale, hs),
            described(c.shift, hh));
        auto mean = c.mean ? copy_of(*c.mean) : nullptr;
        auto variance = c.variance ? copy_of(*c.variance) : nullptr;
        const ops::Verdict eager = error_of([&] {
            mkc_tensor *dst = nullptr;
            ops::batch_norm(thread_state().scope, c.p, *c.src, mean.get(), variance.get(),
                            c.scale, c.shift, &dst, nullptr, nullptr);
            mkc_tensor_destroy(dst);
        });
        CHECK(!v.ok() && v.status == eager.status);
        CHECK_EQ_TEXT(v.reason, eager.reason);
    }
}

TEST(batch_norm_training_phases_match_eager) {
    const TargetGuard guard;
    const CacheScope scope = program_scope(0xbb);
    unsigned seed = 100;
    for (const Shape &s : kShapes) {
        Inputs in = inputs(s.dims, s.layout, seed += 10, s.blocked);
        const int64_t c = s.dims[1];
        for (int with = 0; with < 4; ++with) {
            const Tensor *sc = with & 1 ? in.scale.get() : nullptr;
            const Tensor *sh = with & 2 ? in.shift.get() : nullptr;
            const mkc_batch_norm_params p =
                params(MKC_LAYOUT_CHANNELS_FIRST, true, "bnt", 1e-4f, 0.75f);
            const BatchNormAttrs attrs(p, true);
            auto mean = copy_of(*in.mean), variance = copy_of(*in.variance);
            auto batch_mean = zeros({c}), batch_variance = zeros({c});
            mkc_tensor *dst = nullptr;
            ops::batch_norm(thread_state().scope, p, *in.src, mean.get(), variance.get(), sc, sh,
                            &dst, batch_mean.get(), batch_variance.get());
            ops::ValueDesc hm, hv, hs, hh;
            const auto x = ops::describe(*in.src);
            const ops::ValueDesc *m = described(in.mean.get(), hm),
                                 *v = described(in.variance.get(), hv), *g = described(sc, hs),
                                 *b = described(sh, hh);
            const std::vector<ops::ValueDesc> out = BatchNormOp::infer(attrs, x, m, v, g, b);
            CHECK(out.size() == 5);
            CHECK(out.at(0).dims == dst->dims && out[0].layout == dst->layout &&
                  out[0].desc == dst->desc);
            CHECK(out.at(1).dims == batch_mean->dims && out.at(4).dims == variance->dims);
            const ops::Prepared prep = BatchNormOp::prepare(scope, attrs, "bnt", x, m, v, g, b);
            const std::vector<const Tensor *> ins{in.src.get(), in.mean.get(),
                                                  in.variance.get(), sc, sh};
            const auto got = run_some(scope, prep, ins, {true, true, true, true, true},
                                      BatchNormOp::run);
            const auto want_dst = take_values(dst);
            CHECK(max_rel_diff(got.at(0), want_dst) == 0);
            CHECK(max_rel_diff(got.at(1), values(*batch_mean)) == 0);
            CHECK(max_rel_diff(got.at(2), values(*batch_variance)) == 0);
            CHECK(max_rel_diff(got.at(3), values(*mean)) == 0);
            CHECK(max_rel_diff(got.at(4), values(*variance)) == 0);
            // Without running statistics, and with dst alone asked for.
            const ops::Prepared bare =
                BatchNormOp::prepare(scope, attrs, "bnt", x, nullptr, nullptr, g, b);
            CHECK(bare.outputs.at(3).desc.is_zero() && bare.outputs.at(4).desc.is_zero());
            const auto alone = run_some(scope, bare, {in.src.get(), nullptr, nullptr, sc, sh},
                                        {true, false, false, false, false}, BatchNormOp::run);
            CHECK(max_rel_diff(alone.at(0), want_dst) == 0);
        }
    }
}

TEST(batch_norm_backward_phases_match_eager) {
    const TargetGuard guard;
    const CacheScope scope = program_scope(0xbc);
    unsigned seed = 200;
    for (const Shape &s : kShapes) {
        Inputs in = inputs(s.dims, s.layout, seed += 10, s.blocked);
        auto diff_dst = tensor(s.dims, s.layout, seed + 5);
        if (s.blocked) diff_dst = blocked(*diff_dst);
        const int64_t c = s.dims[1];
        for (mkc_layout df : {MKC_LAYOUT_TARGET, MKC_LAYOUT_CHANNELS_LAST}) {
            for (int with = 0; with < 4; ++with) {
                const Tensor *sc = with & 1 ? in.scale.get() : nullptr;
                const Tensor *sh = with & 2 ? in.shift.get() : nullptr;
                const mkc_batch_norm_params p = params(df, true, "bnb", 1e-4f);
                const BatchNormAttrs attrs(p, true);
                // The batch statistics, as the training forward gives them;
                // the phases' forward leaves its descriptor in the scope.
                auto bm = zeros({c}), bv = zeros({c});
                {
                    mkc_tensor *y = nullptr;
                    layout::set_target(thread_state(), in.src->layout);
                    ops::batch_norm(thread_state().scope, p, *in.src, nullptr, nullptr, sc, sh,
                                    &y, bm.get(), bv.get());
                    mkc_tensor_destroy(y);
                    ops::ValueDesc hs, hh;
                    BatchNormOp::prepare(scope, attrs, "bnb", ops::describe(*in.src), nullptr,
                                         nullptr, described(sc, hs), described(sh, hh));
                }
                layout::set_target(thread_state(), in.src->layout);
                mkc_tensor *dx = nullptr, *dg = nullptr, *db = nullptr;
                ops::batch_norm_backward(thread_state().scope, p, *in.src, *bm, *bv, sc, sh,
                                         *diff_dst, &dx, sc ? &dg : nullptr, sh ? &db : nullptr);
                ops::ValueDesc hs, hh;
                const auto x = ops::describe(*in.src), m = ops::describe(*bm),
                           v = ops::describe(*bv), dy = ops::describe(*diff_dst);
                const std::vector<ops::ValueDesc> out = BatchNormBackwardOp::infer(
                    attrs, x, m, v, described(sc, hs), described(sh, hh), dy);
                CHECK(out.at(0).dims == dx->dims && out[0].layout == dx->layout &&
                      out[0].desc == dx->desc);
                CHECK(!sc || (out.at(1).dims == dg->dims && out[1].desc == dg->desc));
                CHECK(!sh || (out.at(2).dims == db->dims && out[2].desc == db->desc));
                CHECK(sc || out.at(1).desc.is_zero());
                layout::set_target(thread_state(), in.src->layout);
                const ops::Prepared prep = BatchNormBackwardOp::prepare(
                    scope, attrs, "bnb", x, m, v, described(sc, hs), described(sh, hh), dy);
                CHECK(prep.outputs.at(0).layout == dx->layout);
                CHECK(prep.takes.at(4).is_zero());
                const std::vector<const Tensor *> ins{in.src.get(), bm.get(), bv.get(), sc,
                                                      nullptr, diff_dst.get()};
                const auto got = run_some(scope, prep, ins, {true, sc != nullptr, sh != nullptr},
                                          BatchNormBackwardOp::run);
                const auto want_dx = take_values(dx);
                CHECK(max_rel_diff(got.at(0), want_dx) == 0);
                if (sc) CHECK(max_rel_diff(got.at(1), take_values(dg)) == 0);
                if (sh) CHECK(max_rel_diff(got.at(2), take_values(db)) == 0);
                const auto alone = run_some(scope, prep, ins, {true, false, false},
                                            BatchNormBackwardOp::run);
                CHECK(max_rel_diff(alone.at(0), want_dx) == 0);
            }
        }
    }
}

TEST(batch_norm_backward_check_gives_the_eager_message) {
    const TargetGuard guard;
    auto src = tensor({2, 6, 3, 3}), dy = tensor({2, 6, 3, 3}), wrong_dy = tensor({2, 6, 3, 2});
    auto vec = tensor({6}), short_vec = tensor({4}), low_rank = tensor({6});
    const auto f = MKC_LAYOUT_CHANNELS_FIRST;
    struct Case {
        mkc_batch_norm_params p;
        const Tensor *src, *mean, *scale, *diff_dst;
    };
    for (const Case &c :
         {Case{params(f, true), src.get(), vec.get(), nullptr, wrong_dy.get()},
          Case{params(f, true), src.get(), short_vec.get(), nullptr, dy.get()},
          Case{params(f, true), src.get(), vec.get(), short_vec.get(), dy.get()},
          Case{params(f, true, nullptr, -1.f), src.get(), vec.get(), nullptr, dy.get()},
          Case{params(f, true), low_rank.get(), vec.get(), nullptr, low_rank.get()},
          Case{params(static_cast<mkc_layout>(9), true), src.get(), vec.get(), nullptr,
               dy.get()}}) {
        ops::ValueDesc hs;
        const ops::Verdict v = ops::check<BatchNormBackwardOp>(
            BatchNormAttrs(c.p, true), ops::describe(*c.src), ops::describe(*c.mean),
            ops::describe(*vec), described(c.scale, hs), nullptr, ops::describe(*c.diff_dst));
        const ops::Verdict eager = error_of([&] {
            mkc_tensor *dx = nullptr;
            ops::batch_norm_backward(thread_state().scope, c.p, *c.src, *c.mean, *vec, c.scale,
                                     nullptr, *c.diff_dst, &dx, nullptr, nullptr);
            mkc_tensor_destroy(dx);
        });
        CHECK(!v.ok() && v.status == eager.status);
        CHECK_EQ_TEXT(v.reason, eager.reason);
    }
}

} // namespace
} // namespace mkc::test
