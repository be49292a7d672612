// linear and matmul phases (forward; linear's two gradient primitives)
// against the eager calls and a float64 reference.
#include "common/cpu_features.hpp"
#include "internal_test.hpp"
#include "ops/matmul.hpp"
#include "ops/ops.hpp"

namespace mkc::test {
namespace {

using ops::LinearAttrs;
using ops::LinearBackwardDataOp;
using ops::LinearBackwardWeightsOp;
using ops::LinearOp;
using ops::MatmulAttrs;
using ops::MatmulOp;

mkc_linear_params linear_params(mkc_activation_kind act = MKC_ACTIVATION_NONE) {
    mkc_linear_params p;
    mkc_linear_params_init(&p);
    p.activation = act;
    return p;
}

mkc_matmul_params matmul_params(bool ta, bool tb) {
    mkc_matmul_params p;
    mkc_matmul_params_init(&p);
    p.transpose_a = ta;
    p.transpose_b = tb;
    return p;
}

// y[r, o] = sum_i x[r, i] w[o, i] (+ b[o]), in float64.
std::vector<float> linear_reference(const std::vector<float> &x, const std::vector<float> &w,
                                    const std::vector<float> *b, int64_t rows, int64_t in,
                                    int64_t out) {
    std::vector<float> y(rows * out);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < out; ++o) {
            double acc = b ? (*b)[o] : 0.0;
            for (int64_t i = 0; i < in; ++i) acc += double(x[r * in + i]) * w[o * in + i];
            y[r * out + o] = static_cast<float>(acc);
        }
    return y;
}

TEST(linear_phases_match_eager_and_reference) {
    const CacheScope scope = program_scope(0x11e);
    for (bool with_bias : {true, false}) {
        auto src = tensor({3, 5, 19}, MKC_LAYOUT_CHANNELS_FIRST, 1);
        auto w = tensor({7, 19}, MKC_LAYOUT_CHANNELS_FIRST, 2);
        auto b = tensor({7}, MKC_LAYOUT_CHANNELS_FIRST, 3);
        const mkc_linear_params p = linear_params();
        const LinearAttrs attrs(p, false);
        const ops::ValueDesc vs = ops::describe(*src), vw = ops::describe(*w),
                             vb = ops::describe(*b);
        const ops::ValueDesc *bias = with_bias ? &vb : nullptr;
        const ops::ValueDesc y = LinearOp::infer(attrs, vs, vw, bias);
        CHECK((y.dims == Dims{3, 5, 7}) && y.layout == MKC_LAYOUT_CHANNELS_FIRST);
        const ops::Prepared prepared = LinearOp::prepare(scope, attrs, "fc", vs, vw, bias);
        CHECK(prepared.outputs.at(0).dims == y.dims);
        const auto got = run_prepared(scope, prepared,
                                      {src.get(), w.get(), with_bias ? b.get() : nullptr},
                                      LinearOp::run);
        mkc_tensor *dst = nullptr;
        ops::linear(thread_state().scope, p, *src, *w, with_bias ? b.get() : nullptr, &dst);
        CHECK(max_rel_diff(got.at(0), take_values(dst)) <= 1e-6);
        const auto bv = values(*b);
        const auto want =
            linear_reference(values(*src), values(*w), with_bias ? &bv : nullptr, 15, 19, 7);
        CHECK(max_rel_diff(got[0], want) <= 1e-5);
    }
}

TEST(linear_check_gives_the_eager_messages) {
    auto src = tensor({4, 10});
    auto w = tensor({6, 11});
    auto w3 = tensor({6, 10, 1});
    auto b = tensor({5});
    auto good_w = tensor({6, 10});
    const mkc_linear_params p = linear_params();
    const LinearAttrs attrs(p, false);
    auto compare = [&](const Tensor &weights, const Tensor *bias) {
        const ops::ValueDesc vb = bias ? ops::describe(*bias) : ops::ValueDesc{};
        const ops::Verdict v = ops::check<LinearOp>(attrs, ops::describe(*src),
                                                    ops::describe(weights), bias ? &vb : nullptr);
        const ops::Verdict eager = error_of([&] {
            mkc_tensor *d = nullptr;
            ops::linear(thread_state().scope, p, *src, weights, bias, &d);
        });
        CHECK(!v.ok() && v.status == eager.status);
        CHECK_EQ_TEXT(v.reason, eager.reason);
    };
    compare(*w, nullptr);       // feature mismatch
    compare(*w3, nullptr);      // weights rank
    compare(*good_w, b.get());  // bias shape
}

// On data of `dtype`: diff_src in it, the weights and bias gradients
// float32.
void check_linear_gradient_phases(mkc_dtype dtype, uint64_t executor) {
    const CacheScope scope = program_scope(executor);
    auto src = converted(*tensor({2, 3, 9}, MKC_LAYOUT_CHANNELS_FIRST, 4), dtype);
    auto w = converted(*tensor({5, 9}, MKC_LAYOUT_CHANNELS_FIRST, 5), dtype);
    auto dy = converted(*tensor({2, 3, 5}, MKC_LAYOUT_CHANNELS_FIRST, 6), dtype);
    mkc_linear_params p = linear_params();
    p.training = 1;
    const LinearAttrs attrs(p, true);
    const ops::ValueDesc vs = ops::describe(*src), vw = ops::describe(*w), vdy = ops::describe(*dy);

    const ops::Prepared data = LinearBackwardDataOp::prepare(scope, attrs, "g", true, vs, vw, vdy);
    const auto dx = run_prepared(scope, data, {nullptr, w.get(), dy.get()},
                                 LinearBackwardDataOp::run);
    const ops::Prepared weights =
        LinearBackwardWeightsOp::prepare(scope, attrs, "g", true, vs, vw, vdy);
    const auto dwb = run_prepared(scope, weights, {src.get(), nullptr, dy.get()},
                                  LinearBackwardWeightsOp::run);
    const auto shapes = LinearBackwardWeightsOp::infer(attrs, true, vs, vw, vdy);
    CHECK(shapes.size() == 2 && (shapes[0].dims == Dims{5, 9}) && (shapes[1].dims == Dims{5}));
    CHECK((LinearBackwardDataOp::infer(attrs, vs, vw, vdy).dims == Dims{2, 3, 9}));
    CHECK(data.outputs[0].dtype == dtype);
    CHECK(LinearBackwardDataOp::infer(attrs, vs, vw, vdy).dtype == dtype);
    CHECK(weights.outputs[0].dtype == MKC_DTYPE_F32 && weights.outputs[1].dtype == MKC_DTYPE_F32);
    CHECK(shapes[0].dtype == MKC_DTYPE_F32 && shapes[1].dtype == MKC_DTYPE_F32);

    mkc_tensor *ex = nullptr, *ew = nullptr, *eb = nullptr;
    ops::linear_backward(thread_state().scope, p, *src, *w, *dy, &ex, &ew, &eb);
    CHECK(max_rel_diff(dx.at(0), take_values(ex)) <= 1e-6);
    CHECK(max_rel_diff(dwb.at(0), take_values(ew)) <= 1e-6);
    CHECK(max_rel_diff(dwb.at(1), take_values(eb)) <= 1e-6);

    auto bad = converted(*tensor({2, 3, 4}), dtype);
    const ops::Verdict v =
        ops::check<LinearBackwardDataOp>(attrs, vs, vw, ops::describe(*bad));
    const ops::Verdict eager = error_of([&] {
        mkc_tensor *d = nullptr;
        ops::linear_backward(thread_state().scope, p, *src, *w, *bad, &d, nullptr, nullptr);
    });
    CHECK(!v.ok() && v.status == eager.status);
    CHECK_EQ_TEXT(v.reason, eager.reason);
}

TEST(linear_gradient_phases_match_eager) {
    check_linear_gradient_phases(MKC_DTYPE_F32, 0x11f);
}

TEST(linear_gradient_phases_match_eager_in_bfloat16) {
    if (!cpu_has_bf16_kernels()) return; // oneDNN has no bfloat16 kernels here
    check_linear_gradient_phases(MKC_DTYPE_BF16, 0x120);
}

TEST(matmul_phases_match_eager) {
    const CacheScope scope = program_scope(0x3a7);
    struct Case {
        Dims a, b;
        bool ta, tb, bias;
        Dims y;
    };
    for (const Case &c : {Case{{2, 3, 5, 7}, {7, 6}, false, false, true, {2, 3, 5, 6}},
                          Case{{4, 7, 5}, {1, 6, 7}, true, true, false, {4, 5, 6}},
                          Case{{3, 1, 9, 2}, {5, 9, 4}, true, false, true, {3, 5, 2, 4}}}) {
        auto a = tensor(c.a, MKC_LAYOUT_CHANNELS_FIRST, 7);
        auto b = tensor(c.b, MKC_LAYOUT_CHANNELS_FIRST, 8);
        auto bias = tensor({c.y.back()}, MKC_LAYOUT_CHANNELS_FIRST, 9);
        const mkc_matmul_params p = matmul_params(c.ta, c.tb);
        const MatmulAttrs attrs{p};
        const ops::ValueDesc va = ops::describe(*a), vb = ops::describe(*b),
                             vbias = ops::describe(*bias);
        const ops::ValueDesc *pb = c.bias ? &vbias : nullptr;
        CHECK(MatmulOp::infer(attrs, va, vb, pb).dims == c.y);
        const ops::Prepared prepared = MatmulOp::prepare(scope, attrs, nullptr, va, vb, pb);
        const auto got = run_prepared(scope, prepared,
                                      {a.get(), b.get(), c.bias ? bias.get() : nullptr},
                                      MatmulOp::run);
        mkc_tensor *dst = nullptr;
        ops::matmul(thread_state().scope, p, *a, *b, c.bias ? bias.get() : nullptr, &dst);
        CHECK(max_rel_diff(got.at(0), take_values(dst)) <= 1e-6);
    }
}

TEST(matmul_check_gives_the_eager_messages) {
    auto a = tensor({2, 3, 4});
    auto b_inner = tensor({5, 6});
    auto b_batch = tensor({3, 4, 6});
    auto b_rank = tensor({4});
    const mkc_matmul_params p = matmul_params(false, false);
    for (const Tensor *b : {b_inner.get(), b_batch.get(), b_rank.get()}) {
        const ops::Verdict v =
            ops::check<MatmulOp>(MatmulAttrs{p}, ops::describe(*a), ops::describe(*b),
                                 static_cast<const ops::ValueDesc *>(nullptr));
        const ops::Verdict eager = error_of([&] {
            mkc_tensor *d = nullptr;
            ops::matmul(thread_state().scope, p, *a, *b, nullptr, &d);
        });
        CHECK(!v.ok() && v.status == eager.status);
        CHECK_EQ_TEXT(v.reason, eager.reason);
    }
}

} // namespace
} // namespace mkc::test
