// The operator table: one row per graph operator, holding everything the
// graph layer knows of it - its name and public id, its ports, how its
// attributes are read from the C ABI, what its output's shape keeps of a
// dim bound at run time, its phases (infer, prepare, run) on oneDNN, its
// reference kernel, and what each implementation may do in place or read
// as a view.
//
// Graph building, node names, plan text, override parsing, fusion, the
// implementations and the compile passes ask a node's row rather than
// switching on its operator, so an operator is added by adding its row
// (op_table.cpp) and its kernels.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "ops/phases.hpp"

namespace mkc::ops {
enum class LinearKernel; // ops/matmul.hpp
}

namespace mkc::graph {

// Inputs in port order; null for an absent optional input.
using NodeInputs = std::vector<const ops::ValueDesc *>;
using NodeRun = void (*)(const CacheScope &, PrimitiveEntry &, const ops::Buffers &);

// What a reference kernel is given: the node (its params), the caller-order
// dims and the dtype of its inputs (per port; empty: absent) and the dims of
// its result, whether its data is channels-last, and the plain buffers.
struct ReferenceCall {
    const Node &node;
    const std::vector<Dims> &in;
    const std::vector<mkc_dtype> &dtypes;
    const Dims &out;
    bool channels_last;
    const ops::Buffers &buffers;
};

// How the result's dims follow a dim of the input bound at run time (the
// fusion pass proves two shapes equal for every run from this).
enum class Shaping {
    none,          // not followed: the result's shape is not known then
    same_as_input, // element-wise or normalising: the input's dims
    spatial,       // convolutions and pooling: the batch passes; a stride-1 dim may
    broadcast,     // numpy broadcasting of the two inputs
    leading,       // a linear layer: the input's dims but the last, which the weights give
    moved,         // reshape, transpose, matmul, concat: each result dim is a known one
                   // or one input dim moved, found by inferring twice (shapes.cpp)
};

// How many inputs (at least, at most) and outputs an operator has.
struct Arity {
    int min_inputs, max_inputs, outputs;
};

struct OpRow {
    NodeOp op;        // its value is the public mkc_op id
    const char *name; // in messages, plan text, overrides and choice keys
    Arity arity;
    int first_optional; // ports from here up to max_inputs may be absent
    const char *ports;  // the ports' names, "src,weights,bias" (messages)
    // The dtypes each input may have, a bit per mkc_dtype: port i's is
    // dtypes[min(i, last)] (so one entry serves every port).
    std::array<uint32_t, 4> dtypes;
    Shaping shaping;

    // Traits the passes ask about.
    bool convolution;  // params are mkc_conv_params (with sum, activation)
    bool channel_axis; // has a data_format: its data is read in that order
    bool view;         // reshape or transpose: may be a view of its input
    bool onednn_in_place, reference_in_place; // may write dst over its first input
    bool onednn_reads_views; // takes strided operands and writes given strides
    // The port of weights its primitive reads in an arrangement of its own
    // choosing, and reads as they come when it can (-1: none): a program
    // shows such a constant in the arrangement an earlier plan converted it
    // to.
    int held_weights_port = -1;
    // The port of int8 weights its oneDNN run checks on each run where the
    // CPU lacks VNNI (7 bits there), -1: none. A program whose weights
    // there are a constant checks them once, when it compiles the step.
    int seven_bit_weights_port = -1;
    // Its reference kernel reads and writes float32: bfloat16 inputs are
    // widened for it and its result rounded back.
    bool reference_widens_bf16;

    // The node's params from the caller's ABI struct (sized, name copied
    // out to `name`); throws INVALID_ARGUMENT naming the call ("graph
    // node", "op_run") and the operator.
    NodeParams (*read_params)(const void *params, std::string &name, const char *call);
    // The data_format its params carry, or null for an operator without one.
    mkc_layout (*data_format)(const NodeParams &params);
    // The strides of its window (spatial shaping only) and whether the
    // window is the whole extent.
    const int64_t *(*window_stride)(const NodeParams &params, bool &global);
    // Sets a fused activation post-op; false when it has one already. Null
    // for an operator without an activation post-op.
    bool (*set_activation)(NodeParams &params, const ActivationParams &a);
    // The port of the residual a fused sum adds (kNoValue: none).
    int (*residual_port)(const Node &node);
    // The port a plan's folded add may take as the addend of this node's
    // float32 result (a matmul's), kNoValue where the node cannot take one
    // (an activation comes first). Null: no such port.
    int (*addend_port)(const Node &node);
    // View operators: the result as a view of `src`'s bytes (`out` is the
    // inferred result), false when those bytes cannot be viewed so; and the
    // axes' permutation when the view is a transpose (else null).
    bool (*view_of)(const Node &node, const ops::ValueDesc &src, const ops::ValueDesc &out,
                    ops::ValueDesc &result);
    const std::vector<int> *(*permutation)(const Node &node);

    // The outputs' descriptions for these inputs (shapes, dtypes, layout
    // labels), or the operator's error: what every implementation checks
    // first.
    std::vector<ops::ValueDesc> (*infer)(const Node &node, const NodeInputs &inputs);
    // The step on oneDNN (ops/): null for an operator oneDNN cannot run.
    ops::Prepared (*prepare)(const CacheScope &scope, const Node &node, const NodeInputs &inputs,
                             const Dims *y_strides);
    NodeRun run;
    // The node on another oneDNN primitive family than its own (a linear
    // layer's inner product on the matmul or a 1x1 convolution): the
    // implementations `onednn_matmul`, `onednn_conv1x1` and, with
    // `row_parts` (its rows in parts whose primitives plans of other input
    // shapes share, ops::LinearOp), `onednn_matmul_shared`, which run with
    // `run`. Null: none.
    ops::Prepared (*prepare_on_kernel)(const CacheScope &scope, const Node &node,
                                       const NodeInputs &inputs, ops::LinearKernel kernel,
                                       bool row_parts);
    // The cases the oneDNN phases compute as the operator defines them: ok,
    // or why not (a primitive whose rounding or coordinates differ from the
    // operator's in that case). Null: every case its infer accepts.
    ops::Verdict (*onednn_supports)(const Node &node, const NodeInputs &inputs);
    // Its attributes as text for dumps (":s2x2:p1x1", the ones that are set).
    std::string (*attrs_text)(const Node &node, const NodeInputs &inputs);
    // The reference kernel (reference/) on plain buffers.
    void (*reference)(const ReferenceCall &call);
    // The floating-point (or integer) operations one run of the node does,
    // counting a multiply-add as two: its inputs and its result as inferred.
    // Null: an operator without a product (its cost is its memory traffic).
    int64_t (*flops)(const Node &node, const NodeInputs &inputs, const ops::ValueDesc &out);
};

// The row of `op` (every NodeOp has one).
const OpRow &op_row(NodeOp op);
// The row named `name` (as node names and overrides write it), or null.
const OpRow *op_named(const std::string &name);
// The row of public id `id` (mkc_op), or null.
const OpRow *op_by_id(int64_t id);
// Every row, in public id order.
const std::vector<OpRow> &op_rows();

inline const OpRow &row(const Node &node) { return op_row(node.op); }

// A bit of OpRow::dtypes.
constexpr uint32_t dtype_bit(mkc_dtype dtype) { return 1u << static_cast<unsigned>(dtype); }
// Every dtype: the ports that only move or convert bytes.
constexpr uint32_t kAnyDtype = [] {
    uint32_t bits = 0;
    for (mkc_dtype d : kDtypes) bits |= dtype_bit(d);
    return bits;
}();
// The dtypes port `port` of `row` takes.
inline uint32_t port_dtypes(const OpRow &row, size_t port) {
    return row.dtypes[port < row.dtypes.size() ? port : row.dtypes.size() - 1];
}

// Whether a bfloat16 plan gives port `port` of `r` bfloat16: the data ports
// of an operator computing in either float (a bias stays float32, which the
// primitives take as it is and which keeps its precision).
bool bf16_port(const OpRow &r, size_t port);

// The node's outputs' descriptions, or its error: an input of a dtype its
// row does not take ("input 0 (src) is int64; conv2d takes float32"), else
// its operator's checks. And its prepared step on oneDNN (`y_strides`: a
// matmul, or an inference convolution, writes its result with these
// strides, caller order; see ops::MatmulOp, ops::ConvOp).
std::vector<ops::ValueDesc> infer_node(const Node &node, const NodeInputs &inputs);
ops::Prepared prepare_node(const CacheScope &scope, const Node &node, const NodeInputs &inputs,
                           const Dims *y_strides = nullptr);

} // namespace mkc::graph
