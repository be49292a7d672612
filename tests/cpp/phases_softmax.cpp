// softmax's phases: infer and check on descriptions, prepare in a program's
// scope and run on raw buffers, against the eager calls.
#include "internal_test.hpp"
#include "ops/ops.hpp"
#include "ops/softmax.hpp"

namespace mkc::test {
namespace {

using ops::SoftmaxAttrs;
using ops::SoftmaxBackwardOp;
using ops::SoftmaxOp;

// A tensor of a dtype no operator takes (only float32 exists).
std::unique_ptr<Tensor> bad_dtype(const Dims &dims) {
    auto t = tensor(dims);
    t->dtype = MKC_DTYPE_F16;
    return t;
}

mkc_tensor *eager_softmax(const SoftmaxAttrs &a, const Tensor &src, const char *name = nullptr) {
    mkc_tensor *dst = nullptr;
    ops::softmax(thread_state().scope, a.axis, a.log, name, src, &dst);
    return dst;
}

mkc_tensor *eager_softmax_backward(const SoftmaxAttrs &a, const Tensor &dst,
                                   const Tensor &diff_dst) {
    mkc_tensor *diff_src = nullptr;
    ops::softmax_backward(thread_state().scope, a.axis, a.log, "smb", dst, diff_dst, &diff_src);
    return diff_src;
}

TEST(softmax_infer_matches_eager) {
    for (mkc_layout lay : {MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_LAST}) {
        for (const SoftmaxAttrs a : {SoftmaxAttrs{1, false}, SoftmaxAttrs{-1, true},
                                     SoftmaxAttrs{0, false}, SoftmaxAttrs{-3, true}}) {
            auto src = tensor({3, 19, 5, 7}, lay, 2);
            const ops::ValueDesc out = SoftmaxOp::infer(a, ops::describe(*src));
            mkc_tensor *dst = eager_softmax(a, *src);
            CHECK(out.dims == dst->dims && out.layout == dst->layout && out.desc == dst->desc);
            mkc_tensor_destroy(dst);
        }
    }
}

TEST(softmax_check_gives_the_eager_message) {
    auto src = tensor({2, 5, 3});
    auto wrong_dtype = bad_dtype({2, 5, 3});
    struct Case {
        SoftmaxAttrs attrs;
        const Tensor *src;
    };
    for (const Case &c :
         {Case{{3, false}, src.get()}, Case{{-4, true}, src.get()},
          Case{{0, false}, wrong_dtype.get()}, Case{{1, true}, wrong_dtype.get()}}) {
        const ops::Verdict v = ops::check<SoftmaxOp>(c.attrs, ops::describe(*c.src));
        const ops::Verdict eager =
            error_of([&] { mkc_tensor_destroy(eager_softmax(c.attrs, *c.src)); });
        CHECK(!v.ok() && v.status == eager.status);
        CHECK_EQ_TEXT(v.reason, eager.reason);
    }
    CHECK(ops::check<SoftmaxOp>({-3, false}, ops::describe(*src)).ok());
}

TEST(softmax_prepared_run_matches_eager) {
    const CacheScope scope = program_scope(0x50f7);
    auto plain = tensor({2, 21, 3, 5}, MKC_LAYOUT_CHANNELS_FIRST, 4);
    auto nhwc = tensor({3, 7, 4, 6}, MKC_LAYOUT_CHANNELS_LAST, 5);
    auto block = blocked(*plain);
    for (const Tensor *src : {plain.get(), nhwc.get(), block.get()}) {
        for (const SoftmaxAttrs a : {SoftmaxAttrs{1, false}, SoftmaxAttrs{-1, true},
                                     SoftmaxAttrs{2, false}}) {
            const ops::Prepared p = SoftmaxOp::prepare(scope, a, "sm", ops::describe(*src));
            CHECK(p.takes.at(0) == src->desc);
            CHECK(p.outputs.at(0).desc == SoftmaxOp::infer(a, ops::describe(*src)).desc);
            const auto got = run_prepared(scope, p, {src}, SoftmaxOp::run);
            CHECK(max_rel_diff(got.at(0), take_values(eager_softmax(a, *src, "sm"))) == 0);
        }
    }
    // A float64 reference along the last axis.
    auto src = tensor({4, 9}, MKC_LAYOUT_CHANNELS_FIRST, 6);
    const ops::Prepared p = SoftmaxOp::prepare(scope, {-1, false}, nullptr, ops::describe(*src));
    const auto got = run_prepared(scope, p, {src.get()}, SoftmaxOp::run).at(0);
    const auto x = values(*src);
    std::vector<float> want(x.size());
    for (int r = 0; r < 4; ++r) {
        double sum = 0;
        for (int c = 0; c < 9; ++c) sum += std::exp(double(x[r * 9 + c]));
        for (int c = 0; c < 9; ++c) want[r * 9 + c] = float(std::exp(double(x[r * 9 + c])) / sum);
    }
    CHECK(max_rel_diff(got, want) <= 1e-6);
}

TEST(softmax_backward_phases_match_eager) {
    const CacheScope scope = program_scope(0x50f8);
    for (mkc_layout lay : {MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_LAST}) {
        for (const SoftmaxAttrs a : {SoftmaxAttrs{1, false}, SoftmaxAttrs{-1, true}}) {
            auto src = tensor({3, 17, 2, 5}, lay, 7);
            mkc_tensor *dst = eager_softmax(a, *src);
            auto diff_dst = tensor({3, 17, 2, 5}, lay, 8);
            const ops::ValueDesc out =
                SoftmaxBackwardOp::infer(a, ops::describe(*dst), ops::describe(*diff_dst));
            mkc_tensor *eager = eager_softmax_backward(a, *dst, *diff_dst);
            CHECK(out.dims == eager->dims && out.layout == eager->layout);
            const ops::Prepared p = SoftmaxBackwardOp::prepare(scope, a, "smb", ops::describe(*dst),
                                                               ops::describe(*diff_dst));
            const auto got = run_prepared(scope, p, {dst, diff_dst.get()}, SoftmaxBackwardOp::run);
            CHECK(max_rel_diff(got.at(0), take_values(eager)) == 0);
            mkc_tensor_destroy(dst);
        }
    }
}

TEST(softmax_backward_check_gives_the_eager_message) {
    auto dst = tensor({2, 6, 5});
    auto other_shape = tensor({2, 6, 4});
    auto other_layout = tensor({2, 5, 6}, MKC_LAYOUT_CHANNELS_LAST);
    auto ints = bad_dtype({2, 6, 5});
    struct Case {
        SoftmaxAttrs attrs;
        const Tensor *diff_dst;
    };
    for (const Case &c : {Case{{1, false}, other_shape.get()}, Case{{1, true}, other_layout.get()},
                          Case{{1, false}, ints.get()}, Case{{3, true}, dst.get()},
                          Case{{-4, false}, dst.get()}}) {
        const ops::Verdict v = ops::check<SoftmaxBackwardOp>(c.attrs, ops::describe(*dst),
                                                             ops::describe(*c.diff_dst));
        const ops::Verdict eager = error_of(
            [&] { mkc_tensor_destroy(eager_softmax_backward(c.attrs, *dst, *c.diff_dst)); });
        CHECK(!v.ok() && v.status == eager.status);
        CHECK_EQ_TEXT(v.reason, eager.reason);
    }
}

} // namespace
} // namespace mkc::test
