// The `reference` implementation (graph/implementations.hpp): a node's step
// runs the reference kernel of its operator (reference/kernels.hpp) on
// plain bytes. Each input is read plain in the caller's order of its own
// layout label - for an operator with a channel axis (conv, pool, batch
// and LRN norm), of its data format - and the result is written plain in
// its label's order; the compile converts what arrives otherwise.
#include <cstring>

#include "common/error.hpp"
#include "graph/implementations.hpp"
#include "layout/layout.hpp"
#include "reference/kernels.hpp"
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
    Dims out;
    bool channels_last = false;
};

bool has_channel_axis(NodeOp op) {
    return op == NodeOp::conv2d || op == NodeOp::conv3d || op == NodeOp::conv2d_transpose ||
           op == NodeOp::pool || op == NodeOp::batch_norm || op == NodeOp::lrn;
}

// Every node its operator's checks accept (float32, the only dtype).
ops::Verdict reference_supports(const Node &node, const NodeInputs &inputs) {
    return ops::verdict_of([&] { infer_node(node, inputs); });
}

ops::Prepared reference_prepare(const CacheScope &, const Node &node, const NodeInputs &inputs,
                                const Dims *) {
    const std::vector<ValueDesc> outputs = infer_node(node, inputs);
    const ValueDesc &y = outputs.at(0);
    auto e = std::make_shared<ReferenceEntry>();
    e->node = node;
    e->channels_last = has_channel_axis(node.op) && y.layout == MKC_LAYOUT_CHANNELS_LAST;
    ops::Prepared p;
    // A convolution's residual (port 3) is not read: its output buffer holds it.
    const size_t ports = is_convolution(node.op) && node.inputs.size() > 3 ? 3 : node.inputs.size();
    for (size_t i = 0; i < ports; ++i) {
        const ValueDesc *v = inputs[i];
        if (!v) {
            p.takes.push_back({});
            e->in.push_back({});
            continue;
        }
        // The data (port 0) of an operator with a channel axis in its data
        // format's order; everything else in its own label's.
        const mkc_layout order = has_channel_axis(node.op) && i == 0 ? y.layout : v->layout;
        p.takes.push_back(layout::plain_desc(v->dims, dnnl::memory::data_type::f32, order));
        e->in.push_back(layout::to_caller_order(v->dims, order));
    }
    e->out = layout::to_caller_order(y.dims, y.layout);
    p.outputs.push_back(ops::plain_value(y.dtype, y.layout, y.dims));
    p.entry = std::move(e);
    return p;
}

const float *in_f(const ops::Buffers &b, size_t i) { return static_cast<const float *>(b.in[i]); }
int64_t count(const Dims &d) {
    int64_t n = 1;
    for (int64_t x : d)
        n *= x;
    return n;
}
int axis_of(int axis, size_t rank) { return axis < 0 ? axis + static_cast<int>(rank) : axis; }

void reference_run(const CacheScope &, PrimitiveEntry &entry, const ops::Buffers &b) {
    const auto &e = static_cast<const ReferenceEntry &>(entry);
    const Node &node = e.node;
    float *y = static_cast<float *>(b.out[0]);
    const size_t nin = e.in.size();
    const float *x = in_f(b, 0);
    auto opt = [&](size_t i) { return i < nin && b.in[i] ? in_f(b, i) : nullptr; };
    switch (node.op) {
    case NodeOp::conv2d:
    case NodeOp::conv3d:
    case NodeOp::conv2d_transpose:
        reference::conv(std::get<mkc_conv_params>(node.params), node.op == NodeOp::conv2d_transpose,
                        e.channels_last, e.in[0], x, e.in[1], in_f(b, 1), opt(2), e.out, y);
        return;
    case NodeOp::activation: {
        const auto &p = std::get<ActivationParams>(node.params);
        reference::activation(p.kind, p.alpha, p.beta, x, y, count(e.out));
        return;
    }
    case NodeOp::softmax: {
        const auto &p = std::get<SoftmaxParams>(node.params);
        reference::softmax(e.out, axis_of(p.axis, e.out.size()), p.log, x, y);
        return;
    }
    case NodeOp::binary:
        reference::binary(std::get<BinaryParams>(node.params).kind, e.in[0], x, e.in[1], in_f(b, 1),
                          e.out, y);
        return;
    case NodeOp::pool:
        reference::pool(std::get<mkc_pool_params>(node.params), e.channels_last, e.in[0], x, e.out,
                        y);
        return;
    case NodeOp::linear: {
        const auto &p = std::get<mkc_linear_params>(node.params);
        const int64_t in = e.in[0].back(), out = e.in[1][0];
        reference::linear(count(e.in[0]) / in, in, out, x, in_f(b, 1), opt(2), p.activation,
                          p.activation_alpha, p.activation_beta, y);
        return;
    }
    case NodeOp::matmul:
        reference::matmul(std::get<mkc_matmul_params>(node.params), e.in[0], x, e.in[1], in_f(b, 1),
                          opt(2), e.out, y);
        return;
    case NodeOp::layer_norm: {
        const auto &p = std::get<mkc_layer_norm_params>(node.params);
        reference::layer_norm(e.out, axis_of(p.begin_norm_axis, e.out.size()), p.epsilon, x, opt(1),
                              opt(2), y);
        return;
    }
    case NodeOp::batch_norm: {
        const auto &p = std::get<mkc_batch_norm_params>(node.params);
        reference::batch_norm(e.out, e.channels_last, p.epsilon, x, in_f(b, 1), in_f(b, 2), opt(3),
                              opt(4), y);
        return;
    }
    case NodeOp::lrn: {
        const auto &p = std::get<mkc_lrn_params>(node.params);
        reference::lrn(e.out, e.channels_last, p.size, p.alpha, p.beta, p.k, x, y);
        return;
    }
    case NodeOp::concat: {
        std::vector<const float *> srcs;
        for (size_t i = 0; i < nin; ++i)
            srcs.push_back(in_f(b, i));
        reference::concat(axis_of(std::get<ConcatParams>(node.params).axis, e.out.size()), e.in,
                          srcs, y);
        return;
    }
    case NodeOp::transpose:
        reference::transpose(e.in[0], std::get<TransposeParams>(node.params).perm, x, y);
        return;
    case NodeOp::reshape:
        std::memcpy(y, x, static_cast<size_t>(count(e.out)) * sizeof(float));
        return;
    }
    fail(MKC_STATUS_INTERNAL_ERROR, "reference: no kernel for ", node_op_name(node.op));
}

NodeRun reference_runner(NodeOp) { return reference_run; }

// The kernels that may write their result over their first input.
bool reference_overwrites_input(NodeOp op) {
    return op == NodeOp::activation || op == NodeOp::softmax || op == NodeOp::binary ||
           op == NodeOp::layer_norm || op == NodeOp::batch_norm;
}

bool reference_reads_views(NodeOp) { return false; }

} // namespace

extern const Implementation kReference;
const Implementation kReference{"reference",          10,
                                reference_supports,   reference_prepare,
                                reference_runner,     reference_overwrites_input,
                                reference_reads_views};

} // namespace mkc::graph
