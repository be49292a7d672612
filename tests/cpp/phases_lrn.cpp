// LRN's phases: infer and check on descriptions, prepare in a program's
// scope and run on raw buffers, against the eager calls.
#include "internal_test.hpp"
#include "layout/layout.hpp"
#include "ops/lrn.hpp"
#include "ops/ops.hpp"

namespace mkc::test {
namespace {

using ops::LrnAttrs;
using ops::LrnBackwardOp;
using ops::LrnOp;

mkc_lrn_params params(int64_t size, mkc_layout data_format, bool training = false,
                      const char *name = nullptr, float k = 1.f) {
    mkc_lrn_params p{};
    p.struct_size = sizeof p;
    p.size = size;
    p.alpha = 1e-2f;
    p.beta = 0.75f;
    p.k = k;
    p.data_format = data_format;
    p.training = training;
    p.name = name;
    return p;
}

// Restores the thread's target layout (which the eager calls and these
// tests set) when a test ends, so the tests after it start from the default.
struct TargetGuard {
    ~TargetGuard() { layout::set_target(thread_state(), MKC_LAYOUT_CHANNELS_FIRST); }
};

struct Shape {
    Dims dims; // oneDNN order
    mkc_layout layout;
    bool blocked;
};
const Shape kShapes[] = {
    {{2, 19, 3, 5}, MKC_LAYOUT_CHANNELS_FIRST, false},
    {{3, 7, 5, 4}, MKC_LAYOUT_CHANNELS_LAST, false},
    {{2, 20, 3, 3}, MKC_LAYOUT_CHANNELS_FIRST, true},
    {{2, 5, 7}, MKC_LAYOUT_CHANNELS_FIRST, false},
    {{1, 6, 2, 3, 4}, MKC_LAYOUT_CHANNELS_LAST, false},
};

TEST(lrn_phases_match_eager) {
    const TargetGuard guard;
    const CacheScope scope = program_scope(0x14e);
    unsigned seed = 1;
    for (const Shape &s : kShapes) {
        auto src = tensor(s.dims, s.layout, seed++);
        if (s.blocked) src = blocked(*src);
        for (bool training : {false, true}) {
            for (mkc_layout df :
                 {MKC_LAYOUT_TARGET, MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_LAST}) {
                // Even sizes: the window of our own kernel, on plain bytes.
                for (int64_t size : {1, 2, 3, 4, 5}) {
                    const mkc_lrn_params p = params(size, df, training, "lrn");
                    const LrnAttrs attrs(p, training);
                    const ops::ValueDesc x = ops::describe(*src);
                    const ops::ValueDesc out = LrnOp::infer(attrs, x);
                    // TARGET: infer reads src's own layout, the eager call
                    // the thread's target, set to it here.
                    layout::set_target(thread_state(), src->layout);
                    mkc_tensor *dst = nullptr;
                    ops::lrn(thread_state().scope, p, *src, &dst);
                    CHECK(out.dims == dst->dims && out.layout == dst->layout &&
                          out.desc == dst->desc);
                    layout::set_target(thread_state(), src->layout);
                    const ops::Prepared prep = LrnOp::prepare(scope, attrs, "lrn", x);
                    CHECK(prep.takes.at(0) ==
                          (size % 2 ? src->desc
                                    : layout::plain_desc(src->dims, dnnl::memory::data_type::f32,
                                                         src->layout)));
                    CHECK(prep.outputs.at(0).layout == dst->layout &&
                          prep.outputs[0].desc == dst->desc);
                    const auto got = run_prepared(scope, prep, {src.get()}, LrnOp::run);
                    CHECK(max_rel_diff(got.at(0), take_values(dst)) == 0);
                }
            }
        }
    }
}

TEST(lrn_matches_a_reference) {
    const CacheScope scope = program_scope(0x14f);
    auto src = tensor({1, 4, 1, 1}, MKC_LAYOUT_CHANNELS_FIRST, 3);
    const mkc_lrn_params p = params(3, MKC_LAYOUT_CHANNELS_FIRST, false, nullptr, 2.f);
    const ops::Prepared prep = LrnOp::prepare(scope, LrnAttrs(p, false), nullptr,
                                              ops::describe(*src));
    const auto got = run_prepared(scope, prep, {src.get()}, LrnOp::run).at(0);
    const auto x = values(*src);
    std::vector<float> want(4);
    for (int c = 0; c < 4; ++c) {
        double sum = 0;
        for (int j = c - 1; j <= c + 1; ++j)
            if (j >= 0 && j < 4) sum += double(x[j]) * x[j];
        want[c] = float(x[c] / std::pow(2.0 + 1e-2 / 3 * sum, 0.75));
    }
    CHECK(max_rel_diff(got, want) <= 1e-5);
}

TEST(lrn_check_gives_the_eager_message) {
    const TargetGuard guard;
    auto src = tensor({2, 6, 3, 3}), flat = tensor({2, 6});
    auto odd = tensor({2, 6, 3, 3});
    odd->dtype = MKC_DTYPE_F16;
    const auto f = MKC_LAYOUT_CHANNELS_FIRST;
    struct Case {
        mkc_lrn_params p;
        const Tensor *src;
    };
    for (const Case &c : {Case{params(0, f), src.get()},
                          Case{params(5, f, false, nullptr, 0.f), src.get()},
                          Case{params(5, f), flat.get()}, Case{params(5, f), odd.get()},
                          Case{params(int64_t(1) << 21, f, true), src.get()},
                          Case{params(5, static_cast<mkc_layout>(6)), src.get()}}) {
        const ops::Verdict v = ops::check<LrnOp>(LrnAttrs(c.p, c.p.training != 0),
                                                 ops::describe(*c.src));
        const ops::Verdict eager = error_of([&] {
            mkc_tensor *dst = nullptr;
            ops::lrn(thread_state().scope, c.p, *c.src, &dst);
            mkc_tensor_destroy(dst);
        });
        CHECK(!v.ok() && v.status == eager.status);
        CHECK_EQ_TEXT(v.reason, eager.reason);
    }
}

TEST(lrn_backward_phases_match_eager) {
    const TargetGuard guard;
    unsigned seed = 20;
    for (const Shape &s : kShapes) {
        auto src = tensor(s.dims, s.layout, seed++);
        auto diff_dst = tensor(s.dims, s.layout, seed++);
        if (s.blocked) {
            src = blocked(*src);
            diff_dst = blocked(*diff_dst);
        }
        for (mkc_layout df : {MKC_LAYOUT_TARGET, MKC_LAYOUT_CHANNELS_LAST}) {
            // Size 1 on channels-last data: read channels-first (oneDNN
            // 3.2's kernel for it crashes); even sizes: our own kernel.
            for (int64_t size : {1, 2, 3, 4, 5}) {
                // With and without the descriptor a training forward leaves
                // in the program's scope.
                for (bool forward_first : {false, true}) {
                    const mkc_lrn_params p = params(size, df, true, "lrnb");
                    const LrnAttrs attrs(p, true);
                    const auto x = ops::describe(*src), dy = ops::describe(*diff_dst);
                    const CacheScope own = program_scope(0x151 + seed * 8 + size * 2 +
                                                         (forward_first ? 1 : 0));
                    if (forward_first) LrnOp::prepare(own, attrs, "lrnb", x);
                    layout::set_target(thread_state(), src->layout);
                    mkc_tensor *dx = nullptr;
                    ops::lrn_backward(thread_state().scope, p, *src, *diff_dst, &dx);
                    const ops::ValueDesc out = LrnBackwardOp::infer(attrs, x, dy);
                    CHECK(out.dims == dx->dims && out.layout == dx->layout &&
                          out.desc == dx->desc);
                    layout::set_target(thread_state(), src->layout);
                    const ops::Prepared prep = LrnBackwardOp::prepare(own, attrs, "lrnb", x, dy);
                    CHECK(prep.outputs.at(0).layout == dx->layout &&
                          prep.outputs[0].desc == dx->desc);
                    CHECK(prep.takes.at(0) == prep.outputs[0].desc);
                    const auto got = run_prepared(own, prep, {src.get(), diff_dst.get()},
                                                  LrnBackwardOp::run);
                    CHECK(max_rel_diff(got.at(0), take_values(dx)) == 0);
                }
            }
        }
    }
}

TEST(lrn_backward_check_gives_the_eager_message) {
    const TargetGuard guard;
    auto src = tensor({2, 6, 3, 3}), dy = tensor({2, 6, 3, 3}), wrong = tensor({2, 6, 3, 4});
    auto flat = tensor({2, 6});
    // One channel, one pixel: no arrangement escapes the crashing kernel.
    auto single = tensor({4, 1, 1, 1}, MKC_LAYOUT_CHANNELS_LAST);
    const auto f = MKC_LAYOUT_CHANNELS_FIRST;
    struct Case {
        mkc_lrn_params p;
        const Tensor *src, *diff_dst;
    };
    for (const Case &c : {Case{params(5, f, true), src.get(), wrong.get()},
                          Case{params(0, f, true), src.get(), dy.get()},
                          Case{params(5, f, true), flat.get(), flat.get()},
                          Case{params(5, static_cast<mkc_layout>(6), true), src.get(), dy.get()},
                          Case{params(1, f, true), single.get(), single.get()}}) {
        const ops::Verdict v = ops::check<LrnBackwardOp>(LrnAttrs(c.p, true), ops::describe(*c.src),
                                                         ops::describe(*c.diff_dst));
        const ops::Verdict eager = error_of([&] {
            mkc_tensor *dx = nullptr;
            ops::lrn_backward(thread_state().scope, c.p, *c.src, *c.diff_dst, &dx);
            mkc_tensor_destroy(dx);
        });
        CHECK(!v.ok() && v.status == eager.status);
        CHECK_EQ_TEXT(v.reason, eager.reason);
    }
}

} // namespace
} // namespace mkc::test
