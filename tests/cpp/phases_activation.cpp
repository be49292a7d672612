// Activation's phases: infer and check on descriptions, prepare in a
// program's scope and run on raw buffers, against the eager call.
#include "internal_test.hpp"
#include "ops/activation.hpp"
#include "ops/activation_kernels.hpp"
#include "ops/ops.hpp"

namespace mkc::test {
namespace {

using ops::ActivationAttrs;
using ops::ActivationBackwardOp;
using ops::ActivationOp;

TEST(activation_infer_keeps_the_input_description) {
    auto src = tensor({2, 5, 7, 3}, MKC_LAYOUT_CHANNELS_LAST);
    const ops::ValueDesc in = ops::describe(*src);
    const ops::ValueDesc out = ActivationOp::infer({MKC_ACTIVATION_GELU_TANH, 0, 0}, in);
    CHECK(out.dims == in.dims && out.layout == MKC_LAYOUT_CHANNELS_LAST && out.desc == in.desc);
}

TEST(activation_check_gives_the_eager_message) {
    auto src = tensor({3, 17});
    const ops::ValueDesc in = ops::describe(*src);
    const ActivationAttrs bad{static_cast<mkc_activation_kind>(999), 0, 0};
    const ops::Verdict v = ops::check<ActivationOp>(bad, in);
    mkc_tensor *dst = nullptr;
    const ops::Verdict eager = error_of([&] {
        ops::activation(thread_state().scope, bad.kind, 0, 0, nullptr, *src, &dst);
    });
    CHECK(!v.ok() && v.status == eager.status);
    CHECK_EQ_TEXT(v.reason, eager.reason);
    CHECK(ops::check<ActivationOp>({MKC_ACTIVATION_RELU, 0, 0}, in).ok());

    ops::ValueDesc other = in;
    other.dtype = MKC_DTYPE_F16;
    const ops::Verdict dtype = ops::check<ActivationOp>({MKC_ACTIVATION_RELU, 0, 0}, other);
    CHECK(dtype.status == MKC_STATUS_INVALID_ARGUMENT);
    CHECK_EQ_TEXT(dtype.reason, "activation: src must be float32 or bfloat16, got float16");
}

TEST(activation_prepared_run_matches_eager) {
    const CacheScope scope = program_scope(0xa11ce);
    for (const ActivationAttrs attrs : {ActivationAttrs{MKC_ACTIVATION_RELU, 0.f, 0.f},
                                        ActivationAttrs{MKC_ACTIVATION_ELU, 0.5f, 0.f},
                                        ActivationAttrs{MKC_ACTIVATION_CLIP, -0.25f, 0.5f}}) {
        auto src = tensor({3, 13, 5, 2}, MKC_LAYOUT_CHANNELS_LAST, 3);
        const ops::Prepared p =
            ActivationOp::prepare(scope, attrs, "act", ops::describe(*src));
        const auto got = run_prepared(scope, p, {src.get()}, ActivationOp::run);
        mkc_tensor *dst = nullptr;
        ops::activation(thread_state().scope, attrs.kind, attrs.alpha, attrs.beta, "act", *src,
                        &dst);
        CHECK(max_rel_diff(got.at(0), take_values(dst)) == 0);
        // A float64 reference for the plain kinds.
        if (attrs.kind == MKC_ACTIVATION_RELU) {
            const auto x = values(*src);
            std::vector<float> want(x.size());
            for (size_t i = 0; i < x.size(); ++i) want[i] = x[i] > 0 ? x[i] : 0;
            CHECK(max_rel_diff(got[0], want) == 0);
        }
    }
}

TEST(activation_own_kernel_runs_in_programs_and_leaves_padding_zero) {
    // log, exp and sigmoid of 0 are not 0: the padding of a blocked
    // arrangement must still come back as zeros, as oneDNN leaves it.
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::desc blocked({2, 9, 3, 2}, dnnl::memory::data_type::f32, tag::nChw8c);
    const size_t n = blocked.get_size() / sizeof(float);
    for (const mkc_activation_kind kind :
         {MKC_ACTIVATION_LOG, MKC_ACTIVATION_EXP, MKC_ACTIVATION_SIGMOID}) {
        CHECK(ops::own_activation_kernel(kind));
        std::vector<float> src(n, 0.f), dst(n, 7.f);
        for (size_t i = 0; i < n; ++i) src[i] = 0.5f + static_cast<float>(i % 16);
        ops::activation_kernel(kind, 0, 0, blocked, src.data(), dst.data());
        // Channel c of a 9-channel nChw8c value: block c / 8 (of 2), lane c % 8.
        size_t padding = 0;
        for (size_t i = 0; i < n; ++i) {
            const size_t block = (i / (8 * 3 * 2)) % 2, lane = i % 8;
            if (block * 8 + lane >= 9) {
                ++padding;
                CHECK(dst[i] == 0.f);
            } else {
                CHECK(dst[i] != 0.f);
            }
        }
        CHECK(padding == 2 * 7 * 3 * 2);
    }

    // A program runs the same kernel through run() (no primitive to bind).
    const CacheScope scope = program_scope(0xa11d0);
    auto src = tensor({3, 13, 5, 2}, MKC_LAYOUT_CHANNELS_LAST, 3);
    const ActivationAttrs attrs{MKC_ACTIVATION_MISH, 0, 0};
    const ops::Prepared p = ActivationOp::prepare(scope, attrs, "m", ops::describe(*src));
    CHECK(p.in_args.empty() && p.out_args.empty());
    const auto got = run_prepared(scope, p, {src.get()}, ActivationOp::run);
    mkc_tensor *dst = nullptr;
    ops::activation(thread_state().scope, attrs.kind, 0, 0, "m", *src, &dst);
    CHECK(max_rel_diff(got.at(0), take_values(dst)) == 0);
}

TEST(activation_program_scope_builds_its_own_entry) {
    auto src = tensor({4, 9});
    const ActivationAttrs attrs{MKC_ACTIVATION_TANH, 0, 0};
    const ops::Prepared a = ActivationOp::prepare(program_scope(0xb0b), attrs, "t",
                                                  ops::describe(*src));
    const ops::Prepared again = ActivationOp::prepare(program_scope(0xb0b), attrs, "t",
                                                      ops::describe(*src));
    const ops::Prepared other = ActivationOp::prepare(program_scope(0xb0c), attrs, "t",
                                                      ops::describe(*src));
    CHECK(a.entry == again.entry);  // one executor: one entry, also from another scope object
    CHECK(a.entry != other.entry);  // another executor never shares it
}

TEST(activation_backward_phases_match_eager) {
    const CacheScope scope = program_scope(0xa11cf);
    const ActivationAttrs attrs{MKC_ACTIVATION_SWISH, 1.5f, 0};
    auto src = tensor({2, 3, 5, 7}, MKC_LAYOUT_CHANNELS_FIRST, 5);
    auto diff_dst = tensor({2, 3, 5, 7}, MKC_LAYOUT_CHANNELS_FIRST, 6);
    const ops::Prepared p = ActivationBackwardOp::prepare(scope, attrs, "sw", ops::describe(*src),
                                                          ops::describe(*diff_dst));
    const auto got = run_prepared(scope, p, {src.get(), diff_dst.get()}, ActivationBackwardOp::run);
    mkc_tensor *diff_src = nullptr;
    ops::activation_backward(thread_state().scope, attrs.kind, attrs.alpha, attrs.beta, "sw", *src,
                             *diff_dst, &diff_src);
    CHECK(max_rel_diff(got.at(0), take_values(diff_src)) == 0);

    auto wrong = tensor({2, 3, 5, 6});
    const ops::Verdict v =
        ops::check<ActivationBackwardOp>(attrs, ops::describe(*src), ops::describe(*wrong));
    const ops::Verdict eager = error_of([&] {
        mkc_tensor *d = nullptr;
        ops::activation_backward(thread_state().scope, attrs.kind, attrs.alpha, attrs.beta, "sw",
                                 *src, *wrong, &d);
    });
    CHECK(!v.ok() && v.status == eager.status);
    CHECK_EQ_TEXT(v.reason, eager.reason);
}

} // namespace
} // namespace mkc::test
