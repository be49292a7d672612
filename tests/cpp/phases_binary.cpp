// Binary ops' phases (broadcasting forward, gradients, reduce_sum_to):
// infer and check on descriptions, prepare in a program's scope and run on
// raw buffers, against the eager calls.
#include "common/handles.hpp"
#include "internal_test.hpp"
#include "ops/binary.hpp"
#include "ops/ops.hpp"

namespace mkc::test {
namespace {

using ops::BinaryAttrs;
using ops::BinaryBackwardOp;
using ops::BinaryOp;
using ops::ReduceSumToAttrs;
using ops::ReduceSumToOp;

constexpr mkc_binary_kind kKinds[] = {MKC_BINARY_ADD, MKC_BINARY_SUB, MKC_BINARY_MUL,
                                      MKC_BINARY_DIV, MKC_BINARY_MAX, MKC_BINARY_MIN};

// A tensor of a dtype no operator takes (only float32 exists).
std::unique_ptr<Tensor> bad_dtype(const Dims &dims) {
    auto t = tensor(dims);
    t->dtype = MKC_DTYPE_F16;
    return t;
}

// Values away from 0 (divisors).
std::unique_ptr<Tensor> away_from_zero(const Dims &dims, mkc_layout lay, unsigned seed) {
    auto t = tensor(dims, lay, seed);
    auto *p = static_cast<float *>(t->data);
    for (int64_t i = 0; i < element_count(*t); ++i) p[i] = p[i] >= 0 ? p[i] + 0.5f : p[i] - 0.5f;
    return t;
}

mkc_tensor *eager_binary(mkc_binary_kind kind, const Tensor &a, const Tensor &b,
                         const char *name = nullptr) {
    mkc_tensor *dst = nullptr;
    ops::binary(thread_state().scope, kind, name, a, b, &dst);
    return dst;
}

// Operand pairs covering each way a call goes: same shapes, b broadcast,
// a broadcast (swapped), neither full (a expanded), lower ranks, NHWC.
struct Pair {
    std::unique_ptr<Tensor> a, b;
};
std::vector<Pair> pairs() {
    const auto f = MKC_LAYOUT_CHANNELS_FIRST, l = MKC_LAYOUT_CHANNELS_LAST;
    std::vector<Pair> out;
    auto add = [&](Dims da, mkc_layout la, Dims db, mkc_layout lb) {
        out.push_back({away_from_zero(da, la, 11 + out.size()),
                       away_from_zero(db, lb, 31 + out.size())});
    };
    add({2, 19, 3, 5}, f, {2, 19, 3, 5}, f);
    add({3, 7, 5, 4}, l, {3, 7, 5, 4}, l);
    add({2, 19, 3, 5}, f, {1, 19, 1, 1}, f);
    add({2, 21, 3, 5}, l, {21}, f);         // a channel vector against NHWC
    add({1, 19, 1, 1}, f, {2, 19, 3, 5}, f); // swapped
    add({5}, f, {3, 4, 5}, f);               // swapped, lower rank
    add({3, 1}, f, {1, 4}, f);               // neither full
    add({2, 1, 5}, f, {3, 1}, f);            // neither full, ranks differ
    add({2, 1, 4, 3}, l, {2, 6, 1, 1}, l);   // neither full, NHWC
    add({7, 3}, f, {3}, f);
    return out;
}

TEST(binary_infer_matches_eager) {
    for (const Pair &p : pairs()) {
        for (mkc_binary_kind kind : {MKC_BINARY_ADD, MKC_BINARY_DIV}) {
            const ops::ValueDesc out =
                BinaryOp::infer({kind}, ops::describe(*p.a), ops::describe(*p.b));
            mkc_tensor *dst = eager_binary(kind, *p.a, *p.b);
            CHECK(out.dims == dst->dims && out.layout == dst->layout && out.desc == dst->desc);
            mkc_tensor_destroy(dst);
        }
    }
}

TEST(binary_check_gives_the_eager_message) {
    auto a = tensor({2, 3, 4}), b = tensor({2, 5, 4}), ok = tensor({3, 1});
    auto ints = bad_dtype({2, 3, 4});
    struct Case {
        mkc_binary_kind kind;
        const Tensor *a, *b;
    };
    for (const Case &c : {Case{static_cast<mkc_binary_kind>(99), a.get(), a.get()},
                          Case{static_cast<mkc_binary_kind>(1001), a.get(), a.get()},
                          Case{MKC_BINARY_SUB, a.get(), b.get()},
                          Case{MKC_BINARY_MAX, ok.get(), b.get()},
                          Case{MKC_BINARY_MUL, ints.get(), a.get()},
                          Case{MKC_BINARY_DIV, a.get(), ints.get()}}) {
        const ops::Verdict v =
            ops::check<BinaryOp>({c.kind}, ops::describe(*c.a), ops::describe(*c.b));
        const ops::Verdict eager =
            error_of([&] { mkc_tensor_destroy(eager_binary(c.kind, *c.a, *c.b)); });
        CHECK(!v.ok() && v.status == eager.status);
        CHECK_EQ_TEXT(v.reason, eager.reason);
    }
    CHECK(ops::check<BinaryOp>({MKC_BINARY_ADD}, ops::describe(*a), ops::describe(*ok)).ok());
    CHECK(ops::check<BinaryOp>({MKC_BINARY_ADD}, ops::describe(*ok), ops::describe(*a)).ok());
}

TEST(binary_prepared_run_matches_eager) {
    const CacheScope scope = program_scope(0xb1a1);
    for (const Pair &p : pairs()) {
        for (mkc_binary_kind kind : kKinds) {
            const ops::Prepared prep =
                BinaryOp::prepare(scope, {kind}, "bin", ops::describe(*p.a), ops::describe(*p.b));
            const auto got = run_prepared(scope, prep, {p.a.get(), p.b.get()}, BinaryOp::run);
            mkc_tensor *dst = eager_binary(kind, *p.a, *p.b, "bin");
            CHECK(prep.outputs.at(0).dims == dst->dims && prep.outputs[0].layout == dst->layout);
            CHECK(max_rel_diff(got.at(0), take_values(dst)) == 0);
        }
    }
    // A float64 reference for a broadcast subtraction with a and b swapped.
    auto a = tensor({3}, MKC_LAYOUT_CHANNELS_FIRST, 3);
    auto b = tensor({2, 3}, MKC_LAYOUT_CHANNELS_FIRST, 4);
    const ops::Prepared prep =
        BinaryOp::prepare(scope, {MKC_BINARY_SUB}, nullptr, ops::describe(*a), ops::describe(*b));
    const auto got = run_prepared(scope, prep, {a.get(), b.get()}, BinaryOp::run).at(0);
    const auto x = values(*a), y = values(*b);
    std::vector<float> want(6);
    for (int i = 0; i < 6; ++i) want[i] = float(double(x[i % 3]) - double(y[i]));
    CHECK(max_rel_diff(got, want) <= 1e-6);
}

TEST(binary_blocked_operands_match_eager) {
    const CacheScope scope = program_scope(0xb1a2);
    auto plain = tensor({2, 20, 3, 3}, MKC_LAYOUT_CHANNELS_FIRST, 5);
    auto other = tensor({2, 20, 3, 3}, MKC_LAYOUT_CHANNELS_FIRST, 6);
    auto channel = tensor({1, 20, 1, 1}, MKC_LAYOUT_CHANNELS_FIRST, 7);
    auto a = blocked(*plain), b = blocked(*other), c = blocked(*channel);
    // An NHWC-labelled vector: its caller dims [1, 1, 1, 20] meet an NCHW
    // operand's only through a view of plain bytes.
    auto wide = tensor({2, 4, 3, 20}, MKC_LAYOUT_CHANNELS_FIRST, 8);
    auto last = blocked(*tensor({1, 20, 1, 1}, MKC_LAYOUT_CHANNELS_LAST, 9));
    struct Case {
        const Tensor *a, *b;
    };
    // Both blocked; a blocked with a plain vector and with a blocked one;
    // swapped; a blocked vector taken plain.
    for (const Case &k : {Case{a.get(), b.get()}, Case{a.get(), channel.get()},
                          Case{a.get(), c.get()}, Case{c.get(), b.get()},
                          Case{wide.get(), last.get()}, Case{last.get(), wide.get()}}) {
        const ops::Prepared prep = BinaryOp::prepare(scope, {MKC_BINARY_MUL}, "blk",
                                                     ops::describe(*k.a), ops::describe(*k.b));
        const auto got = run_prepared(scope, prep, {k.a, k.b}, BinaryOp::run);
        CHECK(max_rel_diff(got.at(0), take_values(eager_binary(MKC_BINARY_MUL, *k.a, *k.b,
                                                                 "blk"))) == 0);
    }
    const ops::Prepared same_rank = BinaryOp::prepare(scope, {MKC_BINARY_ADD}, "blk",
                                                      ops::describe(*a), ops::describe(*c));
    CHECK(same_rank.takes.at(0) == a->desc && same_rank.takes.at(1) == c->desc);
    const ops::Prepared viewed = BinaryOp::prepare(scope, {MKC_BINARY_ADD}, "blk",
                                                   ops::describe(*last), ops::describe(*wide));
    CHECK(viewed.takes.at(1) == wide->desc);
    CHECK(viewed.takes.at(0) ==
          layout::plain_desc(last->dims, dnnl::memory::data_type::f32, last->layout));
}

TEST(binary_backward_phases_match_eager) {
    const CacheScope scope = program_scope(0xb1a3);
    for (const Pair &p : pairs()) {
        mkc_tensor *y = eager_binary(MKC_BINARY_ADD, *p.a, *p.b);
        auto diff_dst = tensor(y->dims, y->layout, 41);
        mkc_tensor_destroy(y);
        for (mkc_binary_kind kind : kKinds) {
            const auto a = ops::describe(*p.a), b = ops::describe(*p.b),
                       dy = ops::describe(*diff_dst);
            mkc_tensor *da = nullptr, *db = nullptr;
            ops::binary_backward(thread_state().scope, kind, "g", *p.a, *p.b, *diff_dst, &da, &db);
            const std::vector<ops::ValueDesc> out = BinaryBackwardOp::infer({kind}, a, b, dy);
            CHECK(out.at(0).dims == da->dims && out[0].layout == da->layout &&
                  out[0].desc == da->desc);
            CHECK(out.at(1).dims == db->dims && out[1].layout == db->layout &&
                  out[1].desc == db->desc);
            const ops::Prepared prep = BinaryBackwardOp::prepare(scope, {kind}, "g", a, b, dy);
            const std::vector<const Tensor *> in{p.a.get(), p.b.get(), diff_dst.get()};
            const auto both = run_some(scope, prep, in, {true, true}, BinaryBackwardOp::run);
            const auto want_a = take_values(da), want_b = take_values(db);
            CHECK(max_rel_diff(both.at(0), want_a) == 0);
            CHECK(max_rel_diff(both.at(1), want_b) == 0);
            // One gradient alone, as an eager call asking for one.
            const auto b_only = run_some(scope, prep, in, {false, true}, BinaryBackwardOp::run);
            const auto a_only = run_some(scope, prep, in, {true, false}, BinaryBackwardOp::run);
            CHECK(max_rel_diff(b_only.at(1), want_b) == 0);
            CHECK(max_rel_diff(a_only.at(0), want_a) == 0);
        }
    }
}

TEST(binary_backward_blocked_operands_match_eager) {
    const CacheScope scope = program_scope(0xb1a5);
    auto a = blocked(*tensor({2, 20, 3, 3}, MKC_LAYOUT_CHANNELS_FIRST, 13));
    auto dy = blocked(*tensor({2, 20, 3, 3}, MKC_LAYOUT_CHANNELS_FIRST, 14));
    auto b = away_from_zero({1, 20, 1, 1}, MKC_LAYOUT_CHANNELS_FIRST, 15);
    for (mkc_binary_kind kind : kKinds) {
        mkc_tensor *da = nullptr, *db = nullptr;
        ops::binary_backward(thread_state().scope, kind, nullptr, *a, *b, *dy, &da, &db);
        const ops::Prepared prep = BinaryBackwardOp::prepare(
            scope, {kind}, nullptr, ops::describe(*a), ops::describe(*b), ops::describe(*dy));
        CHECK(prep.takes.at(0) == a->desc && prep.takes.at(2) == dy->desc);
        const auto got = run_some(scope, prep, {a.get(), b.get(), dy.get()}, {true, true},
                                  BinaryBackwardOp::run);
        CHECK(max_rel_diff(got.at(0), take_values(da)) == 0);
        CHECK(max_rel_diff(got.at(1), take_values(db)) == 0);
    }
}

TEST(binary_backward_check_gives_the_eager_message) {
    auto a = tensor({2, 3, 4}), b = tensor({3, 1}), dy = tensor({2, 3, 4});
    auto other = tensor({2, 5, 4}), wrong_dy = tensor({2, 3, 5}), ints = bad_dtype({2, 3, 4});
    struct Case {
        mkc_binary_kind kind;
        const Tensor *a, *b, *dy;
    };
    for (const Case &c : {Case{static_cast<mkc_binary_kind>(42), a.get(), b.get(), dy.get()},
                          Case{MKC_BINARY_MUL, a.get(), other.get(), dy.get()},
                          Case{MKC_BINARY_DIV, a.get(), b.get(), wrong_dy.get()},
                          Case{MKC_BINARY_MAX, a.get(), b.get(), ints.get()},
                          Case{MKC_BINARY_SUB, ints.get(), b.get(), dy.get()}}) {
        const ops::Verdict v = ops::check<BinaryBackwardOp>(
            {c.kind}, ops::describe(*c.a), ops::describe(*c.b), ops::describe(*c.dy));
        const ops::Verdict eager = error_of([&] {
            mkc_tensor *da = nullptr;
            ops::binary_backward(thread_state().scope, c.kind, nullptr, *c.a, *c.b, *c.dy, &da,
                                 nullptr);
            mkc_tensor_destroy(da);
        });
        CHECK(!v.ok() && v.status == eager.status);
        CHECK_EQ_TEXT(v.reason, eager.reason);
    }
}

TEST(reduce_sum_to_phases_match_eager) {
    const CacheScope scope = program_scope(0xb1a4);
    struct Case {
        Dims full, like;
        mkc_layout full_layout, like_layout;
        float scale;
    };
    const auto f = MKC_LAYOUT_CHANNELS_FIRST, l = MKC_LAYOUT_CHANNELS_LAST;
    for (const Case &c : {Case{{2, 19, 3, 5}, {1, 19, 1, 1}, f, f, 1.f},
                          Case{{2, 19, 3, 5}, {19}, l, f, -1.f},
                          Case{{3, 4, 5}, {4, 1}, f, f, 0.5f},
                          Case{{3, 7, 5, 4}, {3, 7, 5, 4}, l, l, 2.f},
                          Case{{6, 5}, {1}, f, f, 1.f}}) {
        auto full = tensor(c.full, c.full_layout, 9);
        auto like = tensor(c.like, c.like_layout, 10);
        const ReduceSumToAttrs attrs{c.scale, "reduce"};
        const ops::ValueDesc out =
            ReduceSumToOp::infer(attrs, ops::describe(*full), ops::describe(*like));
        mkc_tensor *dst = nullptr;
        ops::reduce_sum_to(thread_state().scope, *full, *like, c.scale, &dst, "reduce");
        CHECK(out.dims == dst->dims && out.layout == dst->layout && out.desc == dst->desc);
        const ops::Prepared p = ReduceSumToOp::prepare(scope, attrs, nullptr, ops::describe(*full),
                                                       ops::describe(*like));
        CHECK(p.takes.at(1).is_zero());
        const auto got = run_prepared(scope, p, {full.get(), nullptr}, ReduceSumToOp::run);
        CHECK(max_rel_diff(got.at(0), take_values(dst)) == 0);
    }
    // A float64 reference: [3, 4] summed to [1, 4].
    auto full = tensor({3, 4}, f, 12);
    auto like = tensor({1, 4});
    const ops::Prepared p = ReduceSumToOp::prepare(scope, {1.f, "reduce"}, nullptr,
                                                   ops::describe(*full), ops::describe(*like));
    const auto got = run_prepared(scope, p, {full.get(), nullptr}, ReduceSumToOp::run).at(0);
    const auto x = values(*full);
    std::vector<float> want(4, 0.f);
    for (int j = 0; j < 4; ++j)
        want[j] = float(double(x[j]) + double(x[4 + j]) + double(x[8 + j]));
    CHECK(max_rel_diff(got, want) <= 1e-6);
}

TEST(reduce_sum_to_check_gives_the_eager_message) {
    auto full = tensor({2, 3, 4});
    for (const Dims &like_dims : {Dims{5, 2, 3, 4}, Dims{3, 3}, Dims{2, 1, 5}}) {
        auto like = tensor(like_dims);
        const ops::Verdict v = ops::check<ReduceSumToOp>(
            ReduceSumToAttrs{1.f, "mul_backward"}, ops::describe(*full), ops::describe(*like));
        const ops::Verdict eager = error_of([&] {
            mkc_tensor *dst = nullptr;
            ops::reduce_sum_to(thread_state().scope, *full, *like, 1.f, &dst, "mul_backward");
            mkc_tensor_destroy(dst);
        });
        CHECK(!v.ok() && v.status == eager.status);
        CHECK_EQ_TEXT(v.reason, eager.reason);
    }
}

} // namespace
size_t live_tensors() {
    size_t n = 0;
    registry<Tensor>().lock_all();
    registry<Tensor>().for_each_live([&](const Tensor *) { ++n; });
    registry<Tensor>().unlock_all();
    return n;
}

TEST(binary_backward_leaves_only_its_results_registered) {
    // The broadcast side's gradient goes through full-shape intermediates:
    // made as results, they must leave the live-handle registry with the
    // call (a freed tensor left there is locked by the next fork).
    auto a = tensor({2, 5, 3, 4}, MKC_LAYOUT_CHANNELS_FIRST, 21);
    auto b = away_from_zero({1, 5, 1, 4}, MKC_LAYOUT_CHANNELS_FIRST, 22);
    auto dy = tensor({2, 5, 3, 4}, MKC_LAYOUT_CHANNELS_FIRST, 23);
    for (mkc_binary_kind kind : kKinds) {
        const size_t before = live_tensors();
        mkc_tensor *da = nullptr, *db = nullptr;
        ops::binary_backward(thread_state().scope, kind, nullptr, *a, *b, *dy, &da, &db);
        CHECK(live_tensors() == before + 2);
        mkc_tensor_destroy(da);
        mkc_tensor_destroy(db);
        CHECK(live_tensors() == before);
    }
}

} // namespace mkc::test
