// Convolution's phases (conv2d, conv3d, conv2d_transpose; forward, data and
// weights gradients): infer and check on descriptions, prepare in a
// program's scope and run on raw buffers, against the eager calls.
#include "common/cpu_features.hpp"
#include "internal_test.hpp"
#include "layout/layout.hpp"
#include "ops/conv.hpp"
#include "ops/ops.hpp"

namespace mkc::test {
namespace {

using ops::ConvAttrs;
using ops::ConvBackwardDataOp;
using ops::ConvBackwardWeightsOp;
using ops::ConvOp;

// One convolution: the operator, its shapes (oneDNN order) and attributes
// (one value for every spatial dim, but the end padding).
struct Case {
    int k;
    bool transposed;
    Dims x, w;
    mkc_layout layout;
    int64_t stride, pad, pad_end, dilation, output_padding, groups;
    bool bias;
    mkc_activation_kind activation;
};

const char *op_of(const Case &c) {
    return c.transposed ? "conv2d_transpose" : c.k == 3 ? "conv3d" : "conv2d";
}
const char *backward_op_of(const Case &c) {
    return c.transposed ? "conv2d_transpose_backward"
           : c.k == 3   ? "conv3d_backward"
                        : "conv2d_backward";
}

mkc_conv_params params_of(const Case &c) {
    mkc_conv_params p;
    mkc_conv_params_init(&p);
    for (int i = 0; i < 3; ++i) {
        p.stride[i] = c.stride;
        p.pad_begin[i] = c.pad;
        p.pad_end[i] = c.pad_end;
        p.dilation[i] = c.dilation;
        p.output_padding[i] = c.output_padding;
    }
    p.groups = c.groups;
    p.data_format = c.layout;
    p.activation = c.activation;
    return p;
}

Dims bias_dims(const Case &c) { return {c.transposed ? c.w[1] * c.groups : c.w[0]}; }

// Odd shapes, channels off multiples of 16, batches above 1, both layouts,
// strides, asymmetric padding, dilation, groups, bias or none.
std::vector<Case> cases() {
    const auto NCHW = MKC_LAYOUT_CHANNELS_FIRST, NHWC = MKC_LAYOUT_CHANNELS_LAST;
    const auto none = MKC_ACTIVATION_NONE, relu = MKC_ACTIVATION_RELU;
    return {
        {2, false, {2, 3, 11, 9}, {5, 3, 3, 3}, NCHW, 1, 1, 1, 1, 0, 1, true, relu},
        {2, false, {3, 13, 10, 7}, {17, 13, 3, 2}, NHWC, 2, 1, 0, 2, 0, 1, false, none},
        {2, false, {2, 12, 8, 9}, {18, 4, 3, 3}, NCHW, 1, 1, 2, 1, 0, 3, false, none},
        {2, false, {2, 16, 9, 9}, {32, 1, 3, 3}, NHWC, 2, 1, 1, 1, 0, 16, true, none},
        {2, false, {2, 32, 7, 6}, {48, 32, 1, 1}, NCHW, 1, 0, 0, 1, 0, 1, true, none},
        {2, false, {2, 32, 7, 7}, {64, 16, 3, 3}, NHWC, 1, 1, 1, 1, 0, 2, true, relu},
        {3, false, {2, 3, 5, 6, 7}, {4, 3, 3, 3, 3}, NCHW, 2, 1, 1, 1, 0, 1, true, none},
        {3, false, {1, 5, 4, 5, 6}, {7, 5, 2, 3, 2}, NHWC, 1, 1, 0, 2, 0, 1, false, none},
        {2, true, {2, 6, 5, 7}, {6, 3, 3, 3}, NCHW, 2, 1, 1, 1, 1, 1, true, none},
        {2, true, {3, 8, 4, 5}, {8, 3, 3, 3}, NHWC, 2, 0, 1, 1, 1, 2, false, relu},
        {2, true, {2, 16, 5, 5}, {16, 16, 2, 2}, NCHW, 1, 0, 0, 2, 0, 1, true, none},
    };
}

// The eager call's result tensor (the caller releases it).
mkc_tensor *eager_forward(const Case &c, const mkc_conv_params &p, const Tensor &x,
                          const Tensor &w, const Tensor *b) {
    mkc_tensor *dst = nullptr;
    ops::convolution(thread_state().scope, op_of(c), c.k, c.transposed, p, x, w, b, &dst);
    return dst;
}

TEST(conv_infer_matches_eager) {
    for (const Case &c : cases()) {
        const mkc_conv_params p = params_of(c);
        auto x = tensor(c.x, c.layout, 1);
        auto w = tensor(c.w, MKC_LAYOUT_CHANNELS_FIRST, 2);
        auto b = c.bias ? tensor(bias_dims(c), MKC_LAYOUT_CHANNELS_FIRST, 3) : nullptr;
        const ops::ValueDesc bd = b ? ops::describe(*b) : ops::ValueDesc{};
        const ops::ValueDesc out = ConvOp::infer(ConvAttrs(p, c.k, c.transposed, false),
                                                 ops::describe(*x), ops::describe(*w),
                                                 b ? &bd : nullptr);
        mkc_tensor *dst = eager_forward(c, p, *x, *w, b.get());
        CHECK(out.dims == dst->dims);
        CHECK(out.layout == dst->layout && out.layout == c.layout);
        CHECK(out.dtype == MKC_DTYPE_F32);
        CHECK(out.desc == layout::plain_desc(out.dims, dnnl::memory::data_type::f32, c.layout));
        mkc_tensor_destroy(dst);
    }
}

TEST(conv_prepared_run_matches_eager) {
    const CacheScope scope = program_scope(0xc0417);
    for (const Case &c : cases()) {
        const mkc_conv_params p = params_of(c);
        const ConvAttrs attrs(p, c.k, c.transposed, false);
        auto x = tensor(c.x, c.layout, 4);
        auto w = tensor(c.w, MKC_LAYOUT_CHANNELS_FIRST, 5);
        auto b = c.bias ? tensor(bias_dims(c), MKC_LAYOUT_CHANNELS_FIRST, 6) : nullptr;
        const ops::ValueDesc bd = b ? ops::describe(*b) : ops::ValueDesc{};
        const ops::Prepared prep = ConvOp::prepare(scope, attrs, "conv", ops::describe(*x),
                                                   ops::describe(*w), b ? &bd : nullptr);
        CHECK(prep.takes.size() == 3 && prep.outputs.size() == 1);
        // Grouped and transposed weights: the caller's plain bytes read
        // through a view, converted to the primitive's arrangement (once, by
        // a program); others taken as the primitive wants them.
        const bool view = c.groups > 1 || c.transposed;
        CHECK(prep.views.size() == (view ? 3u : 0u));
        if (view)
            CHECK(prep.views[1].base == w->desc && !prep.views[1].view.is_zero() &&
                  prep.views[0].view.is_zero());
        CHECK(prep.takes[1] == prep.entry->arg_desc(DNNL_ARG_WEIGHTS));
        CHECK(prep.in_args.at(1) == DNNL_ARG_WEIGHTS); // a plain execution, even with a view
        CHECK(c.bias ? prep.takes[2] == b->desc : prep.takes[2] == dnnl::memory::desc());
        const auto got = run_prepared(scope, prep, {x.get(), w.get(), b.get()}, ConvOp::run);
        mkc_tensor *dst = eager_forward(c, p, *x, *w, b.get());
        CHECK(prep.outputs[0].dims == dst->dims && prep.outputs[0].layout == dst->layout);
        CHECK(prep.outputs[0].desc == dst->desc); // the same primitive's choice
        CHECK(max_rel_diff(got.at(0), take_values(dst)) == 0);
    }
}

// Runs prepared phases whose outputs start as `initial` (converted to what
// `prepared.outputs` says); the outputs' values returned plain.
std::vector<float> run_into(const CacheScope &scope, const ops::Prepared &prepared,
                            const std::vector<const Tensor *> &inputs, const Tensor &initial,
                            void (*run)(const CacheScope &, PrimitiveEntry &,
                                        const ops::Buffers &)) {
    std::vector<std::shared_ptr<void>> held;
    const std::vector<const void *> in = arranged_inputs(scope, prepared, inputs, held);
    const ops::ValueDesc &y = prepared.outputs.at(0);
    auto out = allocate(y.desc.get_size(), false);
    reorder(scope, initial.desc, initial.data, y.desc, out.get());
    void *outs[] = {out.get()};
    run(scope, *prepared.entry, ops::Buffers{in.data(), outs});
    return values(y.desc, out.get(), y.layout);
}

TEST(conv_sum_accumulates_into_the_output_buffer) {
    const CacheScope scope = program_scope(0xc0418);
    for (const Case &c : {cases()[0], cases()[5], cases()[6], cases()[8]}) {
        mkc_conv_params p = params_of(c);
        p.sum = 1;
        const ConvAttrs attrs(p, c.k, c.transposed, false);
        auto x = tensor(c.x, c.layout, 7);
        auto w = tensor(c.w, MKC_LAYOUT_CHANNELS_FIRST, 8);
        auto b = c.bias ? tensor(bias_dims(c), MKC_LAYOUT_CHANNELS_FIRST, 9) : nullptr;
        const ops::ValueDesc bd = b ? ops::describe(*b) : ops::ValueDesc{};
        const ops::Prepared prep = ConvOp::prepare(scope, attrs, "res", ops::describe(*x),
                                                   ops::describe(*w), b ? &bd : nullptr);
        const Dims y = prep.outputs.at(0).dims;
        auto residual = tensor(y, c.layout, 10);
        const auto got = run_into(scope, prep, {x.get(), w.get(), b.get()}, *residual, ConvOp::run);

        // The eager call accumulates into its existing dst.
        auto existing = tensor(y, c.layout, 10);
        mkc_tensor *dst = existing.get();
        ops::convolution(thread_state().scope, op_of(c), c.k, c.transposed, p, *x, *w, b.get(),
                         &dst);
        CHECK(dst == existing.get());
        const auto want = values(*dst);
        CHECK(max_rel_diff(got, want) == 0);
        // And the residual counted: without it the result differs.
        p.sum = 0;
        mkc_tensor *plain = eager_forward(c, p, *x, *w, b.get());
        CHECK(max_rel_diff(got, take_values(plain)) > 1e-3);
    }
}

TEST(conv_check_gives_the_eager_message) {
    const Case good = cases()[0];
    struct Bad {
        const char *what;
        Case c;
        void (*edit)(mkc_conv_params &);
        void (*edit_tensors)(Tensor &x, Tensor &w);
    };
    const auto none = [](mkc_conv_params &) {};
    const auto keep = [](Tensor &, Tensor &) {};
    Case channels = good;
    channels.w = {5, 4, 3, 3};
    Case big_kernel = good;
    big_kernel.w = {5, 3, 14, 3};
    Case groups = cases()[2];
    groups.w = {17, 4, 3, 3};
    Case rank = good;
    rank.x = {2, 3, 11};
    Case transposed = cases()[8];
    Case conv3d = cases()[6];
    const std::vector<Bad> bad = {
        {"channels", channels, none, keep},
        {"kernel", big_kernel, none, keep},
        {"groups", groups, none, keep},
        {"rank", rank, none, keep},
        {"stride", good, [](mkc_conv_params &p) { p.stride[1] = 0; }, keep},
        {"dilation", conv3d, [](mkc_conv_params &p) { p.dilation[2] = -1; }, keep},
        {"output_padding", good, [](mkc_conv_params &p) { p.output_padding[0] = 1; }, keep},
        {"transposed output_padding", transposed,
         [](mkc_conv_params &p) { p.output_padding[1] = 2; }, keep},
        {"activation", good,
         [](mkc_conv_params &p) { p.activation = static_cast<mkc_activation_kind>(999); }, keep},
        {"data_format", good,
         [](mkc_conv_params &p) { p.data_format = static_cast<mkc_layout>(7); }, keep},
        {"dtype", good, none, [](Tensor &x, Tensor &) { x.dtype = MKC_DTYPE_F16; }},
        {"grouped weights not plain", cases()[2], none,
         [](Tensor &, Tensor &w) {
             w.desc = dnnl::memory::desc(w.dims, dnnl::memory::data_type::f32,
                                         dnnl::memory::format_tag::ohwi);
         }},
        {"transposed weights not plain", transposed, none,
         [](Tensor &, Tensor &w) {
             w.desc = dnnl::memory::desc(w.dims, dnnl::memory::data_type::f32,
                                         dnnl::memory::format_tag::ohwi);
         }},
    };
    for (const Bad &t : bad) {
        mkc_conv_params p = params_of(t.c);
        t.edit(p);
        auto x = tensor(t.c.x, MKC_LAYOUT_CHANNELS_FIRST, 1);
        auto w = tensor(t.c.w, MKC_LAYOUT_CHANNELS_FIRST, 2);
        t.edit_tensors(*x, *w);
        const ConvAttrs attrs(p, t.c.k, t.c.transposed, false);
        const ops::Verdict v =
            ops::check<ConvOp>(attrs, ops::describe(*x), ops::describe(*w), nullptr);
        const ops::Verdict eager = error_of([&] {
            mkc_tensor *dst = eager_forward(t.c, p, *x, *w, nullptr);
            mkc_tensor_destroy(dst);
        });
        if (v.ok() || v.status != eager.status) std::fprintf(stderr, "case %s\n", t.what);
        CHECK(!v.ok() && v.status == eager.status);
        CHECK_EQ_TEXT(v.reason, eager.reason);
    }
    // A bias of the wrong shape.
    const mkc_conv_params p = params_of(good);
    auto x = tensor(good.x), w = tensor(good.w), b = tensor({4});
    const ops::ValueDesc bd = ops::describe(*b);
    const ops::Verdict v = ops::check<ConvOp>(ConvAttrs(p, 2, false, false), ops::describe(*x),
                                              ops::describe(*w), &bd);
    const ops::Verdict eager = error_of([&] { eager_forward(good, p, *x, *w, b.get()); });
    CHECK(!v.ok() && v.status == eager.status);
    CHECK_EQ_TEXT(v.reason, eager.reason);
    CHECK(ops::check<ConvOp>(ConvAttrs(p, 2, false, false), ops::describe(*x), ops::describe(*w),
                             nullptr)
              .ok());
}

TEST(conv_target_layout_resolves_per_phase) {
    const Case c = cases()[0];
    mkc_conv_params p = params_of(c);
    p.data_format = MKC_LAYOUT_TARGET;
    auto x = tensor(c.x, MKC_LAYOUT_CHANNELS_FIRST, 1);
    auto w = tensor(c.w, MKC_LAYOUT_CHANNELS_FIRST, 2);
    const ConvAttrs attrs(p, 2, false, false);
    const mkc_layout before = thread_state().target_layout;
    layout::set_target(MKC_LAYOUT_CHANNELS_LAST);
    // infer has no thread: TARGET is src's own layout.
    const ops::ValueDesc inferred =
        ConvOp::infer(attrs, ops::describe(*x), ops::describe(*w), nullptr);
    CHECK(inferred.layout == MKC_LAYOUT_CHANNELS_FIRST);
    // prepare reads the scope's thread state, as the eager call does.
    const ops::Prepared prep = ConvOp::prepare(program_scope(0xc0419), attrs, nullptr,
                                               ops::describe(*x), ops::describe(*w), nullptr);
    mkc_tensor *dst = eager_forward(c, p, *x, *w, nullptr);
    CHECK(prep.outputs.at(0).layout == MKC_LAYOUT_CHANNELS_LAST);
    CHECK(prep.outputs[0].layout == dst->layout && prep.outputs[0].dims == dst->dims);
    mkc_tensor_destroy(dst);
    layout::set_target(before);
}

TEST(conv_prepare_shares_an_entry_per_executor) {
    const Case c = cases()[2];
    const mkc_conv_params p = params_of(c);
    const ConvAttrs attrs(p, c.k, c.transposed, false);
    auto x = tensor(c.x), w = tensor(c.w);
    const auto prepare = [&](uint64_t executor) {
        return ConvOp::prepare(program_scope(executor), attrs, nullptr, ops::describe(*x),
                               ops::describe(*w), nullptr);
    };
    const ops::Prepared a = prepare(0xc041a), again = prepare(0xc041a), other = prepare(0xc041b);
    CHECK(a.entry == again.entry);
    CHECK(a.entry != other.entry);
}

// The gradients' results of one case, eager and by the phases.
struct Grads {
    std::vector<float> dx, dw, db;
};

Grads eager_backward(const Case &c, const mkc_conv_params &p, const Tensor &x, const Tensor &w,
                     const Tensor &dy, bool bias) {
    mkc_tensor *dx = nullptr, *dw = nullptr, *db = nullptr;
    ops::convolution_backward(thread_state().scope, backward_op_of(c), c.k, c.transposed, p, x,
                              w, dy, &dx, &dw, bias ? &db : nullptr);
    Grads g{take_values(dx), take_values(dw), {}};
    if (bias) g.db = take_values(db);
    return g;
}

TEST(conv_backward_infer_matches_eager) {
    for (Case c : cases()) {
        c.activation = MKC_ACTIVATION_NONE;
        const mkc_conv_params p = params_of(c);
        const ConvAttrs attrs(p, c.k, c.transposed, true);
        auto x = tensor(c.x, c.layout, 1);
        auto w = tensor(c.w, MKC_LAYOUT_CHANNELS_FIRST, 2);
        mkc_tensor *y = eager_forward(c, p, *x, *w, nullptr);
        auto dy = tensor(y->dims, c.layout, 3);
        mkc_tensor_destroy(y);
        const ops::ValueDesc dx_d =
            ConvBackwardDataOp::infer(attrs, ops::describe(*x), ops::describe(*w),
                                      ops::describe(*dy));
        const std::vector<ops::ValueDesc> dw_d = ConvBackwardWeightsOp::infer(
            attrs, c.bias, ops::describe(*x), ops::describe(*w), ops::describe(*dy));
        mkc_tensor *dx = nullptr, *dw = nullptr, *db = nullptr;
        ops::convolution_backward(thread_state().scope, backward_op_of(c), c.k, c.transposed, p,
                                  *x, *w, *dy, &dx, &dw, c.bias ? &db : nullptr);
        CHECK(dx_d.dims == dx->dims && dx_d.layout == dx->layout);
        CHECK(dw_d.size() == (c.bias ? 2u : 1u));
        CHECK(dw_d[0].dims == dw->dims && dw_d[0].layout == dw->layout);
        CHECK(dw_d[0].desc == dw->desc);
        if (c.bias) {
            CHECK(dw_d[1].dims == db->dims && dw_d[1].layout == db->layout);
            mkc_tensor_destroy(db);
        }
        mkc_tensor_destroy(dx);
        mkc_tensor_destroy(dw);
    }
}

// The gradients' phases in a program's scope against the eager calls, on
// data of `dtype` (the bias float32): diff_src in that dtype, the weights
// and bias gradients float32.
void backward_phases_match_eager(mkc_dtype dtype, uint64_t executor) {
    const CacheScope scope = program_scope(executor);
    for (Case c : cases()) {
        c.activation = MKC_ACTIVATION_NONE;
        mkc_conv_params p = params_of(c);
        p.training = 1;
        auto x = converted(*tensor(c.x, c.layout, 11), dtype);
        auto w = converted(*tensor(c.w, MKC_LAYOUT_CHANNELS_FIRST, 12), dtype);
        auto b = c.bias ? tensor(bias_dims(c), MKC_LAYOUT_CHANNELS_FIRST, 13) : nullptr;
        const ops::ValueDesc bd = b ? ops::describe(*b) : ops::ValueDesc{};
        // The training forward first, as a program runs it: it leaves its
        // descriptor in the scope, which the gradients find.
        const ConvAttrs fwd(p, c.k, c.transposed, true);
        const ops::Prepared f = ConvOp::prepare(scope, fwd, "train", ops::describe(*x),
                                                ops::describe(*w), b ? &bd : nullptr);
        const auto y = run_prepared(scope, f, {x.get(), w.get(), b.get()}, ConvOp::run);
        mkc_tensor *ey = nullptr;
        ops::convolution(thread_state().scope, op_of(c), c.k, c.transposed, p, *x, *w, b.get(),
                         &ey);
        CHECK(max_rel_diff(y.at(0), take_values(ey)) == 0);

        auto dy = converted(*tensor(f.outputs.at(0).dims, c.layout, 14), dtype);
        const ops::Prepared d =
            ConvBackwardDataOp::prepare(scope, fwd, "train", c.bias, ops::describe(*x),
                                        ops::describe(*w), ops::describe(*dy));
        const ops::Prepared g =
            ConvBackwardWeightsOp::prepare(scope, fwd, "train", c.bias, ops::describe(*x),
                                           ops::describe(*w), ops::describe(*dy));
        CHECK(d.takes.size() == 3 && d.outputs.size() == 1);
        CHECK(g.takes.size() == 3 && g.outputs.size() == (c.bias ? 2u : 1u));
        const auto dx =
            run_prepared(scope, d, {x.get(), w.get(), dy.get()}, ConvBackwardDataOp::run);
        const auto dw =
            run_prepared(scope, g, {x.get(), w.get(), dy.get()}, ConvBackwardWeightsOp::run);

        p.name = "train";
        const Grads want = eager_backward(c, p, *x, *w, *dy, c.bias);
        CHECK(d.outputs[0].dims == x->dims && d.outputs[0].layout == c.layout);
        CHECK(d.outputs[0].dtype == dtype && g.outputs[0].dtype == MKC_DTYPE_F32);
        CHECK(!c.bias || g.outputs[1].dtype == MKC_DTYPE_F32);
        CHECK(max_rel_diff(dx.at(0), want.dx) == 0);
        CHECK(max_rel_diff(dw.at(0), want.dw) == 0);
        if (c.bias) CHECK(max_rel_diff(dw.at(1), want.db) == 0);
    }
}

TEST(conv_backward_phases_match_eager) { backward_phases_match_eager(MKC_DTYPE_F32, 0xc041c); }

TEST(conv_backward_phases_match_eager_in_bfloat16) {
    if (!cpu_has_bf16_kernels()) return; // oneDNN has no bfloat16 kernels here
    backward_phases_match_eager(MKC_DTYPE_BF16, 0xc041d);
}

TEST(conv_backward_check_gives_the_eager_message) {
    const Case good = cases()[1];
    auto x = tensor(good.x, good.layout, 1);
    auto w = tensor(good.w, MKC_LAYOUT_CHANNELS_FIRST, 2);
    const mkc_conv_params fp = params_of(good);
    Dims y = ConvOp::infer(ConvAttrs(fp, 2, false, false), ops::describe(*x), ops::describe(*w),
                           nullptr)
                 .dims;
    auto dy_ok = tensor(y, good.layout, 3);
    y[3] += 1;
    auto dy = tensor(y, good.layout, 3);
    const auto compare = [&](const mkc_conv_params &p, const Tensor &d, const Case &c) {
        const ConvAttrs attrs(p, c.k, c.transposed, true);
        const ops::Verdict data = ops::check<ConvBackwardDataOp>(attrs, ops::describe(*x),
                                                                 ops::describe(*w),
                                                                 ops::describe(d));
        const ops::Verdict weights = ops::check<ConvBackwardWeightsOp>(
            attrs, true, ops::describe(*x), ops::describe(*w), ops::describe(d));
        const ops::Verdict eager = error_of([&] {
            mkc_tensor *dx = nullptr, *dw = nullptr;
            ops::convolution_backward(thread_state().scope, backward_op_of(c), c.k,
                                      c.transposed, p, *x, *w, d, &dx, &dw, nullptr);
        });
        CHECK(!data.ok() && data.status == eager.status);
        CHECK_EQ_TEXT(data.reason, eager.reason);
        CHECK(weights.status == data.status);
        CHECK_EQ_TEXT(weights.reason, data.reason);
    };
    mkc_conv_params p = params_of(good);
    compare(p, *dy, good); // diff_dst's shape
    p.activation = MKC_ACTIVATION_RELU;
    compare(p, *dy_ok, good); // a fused activation has no backward
    p.activation = MKC_ACTIVATION_NONE;
    p.sum = 1;
    compare(p, *dy_ok, good); // nor a sum
    p.sum = 0;
    p.pad_end[0] = -1;
    compare(p, *dy_ok, good);
    p.pad_end[0] = 0;
    dy_ok->dtype = MKC_DTYPE_F16;
    compare(p, *dy_ok, good);
    dy_ok->dtype = MKC_DTYPE_F32;
    CHECK(ops::check<ConvBackwardDataOp>(ConvAttrs(p, 2, false, true), ops::describe(*x),
                                         ops::describe(*w), ops::describe(*dy_ok))
              .ok());
}

} // namespace
} // namespace mkc::test
