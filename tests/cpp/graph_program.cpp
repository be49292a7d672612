// Programs built on the internal graph: results equal the eager calls run
// one by one, converters only where arrangements differ, the arena within
// its bounds, plans per input-shape group, entries per program, and bad
// input refused with the node or input named.
#include <cstdio>
#include <map>

#include "cache/blob_cache.hpp"
#include "graph/program.hpp"
#include "internal_test.hpp"
#include "ops/ops.hpp"

namespace mkc::test {
namespace {

using graph::Graph;
using graph::NodeOp;
using graph::Program;
using graph::ProgramOptions;

mkc_conv_params conv_params(int pad, mkc_activation_kind act, mkc_layout df) {
    mkc_conv_params p;
    mkc_conv_params_init(&p);
    for (int i = 0; i < 2; ++i)
        p.pad_begin[i] = p.pad_end[i] = pad;
    p.activation = act;
    p.data_format = df;
    return p;
}

mkc_pool_params max_pool(mkc_layout df) {
    mkc_pool_params p;
    mkc_pool_params_init(&p);
    p.kind = MKC_POOL_MAX;
    for (int i = 0; i < 2; ++i)
        p.kernel[i] = p.stride[i] = 2;
    p.data_format = df;
    return p;
}

// The entries (lines of the cache's key list) a program's executor owns.
int entries_of(uint64_t executor) {
    char hex[32];
    std::snprintf(hex, sizeof hex, "|e%llx", static_cast<unsigned long long>(executor));
    const std::string keys = BlobCache::instance().keys(0);
    int n = 0;
    for (size_t at = keys.find(hex); at != std::string::npos; at = keys.find(hex, at + 1))
        ++n;
    return n;
}

// conv(+relu) -> max pool -> conv -> reshape -> linear -> softmax, and the
// same op by op through the eager entry points.
struct SmallCnn {
    mkc_layout layout;
    std::shared_ptr<Tensor> w1 = constant({6, 3, 3, 3}, 1), b1 = constant({6}, 2);
    std::shared_ptr<Tensor> w2 = constant({5, 6, 3, 3}, 3);
    std::shared_ptr<Tensor> w3 = constant({4, 5 * 4 * 5}, 4), b3 = constant({4}, 5);

    Graph build(int64_t batch) const {
        Graph g;
        const bool last = layout == MKC_LAYOUT_CHANNELS_LAST;
        const int x = g.add_input("x", MKC_DTYPE_F32,
                                  last ? std::vector<int64_t>{batch, 9, 11, 3}
                                       : std::vector<int64_t>{batch, 3, 9, 11},
                                  layout);
        const int cw1 = g.add_constant(w1, "w1"), cb1 = g.add_constant(b1, "b1");
        const int cw2 = g.add_constant(w2, "w2"), cw3 = g.add_constant(w3, "w3"),
                  cb3 = g.add_constant(b3, "b3");
        int y = g.add_node(NodeOp::conv2d, conv_params(1, MKC_ACTIVATION_RELU, layout), "c1",
                           {x, cw1, cb1})[0];
        y = g.add_node(NodeOp::pool, max_pool(layout), "p1", {y})[0];
        y = g.add_node(NodeOp::conv2d, conv_params(1, MKC_ACTIVATION_NONE, layout), "c2",
                       {y, cw2})[0];
        // Flatten in NCHW order (a channels-last model flattens NHWC order:
        // the weights are random, so either is a model).
        y = g.add_node(NodeOp::reshape, graph::ReshapeParams{{-1, 5 * 4 * 5}}, "flat", {y})[0];
        y = g.add_node(NodeOp::linear,
                       [] {
                           mkc_linear_params p;
                           mkc_linear_params_init(&p);
                           return p;
                       }(),
                       "fc", {y, cw3, cb3})[0];
        y = g.add_node(NodeOp::softmax, graph::SoftmaxParams{-1, false}, "", {y})[0];
        g.add_output(y, "probs");
        return g;
    }

    std::vector<float> eager(const Tensor &x) const {
        const CacheScope &s = thread_state().scope;
        mkc_tensor *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr, *e = nullptr,
                   *f = nullptr;
        ops::convolution(s, "conv2d", 2, false, conv_params(1, MKC_ACTIVATION_RELU, layout), x, *w1,
                         b1.get(), &a);
        ops::pool(s, max_pool(layout), *a, &b);
        ops::convolution(s, "conv2d", 2, false, conv_params(1, MKC_ACTIVATION_NONE, layout), *b,
                         *w2, nullptr, &c);
        const int64_t flat[] = {x.dims[0], -1};
        ops::reshape(s, 2, flat, *c, &d);
        mkc_linear_params lp;
        mkc_linear_params_init(&lp);
        ops::linear(s, lp, *d, *w3, b3.get(), &e);
        ops::softmax(s, -1, false, nullptr, *e, &f);
        for (mkc_tensor *t : {a, b, c, d, e})
            mkc_tensor_destroy(t);
        return take_values(f);
    }
};

TEST(program_matches_eager_in_both_layouts_with_and_without_reuse) {
    for (const mkc_layout layout : {MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_LAST}) {
        const SmallCnn cnn{layout};
        const bool last = layout == MKC_LAYOUT_CHANNELS_LAST;
        auto x = tensor(last ? Dims{3, 3, 9, 11} : Dims{3, 3, 9, 11}, layout, 9);
        const std::vector<float> want = cnn.eager(*x);
        for (bool reuse : {true, false}) {
            ProgramOptions options;
            options.compile.reuse = reuse;
            Program program(cnn.build(3), options);
            const Tensor *inputs[] = {x.get()};
            mkc_tensor *out[] = {nullptr};
            program.run(inputs, out);
            CHECK(max_rel_diff(take_values(out[0]), want) <= 1e-5);
            const auto plan = program.last_plan();
            CHECK(plan->arena_bytes >= plan->lower_bound_bytes);
            if (reuse)
                CHECK(plan->arena_bytes < plan->naive_bytes);
            else
                CHECK(plan->arena_bytes == plan->naive_bytes);
            // A second run into the output the first made: same values.
            mkc_tensor *again[] = {nullptr};
            program.run(inputs, again);
            mkc_tensor *into[] = {again[0]};
            program.run(inputs, into);
            CHECK(into[0] == again[0]);
            CHECK(max_rel_diff(take_values(again[0]), want) <= 1e-5);
        }
    }
}

TEST(program_plans_per_input_shape_and_evicts_past_capacity) {
    const SmallCnn cnn{MKC_LAYOUT_CHANNELS_FIRST};
    ProgramOptions options;
    options.capacity = 2;
    Program program(cnn.build(-1), options);
    for (int64_t batch : {1, 4, 2, 4}) {
        auto x = tensor({batch, 3, 9, 11}, MKC_LAYOUT_CHANNELS_FIRST, 11);
        const Tensor *inputs[] = {x.get()};
        mkc_tensor *out[] = {nullptr};
        program.run(inputs, out);
        CHECK(max_rel_diff(take_values(out[0]), cnn.eager(*x)) <= 1e-5);
    }
    CHECK(program.plan_count() == 2);
}

TEST(programs_share_no_entries_and_drop_theirs) {
    const SmallCnn cnn{MKC_LAYOUT_CHANNELS_FIRST};
    auto x = tensor({2, 3, 9, 11}, MKC_LAYOUT_CHANNELS_FIRST, 12);
    const Tensor *inputs[] = {x.get()};
    auto a = std::make_unique<Program>(cnn.build(2), ProgramOptions{});
    auto b = std::make_unique<Program>(cnn.build(2), ProgramOptions{});
    CHECK(a->executor() != b->executor());
    mkc_tensor *oa[] = {nullptr}, *ob[] = {nullptr};
    a->run(inputs, oa);
    b->run(inputs, ob);
    CHECK(max_rel_diff(take_values(oa[0]), take_values(ob[0])) == 0);
    const uint64_t ea = a->executor();
    const int before = entries_of(ea);
    CHECK(before > 0 && entries_of(b->executor()) == before);
    a.reset();
    CHECK(entries_of(ea) == 0);
    CHECK(entries_of(b->executor()) == before);
}

TEST(program_errors_name_the_node_or_input) {
    const SmallCnn cnn{MKC_LAYOUT_CHANNELS_FIRST};
    Program program(cnn.build(2), ProgramOptions{});
    auto wrong_batch = tensor({3, 3, 9, 11});
    auto wrong_rank = tensor({2, 3, 9});
    for (const Tensor *t : {wrong_batch.get(), wrong_rank.get(), static_cast<Tensor *>(nullptr)}) {
        const Tensor *inputs[] = {t};
        mkc_tensor *out[] = {nullptr};
        const ops::Verdict v = error_of([&] { program.run(inputs, out); });
        CHECK(v.status == MKC_STATUS_INVALID_ARGUMENT);
        CHECK(v.reason.find("input 'x'") != std::string::npos);
    }
    // A shape error inside the graph: the conv's weights expect 3 channels.
    Graph g;
    const int x = g.add_input("x", MKC_DTYPE_F32, {1, 4, 5, 5}, MKC_LAYOUT_CHANNELS_FIRST);
    const int w = g.add_constant(cnn.w1, "w1");
    const int y =
        g.add_node(NodeOp::conv2d, conv_params(0, MKC_ACTIVATION_NONE, MKC_LAYOUT_CHANNELS_FIRST),
                   "stem", {x, w})[0];
    g.add_output(y, "y");
    Program bad(std::move(g), ProgramOptions{});
    auto x4 = tensor({1, 4, 5, 5});
    const Tensor *inputs[] = {x4.get()};
    mkc_tensor *out[] = {nullptr};
    const ops::Verdict v = error_of([&] { bad.run(inputs, out); });
    CHECK_EQ_TEXT(v.reason, "node 0 (conv2d 'stem'): conv2d: src has 4 channels but weights "
                            "expect 3 (weights dim 1 = 3 x groups = 1)");
}

TEST(plans_of_one_program_share_its_converted_constants) {
    const SmallCnn cnn{MKC_LAYOUT_CHANNELS_FIRST};
    Program program(cnn.build(-1), ProgramOptions{});
    auto one = tensor({1, 3, 9, 11}), four = tensor({4, 3, 9, 11});
    const Tensor *a[] = {one.get()}, *b[] = {four.get()};
    const auto pa = program.plan_for(a), pb = program.plan_for(b);
    CHECK(pa != pb && !pa->constants.empty());
    int shared = 0;
    for (const auto &c : pa->constants)
        for (const auto &d : pb->constants) shared += c == d;
    // Every copy the first plan made that the second needs in the same
    // arrangement is the same memory.
    CHECK(shared > 0);
}

// conv -> batch_norm -> relu -> conv -> batch_norm -> add(x) -> relu: a
// residual block, fused to two convolutions (the second with a sum), with
// the sum written in place or into a copy of the residual.
TEST(residual_block_fused_and_in_place_matches_unfused) {
    for (const mkc_layout layout : {MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_LAST}) {
        const bool last = layout == MKC_LAYOUT_CHANNELS_LAST;
        Graph g;
        const int64_t c = 12;
        const int x = g.add_input("x", MKC_DTYPE_F32,
                                  last ? std::vector<int64_t>{2, 7, 9, c}
                                       : std::vector<int64_t>{2, c, 7, 9},
                                  layout);
        // A first conv whose output is the residual (so it is a result in
        // the arena, arranged as the second conv writes).
        int y0 = g.add_node(NodeOp::conv2d, conv_params(1, MKC_ACTIVATION_NONE, layout), "c0",
                            {x, g.add_constant(constant({c, c, 3, 3}, 20), "w0")})[0];
        int y = y0;
        for (int i = 0; i < 2; ++i) {
            y = g.add_node(NodeOp::conv2d, conv_params(1, MKC_ACTIVATION_NONE, layout),
                           "c" + std::to_string(i + 1),
                           {y, g.add_constant(constant({c, c, 3, 3}, 21 + i), "w")})[0];
            mkc_batch_norm_params bp;
            mkc_batch_norm_params_init(&bp);
            bp.data_format = layout;
            auto var = constant({c}, 30 + i);
            for (int64_t k = 0; k < c; ++k) static_cast<float *>(var->data)[k] += 1.5f;
            y = g.add_node(NodeOp::batch_norm, bp, "bn",
                           {y, g.add_constant(constant({c}, 40 + i), "m"),
                            g.add_constant(var, "v"), g.add_constant(constant({c}, 50 + i), "s"),
                            g.add_constant(constant({c}, 60 + i), "b")})[0];
            if (i == 1) y = g.add_node(NodeOp::binary, graph::BinaryParams{MKC_BINARY_ADD}, "add",
                                       {y, y0})[0];
            y = g.add_node(NodeOp::activation, graph::ActivationParams{}, "", {y})[0];
        }
        g.add_output(y, "y");
        auto in = tensor(last ? Dims{2, c, 7, 9} : Dims{2, c, 7, 9}, layout, 70);
        const Tensor *inputs[] = {in.get()};
        std::vector<float> results[3];
        int in_place[3] = {0, 0, 0};
        for (int mode = 0; mode < 3; ++mode) {
            ProgramOptions options;
            options.fuse = mode > 0;
            options.compile.inplace = mode == 2;
            Program program(g, options);
            mkc_tensor *out[] = {nullptr};
            program.run(inputs, out);
            results[mode] = take_values(out[0]);
            in_place[mode] = program.last_plan()->in_place;
            if (mode > 0)
                CHECK(program.fuse_report().sums == 1 && program.graph().nodes.size() == 3);
        }
        CHECK(max_rel_diff(results[1], results[0]) <= 1e-4);
        CHECK(max_rel_diff(results[2], results[1]) == 0);
        CHECK(in_place[1] == 0 && in_place[2] == 1);
    }
}

TEST(grouped_and_transposed_weights_are_converted_once_at_compile) {
    // conv (groups 2) -> conv2d_transpose (groups 3): both read their
    // weights through a view; the program converts them when it compiles,
    // and its runs execute no conversion of them (the library's reorder
    // count does not move) while giving the eager calls' values.
    for (const mkc_layout layout : {MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_LAST}) {
        Graph g;
        const bool last = layout == MKC_LAYOUT_CHANNELS_LAST;
        const int x = g.add_input(
            "x", MKC_DTYPE_F32,
            last ? std::vector<int64_t>{2, 7, 9, 6} : std::vector<int64_t>{2, 6, 7, 9}, layout);
        auto w1 = constant({12, 3, 3, 3}, 1), w2 = constant({12, 5, 3, 3}, 2);
        auto b2 = constant({15}, 3);
        mkc_conv_params p1 = conv_params(1, MKC_ACTIVATION_NONE, layout);
        p1.groups = 2;
        mkc_conv_params p2 = conv_params(1, MKC_ACTIVATION_NONE, layout);
        p2.groups = 3;
        p2.stride[0] = p2.stride[1] = 2;
        int y = g.add_node(NodeOp::conv2d, p1, "grouped", {x, g.add_constant(w1, "w1")})[0];
        y = g.add_node(NodeOp::conv2d_transpose, p2, "up",
                       {y, g.add_constant(w2, "w2"), g.add_constant(b2, "b2")})[0];
        g.add_output(y, "y");
        auto xt = tensor({2, 6, 7, 9}, layout, 4);
        const Tensor *inputs[] = {xt.get()};
        Program program(g, ProgramOptions{});
        mkc_tensor *first[] = {nullptr};
        program.run(inputs, first);
        const uint64_t before = reorder_count();
        mkc_tensor *again[] = {nullptr};
        program.run(inputs, again);
        CHECK(reorder_count() == before);
        const std::vector<float> got = take_values(again[0]);
        CHECK(max_rel_diff(take_values(first[0]), got) == 0);

        const CacheScope &s = thread_state().scope;
        mkc_tensor *a = nullptr, *b = nullptr;
        ops::convolution(s, "conv2d", 2, false, p1, *xt, *w1, nullptr, &a);
        ops::convolution(s, "conv2d_transpose", 2, true, p2, *a, *w2, b2.get(), &b);
        mkc_tensor_destroy(a);
        CHECK(max_rel_diff(got, take_values(b)) <= 1e-5);
        for (const graph::Step &step : program.last_plan()->steps)
            CHECK(!step.in_args.empty()); // every step a plain execution
    }
}

TEST(element_wise_steps_write_over_their_input_at_its_last_use) {
    // x -> linear a -> relu r (over a) -> add(r, a2) s: over r, whose last
    // reader it is -> softmax (over s) -> output; a2 = linear of x is read
    // again by a later mul, so nothing writes over it; add(q, q) reads its
    // bytes twice and does not write over them either.
    Graph g;
    const int x = g.add_input("x", MKC_DTYPE_F32, {3, 8}, MKC_LAYOUT_CHANNELS_FIRST);
    mkc_linear_params lp;
    mkc_linear_params_init(&lp);
    const int a = g.add_node(NodeOp::linear, lp, "a", {x, g.add_constant(constant({8, 8}, 1), "")})[0];
    const int a2 =
        g.add_node(NodeOp::linear, lp, "a2", {x, g.add_constant(constant({8, 8}, 2), "")})[0];
    const int r = g.add_node(NodeOp::activation, graph::ActivationParams{}, "relu", {a})[0];
    const int s = g.add_node(NodeOp::binary, graph::BinaryParams{MKC_BINARY_ADD}, "add", {r, a2})[0];
    const int p = g.add_node(NodeOp::softmax, graph::SoftmaxParams{-1, false}, "probs", {s})[0];
    const int m = g.add_node(NodeOp::binary, graph::BinaryParams{MKC_BINARY_MUL}, "mul", {p, a2})[0];
    const int q = g.add_node(NodeOp::activation, graph::ActivationParams{MKC_ACTIVATION_TANH}, "tanh",
                             {m})[0];
    g.add_output(g.add_node(NodeOp::binary, graph::BinaryParams{MKC_BINARY_ADD}, "twice",
                            {q, q})[0],
                 "y");
    auto xt = tensor({3, 8}, MKC_LAYOUT_CHANNELS_FIRST, 6);
    const Tensor *inputs[] = {xt.get()};
    std::vector<std::vector<float>> results;
    for (const bool inplace : {true, false}) {
        ProgramOptions options;
        options.fuse = false; // the relu a step of its own
        options.compile.inplace = inplace;
        Program program(g, options);
        mkc_tensor *out[] = {nullptr};
        program.run(inputs, out);
        results.push_back(take_values(out[0]));
        std::string over;
        for (const graph::Step &st : program.last_plan()->steps)
            if (st.in_place)
                over += st.what.substr(st.what.find('\'')) + " ";
        CHECK_EQ_TEXT(over, inplace ? "'relu') 'add') 'probs') 'mul') 'tanh') " : "");
    }
    CHECK(max_rel_diff(results[0], results[1]) == 0);
}

TEST(a_value_is_converted_once_per_arrangement_even_for_a_sum) {
    // stem conv -> max pool (in whatever arrangement the stem chose) -> a
    // residual block whose first conv and whose sum both want the pool's
    // output in the blocks' arrangement: one converter makes it, and the
    // sum (the pool output's last reader) writes into that copy in place.
    for (const mkc_layout layout : {MKC_LAYOUT_CHANNELS_FIRST, MKC_LAYOUT_CHANNELS_LAST}) {
        Graph g;
        const bool last = layout == MKC_LAYOUT_CHANNELS_LAST;
        const int x = g.add_input("x", MKC_DTYPE_F32,
                                  last ? std::vector<int64_t>{2, 20, 20, 3}
                                       : std::vector<int64_t>{2, 3, 20, 20},
                                  layout);
        const int w0 = g.add_constant(constant({32, 3, 7, 7}, 1), "w0");
        const int w1 = g.add_constant(constant({32, 32, 3, 3}, 2), "w1");
        const int w2 = g.add_constant(constant({32, 32, 3, 3}, 3), "w2");
        mkc_conv_params stem = conv_params(3, MKC_ACTIVATION_RELU, layout);
        stem.stride[0] = stem.stride[1] = 2;
        int y = g.add_node(NodeOp::conv2d, stem, "stem", {x, w0})[0];
        const int p = g.add_node(NodeOp::pool, max_pool(layout), "pool", {y})[0];
        y = g.add_node(NodeOp::conv2d, conv_params(1, MKC_ACTIVATION_RELU, layout), "c1",
                       {p, w1})[0];
        y = g.add_node(NodeOp::conv2d, conv_params(1, MKC_ACTIVATION_NONE, layout), "c2",
                       {y, w2})[0];
        y = g.add_node(NodeOp::binary, graph::BinaryParams{MKC_BINARY_ADD}, "", {y, p})[0];
        g.add_output(y, "y");
        auto xt = tensor({2, 3, 20, 20}, layout, 5);
        const Tensor *inputs[] = {xt.get()};
        std::vector<std::vector<float>> results;
        for (const bool inplace : {true, false}) {
            ProgramOptions options;
            options.compile.inplace = inplace;
            Program program(g, options);
            mkc_tensor *out[] = {nullptr};
            program.run(inputs, out);
            results.push_back(take_values(out[0]));
            const auto plan = program.last_plan();
            if (!inplace)
                continue;
            std::map<std::pair<int, std::string>, int> made; // (buffer, format) -> converters
            for (const graph::Step &s : plan->steps)
                if (s.node < 0 && s.in.at(0).kind == graph::BufferRef::Kind::arena)
                    ++made[{s.in[0].index, s.out_formats.at(0)}];
            for (const auto &m : made)
                CHECK(m.second == 1);
            CHECK(plan->in_place == 1);
        }
        CHECK(max_rel_diff(results[0], results[1]) <= 1e-5);
    }
}

TEST(plan_text_has_a_line_per_step_and_the_totals) {
    const SmallCnn cnn{MKC_LAYOUT_CHANNELS_LAST};
    Program program(cnn.build(3), ProgramOptions{});
    auto x = tensor({3, 3, 9, 11}, MKC_LAYOUT_CHANNELS_LAST, 9);
    const Tensor *inputs[] = {x.get()};
    const auto plan = program.plan_for(inputs);
    const std::string text = graph::plan_text(program.graph(), *plan);
    int lines = 0, converters = 0;
    for (size_t at = 0; (at = text.find('\n', at)) != std::string::npos; ++at)
        ++lines;
    for (size_t at = 0; (at = text.find(": convert ", at)) != std::string::npos; ++at)
        ++converters;
    CHECK(lines == static_cast<int>(plan->steps.size() + plan->views.size()) + 2);
    CHECK(converters == plan->converters);
    CHECK(text.find("node 0 (conv2d 'c1')") != std::string::npos);
    CHECK(text.find("output 'probs'") != std::string::npos);
    CHECK(text.find("arena " + std::to_string(plan->arena_bytes) + " bytes") != std::string::npos);
}

} // namespace
} // namespace mkc::test
