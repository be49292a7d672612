// The fusion pass: each rewrite and their chains on odd shapes (channels
// not a multiple of 16, batch > 1, strides, padding, dilation, groups) in
// both layouts. The fused graph has the nodes and the report expected, and
// gives the outputs of the graph as built when both run as programs; where
// fusing would change what the graph computes, nothing is fused.
//
// A program cannot run a sum yet (compile does not bind the residual), so
// graphs with one are checked by their structure and run through the eager
// convolution with the residual already in its dst - what compile is to do;
// the rest of such graphs (batch_norm folding, activations) is run as
// programs with the sum left out.
#include <cstring>
#include <map>
#include <utility>

#include "fusion/fuse.hpp"
#include "graph/op_table.hpp"
#include "graph/program.hpp"
#include "internal_test.hpp"
#include "layout/layout.hpp"
#include "ops/ops.hpp"

namespace mkc::test {
namespace {

using graph::FuseOptions;
using graph::FuseReport;
using graph::Graph;
using graph::kNoValue;
using graph::NodeOp;
using graph::Program;
using graph::ProgramOptions;

constexpr mkc_layout kFirst = MKC_LAYOUT_CHANNELS_FIRST;
constexpr mkc_layout kLast = MKC_LAYOUT_CHANNELS_LAST;

// A constant of oneDNN-order dims with values in [lo, hi].
std::shared_ptr<Tensor> constant(const Dims &dims, unsigned seed, float lo = -1.f, float hi = 1.f) {
    std::shared_ptr<Tensor> t = tensor(dims, kFirst, seed);
    auto *p = static_cast<float *>(t->data);
    for (int64_t i = 0; i < element_count(*t); ++i)
        p[i] = lo + (p[i] + 1.f) / 2.f * (hi - lo);
    t->constant = true;
    return t;
}

// Caller-order dims of a graph input, the batch bound at run time when
// `dynamic_batch`.
std::vector<int64_t> input_dims(const Dims &onednn, mkc_layout layout, bool dynamic_batch) {
    Dims d = layout::to_caller_order(onednn, layout);
    if (dynamic_batch)
        d[0] = -1;
    return d;
}

struct ConvCase {
    const char *what;
    NodeOp op;
    Dims x, w; // oneDNN order
    int64_t stride, pad_begin, pad_end, dilation, groups, output_padding;
    bool bias;

    bool transposed() const { return op == NodeOp::conv2d_transpose; }
    int rank() const { return op == NodeOp::conv3d ? 3 : 2; }
    int64_t out_channels() const { return transposed() ? w[1] * groups : w[0]; }
};

std::vector<ConvCase> conv_cases() {
    const NodeOp c2 = NodeOp::conv2d, c3 = NodeOp::conv3d, t2 = NodeOp::conv2d_transpose;
    // clang-format off
    // what, op, x, w, stride, pad begin, pad end, dilation, groups, output padding, bias
    return {{"grouped dilated conv2d", c2, {3, 9, 11, 13}, {15, 3, 3, 3}, 2, 2, 1, 2, 3, 0, true},
            {"1x1 conv2d without bias", c2, {2, 5, 6, 7}, {7, 5, 1, 1}, 1, 0, 0, 1, 1, 0, false},
            {"conv3d", c3, {2, 5, 5, 6, 7}, {7, 5, 3, 2, 3}, 1, 1, 1, 1, 1, 0, true},
            {"grouped strided transposed", t2, {3, 6, 5, 7}, {6, 5, 3, 3}, 2, 1, 1, 1, 2, 1, true},
            {"transposed, no bias", t2, {2, 9, 4, 5}, {9, 2, 2, 3}, 1, 0, 1, 2, 3, 0, false}};
    // clang-format on
}

mkc_conv_params conv_params(const ConvCase &c, mkc_layout df) {
    mkc_conv_params p;
    mkc_conv_params_init(&p);
    for (int i = 0; i < c.rank(); ++i) {
        p.stride[i] = c.stride;
        p.pad_begin[i] = c.pad_begin;
        p.pad_end[i] = c.pad_end;
        p.dilation[i] = c.dilation;
        p.output_padding[i] = c.output_padding;
    }
    p.groups = c.groups;
    p.data_format = df;
    return p;
}

// A convolution node of case `c` reading `src`, its weights (and bias)
// new constants.
int add_conv(Graph &g, const ConvCase &c, mkc_layout df, int src, const std::string &name,
             unsigned seed, mkc_activation_kind act = MKC_ACTIVATION_NONE) {
    mkc_conv_params p = conv_params(c, df);
    p.activation = act;
    const int w = g.add_constant(constant(c.w, seed), name + ".w");
    std::vector<int> in{src, w};
    if (c.bias)
        in.push_back(g.add_constant(constant({c.out_channels()}, seed + 1), name + ".b"));
    return g.add_node(c.op, p, name, in)[0];
}

mkc_conv_params plain_conv(mkc_layout df, int64_t pad, int64_t dilation = 1) {
    mkc_conv_params p;
    mkc_conv_params_init(&p);
    for (int i = 0; i < 2; ++i) {
        p.pad_begin[i] = p.pad_end[i] = pad;
        p.dilation[i] = dilation;
    }
    p.data_format = df;
    return p;
}

graph::ActivationParams act(mkc_activation_kind kind, float alpha = 0, float beta = 0) {
    return {kind, alpha, beta};
}

// Which of a batch_norm's optional vectors it has.
enum class Affine { both, none, scale, shift };

// An inference batch_norm over `src` (channels `c`), its statistics new
// constants (the variance well away from 0).
int add_batch_norm(Graph &g, int src, int64_t c, mkc_layout df, const std::string &name,
                   unsigned seed, Affine affine = Affine::both) {
    mkc_batch_norm_params p;
    mkc_batch_norm_params_init(&p);
    p.epsilon = 1e-3f;
    p.data_format = df;
    const int mean = g.add_constant(constant({c}, seed, -0.5f, 0.5f), name + ".mean");
    const int var = g.add_constant(constant({c}, seed + 1, 0.5f, 1.5f), name + ".var");
    std::vector<int> in{src, mean, var};
    const bool scale = affine == Affine::both || affine == Affine::scale;
    const bool shift = affine == Affine::both || affine == Affine::shift;
    if (scale || shift)
        in.push_back(scale ? g.add_constant(constant({c}, seed + 2, -1.5f, 1.5f), name + ".scale")
                           : kNoValue);
    if (shift)
        in.push_back(g.add_constant(constant({c}, seed + 3), name + ".shift"));
    return g.add_node(NodeOp::batch_norm, p, name, in)[0];
}

int add_binary(Graph &g, mkc_binary_kind kind, int a, int b, const std::string &name = "") {
    return g.add_node(NodeOp::binary, graph::BinaryParams{kind}, name, {a, b})[0];
}

// Every output of `g` run as a program on `inputs`, as it is (the program
// fuses nothing itself).
std::vector<std::vector<float>> run(const Graph &g, const std::vector<const Tensor *> &inputs) {
    ProgramOptions options;
    options.fuse = false;
    return run_program(g, options, inputs).outputs;
}

bool same_outputs(const std::vector<std::vector<float>> &a,
                  const std::vector<std::vector<float>> &b) {
    if (a.size() != b.size())
        return false;
    for (size_t k = 0; k < a.size(); ++k)
        if (!(max_rel_diff(a[k], b[k]) <= 1e-5))
            return false;
    return true;
}

bool same_runs(const Graph &built, const Graph &fused, const std::vector<const Tensor *> &inputs) {
    return same_outputs(run(built, inputs), run(fused, inputs));
}

// A copy of a tensor (owned, the same arrangement).
std::unique_ptr<Tensor> copy_of(const Tensor &t) {
    auto c = make_owned_tensor(t.desc, t.layout, t.dtype);
    std::memcpy(c->data, t.data, t.desc.get_size());
    return c;
}

// A graph of convolutions only, run node by node through the eager
// convolution; a node with a sum writes into a copy of its residual, as a
// compiled plan is to. The first output's values.
std::vector<float> run_convolutions(const Graph &g, const std::vector<const Tensor *> &inputs) {
    std::map<int, const Tensor *> at;
    int k = 0;
    for (size_t v = 0; v < g.values.size(); ++v) {
        if (g.values[v].kind == graph::Value::Kind::input)
            at[static_cast<int>(v)] = inputs.at(k++);
        else if (g.values[v].kind == graph::Value::Kind::constant)
            at[static_cast<int>(v)] = g.values[v].constant.get();
    }
    std::vector<mkc_tensor *> made;
    std::vector<std::unique_ptr<Tensor>> residuals;
    for (const graph::Node &node : g.nodes) {
        const mkc_conv_params &p = std::get<mkc_conv_params>(node.params);
        const Tensor *bias =
            node.inputs.size() > 2 && node.inputs[2] != kNoValue ? at.at(node.inputs[2]) : nullptr;
        mkc_tensor *dst = nullptr;
        if (p.sum) {
            residuals.push_back(copy_of(*at.at(node.inputs.at(3))));
            dst = residuals.back().get();
        }
        ops::convolution(thread_state().scope, graph::op_row(node.op).name,
                         node.op == NodeOp::conv3d ? 3 : 2, node.op == NodeOp::conv2d_transpose, p,
                         *at.at(node.inputs[0]), *at.at(node.inputs[1]), bias, &dst);
        if (!p.sum)
            made.push_back(dst);
        at[node.outputs[0]] = dst;
    }
    const std::vector<float> out = values(*at.at(g.outputs.at(0).value));
    for (mkc_tensor *t : made)
        mkc_tensor_destroy(t);
    return out;
}

// Every value a node reads exists before it, every node's outputs are its
// own, and the outputs are values of the graph.
bool well_formed(const Graph &g) {
    const int nvalues = static_cast<int>(g.values.size());
    for (size_t n = 0; n < g.nodes.size(); ++n) {
        for (int v : g.nodes[n].inputs) {
            if (v == kNoValue)
                continue;
            if (v < 0 || v >= nvalues)
                return false;
            const graph::Value &value = g.values[v];
            if (value.kind == graph::Value::Kind::result && value.producer >= static_cast<int>(n))
                return false;
        }
        for (int v : g.nodes[n].outputs)
            if (v < 0 || v >= nvalues || g.values[v].producer != static_cast<int>(n))
                return false;
    }
    for (const graph::Output &o : g.outputs)
        if (o.value < 0 || o.value >= nvalues)
            return false;
    return true;
}

std::string conv_text(int node, const ConvCase &c, const char *name) {
    return "node " + std::to_string(node) + " (" + graph::op_row(c.op).name + " '" + name + "')";
}

const mkc_layout kLayouts[] = {kFirst, kLast};

TEST(fuse_activation_into_convolutions) {
    const graph::ActivationParams kinds[] = {act(MKC_ACTIVATION_RELU, 0.1f),
                                             act(MKC_ACTIVATION_CLIP, -0.25f, 0.5f),
                                             act(MKC_ACTIVATION_HARDSWISH, 1.f / 6, 0.5f),
                                             act(MKC_ACTIVATION_ELU, 0.7f),
                                             act(MKC_ACTIVATION_TANH),
                                             act(MKC_ACTIVATION_SWISH, 1.5f),
                                             act(MKC_ACTIVATION_GELU_ERF)};
    const int nkinds = sizeof kinds / sizeof kinds[0];
    int i = 0;
    for (const ConvCase &c : conv_cases()) {
        for (const mkc_layout df : kLayouts) {
            const graph::ActivationParams a = kinds[i++ % nkinds];
            Graph g;
            const int x = g.add_input("x", MKC_DTYPE_F32, input_dims(c.x, df, false), df);
            const int y = add_conv(g, c, df, x, "c", 1);
            g.add_output(g.add_node(NodeOp::activation, a, "", {y})[0], "y");

            FuseReport r;
            const Graph f = graph::fuse(g, &r);
            CHECK(f.nodes.size() == 1 && well_formed(f));
            CHECK(r.activations == 1 && r.total() == 1 && r.lines.size() == 1);
            CHECK_EQ_TEXT(r.lines.at(0), "node 1 (activation) fused into " + conv_text(0, c, "c"));
            const mkc_conv_params &p = std::get<mkc_conv_params>(f.nodes.at(0).params);
            CHECK(p.activation == a.kind && p.activation_alpha == a.alpha &&
                  p.activation_beta == a.beta && !p.sum);
            CHECK(f.nodes[0].name == "c" && f.outputs.at(0).name == "y");

            auto xt = tensor(c.x, df, 3);
            if (!same_runs(g, f, {xt.get()}))
                report_failure(__FILE__, __LINE__, std::string("different outputs: ") + c.what);
        }
    }
}

TEST(fuse_activation_into_linear_and_matmul) {
    // linear [5, 7] x [3, 7]^T + b, then tanh.
    {
        Graph g;
        const int x = g.add_input("x", MKC_DTYPE_F32, {5, 7}, kFirst);
        const int w = g.add_constant(constant({3, 7}, 1), "w");
        const int b = g.add_constant(constant({3}, 2), "b");
        mkc_linear_params p;
        mkc_linear_params_init(&p);
        const int y = g.add_node(NodeOp::linear, p, "fc", {x, w, b})[0];
        g.add_output(g.add_node(NodeOp::activation, act(MKC_ACTIVATION_TANH), "t", {y})[0], "y");
        FuseReport r;
        const Graph f = graph::fuse(g, &r);
        CHECK(f.nodes.size() == 1 && r.activations == 1);
        CHECK_EQ_TEXT(r.lines.at(0), "node 1 (activation 't') fused into node 0 (linear 'fc')");
        CHECK(std::get<mkc_linear_params>(f.nodes[0].params).activation == MKC_ACTIVATION_TANH);
        auto xt = tensor({5, 7}, kFirst, 3);
        CHECK(same_runs(g, f, {xt.get()}));
    }
    // Batched matmul [2, 5, 6] @ [6, 4] + bias, then leaky relu.
    {
        Graph g;
        const int a = g.add_input("a", MKC_DTYPE_F32, {2, 5, 6}, kFirst);
        const int b = g.add_input("b", MKC_DTYPE_F32, {6, 4}, kFirst);
        const int bias = g.add_constant(constant({4}, 4), "bias");
        mkc_matmul_params p;
        mkc_matmul_params_init(&p);
        const int y = g.add_node(NodeOp::matmul, p, "mm", {a, b, bias})[0];
        g.add_output(g.add_node(NodeOp::activation, act(MKC_ACTIVATION_RELU, 0.2f), "", {y})[0],
                     "y");
        FuseReport r;
        const Graph f = graph::fuse(g, &r);
        CHECK(f.nodes.size() == 1 && r.activations == 1);
        const mkc_matmul_params &q = std::get<mkc_matmul_params>(f.nodes[0].params);
        CHECK(q.activation == MKC_ACTIVATION_RELU && q.activation_alpha == 0.2f);
        auto at = tensor({2, 5, 6}, kFirst, 5), bt = tensor({6, 4}, kFirst, 6);
        CHECK(same_runs(g, f, {at.get(), bt.get()}));
    }
}

TEST(fuse_a_constant_scalar_into_a_matmul_as_its_scale) {
    // scores = q @ k^T, then (times | divided by) a one-element constant, then
    // (in one case) relu: the scale is the matmul's, the relu after it.
    struct Case {
        mkc_binary_kind kind;
        bool constant_first;
        Dims c_dims;
        bool relu;
        float scale; // expected; 0: not fused
    };
    const float c = 0.25f;
    const Case cases[] = {
        {MKC_BINARY_MUL, false, {1}, false, c},          {MKC_BINARY_MUL, true, {1, 1}, true, c},
        {MKC_BINARY_DIV, false, {1}, false, 1 / c},      {MKC_BINARY_DIV, true, {1}, false, 0},
        {MKC_BINARY_SUB, false, {1}, false, 0},          {MKC_BINARY_MUL, false, {7}, false, 0},
        {MKC_BINARY_MUL, false, {1, 1, 1, 1}, false, 0},
    };
    for (const Case &k : cases) {
        Graph g;
        const int q = g.add_input("q", MKC_DTYPE_F32, {2, 3, 5, 8}, kFirst);
        const int kk = g.add_input("k", MKC_DTYPE_F32, {2, 3, 7, 8}, kFirst);
        auto ct = constant(k.c_dims, 8, c, c);
        const int cv = g.add_constant(ct, "c");
        mkc_matmul_params p;
        mkc_matmul_params_init(&p);
        p.transpose_b = 1;
        const int s = g.add_node(NodeOp::matmul, p, "scores", {q, kk})[0];
        int y = k.constant_first ? add_binary(g, k.kind, cv, s) : add_binary(g, k.kind, s, cv);
        if (k.relu)
            y = g.add_node(NodeOp::activation, act(MKC_ACTIVATION_RELU), "", {y})[0];
        g.add_output(y, "y");
        FuseReport r;
        const Graph f = graph::fuse(g, &r);
        const bool fused = k.scale != 0;
        CHECK(r.scales == (fused ? 1 : 0));
        CHECK(f.nodes.size() == (fused ? 1u : 2u)); // relu only where the scale fuses
        if (fused) {
            const auto &q2 = std::get<mkc_matmul_params>(f.nodes[0].params);
            CHECK(q2.scale == k.scale);
            CHECK(q2.activation == (k.relu ? MKC_ACTIVATION_RELU : MKC_ACTIVATION_NONE));
            CHECK(r.lines.at(0).find("as its scale") != std::string::npos);
        }
        auto qt = tensor({2, 3, 5, 8}, kFirst, 5), kt = tensor({2, 3, 7, 8}, kFirst, 6);
        CHECK(same_runs(g, f, {qt.get(), kt.get()}));
    }
    // After an activation the scale would come first: not fused.
    Graph g;
    const int a = g.add_input("a", MKC_DTYPE_F32, {4, 6}, kFirst);
    const int b = g.add_input("b", MKC_DTYPE_F32, {6, 3}, kFirst);
    mkc_matmul_params p;
    mkc_matmul_params_init(&p);
    p.activation = MKC_ACTIVATION_RELU;
    const int y = g.add_node(NodeOp::matmul, p, "mm", {a, b})[0];
    g.add_output(add_binary(g, MKC_BINARY_MUL, y, g.add_constant(constant({1}, 3), "c")), "y");
    FuseReport r;
    CHECK(graph::fuse(g, &r).nodes.size() == 2 && r.scales == 0);
}

TEST(fold_batch_norm_into_convolutions) {
    const Affine affines[] = {Affine::both, Affine::none, Affine::scale, Affine::shift};
    int i = 0;
    for (const ConvCase &c : conv_cases()) {
        for (const mkc_layout df : kLayouts) {
            const Affine affine = affines[i++ % 4];
            Graph g;
            const int x = g.add_input("x", MKC_DTYPE_F32, input_dims(c.x, df, false), df);
            const int y = add_conv(g, c, df, x, "c", 11);
            g.add_output(add_batch_norm(g, y, c.out_channels(), df, "bn", 20, affine), "y");

            FuseReport r;
            const Graph f = graph::fuse(g, &r);
            CHECK(f.nodes.size() == 1 && well_formed(f));
            CHECK(r.batch_norms == 1 && r.total() == 1);
            CHECK_EQ_TEXT(r.lines.at(0), "node 1 (batch_norm 'bn') folded into the weights and "
                                         "bias of " +
                                             conv_text(0, c, "c"));
            // New constants for the weights and the bias (made when there
            // was none); the graph's own are left as they were.
            const graph::Node &n = f.nodes.at(0);
            CHECK(n.inputs.size() == 3 && n.inputs[2] != kNoValue);
            const graph::Value &w = f.values.at(n.inputs[1]);
            CHECK(w.kind == graph::Value::Kind::constant && w.constant != g.values[1].constant);
            CHECK(w.constant->dims == c.w);
            CHECK(f.values.at(n.inputs[2]).constant->dims == Dims{c.out_channels()});
            CHECK(f.values.size() == 4); // x, weights, bias, y

            auto xt = tensor(c.x, df, 12);
            if (!same_runs(g, f, {xt.get()}))
                report_failure(__FILE__, __LINE__, std::string("different outputs: ") + c.what);
        }
    }
}

// conv -> bn -> relu -> conv -> bn -> clip: two convolutions, each with its
// batch_norm folded and its activation fused; also with the batch bound at
// run time.
TEST(fuse_chains_of_batch_norm_and_activation) {
    const ConvCase c = conv_cases()[0];
    for (const mkc_layout df : kLayouts) {
        for (const bool dynamic : {false, true}) {
            Graph g;
            const int x = g.add_input("x", MKC_DTYPE_F32, input_dims(c.x, df, dynamic), df);
            int y = add_conv(g, c, df, x, "c1", 31);
            y = add_batch_norm(g, y, 15, df, "bn1", 40);
            y = g.add_node(NodeOp::activation, act(MKC_ACTIVATION_RELU), "r1", {y})[0];
            const int w2 = g.add_constant(constant({6, 15, 1, 1}, 33), "c2.w");
            y = g.add_node(NodeOp::conv2d, plain_conv(df, 0), "c2", {y, w2})[0];
            y = add_batch_norm(g, y, 6, df, "bn2", 50, Affine::scale);
            y = g.add_node(NodeOp::activation, act(MKC_ACTIVATION_CLIP, 0.f, 0.5f), "r2", {y})[0];
            g.add_output(y, "y");

            FuseReport r;
            const Graph f = graph::fuse(g, &r);
            CHECK(f.nodes.size() == 2 && well_formed(f));
            CHECK(r.batch_norms == 2 && r.activations == 2 && r.sums == 0);
            CHECK(r.lines.size() == 4);
            CHECK_EQ_TEXT(r.lines.at(1),
                          "node 2 (activation 'r1') fused into node 0 (conv2d 'c1')");
            CHECK_EQ_TEXT(r.lines.at(3),
                          "node 5 (activation 'r2') fused into node 3 (conv2d 'c2')");
            CHECK(f.nodes.at(0).name == "c1" && f.nodes.at(1).name == "c2");
            CHECK(f.nodes[1].inputs.at(0) == f.nodes[0].outputs.at(0));
            const auto &p2 = std::get<mkc_conv_params>(f.nodes[1].params);
            CHECK(p2.activation == MKC_ACTIVATION_CLIP && p2.activation_beta == 0.5f);
            const std::string text = r.text();
            CHECK(text.find("fused 4 nodes: 2 activation, 0 sum, 2 batch_norm, 0 scale\n") == 0);

            auto xt = tensor(c.x, df, 34);
            CHECK(same_runs(g, f, {xt.get()}));
        }
    }
}

// A residual block: conv -> bn -> relu -> conv -> bn -> add(x) -> relu.
struct ResidualBlock {
    mkc_layout df;
    bool dynamic;
    Dims x{3, 13, 7, 9};

    // Weights of the scale a trained layer of 117 inputs has, so the
    // values (and float32's rounding of the folded weights) stay as in a
    // model.
    Graph build() const {
        Graph g;
        const int in = g.add_input("x", MKC_DTYPE_F32, input_dims(x, df, dynamic), df);
        const int w1 = g.add_constant(constant({13, 13, 3, 3}, 61, -0.25f, 0.25f), "w1");
        const int b1 = g.add_constant(constant({13}, 62), "b1");
        int y = g.add_node(NodeOp::conv2d, plain_conv(df, 1), "c1", {in, w1, b1})[0];
        y = add_batch_norm(g, y, 13, df, "bn1", 63);
        y = g.add_node(NodeOp::activation, act(MKC_ACTIVATION_RELU), "", {y})[0];
        const int w2 = g.add_constant(constant({13, 13, 3, 3}, 64, -0.25f, 0.25f), "w2");
        y = g.add_node(NodeOp::conv2d, plain_conv(df, 2, 2), "c2", {y, w2})[0];
        y = add_batch_norm(g, y, 13, df, "bn2", 65, Affine::shift);
        y = add_binary(g, MKC_BINARY_ADD, y, in, "add");
        y = g.add_node(NodeOp::activation, act(MKC_ACTIVATION_RELU), "", {y})[0];
        g.add_output(y, "y");
        return g;
    }
};

TEST(fuse_batch_norm_sum_and_activation_of_a_residual_block) {
    for (const mkc_layout df : kLayouts) {
        for (const bool dynamic : {false, true}) {
            const ResidualBlock block{df, dynamic};
            const Graph g = block.build();
            FuseReport r;
            const Graph f = graph::fuse(g, &r);
            CHECK(f.nodes.size() == 2 && well_formed(f));
            CHECK(r.batch_norms == 2 && r.sums == 1 && r.activations == 2);
            CHECK(r.lines.size() == 5);
            CHECK_EQ_TEXT(r.lines.at(3), "node 5 (binary 'add') fused into node 3 (conv2d 'c2') "
                                         "as its sum with input 'x'");
            CHECK_EQ_TEXT(r.lines.at(4), "node 6 (activation) fused into node 3 (conv2d 'c2')");
            // The second convolution: folded weights and bias, the input as
            // its residual (4th input), the sum, then the relu.
            const graph::Node &n = f.nodes.at(1);
            CHECK(n.name == "c2" && n.inputs.size() == 4 && n.inputs[0] == f.nodes[0].outputs[0]);
            CHECK(n.inputs[3] == 0 && f.values.at(0).kind == graph::Value::Kind::input);
            CHECK(n.inputs[2] != kNoValue);
            const auto &p = std::get<mkc_conv_params>(n.params);
            CHECK(p.sum == 1 && p.activation == MKC_ACTIVATION_RELU);
            CHECK(n.outputs.at(0) == f.outputs.at(0).value);

            // Run: the convolutions eagerly, the residual in dst first.
            auto xt = tensor(block.x, df, 66);
            const auto want = run(g, {xt.get()});
            CHECK(max_rel_diff(run_convolutions(f, {xt.get()}), want.at(0)) <= 1e-5);

            // Without the sum: the add and its relu stay, and a program
            // runs the rest.
            FuseOptions no_sum;
            no_sum.sum = false;
            FuseReport r2;
            const Graph f2 = graph::fuse(g, &r2, no_sum);
            CHECK(f2.nodes.size() == 4 && r2.sums == 0 && r2.batch_norms == 2 &&
                  r2.activations == 1);
            CHECK(f2.nodes.at(2).op == NodeOp::binary && f2.nodes.at(3).op == NodeOp::activation);
            CHECK(same_outputs(run(f2, {xt.get()}), want));
        }
    }
}

// The residual made after the convolution (a strided shortcut with its own
// batch_norm, the block's output add(shortcut, main)): the fused convolution
// sits after the shortcut's.
TEST(fuse_sum_with_a_residual_made_after_the_convolution) {
    for (const mkc_layout df : kLayouts) {
        Graph g;
        const Dims xd{2, 6, 5, 7};
        const int x = g.add_input("x", MKC_DTYPE_F32, input_dims(xd, df, false), df);
        mkc_conv_params pa = plain_conv(df, 1);
        pa.stride[0] = pa.stride[1] = 2;
        const int wa = g.add_constant(constant({10, 6, 3, 3}, 71), "wa");
        const int a = g.add_node(NodeOp::conv2d, pa, "a", {x, wa})[0];
        mkc_conv_params pb = plain_conv(df, 0);
        pb.stride[0] = pb.stride[1] = 2;
        const int wb = g.add_constant(constant({10, 6, 1, 1}, 72), "wb");
        const int bb = g.add_constant(constant({10}, 73), "bb");
        int s = g.add_node(NodeOp::conv2d, pb, "b", {x, wb, bb})[0];
        s = add_batch_norm(g, s, 10, df, "bnb", 74);
        int y = add_binary(g, MKC_BINARY_ADD, s, a);
        y = g.add_node(NodeOp::activation, act(MKC_ACTIVATION_RELU), "", {y})[0];
        g.add_output(y, "y");

        FuseReport r;
        const Graph f = graph::fuse(g, &r);
        CHECK(f.nodes.size() == 2 && well_formed(f));
        CHECK(r.sums == 1 && r.batch_norms == 1 && r.activations == 1);
        CHECK_EQ_TEXT(r.lines.at(0), "node 3 (binary) fused into node 0 (conv2d 'a') as its sum "
                                     "with the output of node 2 (batch_norm 'bnb')");
        CHECK(f.nodes.at(0).name == "b" && f.nodes.at(1).name == "a");
        CHECK(f.nodes[1].inputs.size() == 4 && f.nodes[1].inputs[2] == kNoValue);
        CHECK(f.nodes[1].inputs[3] == f.nodes[0].outputs.at(0));

        auto xt = tensor(xd, df, 75);
        CHECK(max_rel_diff(run_convolutions(f, {xt.get()}), run(g, {xt.get()}).at(0)) <= 1e-5);
    }
}

void check_nothing_fused(const Graph &g, const char *what) {
    FuseReport r;
    const Graph f = graph::fuse(g, &r);
    if (!(f.nodes.size() == g.nodes.size() && r.total() == 0 && r.lines.empty() &&
          r.text().empty() && well_formed(f)))
        report_failure(__FILE__, __LINE__, std::string("fused: ") + what);
}

TEST(nothing_fused_where_the_graph_would_change) {
    const ConvCase c = conv_cases()[0];
    const int64_t co = c.out_channels();
    for (const mkc_layout df : kLayouts) {
        auto xt = tensor(c.x, df, 81);
        const std::vector<int64_t> xd = input_dims(c.x, df, false);
        {
            // A second reader of the convolution's output.
            Graph g;
            const int y = add_conv(g, c, df, g.add_input("x", MKC_DTYPE_F32, xd, df), "c", 82);
            g.add_output(g.add_node(NodeOp::activation, act(MKC_ACTIVATION_RELU), "", {y})[0], "a");
            g.add_output(g.add_node(NodeOp::activation, act(MKC_ACTIVATION_TANH), "", {y})[0], "b");
            check_nothing_fused(g, "a second reader");
            CHECK(same_runs(g, graph::fuse(g, nullptr), {xt.get()}));
        }
        {
            // The convolution's output is a graph output.
            Graph g;
            const int y = add_conv(g, c, df, g.add_input("x", MKC_DTYPE_F32, xd, df), "c", 83);
            g.add_output(y, "mid");
            g.add_output(g.add_node(NodeOp::activation, act(MKC_ACTIVATION_RELU), "", {y})[0], "y");
            check_nothing_fused(g, "a graph output in the middle");
            CHECK(same_runs(g, graph::fuse(g, nullptr), {xt.get()}));
        }
        {
            // The mean is an input, not a constant.
            Graph g;
            const int x = g.add_input("x", MKC_DTYPE_F32, xd, df);
            const int mean = g.add_input("mean", MKC_DTYPE_F32, {co}, kFirst);
            const int y = add_conv(g, c, df, x, "c", 84);
            mkc_batch_norm_params p;
            mkc_batch_norm_params_init(&p);
            p.data_format = df;
            const int var = g.add_constant(constant({co}, 85, 0.5f, 1.5f), "var");
            g.add_output(g.add_node(NodeOp::batch_norm, p, "bn", {y, mean, var})[0], "y");
            check_nothing_fused(g, "a non-constant mean");
            auto mt = tensor({co}, kFirst, 86);
            CHECK(same_runs(g, graph::fuse(g, nullptr), {xt.get(), mt.get()}));
        }
        {
            // The weights are an input.
            Graph g;
            const int x = g.add_input("x", MKC_DTYPE_F32, xd, df);
            const int w = g.add_input("w", MKC_DTYPE_F32, c.w, kFirst);
            const int y = g.add_node(c.op, conv_params(c, df), "c", {x, w})[0];
            g.add_output(add_batch_norm(g, y, co, df, "bn", 87), "y");
            check_nothing_fused(g, "weights that are an input");
            auto wt = tensor(c.w, kFirst, 88);
            CHECK(same_runs(g, graph::fuse(g, nullptr), {xt.get(), wt.get()}));
        }
        {
            // The batch_norm labels its output otherwise than the convolution.
            Graph g;
            const int y = add_conv(g, c, df, g.add_input("x", MKC_DTYPE_F32, xd, df), "c", 89);
            g.add_output(add_batch_norm(g, y, co, df == kFirst ? kLast : kFirst, "bn", 90), "y");
            check_nothing_fused(g, "a batch_norm of another data_format");
            CHECK(same_runs(g, graph::fuse(g, nullptr), {xt.get()}));
        }
        {
            // An activation already fused: the second one stays a node.
            Graph g;
            const int y = add_conv(g, c, df, g.add_input("x", MKC_DTYPE_F32, xd, df), "c", 91,
                                   MKC_ACTIVATION_RELU);
            g.add_output(g.add_node(NodeOp::activation, act(MKC_ACTIVATION_SIGMOID), "", {y})[0],
                         "y");
            check_nothing_fused(g, "an activation already fused");
            CHECK(same_runs(g, graph::fuse(g, nullptr), {xt.get()}));
        }
        {
            // A batch_norm after a fused activation is not folded (nor is
            // anything after it fused).
            Graph g;
            const int y = add_conv(g, c, df, g.add_input("x", MKC_DTYPE_F32, xd, df), "c", 92,
                                   MKC_ACTIVATION_TANH);
            g.add_output(add_batch_norm(g, y, co, df, "bn", 93), "y");
            check_nothing_fused(g, "a batch_norm after a fused activation");
            CHECK(same_runs(g, graph::fuse(g, nullptr), {xt.get()}));
        }
        {
            // Not an add, and an add of another shape (broadcast).
            Graph g;
            const int x = g.add_input("x", MKC_DTYPE_F32, xd, df);
            Dims yd = c.x; // the output's oneDNN dims
            yd[1] = co;
            yd[2] = 5;
            yd[3] = 6;
            const int r = g.add_input("r", MKC_DTYPE_F32, layout::to_caller_order(yd, df), df);
            const int y1 = add_conv(g, c, df, x, "c1", 94);
            g.add_output(add_binary(g, MKC_BINARY_SUB, y1, r), "sub");
            const int y2 = add_conv(g, c, df, x, "c2", 95);
            Dims bd(4, 1);
            bd[df == kFirst ? 1 : 3] = co;
            const int bias = g.add_constant(constant(bd, 96), "per_channel");
            g.add_output(add_binary(g, MKC_BINARY_ADD, y2, bias), "add");
            check_nothing_fused(g, "a sub and a broadcast add");
            auto rt = tensor(yd, df, 97);
            CHECK(same_runs(g, graph::fuse(g, nullptr), {xt.get(), rt.get()}));
        }
        {
            // A residual whose batch is bound at run time apart from the
            // convolution's: the shapes may differ in a run.
            Graph g;
            const int x = g.add_input("x", MKC_DTYPE_F32, input_dims(c.x, df, true), df);
            Dims yd = c.x;
            yd[1] = co;
            yd[2] = 5;
            yd[3] = 6;
            const int r = g.add_input("r", MKC_DTYPE_F32, input_dims(yd, df, true), df);
            g.add_output(add_binary(g, MKC_BINARY_ADD, add_conv(g, c, df, x, "c", 98), r), "y");
            check_nothing_fused(g, "a residual of another batch");
            // The same dims given statically do fuse.
            Graph s;
            const int sx = s.add_input("x", MKC_DTYPE_F32, xd, df);
            const int sr = s.add_input("r", MKC_DTYPE_F32, layout::to_caller_order(yd, df), df);
            s.add_output(add_binary(s, MKC_BINARY_ADD, add_conv(s, c, df, sx, "c", 98), sr), "y");
            FuseReport rs;
            const Graph fs = graph::fuse(s, &rs);
            CHECK(rs.sums == 1 && fs.nodes.size() == 1 && fs.nodes[0].inputs.at(3) == 1);
            auto rt = tensor(yd, df, 99);
            CHECK(max_rel_diff(run_convolutions(fs, {xt.get(), rt.get()}),
                               run(s, {xt.get(), rt.get()}).at(0)) <= 1e-5);
        }
        {
            // data_format TARGET: the layout is the compiling thread's.
            Graph g;
            const int x = g.add_input("x", MKC_DTYPE_F32, xd, df);
            const int y = add_conv(g, c, MKC_LAYOUT_TARGET, x, "c", 100);
            g.add_output(add_batch_norm(g, y, co, MKC_LAYOUT_TARGET, "bn", 101), "bn");
            const int t = add_conv(g, c, MKC_LAYOUT_TARGET, x, "t", 102);
            const int r = add_conv(g, c, df, x, "r", 103);
            g.add_output(add_binary(g, MKC_BINARY_ADD, t, r), "sum");
            check_nothing_fused(g, "a data_format of TARGET");
        }
    }
}

TEST(fused_graph_keeps_its_inputs_and_outputs) {
    // Two inputs (the second unused by any node), an unused constant, a
    // graph output that is an input.
    Graph g;
    const int b = g.add_input("b", MKC_DTYPE_F32, {2, 3}, kFirst);
    const int a = g.add_input("a", MKC_DTYPE_F32, {4, 3, 5, 6}, kFirst);
    g.add_constant(constant({7}, 1), "unused");
    const int w = g.add_constant(constant({5, 3, 3, 3}, 2), "w");
    const int y = g.add_node(NodeOp::conv2d, plain_conv(kFirst, 1), "c", {a, w})[0];
    g.add_output(g.add_node(NodeOp::activation, act(MKC_ACTIVATION_RELU), "", {y})[0], "out");
    g.add_output(b, "passed");

    FuseReport r;
    const Graph f = graph::fuse(g, &r);
    CHECK(f.values.size() >= 2 && f.values[0].name == "b" && f.values[1].name == "a");
    int inputs = 0, constants = 0;
    for (const graph::Value &v : f.values) {
        inputs += v.kind == graph::Value::Kind::input;
        constants += v.kind == graph::Value::Kind::constant;
    }
    CHECK(inputs == 2 && constants == 1);
    CHECK(f.outputs.size() == 2 && f.outputs[0].name == "out" && f.outputs[1].name == "passed");
    CHECK(f.outputs[1].value == 0);
    CHECK_EQ_TEXT(r.text(), "fused 1 node: 1 activation, 0 sum, 0 batch_norm, 0 scale\n"
                            "node 1 (activation) fused into node 0 (conv2d 'c')\n");
    auto bt = tensor({2, 3}, kFirst, 3), at = tensor({4, 3, 5, 6}, kFirst, 4);
    CHECK(same_runs(g, f, {bt.get(), at.get()}));

    // A graph with nothing to fuse comes back as it was.
    Graph plain;
    const int x = plain.add_input("x", MKC_DTYPE_F32, {2, 3}, kFirst);
    plain.add_output(plain.add_node(NodeOp::softmax, graph::SoftmaxParams{}, "", {x})[0], "y");
    FuseReport none;
    none.activations = 5; // reset by fuse
    const Graph same = graph::fuse(plain, &none);
    CHECK(none.total() == 0 && same.nodes.size() == 1 && same.values.size() == 2);
}

} // namespace
} // namespace mkc::test
