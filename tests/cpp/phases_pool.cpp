// Pooling's phases (forward inference and training, backward): infer and
// check on descriptions, prepare in a program's scope and run on raw
// buffers, against the eager calls.
#include "internal_test.hpp"
#include "layout/layout.hpp"
#include "ops/ops.hpp"
#include "ops/pool.hpp"

namespace mkc::test {
namespace {

using ops::PoolAttrs;
using ops::PoolBackwardOp;
using ops::PoolOp;

// One pooling: src's shape (oneDNN order) and layout, and the attributes
// (one value for every spatial dim, but the end padding).
struct Case {
    mkc_pool_kind kind;
    Dims x;
    mkc_layout layout;
    int64_t kernel, stride, pad, pad_end;
    bool ceil, global;
};

mkc_pool_params params_of(const Case &c, bool training = false) {
    mkc_pool_params p;
    mkc_pool_params_init(&p);
    p.kind = c.kind;
    for (int i = 0; i < 3; ++i) {
        p.kernel[i] = c.kernel;
        p.stride[i] = c.stride;
        p.pad_begin[i] = c.pad;
        p.pad_end[i] = c.pad_end;
    }
    p.ceil_mode = c.ceil;
    p.global = c.global;
    p.data_format = c.layout;
    p.training = training;
    return p;
}

PoolAttrs attrs_of(const mkc_pool_params &p, const Case &c) {
    return PoolAttrs(p, static_cast<int>(c.x.size()), p.training != 0);
}

// Every kind, 2-D and 3-D, both layouts, odd shapes and channels, batches
// above 1, padding, ceil mode and global pooling.
std::vector<Case> cases() {
    const auto NCHW = MKC_LAYOUT_CHANNELS_FIRST, NHWC = MKC_LAYOUT_CHANNELS_LAST;
    const auto max = MKC_POOL_MAX, avg = MKC_POOL_AVG_INCLUDE_PAD,
               avg_ex = MKC_POOL_AVG_EXCLUDE_PAD;
    return {
        {max, {2, 3, 11, 9}, NCHW, 3, 2, 1, 1, false, false},
        {avg, {3, 13, 10, 7}, NHWC, 3, 1, 1, 0, false, false},
        {avg_ex, {2, 17, 9, 8}, NCHW, 2, 2, 0, 1, true, false},
        {max, {2, 5, 8, 7}, NHWC, 3, 2, 0, 0, true, false},
        {max, {2, 7, 5, 6}, NCHW, 1, 1, 0, 0, false, true},
        {max, {2, 3, 5, 6, 7}, NCHW, 2, 2, 1, 0, false, false},
        {avg_ex, {1, 5, 4, 5, 6}, NHWC, 3, 1, 1, 1, false, false},
        {avg, {3, 19, 4, 4}, NHWC, 1, 1, 0, 0, false, true},
        {max, {2, 32, 8, 9}, NCHW, 2, 2, 0, 0, false, false},
        // Ceil mode's last windows past the end padding, counted (rescaled).
        {avg, {2, 17, 9, 8}, NHWC, 2, 2, 0, 0, true, false},
        {avg, {2, 3, 5, 6, 7}, NCHW, 3, 2, 1, 0, true, false},
    };
}

mkc_tensor *eager_pool(const mkc_pool_params &p, const Tensor &x) {
    mkc_tensor *dst = nullptr;
    ops::pool(thread_state().scope, p, x, &dst);
    return dst;
}

TEST(pool_infer_matches_eager) {
    for (const Case &c : cases()) {
        for (const bool training : {false, true}) {
            const mkc_pool_params p = params_of(c, training);
            auto x = tensor(c.x, c.layout, 1);
            const ops::ValueDesc out = PoolOp::infer(attrs_of(p, c), ops::describe(*x));
            mkc_tensor *dst = eager_pool(p, *x);
            CHECK(out.dims == dst->dims);
            CHECK(out.layout == dst->layout && out.layout == c.layout);
            CHECK(out.desc == layout::plain_desc(out.dims, dnnl::memory::data_type::f32, c.layout));
            mkc_tensor_destroy(dst);
        }
    }
}

TEST(pool_prepared_run_matches_eager) {
    const CacheScope scope = program_scope(0x9001);
    for (const Case &c : cases()) {
        for (const bool training : {false, true}) {
            const mkc_pool_params p = params_of(c, training);
            auto x = tensor(c.x, c.layout, 2);
            const ops::Prepared prep =
                PoolOp::prepare(scope, attrs_of(p, c), "pool", ops::describe(*x));
            CHECK(prep.takes.size() == 1 && prep.takes[0] == x->desc); // src as it is
            const auto got = run_prepared(scope, prep, {x.get()}, PoolOp::run);
            mkc_tensor *dst = eager_pool(p, *x);
            CHECK(prep.outputs.at(0).dims == dst->dims && prep.outputs[0].layout == dst->layout);
            CHECK(prep.outputs[0].desc == dst->desc);
            CHECK(max_rel_diff(got.at(0), take_values(dst)) == 0);
        }
    }
}

// A blocked src (a conv output) is pooled as it is, by the phases as by
// the eager call.
TEST(pool_runs_on_a_blocked_src) {
    const CacheScope scope = program_scope(0x9002);
    const Case c = cases()[8];
    const mkc_pool_params p = params_of(c);
    auto plain = tensor(c.x, c.layout, 3);
    auto x = make_owned_tensor(dnnl::memory::desc(c.x, dnnl::memory::data_type::f32,
                                                  dnnl::memory::format_tag::nChw16c),
                               c.layout, MKC_DTYPE_F32);
    reorder(scope, plain->desc, plain->data, x->desc, x->data);
    const ops::Prepared prep = PoolOp::prepare(scope, attrs_of(p, c), nullptr, ops::describe(*x));
    CHECK(prep.takes.at(0) == x->desc);
    const auto got = run_prepared(scope, prep, {x.get()}, PoolOp::run);
    mkc_tensor *dst = eager_pool(p, *x);
    CHECK(prep.outputs.at(0).desc == dst->desc);
    CHECK(max_rel_diff(got.at(0), take_values(dst)) == 0);
}

TEST(pool_check_gives_the_eager_message) {
    const Case good = cases()[0];
    struct Bad {
        const char *what;
        Case c;
        void (*edit)(mkc_pool_params &);
    };
    const auto none = [](mkc_pool_params &) {};
    Case rank = good;
    rank.x = {2, 3, 11};
    Case big = good;
    big.kernel = 14;
    big.pad = big.pad_end = 0;
    const std::vector<Bad> bad = {
        {"kind", good, [](mkc_pool_params &p) { p.kind = static_cast<mkc_pool_kind>(9); }},
        {"rank", rank, none},
        {"kernel", good, [](mkc_pool_params &p) { p.kernel[1] = 0; }},
        {"stride", good, [](mkc_pool_params &p) { p.stride[0] = 0; }},
        {"padding", good, [](mkc_pool_params &p) { p.pad_end[1] = 3; }},
        {"negative padding", good, [](mkc_pool_params &p) { p.pad_begin[0] = -1; }},
        {"kernel larger than the input", big, none},
        {"data_format", good,
         [](mkc_pool_params &p) { p.data_format = static_cast<mkc_layout>(7); }},
        // Both wrong: the inference call names the layout first, the
        // training call the kind.
        {"kind and data_format", good,
         [](mkc_pool_params &p) {
             p.kind = static_cast<mkc_pool_kind>(9);
             p.data_format = static_cast<mkc_layout>(7);
         }},
    };
    for (const Bad &t : bad) {
        for (const bool training : {false, true}) {
            mkc_pool_params p = params_of(t.c, training);
            t.edit(p);
            auto x = tensor(t.c.x, MKC_LAYOUT_CHANNELS_FIRST, 1);
            const ops::Verdict v = ops::check<PoolOp>(attrs_of(p, t.c), ops::describe(*x));
            const ops::Verdict eager = error_of([&] { mkc_tensor_destroy(eager_pool(p, *x)); });
            if (v.ok() || v.reason != eager.reason) std::fprintf(stderr, "case %s\n", t.what);
            CHECK(!v.ok() && v.status == eager.status);
            CHECK_EQ_TEXT(v.reason, eager.reason);
        }
    }
    // A src that is not float32.
    const mkc_pool_params p = params_of(good);
    auto x = tensor(good.x);
    x->dtype = MKC_DTYPE_F16;
    const ops::Verdict v = ops::check<PoolOp>(attrs_of(p, good), ops::describe(*x));
    const ops::Verdict eager = error_of([&] { eager_pool(p, *x); });
    CHECK(!v.ok() && v.status == eager.status);
    CHECK_EQ_TEXT(v.reason, eager.reason);
    x->dtype = MKC_DTYPE_F32;
    CHECK(ops::check<PoolOp>(attrs_of(p, good), ops::describe(*x)).ok());
}

TEST(pool_target_layout_resolves_per_phase) {
    const Case c = cases()[0];
    mkc_pool_params p = params_of(c);
    p.data_format = MKC_LAYOUT_TARGET;
    auto x = tensor(c.x, MKC_LAYOUT_CHANNELS_FIRST, 1);
    const mkc_layout before = thread_state().target_layout;
    layout::set_target(MKC_LAYOUT_CHANNELS_LAST);
    // infer has no thread: TARGET is src's own layout.
    CHECK(PoolOp::infer(attrs_of(p, c), ops::describe(*x)).layout == MKC_LAYOUT_CHANNELS_FIRST);
    // prepare reads the scope's thread state, as the eager call does.
    const ops::Prepared prep =
        PoolOp::prepare(program_scope(0x9003), attrs_of(p, c), nullptr, ops::describe(*x));
    mkc_tensor *dst = eager_pool(p, *x);
    CHECK(prep.outputs.at(0).layout == MKC_LAYOUT_CHANNELS_LAST);
    CHECK(prep.outputs[0].layout == dst->layout && prep.outputs[0].dims == dst->dims);
    mkc_tensor_destroy(dst);
    layout::set_target(before);
}

TEST(pool_prepare_shares_an_entry_per_executor) {
    const Case c = cases()[1];
    const mkc_pool_params p = params_of(c);
    auto x = tensor(c.x, c.layout);
    const auto prepare = [&](uint64_t executor) {
        return PoolOp::prepare(program_scope(executor), attrs_of(p, c), nullptr,
                               ops::describe(*x));
    };
    const ops::Prepared a = prepare(0x9004), again = prepare(0x9004), other = prepare(0x9005);
    CHECK(a.entry == again.entry);
    CHECK(a.entry != other.entry);
}

mkc_tensor *eager_backward(const mkc_pool_params &p, const Tensor &x, const Tensor &dy) {
    mkc_tensor *dx = nullptr;
    ops::pool_backward(thread_state().scope, p, x, dy, &dx);
    return dx;
}

TEST(pool_backward_phases_match_eager) {
    for (const bool forward_first : {true, false}) {
        // Its own executor each time: with the training forward prepared
        // first, the gradient finds the descriptor it left; without, it
        // makes its own.
        const CacheScope scope = program_scope(forward_first ? 0x9006 : 0x9007);
        for (const Case &c : cases()) {
            const mkc_pool_params p = params_of(c, true);
            const PoolAttrs attrs = attrs_of(p, c);
            auto x = tensor(c.x, c.layout, 4);
            if (forward_first) {
                const ops::Prepared f = PoolOp::prepare(scope, attrs, "p", ops::describe(*x));
                run_prepared(scope, f, {x.get()}, PoolOp::run);
            }
            const Dims y = PoolOp::infer(attrs, ops::describe(*x)).dims;
            auto dy = tensor(y, c.layout, 5);
            const ops::ValueDesc dx_d =
                PoolBackwardOp::infer(attrs, ops::describe(*x), ops::describe(*dy));
            const ops::Prepared b =
                PoolBackwardOp::prepare(scope, attrs, "p", ops::describe(*x), ops::describe(*dy));
            CHECK(b.takes.size() == 2 && b.takes[0] == x->desc && b.outputs.size() == 1);
            const auto got = run_prepared(scope, b, {x.get(), dy.get()}, PoolBackwardOp::run);
            // Twice: the workspace is computed again on every run.
            const auto again = run_prepared(scope, b, {x.get(), dy.get()}, PoolBackwardOp::run);

            mkc_tensor *dx = eager_backward(p, *x, *dy);
            CHECK(dx_d.dims == dx->dims && dx_d.layout == dx->layout && dx_d.layout == c.layout);
            CHECK(b.outputs[0].dims == dx->dims && b.outputs[0].layout == dx->layout);
            CHECK(b.outputs[0].desc == dx->desc);
            const auto want = take_values(dx);
            CHECK(max_rel_diff(got.at(0), want) == 0);
            CHECK(max_rel_diff(again.at(0), want) == 0);
        }
    }
}

// The training forward's descriptor is found by the attributes and dims:
// one left for a blocked src hints no gradient of a plain one (nor the
// reverse), in the eager calls as in the phases.
TEST(pool_backward_after_a_forward_on_another_arrangement) {
    const CacheScope scope = program_scope(0x9008);
    const Case c = cases()[8]; // max pooling, 32 channels
    const mkc_pool_params p = params_of(c, true);
    const PoolAttrs attrs = attrs_of(p, c);
    auto plain = tensor(c.x, c.layout, 6);
    auto blocked = make_owned_tensor(dnnl::memory::desc(c.x, dnnl::memory::data_type::f32,
                                                        dnnl::memory::format_tag::nChw16c),
                                     c.layout, MKC_DTYPE_F32);
    reorder(scope, plain->desc, plain->data, blocked->desc, blocked->data);
    auto dy = tensor(PoolOp::infer(attrs, ops::describe(*plain)).dims, c.layout, 7);
    mkc_tensor *expected = eager_backward(params_of(c, true), *plain, *dy); // nothing left
    const auto want = take_values(expected);
    for (const bool blocked_forward : {true, false}) {
        const Tensor &fx = blocked_forward ? *blocked : *plain;
        const Tensor &bx = blocked_forward ? *plain : *blocked;
        mkc_pool_params named = p;
        named.name = blocked_forward ? "pool_mixed_b" : "pool_mixed_p";
        mkc_tensor_destroy(eager_pool(named, fx));
        CHECK(max_rel_diff(take_values(eager_backward(named, bx, *dy)), want) == 0);

        PoolOp::prepare(scope, attrs, named.name, ops::describe(fx));
        const ops::Prepared b = PoolBackwardOp::prepare(scope, attrs, named.name,
                                                        ops::describe(bx), ops::describe(*dy));
        const auto got = run_prepared(scope, b, {&bx, dy.get()}, PoolBackwardOp::run);
        CHECK(max_rel_diff(got.at(0), want) == 0);
    }
}

TEST(pool_backward_check_gives_the_eager_message) {
    const Case good = cases()[3];
    const mkc_pool_params p = params_of(good, true);
    auto x = tensor(good.x, good.layout, 1);
    Dims y = PoolOp::infer(attrs_of(p, good), ops::describe(*x)).dims;
    y[2] += 1;
    auto dy = tensor(y, good.layout, 2);
    const auto compare = [&](const mkc_pool_params &q, const Tensor &d) {
        const ops::Verdict v =
            ops::check<PoolBackwardOp>(attrs_of(q, good), ops::describe(*x), ops::describe(d));
        const ops::Verdict eager = error_of([&] { eager_backward(q, *x, d); });
        CHECK(!v.ok() && v.status == eager.status);
        CHECK_EQ_TEXT(v.reason, eager.reason);
    };
    compare(p, *dy); // diff_dst's shape
    y[2] -= 1;
    auto dy_ok = tensor(y, good.layout, 2);
    dy_ok->dtype = MKC_DTYPE_F16;
    compare(p, *dy_ok); // diff_dst's type
    dy_ok->dtype = MKC_DTYPE_F32;
    mkc_pool_params q = p;
    q.stride[1] = 0;
    compare(q, *dy_ok);
    q = p;
    q.kind = static_cast<mkc_pool_kind>(0);
    compare(q, *dy_ok);
    CHECK(ops::check<PoolBackwardOp>(attrs_of(p, good), ops::describe(*x), ops::describe(*dy_ok))
              .ok());
}

} // namespace
} // namespace mkc::test
