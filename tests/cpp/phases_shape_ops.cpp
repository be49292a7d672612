// concat, transpose, reshape and to_layout phases against the eager calls.
#include <numeric>

#include "internal_test.hpp"
#include "ops/ops.hpp"
#include "ops/shape_ops.hpp"

namespace mkc::test {
namespace {

using ops::ConcatOp;
using ops::ReshapeOp;
using ops::ToLayoutOp;
using ops::TransposeOp;

TEST(concat_phases_match_eager) {
    const CacheScope scope = program_scope(0xc0c);
    for (const mkc_layout layout : {MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_LAST}) {
        // oneDNN order [N, C, H, W]; caller axis 1 is C for NCHW, H for NHWC.
        auto a = tensor({2, 3, 5, 7}, layout, 1);
        auto b = tensor({2, 3, 4, 7}, layout, 2);
        auto c = tensor({2, 3, 1, 7}, layout, 3);
        auto d = tensor({2, 5, 5, 7}, layout, 4);
        const bool last = layout == MKC_LAYOUT_CHANNELS_LAST;
        // Along H (caller axis 1 in NHWC, 2 in NCHW); then along C.
        const std::vector<const Tensor *> along_h = {a.get(), b.get(), c.get()};
        const std::vector<const Tensor *> along_c = {a.get(), d.get()};
        for (const auto &[axis, srcs] :
             {std::pair{last ? 1 : -2, along_h}, std::pair{last ? -1 : 1, along_c}}) {
            std::vector<ops::ValueDesc> in;
            for (const Tensor *t : srcs) in.push_back(ops::describe(*t));
            const ops::ValueDesc y = ConcatOp::infer({axis}, in);
            const ops::Prepared p = ConcatOp::prepare(scope, {axis}, "cat", in);
            const auto got = run_prepared(scope, p, srcs, ConcatOp::run);
            mkc_tensor *dst = nullptr;
            ops::concat(thread_state().scope, axis, static_cast<int>(srcs.size()), srcs.data(),
                        "cat", &dst);
            CHECK(y.dims == dst->dims && y.layout == dst->layout &&
                  p.outputs.at(0).layout == dst->layout);
            CHECK(max_rel_diff(got.at(0), take_values(dst)) == 0);
        }
    }
}

TEST(concat_check_gives_the_eager_messages) {
    auto a = tensor({2, 3, 5});
    auto rank = tensor({2, 3});
    auto other = tensor({2, 4, 6});
    for (const auto &[axis, second] :
         {std::pair{3, a.get()}, std::pair{0, rank.get()}, std::pair{1, other.get()}}) {
        const std::vector<const Tensor *> srcs = {a.get(), second};
        const ops::Verdict v = ops::check<ConcatOp>(
            {axis}, std::vector<ops::ValueDesc>{ops::describe(*a), ops::describe(*second)});
        const ops::Verdict eager = error_of([&] {
            mkc_tensor *d = nullptr;
            ops::concat(thread_state().scope, axis, 2, srcs.data(), nullptr, &d);
        });
        CHECK(!v.ok() && v.status == eager.status);
        CHECK_EQ_TEXT(v.reason, eager.reason);
    }
}

TEST(transpose_reshape_to_layout_phases_match_eager) {
    const CacheScope scope = program_scope(0x7a5);
    for (const mkc_layout layout : {MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_LAST}) {
        auto src = tensor({3, 5, 2, 7}, layout, 11);
        const ops::ValueDesc v = ops::describe(*src);

        const int perm[] = {2, 0, 3, 1};
        const ops::Prepared t = TransposeOp::prepare(scope, {4, perm}, v);
        mkc_tensor *et = nullptr;
        ops::transpose(thread_state().scope, 4, perm, *src, &et);
        CHECK(TransposeOp::infer({4, perm}, v).dims == et->dims);
        CHECK(max_rel_diff(run_prepared(scope, t, {src.get()}, TransposeOp::run).at(0),
                           take_values(et)) == 0);

        const int64_t dims[] = {5, -1, 14};
        const ops::Prepared r = ReshapeOp::prepare(scope, {3, dims}, v);
        mkc_tensor *er = nullptr;
        ops::reshape(thread_state().scope, 3, dims, *src, &er);
        CHECK((ReshapeOp::infer({3, dims}, v).dims == Dims{5, 3, 14}));
        CHECK(max_rel_diff(run_prepared(scope, r, {src.get()}, ReshapeOp::run).at(0),
                           take_values(er)) == 0);

        for (const char *format : {"nChw16c", "NHWC", "NCHW"}) {
            const ops::Prepared l = ToLayoutOp::prepare(scope, {format}, v);
            mkc_tensor *el = nullptr;
            ops::to_layout(thread_state().scope, format, *src, &el);
            CHECK(l.outputs.at(0).desc == el->desc && l.outputs[0].layout == el->layout);
            CHECK(max_rel_diff(run_prepared(scope, l, {src.get()}, ToLayoutOp::run).at(0),
                               take_values(el)) == 0);
        }
    }
}

TEST(transpose_reshape_to_layout_check_gives_the_eager_messages) {
    auto src = tensor({2, 3, 4});
    const ops::ValueDesc v = ops::describe(*src);
    auto same = [](const ops::Verdict &phase, const ops::Verdict &eager) {
        CHECK(!phase.ok() && phase.status == eager.status);
        CHECK_EQ_TEXT(phase.reason, eager.reason);
    };
    const int short_perm[] = {0, 1};
    const int repeated[] = {0, 1, 1};
    for (const auto &[n, perm] : {std::pair{2, short_perm}, std::pair{3, repeated}})
        same(ops::check<TransposeOp>({n, perm}, v), error_of([&, n = n, perm = perm] {
                 mkc_tensor *d = nullptr;
                 ops::transpose(thread_state().scope, n, perm, *src, &d);
             }));
    const int64_t too_many[] = {5, 5};
    const int64_t two_unknown[] = {-1, -1};
    const int64_t indivisible[] = {5, -1};
    for (const int64_t *dims : {too_many, two_unknown, indivisible})
        same(ops::check<ReshapeOp>({2, dims}, v), error_of([&] {
                 mkc_tensor *d = nullptr;
                 ops::reshape(thread_state().scope, 2, dims, *src, &d);
             }));
    auto flat = tensor({6, 4});
    for (const auto &[format, t] :
         {std::pair{"nChw16c", src.get()}, std::pair{"NHWC", flat.get()},
          std::pair{"tiled", src.get()}})
        same(ops::check<ToLayoutOp>({format}, ops::describe(*t)), error_of([&, f = format,
                                                                            x = t] {
                 mkc_tensor *d = nullptr;
                 ops::to_layout(thread_state().scope, f, *x, &d);
             }));
}

} // namespace
} // namespace mkc::test
