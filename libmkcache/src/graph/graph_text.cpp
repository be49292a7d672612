// A graph as text, for the compile passes' dump: one line per value made
// outside a node, per node (its inputs, attributes, outputs and their
// shapes as far as they hold for every run) and per output.
#include <string>

#include "graph/op_table.hpp"
#include "graph/shapes.hpp"
#include "layout/layout.hpp"

namespace mkc::graph {

namespace {

// "[1,?1,768]": a dim bound at run time as its symbol.
std::string dims_text(const Shape &s) {
    if (!s.known)
        return "[?]";
    const Dims caller = layout::to_caller_order(s.dims, s.layout);
    std::string out = "[";
    for (size_t i = 0; i < caller.size(); ++i)
        out += (i ? "," : "") +
               (caller[i] < 0 ? "?" + std::to_string(-caller[i]) : std::to_string(caller[i]));
    return out + "] " + layout::name(s.layout);
}

std::string value_name(int v) { return v == kNoValue ? "-" : "v" + std::to_string(v); }

} // namespace

std::string graph_text(const Graph &g) {
    const std::vector<Shape> shapes = symbolic_shapes(g);
    std::string s;
    for (size_t v = 0; v < g.values.size(); ++v) {
        const Value &value = g.values[v];
        if (value.kind == Value::Kind::result)
            continue;
        s += value_name(static_cast<int>(v)) +
             (value.kind == Value::Kind::input ? " input '" : " constant '") + value.name + "' " +
             dtype_name(value.dtype) + " " + dims_text(shapes[v]) + "\n";
    }
    for (size_t n = 0; n < g.nodes.size(); ++n) {
        const Node &node = g.nodes[n];
        // The attributes of operators that read their input's rank: a
        // stand-in of the right rank where the shape is not known.
        std::vector<ops::ValueDesc> probes;
        probes.reserve(node.inputs.size());
        NodeInputs inputs;
        for (int v : node.inputs) {
            if (v == kNoValue) {
                inputs.push_back(nullptr);
                continue;
            }
            const Shape &sh = shapes[v];
            Dims dims(sh.known ? sh.dims.size() : 4, 1);
            probes.push_back(ops::plain_value(MKC_DTYPE_F32, sh.layout, dims));
            inputs.push_back(&probes.back());
        }
        std::string line = g.describe_node(static_cast<int>(n)) + ":";
        for (size_t i = 0; i < node.inputs.size(); ++i)
            line += (i ? ", " : " ") + value_name(node.inputs[i]);
        line += " ->";
        for (int v : node.outputs)
            line += " " + value_name(v) + " " + dims_text(shapes[v]);
        std::string attrs;
        try {
            attrs = row(node).attrs_text(node, inputs);
        } catch (...) {
            attrs = " (attributes not shown)";
        }
        s += line + (attrs.empty() ? "" : "  " + attrs) + "\n";
    }
    for (const Output &o : g.outputs)
        s += "output '" + o.name + "' = " + value_name(o.value) + "\n";
    return s;
}

} // namespace mkc::graph
