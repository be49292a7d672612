// The fusion pass over a graph before it is compiled: operators that
// oneDNN can run as one primitive are merged into one node, where the
// merged graph computes exactly what the graph as built does. Each fusion
// is a matcher and a rewrite in a file of its own (fusion/*.cpp):
//
//   activation   a conv2d / conv3d / conv2d_transpose / linear / matmul
//                without a fused activation, whose output only an
//                activation node reads: the activation becomes the
//                producer's post-op (kind, alpha, beta).
//   sum          a convolution without activation or sum whose output only
//                a binary ADD reads, the other operand of the same shape
//                and layout label: the add becomes the convolution's sum
//                post-op and the other operand its residual (below).
//   batch_norm   an inference batch_norm reading a convolution's output
//                (its only reader; no activation, no sum) whose weights,
//                bias, mean, variance, scale and shift are all constants:
//                folded into new weights and bias constants.
//   scale        a matmul without activation whose output only a binary
//                MUL by (or DIV by) a one-element constant reads: the
//                constant becomes a factor of the matmul's scale (an
//                attention's 1/sqrt(head dim)).
//
// Rewrites repeat until none applies, so conv -> batch_norm -> add -> relu
// ends as one convolution with folded weights, a sum and a relu (the sum
// comes before the activation, as oneDNN applies post-ops in order).
//
// Never fused: a value that is a graph output or that another node also
// reads, a node that already has what would be fused (a second activation
// over a fused one), a data_format of TARGET (the layout a plan resolves it
// to is only known when it is compiled), a sum whose operands' shapes cannot
// be proven equal for every run (dims bound at run time are tracked as
// symbols: a batch, or a spatial dim a stride-1 "same" convolution keeps).
//
// The residual of a sum. A convolution node with params.sum != 0 has a 4th
// input: src, weights, bias (kNoValue when none), residual. Such a node
// computes dst = residual + conv(src) (+ bias), then the activation. Only
// this pass makes such nodes (Graph::add_node accepts at most 3 inputs for
// a convolution). Compiling one means filling the convolution's output
// buffer with the residual's values, in the arrangement the convolution
// writes, before the convolution's step runs; the residual value itself
// stays unchanged.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace mkc::graph {

// Which rewrites fuse() may apply (all by default).
struct FuseOptions {
    bool activation = true;
    bool sum = true;
    bool batch_norm = true;
    bool scale = true;
};

// What fuse() did: a count per rewrite and one line per rewrite, in the
// order they were applied, naming the nodes by their numbers in the graph
// as built ("node 3 (activation) fused into node 1 (conv2d 'c1')").
struct FuseReport {
    int activations = 0;
    int sums = 0;
    int batch_norms = 0;
    int scales = 0;
    std::vector<std::string> lines;

    int total() const { return activations + sums + batch_norms + scales; }
    // A summary line, then the lines; empty when nothing was fused.
    std::string text() const;
};

// A new graph computing what `graph` computes: the same inputs in the same
// order, the same output names, fewer nodes where the rewrites above apply
// (value ids and node numbers may change; a fused node keeps the producer's
// name and sits where the last node it replaces was). Constants no node
// reads any more are left out. `report` may be null.
Graph fuse(const Graph &graph, FuseReport *report, const FuseOptions &options = {});

} // namespace mkc::graph
