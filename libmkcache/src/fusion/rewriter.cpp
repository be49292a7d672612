// The rewriter the fusions work through (fusion/fusions.hpp), and the
// constants' helpers the batch_norm fold and the scale use.
#include "fusion/fusions.hpp"

#include <cstring>
#include <utility>

#include "common/thread_state.hpp"
#include "layout/layout.hpp"

namespace mkc::graph::fusion {

namespace {
const auto kF32 = dnnl::memory::data_type::f32;
} // namespace

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

Rewriter::Rewriter(const Graph &g, FuseReport &report)
    : g_(g), report_(report), shapes_(symbolic_shapes(g)), values_(g.values),
      is_output_(g.values.size(), false) {
    for (size_t n = 0; n < g.nodes.size(); ++n)
        slots_.push_back({g.nodes[n], static_cast<int>(n), true});
    for (const Output &o : g.outputs)
        is_output_[o.value] = true;
}

std::string Rewriter::describe(int slot) const { return g_.describe_node(slots_[slot].origin); }

std::string Rewriter::describe_value(int v) const {
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

void Rewriter::merge(int p, int c, Node fused, std::string line) {
    fused.outputs = slots_[c].node.outputs;
    slots_[c].node = std::move(fused);
    slots_[c].origin = slots_[p].origin;
    slots_[p].alive = false;
    report_.lines.push_back(std::move(line));
}

int Rewriter::add_constant(std::shared_ptr<Tensor> t, std::string name) {
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

void Rewriter::count_readers(std::vector<int> &readers, std::vector<int> &reader) const {
    readers.assign(values_.size(), 0);
    reader.assign(values_.size(), -1);
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
}

Graph Rewriter::result() const {
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

} // namespace mkc::graph::fusion
