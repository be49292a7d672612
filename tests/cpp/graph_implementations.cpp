// The choice of an implementation per node: by priority, by override (the
// compile option before MKCACHE_IMPL), overrides parsed with clear errors;
// programs forced to `reference` compute what `onednn` ones do, with the
// converters and in-place steps their choices call for.
#include <cstdlib>

#include "graph/implementations.hpp"
#include "graph/program.hpp"
#include "internal_test.hpp"
#include "ops/ops.hpp"

namespace mkc::test {
namespace {

using graph::Graph;
using graph::NodeOp;
using graph::Program;
using graph::ProgramOptions;

constexpr mkc_layout kFirst = MKC_LAYOUT_CHANNELS_FIRST;

mkc_conv_params conv_params(mkc_layout df) {
    mkc_conv_params p;
    mkc_conv_params_init(&p);
    p.pad_begin[0] = p.pad_begin[1] = p.pad_end[0] = p.pad_end[1] = 1;
    p.data_format = df;
    return p;
}

// Sets MKCACHE_IMPL for a scope.
struct Environment {
    explicit Environment(const char *value) {
        if (value)
            setenv("MKCACHE_IMPL", value, 1);
        else
            unsetenv("MKCACHE_IMPL");
    }
    ~Environment() { unsetenv("MKCACHE_IMPL"); }
};

TEST(overrides_are_parsed_with_clear_errors) {
    const auto o = graph::parse_overrides(" conv2d = reference , softmax=onednn,", "test");
    CHECK(o.size() == 2 && o.at("conv2d") == "reference" && o.at("softmax") == "onednn");
    CHECK(graph::parse_overrides("", "test").empty());
    struct Bad {
        const char *text, *message;
    };
    for (const Bad &b : {Bad{"conv2d", "test: 'conv2d' is not operator=implementation"},
                         Bad{"conv=reference", "test: unknown operator 'conv' in 'conv=reference'"},
                         Bad{"conv2d=fast", "test: unknown implementation 'fast' in 'conv2d=fast' "
                                            "(known: onednn, onednn_matmul, "
                                            "onednn_matmul_shared, onednn_conv1x1, "
                                            "onednn_contiguous, reference)"},
                         Bad{"relu=reference", "test: unknown operator 'relu'"},
                         Bad{"pool=onednn,pool=reference", "test: pool is given twice"}}) {
        const ops::Verdict v = error_of([&] { graph::parse_overrides(b.text, "test"); });
        CHECK(v.status == MKC_STATUS_INVALID_ARGUMENT);
        CHECK_EQ_TEXT(v.reason.substr(0, std::string(b.message).size()), b.message);
    }
}

TEST(choice_by_priority_option_and_environment) {
    Graph g;
    const int x = g.add_input("x", MKC_DTYPE_F32, {1, 4, 5, 5}, kFirst);
    g.add_node(NodeOp::conv2d, conv_params(kFirst), "c",
               {x, g.add_constant(constant({3, 4, 3, 3}, 1), "w")});
    const graph::Node &node = g.nodes[0];
    const ops::ValueDesc xd = ops::plain_value(MKC_DTYPE_F32, kFirst, {1, 4, 5, 5});
    const ops::ValueDesc wd = ops::describe(*g.values[1].constant);
    const graph::NodeInputs in{&xd, &wd};
    graph::Overrides o;
    graph::Choice c = graph::choose(node, in, o, "node 0");
    CHECK(std::string(c.impl->name) == "onednn" && c.why == "priority" && c.refused.empty());
    o.by_environment = {{"conv2d", "reference"}};
    c = graph::choose(node, in, o, "node 0");
    CHECK(std::string(c.impl->name) == "reference" && c.why == "override (MKCACHE_IMPL)");
    o.by_option = {{"conv2d", "onednn"}}; // the option wins
    c = graph::choose(node, in, o, "node 0");
    CHECK(std::string(c.impl->name) == "onednn" && c.why == "override (option)");
    // An override that cannot run the node: an error naming it and why.
    const ops::ValueDesc bad = ops::plain_value(MKC_DTYPE_F32, kFirst, {1, 6, 5, 5});
    const ops::Verdict v =
        error_of([&] { graph::choose(node, {&bad, &wd}, o, "node 0 (conv2d 'c')"); });
    CHECK(v.status == MKC_STATUS_INVALID_ARGUMENT);
    CHECK(v.reason.find("node 0 (conv2d 'c'): implementation 'onednn' was asked for (option) but "
                        "cannot run it: conv2d:") == 0);
}

// A small model touching every family with a reference kernel: conv (+relu)
// -> max pool -> batch norm -> flatten -> linear -> softmax, and a matmul
// branch through a transpose.
Graph model(mkc_layout df) {
    Graph g;
    const bool last = df == MKC_LAYOUT_CHANNELS_LAST;
    const int x =
        g.add_input("x", MKC_DTYPE_F32,
                    last ? std::vector<int64_t>{2, 8, 9, 3} : std::vector<int64_t>{2, 3, 8, 9}, df);
    mkc_conv_params cp = conv_params(df);
    cp.activation = MKC_ACTIVATION_RELU;
    int y = g.add_node(NodeOp::conv2d, cp, "c",
                       {x, g.add_constant(constant({5, 3, 3, 3}, 1), "w"),
                        g.add_constant(constant({5}, 2), "b")})[0];
    mkc_pool_params pp;
    mkc_pool_params_init(&pp);
    pp.kind = MKC_POOL_MAX;
    pp.kernel[0] = pp.kernel[1] = pp.stride[0] = pp.stride[1] = 2;
    pp.data_format = df;
    y = g.add_node(NodeOp::pool, pp, "p", {y})[0];
    mkc_batch_norm_params bp;
    mkc_batch_norm_params_init(&bp);
    bp.data_format = df;
    auto var = constant({5}, 4);
    for (int i = 0; i < 5; ++i)
        static_cast<float *>(var->data)[i] = 1.5f + static_cast<float *>(var->data)[i];
    y = g.add_node(NodeOp::batch_norm, bp, "bn",
                   {y, g.add_constant(constant({5}, 3), "mean"), g.add_constant(var, "var")})[0];
    y = g.add_node(NodeOp::reshape, graph::ReshapeParams{{2, -1}}, "", {y})[0];
    mkc_linear_params lp;
    mkc_linear_params_init(&lp);
    y = g.add_node(NodeOp::linear, lp, "fc",
                   {y, g.add_constant(constant({7, 5 * 4 * 4}, 5), "w2")})[0];
    g.add_output(g.add_node(NodeOp::softmax, graph::SoftmaxParams{-1, false}, "", {y})[0], "probs");
    mkc_matmul_params mp;
    mkc_matmul_params_init(&mp);
    const int t = g.add_node(NodeOp::transpose, graph::TransposeParams{{1, 0}}, "", {y})[0];
    g.add_output(g.add_node(NodeOp::matmul, mp, "mm", {y, t})[0], "gram");
    return g;
}

std::vector<std::vector<float>> run(const Graph &g, const std::string &impl,
                                    const std::vector<const Tensor *> &inputs,
                                    std::shared_ptr<const graph::Plan> *plan = nullptr,
                                    bool fuse = true) {
    ProgramOptions options;
    options.impl = impl;
    options.fuse = fuse;
    ProgramRun r = run_program(g, options, inputs);
    if (plan)
        *plan = r.plan;
    return r.outputs;
}

TEST(programs_forced_to_reference_agree_with_onednn) {
    Environment none(nullptr);
    for (const mkc_layout df : {MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_LAST}) {
        const Graph g = model(df);
        auto x = tensor({2, 3, 8, 9}, df, 7);
        std::shared_ptr<const graph::Plan> ref_plan;
        const auto onednn = run(g, "", {x.get()});
        const auto reference =
            run(g,
                "conv2d=reference,pool=reference,batch_norm=reference,linear=reference,"
                "softmax=reference,matmul=reference,transpose=reference,reshape=reference",
                {x.get()}, &ref_plan);
        for (size_t k = 0; k < onednn.size(); ++k)
            CHECK(max_rel_diff(onednn[k], reference[k]) <= 1e-5);
        for (const graph::Step &s : ref_plan->steps)
            if (s.node >= 0) {
                CHECK_EQ_TEXT(s.impl, "reference");
                CHECK(s.choice == "override (option)");
            }
    }
}

TEST(variants_by_override_or_preference_agree_with_onednn) {
    Environment none(nullptr);
    const Graph g = model(MKC_LAYOUT_CHANNELS_FIRST);
    // By priority a float32 linear runs on the matmul, on every ISA.
    const graph::Node &fc = g.nodes[4];
    CHECK(std::string(graph::row(fc).name) == "linear");
    const ops::ValueDesc src = ops::plain_value(MKC_DTYPE_F32, kFirst, {2, 80});
    const ops::ValueDesc w = ops::describe(*g.values[fc.inputs[1]].constant);
    graph::Overrides o;
    CHECK(std::string(graph::choose(fc, {&src, &w}, o, "fc").impl->name) == "onednn_matmul");
    o.by_option = {{"linear", "onednn"}};
    CHECK(std::string(graph::choose(fc, {&src, &w}, o, "fc").impl->name) == "onednn");
    o.by_option = {{"linear", "onednn_matmul"}};
    CHECK(std::string(graph::choose(fc, {&src, &w}, o, "fc").impl->name) == "onednn_matmul");
    o.by_option = {{"linear", "onednn_contiguous"}};
    const ops::Verdict v = error_of([&] { graph::choose(fc, {&src, &w}, o, "fc"); });
    CHECK(v.status == MKC_STATUS_INVALID_ARGUMENT &&
          v.reason.find("linear reads no strided views") != std::string::npos);
    // By override: the same values, each step named with its kernel.
    auto x = tensor({2, 3, 8, 9}, MKC_LAYOUT_CHANNELS_FIRST, 7);
    std::shared_ptr<const graph::Plan> plan;
    const auto onednn = run(g, "", {x.get()});
    const auto variants = run(g, "linear=onednn_matmul,matmul=onednn_contiguous", {x.get()}, &plan);
    for (size_t k = 0; k < onednn.size(); ++k)
        CHECK(max_rel_diff(onednn[k], variants[k]) <= 1e-5);
    int seen = 0;
    for (const graph::Step &s : plan->steps)
        if (s.node >= 0 && (s.impl.rfind("onednn_matmul:", 0) == 0 ||
                            s.impl.rfind("onednn_contiguous:", 0) == 0))
            ++seen;
    CHECK(seen == 2);
}

TEST(alternating_implementations_get_exactly_the_converters_they_need) {
    // conv (onednn: the arrangement it chose) -> relu (reference: plain) ->
    // conv (onednn) -> relu (reference) -> output: one converter on each
    // edge where the arrangements differ, none elsewhere, and the eager
    // calls' values. MKCACHE_IMPL does the forcing here.
    Environment env("activation=reference");
    for (const mkc_layout df : {MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_LAST}) {
        Graph g;
        const bool last = df == MKC_LAYOUT_CHANNELS_LAST;
        const int x = g.add_input(
            "x", MKC_DTYPE_F32,
            last ? std::vector<int64_t>{2, 7, 6, 16} : std::vector<int64_t>{2, 16, 7, 6}, df);
        int y = x;
        const std::shared_ptr<Tensor> w[] = {constant({16, 16, 3, 3}, 10),
                                             constant({16, 16, 3, 3}, 11)};
        for (unsigned i = 0; i < 2; ++i) {
            y = g.add_node(NodeOp::conv2d, conv_params(df), "c" + std::to_string(i),
                           {y, g.add_constant(w[i], "")})[0];
            y = g.add_node(NodeOp::activation, graph::ActivationParams{}, "r" + std::to_string(i),
                           {y})[0];
        }
        g.add_output(y, "y");
        auto xt = tensor({2, 16, 7, 6}, df, 3);
        ProgramOptions options;
        options.fuse = false; // the relus steps of their own
        Program program(g, options);
        mkc_tensor *out[] = {nullptr};
        const Tensor *inputs[] = {xt.get()};
        program.run(inputs, out);
        const auto plan = program.last_plan();
        // Along the chain, a converter exactly where the arrangement one
        // step writes is not the one the next reads (the input is plain).
        int converters = 0, needed = 0;
        std::string written = last ? "acdb" : "abcd";
        for (const graph::Step &s : plan->steps) {
            if (s.node < 0) {
                ++converters;
                continue;
            }
            needed += s.in_formats.at(0) != written;
            written = s.out_formats.at(0);
            if (s.what.find("activation") != std::string::npos)
                CHECK(s.impl == "reference" && s.choice == "override (MKCACHE_IMPL)");
        }
        needed += written != (last ? "acdb" : "abcd"); // to the plain output
        CHECK(converters == needed);
        // The eager calls, one by one.
        const CacheScope &scope = thread_state().scope;
        mkc_tensor *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr;
        ops::convolution(scope, "conv2d", 2, false, conv_params(df), *xt, *w[0], nullptr, &a);
        ops::activation(scope, MKC_ACTIVATION_RELU, 0, 0, nullptr, *a, &b);
        ops::convolution(scope, "conv2d", 2, false, conv_params(df), *b, *w[1], nullptr, &c);
        ops::activation(scope, MKC_ACTIVATION_RELU, 0, 0, nullptr, *c, &d);
        for (mkc_tensor *t : {a, b, c})
            mkc_tensor_destroy(t);
        CHECK(max_rel_diff(take_values(out[0]), take_values(d)) <= 1e-6);
    }
}

TEST(the_memory_plan_follows_the_implementation) {
    // q, k by linears, heads by reshape + transpose, scores by matmul, then
    // tanh: the onednn matmul reads the transposed heads where they are (no
    // converter), the reference one reads plain bytes, so each head view is
    // converted first - more steps and arena bytes. Both tanhs write over
    // the scores.
    Environment none(nullptr);
    Graph g;
    const int x = g.add_input("x", MKC_DTYPE_F32, {2, 5, 12}, kFirst);
    mkc_linear_params lp;
    mkc_linear_params_init(&lp);
    auto heads = [&](unsigned seed) {
        int y = g.add_node(NodeOp::linear, lp, "fc" + std::to_string(seed),
                           {x, g.add_constant(constant({12, 12}, seed), "")})[0];
        y = g.add_node(NodeOp::reshape, graph::ReshapeParams{{0, 0, 3, 4}}, "", {y})[0];
        return g.add_node(NodeOp::transpose, graph::TransposeParams{{0, 2, 1, 3}}, "", {y})[0];
    };
    const int q = heads(1), k = heads(2);
    mkc_matmul_params mp;
    mkc_matmul_params_init(&mp);
    mp.transpose_b = 1;
    const int s = g.add_node(NodeOp::matmul, mp, "scores", {q, k})[0];
    g.add_output(
        g.add_node(NodeOp::activation, graph::ActivationParams{MKC_ACTIVATION_TANH}, "t", {s})[0],
        "y");
    auto xt = tensor({2, 5, 12}, kFirst, 2);
    std::shared_ptr<const graph::Plan> p1, p2;
    const auto a = run(g, "", {xt.get()}, &p1, false); // the tanh a step of its own
    const auto b = run(g, "matmul=reference,activation=reference", {xt.get()}, &p2, false);
    CHECK(max_rel_diff(a[0], b[0]) <= 1e-5);
    CHECK(p1->converters == 0 && p2->converters == 2); // each head made plain
    CHECK(p2->arena_bytes > p1->arena_bytes);
    CHECK(p1->views.size() == 4 && p2->views.size() == 4);
    int tanh_in_place = 0;
    for (const auto *p : {p1.get(), p2.get()})
        for (const graph::Step &st : p->steps)
            tanh_in_place += st.in_place && st.what.find("'t'") != std::string::npos;
    CHECK(tanh_in_place == 2);
}

TEST(in_place_marks_follow_the_implementation) {
    // c0 -> relu -> c1, and c0 also read by c2 after the relu: onednn's relu
    // reads c0's own bytes, which live on, so it writes a new buffer; the
    // reference relu reads a plain copy a converter made for it, which it
    // may write over. Same values either way.
    Environment none(nullptr);
    Graph g;
    const int x = g.add_input("x", MKC_DTYPE_F32, {2, 16, 7, 6}, kFirst);
    auto conv = [&](int in, unsigned seed) {
        return g.add_node(NodeOp::conv2d, conv_params(kFirst), "c" + std::to_string(seed),
                          {in, g.add_constant(constant({16, 16, 3, 3}, seed), "")})[0];
    };
    const int c0 = conv(x, 0);
    const int r = g.add_node(NodeOp::activation, graph::ActivationParams{}, "relu", {c0})[0];
    const int c1 = conv(r, 1), c2 = conv(c0, 2);
    g.add_output(g.add_node(NodeOp::binary, graph::BinaryParams{MKC_BINARY_ADD}, "", {c1, c2})[0],
                 "y");
    auto xt = tensor({2, 16, 7, 6}, kFirst, 5);
    std::shared_ptr<const graph::Plan> p1, p2;
    const auto a = run(g, "", {xt.get()}, &p1, false);
    const auto b = run(g, "activation=reference", {xt.get()}, &p2, false);
    CHECK(max_rel_diff(a[0], b[0]) <= 1e-5);
    auto step = [](const graph::Plan &p, const char *name) -> const graph::Step & {
        for (const graph::Step &s : p.steps)
            if (s.what.find(name) != std::string::npos)
                return s;
        return p.steps.at(0);
    };
    const graph::Step &ra = step(*p1, "'relu'"), &rb = step(*p2, "'relu'");
    CHECK(rb.impl == "reference" && !ra.in_place);
    if (step(*p1, "'c0'").out_formats.at(0) != "abcd") // not plain: the reference relu's copy
        CHECK(rb.in_place && p2->in_place == p1->in_place + 1);
}

// relu x3 on 1x16, then a 3x3 conv 32->32 on 2x32x20x20: every node with
// two capable implementations is timed and gets the faster of them.
Graph measured_model() {
    Graph g;
    const int x = g.add_input("x", MKC_DTYPE_F32, {2, 32, 20, 20}, kFirst);
    int y = x;
    for (int i = 0; i < 3; ++i)
        y = g.add_node(NodeOp::activation, graph::ActivationParams{}, "r" + std::to_string(i),
                       {y})[0];
    y = g.add_node(NodeOp::conv2d, conv_params(kFirst), "c",
                   {y, g.add_constant(constant({32, 32, 3, 3}, 1), "w")})[0];
    g.add_output(y, "y");
    return g;
}

std::shared_ptr<const graph::Plan> compiled(const Graph &g, bool measure,
                                            const std::string &choices, std::string *text) {
    ProgramOptions options;
    options.fuse = false;
    options.measure = measure;
    options.choices = choices;
    Program program(g, options);
    auto x = tensor({2, 32, 20, 20}, kFirst, 4);
    const Tensor *inputs[] = {x.get()};
    mkc_tensor *out[] = {nullptr};
    program.run(inputs, out);
    mkc_tensor_destroy(out[0]);
    if (text)
        *text = program.choices_text();
    return program.last_plan();
}

TEST(measured_choice_takes_the_fastest_and_reads_back_without_measuring) {
    Environment none(nullptr);
    const Graph g = measured_model();
    std::string text;
    const auto plan = compiled(g, true, "", &text);
    // Each line: key, the chosen implementation, every candidate's time;
    // the chosen one is the fastest.
    int lines = 0;
    for (size_t at = 0; at < text.size();) {
        const size_t end = text.find('\n', at);
        const std::string line = text.substr(at, end - at);
        at = end + 1;
        ++lines;
        const size_t t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
        const std::string chosen = line.substr(t1 + 1, t2 - t1 - 1);
        std::string best;
        double best_us = 1e300;
        int candidates = 0;
        for (size_t p = t2 + 1; p < line.size();) {
            const size_t comma = std::min(line.find(',', p), line.size());
            const std::string part = line.substr(p, comma - p);
            p = comma + 1;
            const double us = std::stod(part.substr(part.find('=') + 1));
            ++candidates;
            if (us < best_us) {
                best_us = us;
                best = part.substr(0, part.find('='));
            }
        }
        CHECK(candidates == 2);
        CHECK_EQ_TEXT(chosen, best);
    }
    CHECK(lines == 4);
    for (const graph::Step &s : plan->steps)
        if (s.node >= 0)
            CHECK(s.choice.rfind("measured: ", 0) == 0);
    // Read back, without measuring: the same implementations, the same
    // times (nothing timed again).
    std::string again;
    const auto loaded = compiled(g, false, text, &again);
    CHECK(again == text);
    CHECK(loaded->steps.size() == plan->steps.size());
    for (size_t i = 0; i < plan->steps.size(); ++i) {
        CHECK(loaded->steps[i].impl == plan->steps[i].impl);
        if (plan->steps[i].node >= 0)
            CHECK(loaded->steps[i].choice.rfind("measured (loaded): ", 0) == 0);
    }
    // Bad text: errors naming the line.
    for (const char *bad : {"no tabs here\n", "k\tfast\tonednn=1\n", "k\tonednn\tonednn=x\n"}) {
        const ops::Verdict v = error_of([&] { compiled(g, false, bad, nullptr); });
        CHECK(v.status == MKC_STATUS_INVALID_ARGUMENT && v.reason.find("choices line 1") == 0);
    }
}

TEST(plans_are_deterministic) {
    Environment none(nullptr);
    for (const mkc_layout df : {MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_LAST}) {
        const Graph g = model(df);
        auto x = tensor({2, 3, 8, 9}, df, 7);
        std::shared_ptr<const graph::Plan> a, b;
        run(g, "softmax=reference", {x.get()}, &a);
        run(g, "softmax=reference", {x.get()}, &b);
        CHECK_EQ_TEXT(graph::plan_text(g, *a), graph::plan_text(g, *b));
    }
}

} // namespace
} // namespace mkc::test
