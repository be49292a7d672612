#include "graph/shapes.hpp"

#include <algorithm>

#include "graph/op_table.hpp"
#include "layout/layout.hpp"

namespace mkc::graph {

bool same_shape(const Shape &a, const Shape &b) {
    return a.known && b.known && a.layout == b.layout && a.dims == b.dims;
}

bool concrete(mkc_layout layout) {
    return layout == MKC_LAYOUT_CHANNELS_FIRST || layout == MKC_LAYOUT_CHANNELS_LAST;
}

namespace {

using ops::ValueDesc;

// The data_format a node's output is labelled with, for the operators that
// have one; TARGET is only resolved when a plan is compiled (the compiling
// thread's target layout), so a shape labelled from it is not known here.
bool target_data_format(const Node &node) {
    const OpRow &r = row(node);
    return r.data_format && !concrete(r.data_format(node.params));
}

// What the operators' infer is given for a dim bound at run time: large
// enough for any usual kernel, small enough that no result is refused as
// too large. Only what cannot depend on it is kept of the answer.
constexpr int64_t kProbe = 257;

// dims padded with leading 1s to `n`.
Dims padded(const Dims &d, size_t n) {
    Dims p(n - d.size(), 1);
    p.insert(p.end(), d.begin(), d.end());
    return p;
}

// The shapes of a graph's values, worked out once from the graph as built
// (a rewrite never changes the shape of a value that survives it).
class Shapes {
public:
    explicit Shapes(const Graph &g) : g_(g), shapes_(g.values.size()) {
        int64_t symbol = -1;
        for (size_t v = 0; v < g.values.size(); ++v) {
            const Value &value = g.values[v];
            if (value.kind == Value::Kind::input) {
                Dims caller = value.dims;
                for (int64_t &d : caller)
                    if (d == -1)
                        d = symbol--; // each dim bound at run time its own symbol
                shapes_[v] = {true, value.layout, layout::to_onednn_order(caller, value.layout)};
            } else if (value.kind == Value::Kind::constant) {
                shapes_[v] = {true, value.constant->layout, value.constant->dims};
            }
        }
        for (size_t n = 0; n < g.nodes.size(); ++n)
            node(g.nodes[n]);
    }

    std::vector<Shape> all() const { return shapes_; }

private:
    // The value as the operators' infer sees it, each symbol as kProbe
    // (`round` 0) or as a value of its own (`round` 1 or 2: see moved_shape).
    ValueDesc probe(int v, int round) const {
        const Value &value = g_.values[v];
        if (value.kind == Value::Kind::constant)
            return ops::describe(*value.constant);
        Dims dims = shapes_[v].dims;
        for (int64_t &d : dims)
            if (d < 0)
                d = probe_value(d, round);
        return ops::plain_value(MKC_DTYPE_F32, shapes_[v].layout, std::move(dims));
    }

    // Symbol `s`'s probe: kProbe in round 0; in rounds 1 and 2 every symbol
    // a value of its own, spaced apart by another step in each round, so
    // that no sum or multiple of one symbol is another's value both times.
    static int64_t probe_value(int64_t s, int round) {
        const int64_t k = -s - 1;
        return round == 0 ? kProbe : round == 1 ? kProbe + 2 * k : kProbe + 6 + 4 * k;
    }

    // The node's results with the inputs probed as `round` says, or none
    // when infer refuses them.
    std::vector<ValueDesc> infer_probed(const Node &node, int round) const {
        std::vector<ValueDesc> descs;
        descs.reserve(node.inputs.size());
        NodeInputs inputs;
        for (int v : node.inputs) {
            if (v == kNoValue) {
                inputs.push_back(nullptr);
                continue;
            }
            descs.push_back(probe(v, round));
            inputs.push_back(&descs.back());
        }
        try {
            return infer_node(node, inputs);
        } catch (...) {
            return {};
        }
    }

    void node(const Node &node) {
        if (node.outputs.size() != 1 || target_data_format(node))
            return;
        bool symbolic = false;
        for (int v : node.inputs) {
            if (v == kNoValue)
                continue;
            if (!shapes_[v].known)
                return;
            symbolic = symbolic || shapes_[v].symbolic();
        }
        // A node infer refuses: the compile step reports it; nothing here
        // depends on it.
        const std::vector<ValueDesc> inferred = infer_probed(node, 0);
        if (inferred.empty())
            return;
        const ValueDesc &r = inferred[0];
        Shape out{true, r.layout, r.dims};
        if (symbolic && !symbolic_shape(node, out))
            return;
        shapes_[node.outputs[0]] = std::move(out);
    }

    // `out` (the shape inferred with every symbol as kProbe) made true for
    // every run, or false when that cannot be told.
    bool symbolic_shape(const Node &node, Shape &out) const {
        const Shape &src = shapes_[node.inputs[0]];
        switch (row(node).shaping) {
        case Shaping::same_as_input:
            // Element-wise or normalising: the input's shape, labelled as
            // the operator labels it.
            if (out.dims.size() != src.dims.size())
                return false;
            out.dims = src.dims;
            return true;
        case Shaping::spatial:
            return spatial_shape(node, out);
        case Shaping::broadcast:
            return broadcast_shape(node, out);
        case Shaping::moved:
            return moved_shape(node, out);
        case Shaping::leading:
            // [..., in] -> [..., out]: the leading dims pass, the last one
            // comes from the other (not symbolic) inputs.
            for (size_t i = 1; i < node.inputs.size(); ++i)
                if (node.inputs[i] != kNoValue && shapes_[node.inputs[i]].symbolic())
                    return false;
            if (out.dims.size() != src.dims.size() || src.dims.empty() || src.dims.back() < 0)
                return false;
            std::copy(src.dims.begin(), src.dims.end() - 1, out.dims.begin());
            return true;
        case Shaping::none:
            break;
        }
        return false;
    }

    // Operators that move dims without computing with them (a reshape's 0
    // and -1, a transpose, a matmul's batch and rows, a concat's other
    // axes): inferred twice, every symbol given another value in each
    // round, a result dim that stays is known, one that is a symbol's value
    // both times is that symbol, and any other (a product, a sum) is not
    // known.
    bool moved_shape(const Node &node, Shape &out) const {
        std::vector<int64_t> symbols;
        for (int v : node.inputs)
            if (v != kNoValue)
                for (int64_t d : shapes_[v].dims)
                    if (d < 0 && std::find(symbols.begin(), symbols.end(), d) == symbols.end())
                        symbols.push_back(d);
        const std::vector<ValueDesc> a = infer_probed(node, 1), b = infer_probed(node, 2);
        if (a.empty() || b.empty())
            return false;
        const Dims &first = a[0].dims, &second = b[0].dims;
        if (first.size() != out.dims.size() || second.size() != out.dims.size())
            return false;
        for (size_t i = 0; i < out.dims.size(); ++i) {
            if (first[i] == second[i]) {
                out.dims[i] = first[i];
                continue;
            }
            auto s = std::find_if(symbols.begin(), symbols.end(), [&](int64_t sym) {
                return first[i] == probe_value(sym, 1) && second[i] == probe_value(sym, 2);
            });
            if (s == symbols.end())
                return false;
            out.dims[i] = *s;
        }
        return true;
    }

    // Convolutions and pooling: the batch passes through; each spatial dim
    // depends on its own input dim only, and a stride of 1 adds a constant
    // to it (none when the probe comes back unchanged); channels come from
    // the weights or the input's own, which must be known.
    bool spatial_shape(const Node &node, Shape &out) const {
        for (size_t i = 1; i < node.inputs.size(); ++i)
            if (node.inputs[i] != kNoValue && shapes_[node.inputs[i]].symbolic())
                return false;
        const Shape &src = shapes_[node.inputs[0]];
        if (out.dims.size() != src.dims.size())
            return false;
        bool global = false;
        const int64_t *stride = row(node).window_stride(node.params, global);
        for (size_t i = 0; i < src.dims.size(); ++i) {
            if (src.dims[i] > 0)
                continue;
            if (i == 0) {
                out.dims[0] = src.dims[0];
            } else if (i == 1) {
                return false;
            } else if (global) {
                continue; // the whole extent: 1 whatever it is
            } else if (i - 2 < 3 && stride[i - 2] == 1 && out.dims[i] == kProbe) {
                out.dims[i] = src.dims[i];
            } else {
                return false;
            }
        }
        return true;
    }

    // numpy broadcasting over the caller's order, as binary does it, and the
    // label of the operand whose shape the result has (a first).
    bool broadcast_shape(const Node &node, Shape &out) const {
        const Shape &a = shapes_[node.inputs[0]], &b = shapes_[node.inputs[1]];
        const Dims ca = layout::to_caller_order(a.dims, a.layout);
        const Dims cb = layout::to_caller_order(b.dims, b.layout);
        const size_t n = std::max(ca.size(), cb.size());
        const Dims pa = padded(ca, n), pb = padded(cb, n);
        Dims c(n);
        for (size_t i = 0; i < n; ++i) {
            if (pa[i] == pb[i] || pb[i] == 1)
                c[i] = pa[i];
            else if (pa[i] == 1)
                c[i] = pb[i];
            else
                return false; // a symbol against another dim: depends on the run
        }
        mkc_layout lay;
        if (ca.size() == n && pa == c) {
            lay = a.layout;
        } else {
            // b's label only when a cannot have the result's shape in any run.
            bool a_never_full = ca.size() != n;
            for (size_t i = 0; i < n && !a_never_full; ++i)
                a_never_full = pa[i] > 0 && c[i] > 0 && pa[i] != c[i];
            if (!a_never_full || !(cb.size() == n && pb == c))
                return false;
            lay = b.layout;
        }
        if (lay != out.layout)
            return false;
        out.dims = layout::to_onednn_order(c, lay);
        return true;
    }

    const Graph &g_;
    std::vector<Shape> shapes_;
};


} // namespace

std::vector<Shape> symbolic_shapes(const Graph &graph) { return Shapes(graph).all(); }

} // namespace mkc::graph
