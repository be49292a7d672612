#include "graph/fuse.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <utility>

#include "common/error.hpp"
#include "common/thread_state.hpp"
#include "graph/op_table.hpp"
#include "handler/handler.hpp"
#include "layout/layout.hpp"

namespace mkc::graph {

std::string FuseReport::text() const {
    if (total() == 0)
        return {};
    std::string s = "fused " + std::to_string(total()) + " node" + (total() == 1 ? "" : "s") +
                    ": " + std::to_string(activations) + " activation, " + std::to_string(sums) +
                    " sum, " + std::to_string(batch_norms) + " batch_norm, " +
                    std::to_string(scales) + " scale\n";
    for (const std::string &line : lines)
        s += line + "\n";
    return s;
}

namespace {

using ops::ValueDesc;

bool concrete(mkc_layout layout) {
    return layout == MKC_LAYOUT_CHANNELS_FIRST || layout == MKC_LAYOUT_CHANNELS_LAST;
}

// The data_format a node's output is labelled with, for the operators that
// have one; TARGET is only resolved when a plan is compiled (the compiling
// thread's target layout), so a shape labelled from it is not known here.
bool target_data_format(const Node &node) {
    const OpRow &r = row(node);
    return r.data_format && !concrete(r.data_format(node.params));
}

// ------------------------------------------------------------------ shapes

// What the operators' infer is given for a dim bound at run time: large
// enough for any usual kernel, small enough that no result is refused as
// too large. Only what cannot depend on it is kept of the answer.
constexpr int64_t kProbe = 257;

// A value's shape as far as it holds for every run: dims in oneDNN order,
// each known (> 0) or a symbol (< 0) standing for a dim bound at run time.
// Two shapes with equal entries are equal at every run; a value whose
// shape cannot be told so is not known.
struct Shape {
    bool known = false;
    mkc_layout layout = MKC_LAYOUT_CHANNELS_FIRST;
    Dims dims;

    bool symbolic() const {
        return std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; });
    }
};

bool same_shape(const Shape &a, const Shape &b) {
    return a.known && b.known && a.layout == b.layout && a.dims == b.dims;
}

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

    // Unknown for values made after the graph was built (they are never
    // asked about).
    Shape of(int v) const {
        return v >= 0 && v < static_cast<int>(shapes_.size()) ? shapes_[v] : Shape{};
    }

private:
    // The value as the operators' infer sees it, each symbol as kProbe.
    ValueDesc probe(int v) const {
        const Value &value = g_.values[v];
        if (value.kind == Value::Kind::constant)
            return ops::describe(*value.constant);
        Dims dims = shapes_[v].dims;
        for (int64_t &d : dims)
            if (d < 0)
                d = kProbe;
        return ops::plain_value(MKC_DTYPE_F32, shapes_[v].layout, std::move(dims));
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
        std::vector<ValueDesc> descs;
        descs.reserve(node.inputs.size());
        NodeInputs inputs;
        for (int v : node.inputs) {
            if (v == kNoValue) {
                inputs.push_back(nullptr);
                continue;
            }
            descs.push_back(probe(v));
            inputs.push_back(&descs.back());
        }
        std::vector<ValueDesc> inferred;
        try {
            inferred = infer_node(node, inputs);
        } catch (...) {
            return; // the compile step reports it; nothing here depends on it
        }
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
        case Shaping::none:
            break;
        }
        return false;
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

// ---------------------------------------------------------------- constants

const auto kF32 = dnnl::memory::data_type::f32;

// A float32 constant's values, plain row-major over its oneDNN-order dims.
std::vector<float> plain_values(const Tensor &t) {
    const dnnl::memory::desc plain = layout::plain_desc(t.dims, kF32, MKC_LAYOUT_CHANNELS_FIRST);
    std::vector<float> out(static_cast<size_t>(element_count(t)));
    if (t.desc == plain)
        std::memcpy(out.data(), t.data, out.size() * sizeof(float));
    else
        reorder(thread_state().scope, t.desc, t.data, plain, out.data());
    return out;
}

// A new constant tensor holding `data` plain over oneDNN-order `dims`.
std::shared_ptr<Tensor> constant_tensor(const Dims &dims, mkc_layout label,
                                        const std::vector<double> &data) {
    std::shared_ptr<Tensor> t = make_owned_tensor(
        layout::plain_desc(dims, kF32, MKC_LAYOUT_CHANNELS_FIRST), label, MKC_DTYPE_F32);
    auto *p = static_cast<float *>(t->data);
    for (size_t i = 0; i < data.size(); ++i)
        p[i] = static_cast<float>(data[i]);
    t->constant = true;
    return t;
}

// ----------------------------------------------------------------- rewrites

class Fuser {
public:
    Fuser(const Graph &g, const FuseOptions &options, FuseReport &report)
        : g_(g), options_(options), report_(report), shapes_(g), values_(g.values),
          is_output_(g.values.size(), false) {
        for (size_t n = 0; n < g.nodes.size(); ++n)
            slots_.push_back({g.nodes[n], static_cast<int>(n), true});
        for (const Output &o : g.outputs)
            is_output_[o.value] = true;
    }

    void run() {
        while (step()) {
        }
    }

    Graph result() const {
        Graph out;
        std::vector<bool> used(values_.size(), false);
        for (const Slot &s : slots_)
            if (s.alive)
                for (int v : s.node.inputs)
                    if (v != kNoValue)
                        used[v] = true;
        for (const Output &o : g_.outputs)
            used[o.value] = true;
        std::vector<int> map(values_.size(), kNoValue);
        // Inputs keep their order (runs pass them so); constants nobody
        // reads any more are left out.
        for (size_t v = 0; v < values_.size(); ++v) {
            const Value &value = values_[v];
            const bool keep = value.kind == Value::Kind::input ||
                              (value.kind == Value::Kind::constant && used[v]);
            if (!keep)
                continue;
            out.values.push_back(value);
            map[v] = static_cast<int>(out.values.size()) - 1;
        }
        for (const Slot &s : slots_) {
            if (!s.alive)
                continue;
            Node node = s.node;
            const int index = static_cast<int>(out.nodes.size());
            for (int &v : node.inputs)
                if (v != kNoValue)
                    v = map[v];
            for (size_t port = 0; port < node.outputs.size(); ++port) {
                Value value = values_[node.outputs[port]];
                value.producer = index;
                value.port = static_cast<int>(port);
                out.values.push_back(std::move(value));
                map[node.outputs[port]] = static_cast<int>(out.values.size()) - 1;
                node.outputs[port] = map[node.outputs[port]];
            }
            out.nodes.push_back(std::move(node));
        }
        for (const Output &o : g_.outputs)
            out.outputs.push_back({map[o.value], o.name});
        return out;
    }

private:
    struct Slot {
        Node node;
        int origin; // the graph's node it stands for (a fused one: the producer)
        bool alive;
    };

    // One rewrite, if any applies.
    bool step() {
        std::vector<int> readers(values_.size(), 0), reader(values_.size(), -1);
        for (size_t s = 0; s < slots_.size(); ++s) {
            if (!slots_[s].alive)
                continue;
            for (int v : slots_[s].node.inputs) {
                if (v == kNoValue)
                    continue;
                ++readers[v];
                reader[v] = static_cast<int>(s);
            }
        }
        for (size_t p = 0; p < slots_.size(); ++p) {
            const Slot &producer = slots_[p];
            // Every rewrite fuses into an operator that takes post-ops.
            if (!producer.alive || producer.node.outputs.size() != 1 ||
                !row(producer.node).set_activation)
                continue;
            const int y = producer.node.outputs[0];
            if (readers[y] != 1 || is_output(y))
                continue;
            const int c = reader[y];
            if (batch_norm(static_cast<int>(p), c) || sum(static_cast<int>(p), c) ||
                scale(static_cast<int>(p), c) || activation(static_cast<int>(p), c))
                return true;
        }
        return false;
    }

    bool is_output(int v) const { return v < static_cast<int>(is_output_.size()) && is_output_[v]; }

    bool is_constant(int v) const {
        return v != kNoValue && values_[v].kind == Value::Kind::constant;
    }

    std::string describe(int slot) const { return g_.describe_node(slots_[slot].origin); }

    std::string describe_value(int v) const {
        const Value &value = values_[v];
        switch (value.kind) {
        case Value::Kind::input:
            return "input '" + value.name + "'";
        case Value::Kind::constant:
            return value.name.empty() ? "a constant" : "constant '" + value.name + "'";
        case Value::Kind::result:
            break;
        }
        return "the output of " + g_.describe_node(value.producer);
    }

    // The producer's node, changed to `fused`, takes the consumer's place
    // and output: what reads the consumer's output reads the fused node's,
    // and every value the fused node reads exists by then.
    void merge(int p, int c, Node fused, std::string line) {
        fused.outputs = slots_[c].node.outputs;
        slots_[c].node = std::move(fused);
        slots_[c].origin = slots_[p].origin;
        slots_[p].alive = false;
        report_.lines.push_back(std::move(line));
    }

    bool activation(int p, int c) {
        const Node &consumer = slots_[c].node;
        if (!options_.activation || consumer.op != NodeOp::activation)
            return false;
        const auto &a = std::get<ActivationParams>(consumer.params);
        if (a.kind == MKC_ACTIVATION_NONE)
            return false; // an error of the activation's own, kept as it is
        Node fused = slots_[p].node;
        const OpRow &r = row(fused);
        if (!r.set_activation || !r.set_activation(fused.params, a))
            return false;
        std::string line = describe(c) + " fused into " + describe(p);
        merge(p, c, std::move(fused), std::move(line));
        ++report_.activations;
        return true;
    }

    bool scale(int p, int c) {
        const Node &consumer = slots_[c].node;
        Node fused = slots_[p].node;
        if (!options_.scale || fused.op != NodeOp::matmul || consumer.op != NodeOp::binary)
            return false;
        auto &params = std::get<mkc_matmul_params>(fused.params);
        const mkc_binary_kind kind = std::get<BinaryParams>(consumer.params).kind;
        const int y = fused.outputs[0];
        const int other = consumer.inputs[0] == y ? consumer.inputs[1] : consumer.inputs[0];
        // y * c, c * y or y / c with c one float32 constant of rank <= 2
        // (a matmul's result has rank >= 2: its shape stays), after no
        // activation (the scale comes before it).
        if (params.activation != MKC_ACTIVATION_NONE || !is_constant(other) ||
            !(kind == MKC_BINARY_MUL || (kind == MKC_BINARY_DIV && consumer.inputs[0] == y)))
            return false;
        const Tensor &t = *values_[other].constant;
        if (t.dtype != MKC_DTYPE_F32 || element_count(t) != 1 || t.dims.size() > 2)
            return false;
        const double c_value = plain_values(t)[0];
        const double factor = kind == MKC_BINARY_MUL ? c_value : 1.0 / c_value;
        const double scaled = params.scale * factor;
        if (!std::isfinite(factor) || !std::isfinite(scaled) || std::fabs(scaled) > FLT_MAX)
            return false; // the binary's own infinities are not ours to move
        params.scale = static_cast<float>(scaled);
        std::string line = describe(c) + " fused into " + describe(p) + " as its scale";
        merge(p, c, std::move(fused), std::move(line));
        ++report_.scales;
        return true;
    }

    bool sum(int p, int c) {
        const Node &consumer = slots_[c].node;
        Node fused = slots_[p].node;
        if (!options_.sum || !row(fused).convolution || consumer.op != NodeOp::binary ||
            std::get<BinaryParams>(consumer.params).kind != MKC_BINARY_ADD)
            return false;
        auto &params = std::get<mkc_conv_params>(fused.params);
        if (params.activation != MKC_ACTIVATION_NONE || params.sum || !concrete(params.data_format))
            return false;
        const int y = fused.outputs[0];
        const int residual = consumer.inputs[0] == y ? consumer.inputs[1] : consumer.inputs[0];
        // The sum adds the residual element by element in the convolution's
        // arrangement: the same dims under the same label, for every run.
        const Shape ys = shapes_.of(y), rs = shapes_.of(residual);
        if (!same_shape(ys, rs) || ys.layout != params.data_format ||
            values_[residual].dtype != MKC_DTYPE_F32)
            return false;
        fused.inputs.resize(3, kNoValue);
        fused.inputs.push_back(residual);
        params.sum = 1;
        std::string line = describe(c) + " fused into " + describe(p) + " as its sum with " +
                           describe_value(residual);
        merge(p, c, std::move(fused), std::move(line));
        ++report_.sums;
        return true;
    }

    bool batch_norm(int p, int c) {
        const Node &consumer = slots_[c].node;
        Node fused = slots_[p].node;
        if (!options_.batch_norm || !row(fused).convolution ||
            consumer.op != NodeOp::batch_norm || consumer.inputs[0] != fused.outputs[0])
            return false;
        auto &params = std::get<mkc_conv_params>(fused.params);
        const auto &bn = std::get<mkc_batch_norm_params>(consumer.params);
        // The folded convolution writes what the batch_norm wrote only under
        // the same label, and never after a post-op of its own.
        if (params.activation != MKC_ACTIVATION_NONE || params.sum ||
            !concrete(params.data_format) || bn.data_format != params.data_format ||
            !(bn.epsilon >= 0.f) || fused.inputs.size() > 3)
            return false;
        const auto port = [](const Node &n, size_t i) {
            return i < n.inputs.size() ? n.inputs[i] : kNoValue;
        };
        const int w = port(fused, 1), b = port(fused, 2);
        const int mean = port(consumer, 1), var = port(consumer, 2);
        const int scale = port(consumer, 3), shift = port(consumer, 4);
        if (!is_constant(w) || (b != kNoValue && !is_constant(b)) || !is_constant(mean) ||
            !is_constant(var) || (scale != kNoValue && !is_constant(scale)) ||
            (shift != kNoValue && !is_constant(shift)))
            return false;

        const Tensor &wt = *values_[w].constant;
        const bool transposed = fused.op == NodeOp::conv2d_transpose;
        const size_t rank = fused.op == NodeOp::conv3d ? 5 : 4;
        const int64_t groups = params.groups;
        if (wt.dtype != MKC_DTYPE_F32 || wt.dims.size() != rank || groups < 1)
            return false;
        // Weights: [C_out, C_in/g, k...], transposed [C_in, C_out/g, k...].
        const int64_t c_out = transposed ? wt.dims[1] * groups : wt.dims[0];
        if (transposed && wt.dims[0] % groups != 0)
            return false;
        const auto vector_of_c_out = [&](int v) {
            if (v == kNoValue)
                return true;
            const Tensor &t = *values_[v].constant;
            return t.dtype == MKC_DTYPE_F32 && t.dims.size() == 1 && t.dims[0] == c_out;
        };
        for (int v : {b, mean, var, scale, shift})
            if (!vector_of_c_out(v))
                return false;

        const auto values_or = [&](int v, float fill) {
            return v == kNoValue ? std::vector<float>(static_cast<size_t>(c_out), fill)
                                 : plain_values(*values_[v].constant);
        };
        const std::vector<float> wv = plain_values(wt), bv = values_or(b, 0.f),
                                 mv = values_or(mean, 0.f), vv = values_or(var, 1.f),
                                 sv = values_or(scale, 1.f), hv = values_or(shift, 0.f);
        std::vector<double> factor(static_cast<size_t>(c_out)), bias(factor.size());
        for (size_t o = 0; o < factor.size(); ++o) {
            const double denom = static_cast<double>(vv[o]) + static_cast<double>(bn.epsilon);
            if (!(denom > 0))
                return false; // the batch_norm's own NaNs are not ours to move
            factor[o] = sv[o] / std::sqrt(denom);
            bias[o] = (static_cast<double>(bv[o]) - mv[o]) * factor[o] + hv[o];
        }
        std::vector<double> folded(wv.size());
        int64_t kernel = 1;
        for (size_t i = 2; i < rank; ++i)
            kernel *= wt.dims[i];
        const int64_t per_out = wt.dims[1] * kernel; // one output channel's weights (conv)
        const int64_t in_per_group = wt.dims[0] / groups, out_per_group = wt.dims[1];
        for (size_t i = 0; i < wv.size(); ++i) {
            const int64_t at = static_cast<int64_t>(i);
            int64_t o;
            if (!transposed) {
                o = at / per_out;
            } else {
                // Element [ci, j, k...] feeds output channel j of ci's group.
                const int64_t ci = at / (out_per_group * kernel);
                const int64_t j = (at / kernel) % out_per_group;
                o = (ci / in_per_group) * out_per_group + j;
            }
            folded[i] = wv[i] * factor[static_cast<size_t>(o)];
        }

        const std::string tag = " folded with " + describe(c);
        const int new_w =
            add_constant(constant_tensor(wt.dims, wt.layout, folded),
                         (values_[w].name.empty() ? "weights" : values_[w].name) + tag);
        const mkc_layout bias_label =
            b == kNoValue ? MKC_LAYOUT_CHANNELS_FIRST : values_[b].constant->layout;
        const int new_b = add_constant(
            constant_tensor({c_out}, bias_label, bias),
            (b == kNoValue || values_[b].name.empty() ? "bias" : values_[b].name) + tag);
        fused.inputs.resize(3, kNoValue);
        fused.inputs[1] = new_w;
        fused.inputs[2] = new_b;
        std::string line = describe(c) + " folded into the weights and bias of " + describe(p);
        merge(p, c, std::move(fused), std::move(line));
        ++report_.batch_norms;
        return true;
    }

    int add_constant(std::shared_ptr<Tensor> t, std::string name) {
        Value v;
        v.kind = Value::Kind::constant;
        v.name = std::move(name);
        v.dtype = t->dtype;
        v.layout = t->layout;
        v.dims = caller_dims(*t);
        v.constant = std::move(t);
        values_.push_back(std::move(v));
        return static_cast<int>(values_.size()) - 1;
    }

    const Graph &g_;
    const FuseOptions &options_;
    FuseReport &report_;
    Shapes shapes_;
    std::vector<Value> values_; // the graph's, then the constants made here
    std::vector<bool> is_output_;
    std::vector<Slot> slots_; // the nodes in order; fused ones in their consumer's place
};

} // namespace

Graph fuse(const Graph &graph, FuseReport *report, const FuseOptions &options) {
    FuseReport local;
    FuseReport &r = report ? *report : local;
    r = FuseReport{};
    Fuser fuser(graph, options, r);
    fuser.run();
    return fuser.result();
}

} // namespace mkc::graph
