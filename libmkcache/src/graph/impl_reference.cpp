// The `reference` implementation (graph/implementations.hpp): a node's step
// runs the reference kernel of its operator (reference/kernels.hpp) on
// plain bytes. Each input is read plain in the caller's order of its own
// layout label - for an operator with a channel axis (conv, pool, batch
// and LRN norm), of its data format - and the result is written plain in
// its label's order; the compile converts what arrives otherwise.
#include <algorithm>
#include <vector>

#include "common/error.hpp"
#include "common/half_floats.hpp"
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
    // A kernel on float32 given bfloat16: the ports widened before it runs,
    // and its result rounded after (read first when it holds a residual).
    std::vector<bool> widen;
    bool round_out = false, residual_in_out = false;
};

// The kernel on float32 copies of the bfloat16 ports, its result rounded to
// bfloat16 (round to nearest, ties to even, as oneDNN rounds).
void run_widened(const ReferenceEntry &e, const ops::Buffers &b) {
    const size_t ports = e.in.size();
    std::vector<std::vector<float>> wide(ports);
    std::vector<const void *> in(b.in, b.in + ports);
    std::vector<mkc_dtype> dtypes = e.dtypes;
    for (size_t i = 0; i < ports; ++i) {
        if (!e.widen[i] || !in[i]) continue;
        wide[i].resize(static_cast<size_t>(dims_product(e.in[i])));
        const auto *bits = static_cast<const uint16_t *>(in[i]);
        for (size_t k = 0; k < wide[i].size(); ++k) wide[i][k] = float_from_bf16(bits[k]);
        in[i] = wide[i].data();
        dtypes[i] = MKC_DTYPE_F32;
    }
    void *out0 = b.out[0];
    std::vector<float> result;
    if (e.round_out) {
        result.resize(static_cast<size_t>(dims_product(e.out)));
        if (e.residual_in_out) {
            const auto *bits = static_cast<const uint16_t *>(b.out[0]);
            for (size_t k = 0; k < result.size(); ++k) result[k] = float_from_bf16(bits[k]);
        }
        out0 = result.data();
    }
    void *const outs[] = {out0};
    const ops::Buffers widened{in.data(), outs};
    row(e.node).reference({e.node, e.in, dtypes, e.out, e.channels_last, widened});
    if (e.round_out) {
        auto *bits = static_cast<uint16_t *>(b.out[0]);
        for (size_t k = 0; k < result.size(); ++k) bits[k] = bf16_from_float(result[k]);
    }
}

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
    if (op.reference_widens_bf16) {
        for (mkc_dtype d : e->dtypes) e->widen.push_back(d == MKC_DTYPE_BF16);
        e->round_out = y.dtype == MKC_DTYPE_BF16;
        e->residual_in_out = residual != kNoValue && node.inputs[residual] != kNoValue;
    }
    p.outputs.push_back(ops::plain_value(y.dtype, y.layout, y.dims));
    p.entry = std::move(e);
    return p;
}

void reference_run(const CacheScope &, PrimitiveEntry &entry, const ops::Buffers &b) {
    const auto &e = static_cast<const ReferenceEntry &>(entry);
    if (e.round_out || std::find(e.widen.begin(), e.widen.end(), true) != e.widen.end())
        return run_widened(e, b);
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
                                reference_reads_views, false, false, nullptr};

} // namespace mkc::graph
