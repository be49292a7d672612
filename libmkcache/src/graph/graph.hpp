// A model's graph as a builder makes it: values (inputs, constants and the
// nodes' results) and nodes in the order they were added. A node may only
// read values that exist when it is added, so the order is topological and
// a cycle cannot be built.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "mkcache/mkcache.h"
#include "tensor/tensor.hpp"

namespace mkc::graph {

// What a node computes (forward operators): the public mkc_op ids, so the
// ABI's enumeration is this one's face. What the graph layer knows of each
// is its row in the operator table (graph/op_table.hpp).
enum class NodeOp : int32_t {
    conv2d = MKC_OP_CONV2D,
    conv3d = MKC_OP_CONV3D,
    conv2d_transpose = MKC_OP_CONV2D_TRANSPOSE,
    activation = MKC_OP_ACTIVATION,
    softmax = MKC_OP_SOFTMAX,
    binary = MKC_OP_BINARY,
    pool = MKC_OP_POOL,
    linear = MKC_OP_LINEAR,
    matmul = MKC_OP_MATMUL,
    layer_norm = MKC_OP_LAYER_NORM,
    batch_norm = MKC_OP_BATCH_NORM, // inference: the running statistics are inputs
    lrn = MKC_OP_LRN,
    concat = MKC_OP_CONCAT,
    transpose = MKC_OP_TRANSPOSE,
    reshape = MKC_OP_RESHAPE,
    // Operators no pass names need no enumerator here: their rows give
    // the public id (NodeOp(MKC_OP_...)).
};

// The attributes of the operators whose eager calls take plain arguments
// rather than a params struct.
struct ActivationParams {
    mkc_activation_kind kind = MKC_ACTIVATION_RELU;
    float alpha = 0, beta = 0;
};
struct SoftmaxParams {
    int axis = -1;
    bool log = false;
};
struct BinaryParams {
    mkc_binary_kind kind = MKC_BINARY_ADD;
};
struct ConcatParams {
    int axis = 0;
};
struct TransposeParams {
    std::vector<int> perm;
};
struct ReshapeParams {
    std::vector<int64_t> dims; // one may be -1; 0: the input's dim there
};

// A node's attributes: the params struct of its operator (its `name` field
// is not used: Node::name stands for it); none for an operator without.
using NodeParams =
    std::variant<std::monostate, mkc_conv_params, ActivationParams, SoftmaxParams, BinaryParams,
                 mkc_pool_params, mkc_linear_params, mkc_matmul_params, mkc_layer_norm_params,
                 mkc_batch_norm_params, mkc_lrn_params, ConcatParams, TransposeParams,
                 ReshapeParams, mkc_reduce_params, mkc_gather_params, mkc_cast_params,
                 mkc_slice_params, mkc_expand_params, mkc_compare_params, mkc_pad_params,
                 mkc_resize_params, mkc_logical_params, mkc_range_params,
                 mkc_gather_nd_params, mkc_binary_params, mkc_quantize_params,
                 mkc_quantized_conv_params, mkc_quantized_linear_params,
                 mkc_quantized_matmul_params>;

constexpr int kNoValue = -1; // an absent optional input

struct Value {
    enum class Kind { input, constant, result } kind = Kind::result;
    std::string name; // inputs: how a run passes them; others: for messages
    mkc_dtype dtype = MKC_DTYPE_F32;
    mkc_layout layout = MKC_LAYOUT_CHANNELS_FIRST;
    std::vector<int64_t> dims;        // inputs: caller order, -1 = bound at run time
    std::shared_ptr<Tensor> constant; // constants: the data (held, never changed)
    int producer = -1;                // results: the node, and which of its outputs
    int port = 0;
};

struct Node {
    NodeOp op;
    NodeParams params;
    std::string name;         // the cache name (may be empty: a default one)
    std::vector<int> inputs;  // value ids in the operator's port order, kNoValue if absent
    std::vector<int> outputs; // value ids
};

struct Output {
    int value;
    std::string name;
};

struct Graph {
    std::vector<Value> values;
    std::vector<Node> nodes;
    std::vector<Output> outputs;

    // The builder's steps; each checks its arguments and throws mkc::Error.
    int add_input(const std::string &name, mkc_dtype dtype, const std::vector<int64_t> &dims,
                  mkc_layout layout);
    int add_constant(std::shared_ptr<Tensor> tensor, const std::string &name);
    // The node's outputs: as many as the operator gives for these inputs.
    std::vector<int> add_node(NodeOp op, NodeParams params, const std::string &name,
                              const std::vector<int> &inputs);
    void add_output(int value, const std::string &name);

    // "node 3 (conv2d 'stem')" for messages.
    std::string describe_node(int node) const;
};

// The graph as text: values, nodes with their attributes and shapes,
// outputs (graph_text.cpp).
std::string graph_text(const Graph &graph);

} // namespace mkc::graph
