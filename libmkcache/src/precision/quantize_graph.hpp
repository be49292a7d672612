// The 8-bit plan of a graph: the compile pass that rewrites each 2-D
// convolution (ungrouped, a fused sum included) and linear layer whose
// weights are float32 constants into the quantized operator, from the
// ranges a calibration recorded (graph/calibration.hpp):
//
//   values    each value a quantized node reads (src, or a residual it
//             adds) gets one uint8 form: a scale and zero point spanning
//             the union of its recorded ranges, zero included;
//   weights   int8, symmetric, one scale per output channel: 127 steps on
//             a CPU with VNNI, 63 without (oneDNN's kernels there add pairs
//             of products in 16 bits, which 7-bit weights cannot saturate);
//   results   uint8 in the result's form, written by the quantized node
//             itself, while a reader takes it so (a quantized node's src,
//             or the residual of a convolution writing uint8); float32
//             otherwise, and for graph outputs.
//
// Every other node stays float32. A reader wanting the other form of a
// value gets a quantize or dequantize step, made once, before its first
// such reader.
#pragma once

#include <set>
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
// `keep_f32`: operators whose nodes stay float32 (a precision override).
Graph quantize_graph(const Graph &graph, const std::string &calibration, QuantizeReport *report,
                     const std::set<NodeOp> &keep_f32 = {});

} // namespace mkc::graph
