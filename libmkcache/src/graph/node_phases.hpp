// A node's operator phases (ops/phases.hpp), chosen by its NodeOp: what the
// compile passes call for every node, whatever its operator.
#pragma once

#include <vector>

#include "graph/graph.hpp"
#include "ops/phases.hpp"

namespace mkc::graph {

// Inputs in port order; null for an absent optional input.
using NodeInputs = std::vector<const ops::ValueDesc *>;

std::vector<ops::ValueDesc> infer_node(const Node &node, const NodeInputs &inputs);
// `y_strides`: a matmul node writes its result with these strides (caller
// order; see ops::MatmulOp); null for every other node.
ops::Prepared prepare_node(const CacheScope &scope, const Node &node, const NodeInputs &inputs,
                           const Dims *y_strides = nullptr);

using NodeRun = void (*)(const CacheScope &, PrimitiveEntry &, const ops::Buffers &);
NodeRun node_run(NodeOp op);

} // namespace mkc::graph
