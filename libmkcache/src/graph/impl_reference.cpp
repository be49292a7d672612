// The `reference` implementation (graph/implementations.hpp): a node's step
// runs the reference kernel of its operator (reference/kernels.hpp) on
// plain bytes. Each input is read plain in the caller's order of its own
// layout label - for an operator with a channel axis (conv, pool, batch
// and LRN norm), of its data format - and the result is written plain in
// its label's order; the compile converts what arrives otherwise.
#include "common/error.hpp"
#include "graph/implementations.hpp"
#include "layout/layout.hpp"
#include "tensor/tensor.hpp"

namespace mkc::graph {

namespace {

using ops::ValueDesc;

// What a reference step needs besides its buffers: the node (its params)
// and the caller-order dims of its inputs (per port; empty: absent) and of
// its result.
struct ReferenceEntry : PrimitiveEntry {
    Node node;
    std::vector<Dims> in;
    std::vector<mkc_dtype> dtypes;
    Dims out;
    bool channels_last = false;
};

// Every node its row's dtypes and its operator's checks accept.
ops::Verdict reference_supports(const Node &node, const NodeInputs &inputs) {
    return ops::verdict_of([&] { infer_node(node, inputs); });
}

ops::Prepared reference_prepare(const CacheScope &, const Node &node, const NodeInputs &inputs,
                                const Dims *) {
    const std::vector<ValueDesc> outputs = infer_node(node, inputs);
    const ValueDesc &y = outputs.at(0);
    auto e = std::make_shared<ReferenceEntry>();
    e->node = node;
    const OpRow &op = row(node);
    e->channels_last = op.channel_axis && y.layout == MKC_LAYOUT_CHANNELS_LAST;
    ops::Prepared p;
    // A fused sum's residual is not read: the output buffer holds it.
    const int residual = op.residual_port(node);
    const size_t ports = residual != kNoValue ? static_cast<size_t>(residual) : node.inputs.size();
    for (size_t i = 0; i < ports; ++i) {
        const ValueDesc *v = inputs[i];
        if (!v) {
            p.takes.push_back({});
            e->in.push_back({});
            e->dtypes.push_back(MKC_DTYPE_F32);
            continue;
        }
        e->dtypes.push_back(v->dtype);
        // The data (port 0) of an operator with a channel axis in its data
        // format's order; everything else in its own label's.
        const mkc_layout order = op.channel_axis && i == 0 ? y.layout : v->layout;
        p.takes.push_back(layout::plain_desc(v->dims, to_onednn(v->dtype), order));
        e->in.push_back(layout::to_caller_order(v->dims, order));
    }
    e->out = layout::to_caller_order(y.dims, y.layout);
    p.outputs.push_back(ops::plain_value(y.dtype, y.layout, y.dims));
    p.entry = std::move(e);
    return p;
}

void reference_run(const CacheScope &, PrimitiveEntry &entry, const ops::Buffers &b) {
    const auto &e = static_cast<const ReferenceEntry &>(entry);
    row(e.node).reference({e.node, e.in, e.dtypes, e.out, e.channels_last, b});
}

NodeRun reference_runner(const OpRow &) { return reference_run; }
bool reference_overwrites_input(const OpRow &op) { return op.reference_in_place; }
bool reference_reads_views(const OpRow &) { return false; }

} // namespace

extern const Implementation kReference;
const Implementation kReference{"reference",          10,
                                reference_supports,   reference_prepare,
                                reference_runner,     reference_overwrites_input,
                                reference_reads_views};

} // namespace mkc::graph
