// The 8-bit plan of a graph: the compile pass that rewrites each 2-D
// convolution (ungrouped, without a fused sum) and linear layer whose
// weights are float32 constants into a quantize step and the quantized
// operator, from the ranges a calibration recorded (graph/calibration.hpp):
//
//   src       uint8 with a zero point spanning the recorded range (zero
//             included), one scale for the tensor;
//   weights   int8, symmetric, one scale per output channel: 127 steps on
//             a CPU with VNNI, 63 without (oneDNN's kernels there add pairs
//             of products in 16 bits, which 7-bit weights cannot saturate);
//   result    float32 from the quantized operator (bias and activation
//             applied in real units), read by the rest of the graph as
//             before.
//
// Every other node stays float32. The nodes keep their numbers' order; a
// quantize step is inserted before the node it feeds.
#pragma once

#include <string>

#include "graph/graph.hpp"

namespace mkc::graph {

struct QuantizeReport {
    int quantized = 0; // nodes rewritten
    std::string text;  // one line per rewritten node, then a summary
};

// `calibration`: the text Calibration::text() gives for this graph. A line
// naming no node of the graph, or a quantizable node without its line, is
// INVALID_ARGUMENT (a calibration of another model); empty text too.
Graph quantize_graph(const Graph &graph, const std::string &calibration, QuantizeReport *report);

} // namespace mkc::graph
