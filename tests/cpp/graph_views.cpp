// Reshape and transpose as views (graph/views.hpp): a program with them
// computes what the same program with every reshape and transpose a copy
// computes (inplace off), with no step for them, a converter only where a
// reader cannot take the bytes as they are, and never a write into bytes a
// view still reads.
#include "graph/program.hpp"
#include "graph/views.hpp"
#include "internal_test.hpp"

namespace mkc::test {
namespace {

using graph::Graph;
using graph::NodeOp;
using graph::Program;
using graph::ProgramOptions;

constexpr mkc_layout kFirst = MKC_LAYOUT_CHANNELS_FIRST;
constexpr mkc_layout kLast = MKC_LAYOUT_CHANNELS_LAST;

using Outcome = ProgramRun;

Outcome run(const Graph &g, bool inplace, const std::vector<const Tensor *> &inputs) {
    ProgramOptions options;
    options.compile.inplace = inplace;
    return run_program(g, options, inputs);
}

// Views on against every reshape and transpose a copy step: the same
// values for every output.
Outcome check_against_copies(const Graph &g, const std::vector<const Tensor *> &inputs) {
    const Outcome views = run(g, true, inputs), copies = run(g, false, inputs);
    CHECK(copies.plan->views.empty());
    CHECK(views.outputs.size() == copies.outputs.size());
    for (size_t k = 0; k < views.outputs.size() && k < copies.outputs.size(); ++k)
        CHECK(max_rel_diff(views.outputs[k], copies.outputs[k]) <= 1e-5);
    return views;
}

int add_reshape(Graph &g, int v, std::vector<int64_t> dims) {
    return g.add_node(NodeOp::reshape, graph::ReshapeParams{std::move(dims)}, "", {v})[0];
}
int add_transpose(Graph &g, int v, std::vector<int> perm) {
    return g.add_node(NodeOp::transpose, graph::TransposeParams{std::move(perm)}, "", {v})[0];
}
int add_linear(Graph &g, int x, int64_t in, int64_t out, unsigned seed) {
    mkc_linear_params p;
    mkc_linear_params_init(&p);
    return g.add_node(NodeOp::linear, p, "fc" + std::to_string(seed),
                      {x, g.add_constant(constant({out, in}, seed), ""),
                       g.add_constant(constant({out}, seed + 1), "")})[0];
}
mkc_conv_params conv_params(mkc_layout df) {
    mkc_conv_params p;
    mkc_conv_params_init(&p);
    p.pad_begin[0] = p.pad_begin[1] = p.pad_end[0] = p.pad_end[1] = 1;
    p.data_format = df;
    return p;
}

TEST(views_are_strides_of_their_input) {
    // [2, 5, 3, 8] transposed to [2, 3, 5, 8]: a view with permuted strides.
    const ops::ValueDesc x = ops::plain_value(MKC_DTYPE_F32, kFirst, {2, 5, 3, 8});
    ops::ValueDesc t;
    CHECK(graph::row_major_bytes(x));
    CHECK(graph::transposed_view(x, {0, 2, 1, 3}, t));
    CHECK(t.dims == (Dims{2, 3, 5, 8}));
    CHECK(t.desc.get_strides() == (Dims{120, 8, 24, 1}));
    CHECK(graph::strided_view(t) && !graph::row_major_bytes(t));
    // Written with the strides a transpose after it wants, the transpose
    // is plain bytes.
    const Dims s = graph::strides_for_transpose({2, 3, 5, 8}, {0, 2, 1, 3});
    CHECK(s == (Dims{120, 8, 24, 1}));
    ops::ValueDesc y = ops::plain_value(MKC_DTYPE_F32, kFirst, {2, 3, 5, 8});
    y.desc = dnnl::memory::desc({2, 3, 5, 8}, dnnl::memory::data_type::f32, s);
    ops::ValueDesc back;
    CHECK(graph::transposed_view(y, {0, 2, 1, 3}, back));
    CHECK(!graph::strided_view(back) && graph::row_major_bytes(back));
    // A channels-last value's bytes are row-major in its caller order.
    CHECK(graph::row_major_bytes(ops::plain_value(MKC_DTYPE_F32, kLast, {1, 4, 3, 5})));
    // Blocked bytes have no view.
    ops::ValueDesc b = ops::plain_value(MKC_DTYPE_F32, kFirst, {1, 16, 3, 5});
    b.desc = dnnl::memory::desc({1, 16, 3, 5}, dnnl::memory::data_type::f32,
                                dnnl::memory::format_tag::nChw16c);
    CHECK(!graph::transposed_view(b, {0, 2, 3, 1}, t) && !graph::row_major_bytes(b));
}

TEST(attention_reads_its_heads_as_views) {
    // x [2, 5, 24] -> q, k, v by linears, heads of 8 by reshape + transpose;
    // scores scaled, softmax, context, heads merged back: the 8 shape nodes
    // are views and no converter runs.
    const int64_t B = 2, S = 5, H = 3, D = 8, E = H * D;
    Graph g;
    const int x = g.add_input("x", MKC_DTYPE_F32, {B, S, E}, kFirst);
    auto heads = [&](int v) {
        return add_transpose(g, add_reshape(g, v, {0, 0, H, D}), {0, 2, 1, 3});
    };
    const int q = heads(add_linear(g, x, E, E, 1)), k = heads(add_linear(g, x, E, E, 3)),
              v = heads(add_linear(g, x, E, E, 5));
    mkc_matmul_params p;
    mkc_matmul_params_init(&p);
    p.transpose_b = 1;
    p.scale = 0.35f;
    const int scores = g.add_node(NodeOp::matmul, p, "scores", {q, k})[0];
    const int probs = g.add_node(NodeOp::softmax, graph::SoftmaxParams{-1, false}, "", {scores})[0];
    mkc_matmul_params_init(&p);
    const int ctx = g.add_node(NodeOp::matmul, p, "context", {probs, v})[0];
    g.add_output(add_reshape(g, add_transpose(g, ctx, {0, 2, 1, 3}), {0, 0, E}), "y");
    auto xt = tensor({B, S, E}, kFirst, 7);
    const Outcome o = check_against_copies(g, {xt.get()});
    CHECK(o.plan->views.size() == 8);
    CHECK(o.plan->converters == 0);
    CHECK(o.plan->steps.size() == 6); // 3 linears, 2 matmuls, softmax
}

TEST(views_of_blocked_bytes_share_one_converter) {
    // A conv's output in oneDNN's own arrangement: made plain once, then
    // both the transpose (an output) and the reshape (read by softmax) are
    // views of that plain copy.
    Graph g;
    const int x = g.add_input("x", MKC_DTYPE_F32, {2, 16, 5, 7}, kFirst);
    const int w = g.add_constant(constant({16, 16, 3, 3}, 2), "w");
    const int y = g.add_node(NodeOp::conv2d, conv_params(kFirst), "c", {x, w})[0];
    g.add_output(add_transpose(g, y, {0, 2, 3, 1}), "t");
    const int flat = add_reshape(g, y, {2, -1});
    g.add_output(g.add_node(NodeOp::softmax, graph::SoftmaxParams{-1, false}, "", {flat})[0], "s");
    auto xt = tensor({2, 16, 5, 7}, kFirst, 4);
    const Outcome o = check_against_copies(g, {xt.get()});
    CHECK(o.plan->views.size() == 2);
    const bool blocked = o.plan->steps.at(0).out_formats.at(0) != "abcd";
    // To plain once (when blocked), then the transposed view to the output.
    CHECK(o.plan->converters == (blocked ? 2 : 1));
}

TEST(a_value_and_its_views_as_outputs) {
    // y, a reshape of y and a transpose of y are all outputs: y's buffer is
    // the first output's, the others converted from there.
    Graph g;
    const int x = g.add_input("x", MKC_DTYPE_F32, {3, 4, 6}, kFirst);
    const int y = add_linear(g, x, 6, 10, 1);
    g.add_output(add_reshape(g, y, {3, 40}), "flat");
    g.add_output(y, "y");
    g.add_output(add_transpose(g, y, {2, 0, 1}), "t");
    g.add_output(add_reshape(g, y, {-1}), "line");
    auto xt = tensor({3, 4, 6}, kFirst, 2);
    const Outcome o = check_against_copies(g, {xt.get()});
    CHECK(o.plan->views.size() == 3);
    CHECK(o.outputs.at(0) == o.outputs.at(1) && o.outputs.at(1) == o.outputs.at(3));
}

TEST(a_sum_never_writes_into_bytes_read_later_or_by_itself) {
    // r = c1(x); t = reshape(r) (a view of r's bytes); then c3(z) + r, a
    // sum whose residual r is read there last - unless softmax(t) comes
    // after it (late_view), when r's bytes must outlive the sum, which then
    // goes into a copy. And c2(r) + r: the conv reads the bytes its sum
    // would write, so never in place either.
    enum Case { late_view, no_late_view, self_residual };
    for (const Case k : {late_view, no_late_view, self_residual}) {
        Graph g;
        const int x = g.add_input("x", MKC_DTYPE_F32, {1, 6, 6, 5}, kLast);
        const int w1 = g.add_constant(constant({5, 5, 3, 3}, 1), "w1");
        const int w2 = g.add_constant(constant({5, 5, 3, 3}, 2), "w2");
        const int r = g.add_node(NodeOp::conv2d, conv_params(kLast), "c1", {x, w1})[0];
        const int z = k == self_residual
                          ? r
                          : g.add_node(NodeOp::conv2d, conv_params(kLast), "c0", {x, w2})[0];
        const int t = add_reshape(g, r, {1, -1});
        const int c = g.add_node(NodeOp::conv2d, conv_params(kLast), "c2", {z, w2})[0];
        g.add_output(g.add_node(NodeOp::binary, graph::BinaryParams{MKC_BINARY_ADD}, "", {c, r})[0],
                     "sum");
        if (k == late_view)
            g.add_output(g.add_node(NodeOp::softmax, graph::SoftmaxParams{-1, false}, "", {t})[0],
                         "s");
        auto xt = tensor({1, 5, 6, 6}, kLast, 3);
        const Outcome o = check_against_copies(g, {xt.get()});
        int sums_in_place = 0;
        for (const graph::Step &s : o.plan->steps)
            sums_in_place += s.in_place && s.what.find("'c2'") != std::string::npos;
        CHECK(sums_in_place == (k == no_late_view ? 1 : 0));
    }
}

} // namespace
} // namespace mkc::test
