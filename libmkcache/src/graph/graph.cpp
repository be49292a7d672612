#include "graph/graph.hpp"

#include <cstdint>
#include <utility>

#include "common/error.hpp"
#include "graph/op_table.hpp"
#include "layout/layout.hpp"
#include "tensor/tensor.hpp"

namespace mkc::graph {

int Graph::add_input(const std::string &name, mkc_dtype dtype, const std::vector<int64_t> &dims,
                     mkc_layout layout) {
    require(!name.empty(), "graph input: the name is empty");
    for (const Value &v : values)
        require(!(v.kind == Value::Kind::input && v.name == name), "graph input '", name,
                "': an input of that name exists");
    require(known_dtype(dtype), "graph input '", name,
            "': dtype must be one of ", dtype_names(), "; got ", static_cast<int>(dtype));
    const int rank = static_cast<int>(dims.size());
    require(rank >= 1 && rank <= MKC_MAX_NDIMS, "graph input '", name, "': rank must be 1..",
            MKC_MAX_NDIMS, ", got ", rank);
    // The static dims alone must describe a tensor that can exist: a run
    // indexes the caller's buffers by their element count.
    const uint64_t limit = uint64_t(1) << 56;
    uint64_t bytes = dtype_size(dtype);
    for (int64_t d : dims) {
        require(d >= 1 || d == -1, "graph input '", name,
                "': dims must be >= 1 (or -1 for one bound at run time), got ", d);
        const uint64_t n = d == -1 ? 1 : static_cast<uint64_t>(d);
        require(n <= limit / bytes, "graph input '", name, "': shape ", shape_text(dims),
                " is too large (more than 2^56 bytes)");
        bytes *= n;
    }
    require(layout == MKC_LAYOUT_CHANNELS_FIRST || layout == MKC_LAYOUT_CHANNELS_LAST,
            "graph input '", name, "': layout must be channels-first or channels-last");
    require(layout == MKC_LAYOUT_CHANNELS_FIRST || rank >= 3, "graph input '", name,
            "': a channels-last input needs rank >= 3");
    Value v;
    v.kind = Value::Kind::input;
    v.name = name;
    v.dtype = dtype;
    v.layout = layout;
    v.dims = dims;
    values.push_back(std::move(v));
    return static_cast<int>(values.size()) - 1;
}

int Graph::add_constant(std::shared_ptr<Tensor> tensor, const std::string &name) {
    require(tensor != nullptr, "graph constant: the tensor is NULL");
    Value v;
    v.kind = Value::Kind::constant;
    v.name = name;
    v.dtype = tensor->dtype;
    v.layout = tensor->layout;
    v.dims = caller_dims(*tensor);
    v.constant = std::move(tensor);
    values.push_back(std::move(v));
    return static_cast<int>(values.size()) - 1;
}

std::vector<int> Graph::add_node(NodeOp op, NodeParams params, const std::string &name,
                                 const std::vector<int> &inputs) {
    const int index = static_cast<int>(nodes.size());
    const OpRow &r = op_row(op);
    const Arity a = r.arity;
    const int n = static_cast<int>(inputs.size());
    const char *op_name = r.name;
    require(n >= a.min_inputs && n <= a.max_inputs, "node ", index, " (", op_name, "): takes ",
            a.min_inputs, a.min_inputs == a.max_inputs ? "" : "..",
            a.min_inputs == a.max_inputs ? std::string() : std::to_string(a.max_inputs),
            " inputs, got ", n);
    for (int i = 0; i < n; ++i) {
        const int v = inputs[i];
        if (v == kNoValue) {
            require(i >= r.first_optional, "node ", index, " (", op_name, "): input ", i,
                    " is required");
            continue;
        }
        require(v >= 0 && v < static_cast<int>(values.size()), "node ", index, " (", op_name,
                "): input ", i, " is not a value of this graph (", v, ")");
    }
    Node node{op, std::move(params), name, inputs, {}};
    for (int port = 0; port < a.outputs; ++port) {
        Value v;
        v.kind = Value::Kind::result;
        v.producer = index;
        v.port = port;
        values.push_back(std::move(v));
        node.outputs.push_back(static_cast<int>(values.size()) - 1);
    }
    nodes.push_back(std::move(node));
    return nodes.back().outputs;
}

void Graph::add_output(int value, const std::string &name) {
    require(value >= 0 && value < static_cast<int>(values.size()), "graph output '", name,
            "': not a value of this graph (", value, ")");
    require(!name.empty(), "graph output: the name is empty");
    for (const Output &o : outputs)
        require(o.name != name, "graph output '", name, "': an output of that name exists");
    outputs.push_back({value, name});
}

std::string Graph::describe_node(int node) const {
    const Node &n = nodes.at(static_cast<size_t>(node));
    std::string s = "node " + std::to_string(node) + " (" + op_row(n.op).name;
    if (!n.name.empty())
        s += " '" + n.name + "'";
    return s + ")";
}

} // namespace mkc::graph
