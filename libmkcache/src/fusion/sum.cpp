// A residual add as a sum post-op: a convolution or linear layer without
// activation or sum whose output only a binary ADD reads, the other operand
// of the same shape and layout label for every run, becomes a convolution
// (linear layer) with sum = 1 whose 4th input is that operand (its
// residual; see fuse.hpp).
#include "fusion/fusions.hpp"

#include <string>

namespace mkc::graph::fusion {

namespace {

// The params' post-op fields: whether they leave room for a sum, and
// setting it. A convolution's result must carry its data format's label.
struct SumTarget {
    bool open = false;
    bool labelled = false; // the result's label must be `layout`
    mkc_layout layout = MKC_LAYOUT_CHANNELS_FIRST;
    int *sum = nullptr;
};

SumTarget sum_target(Node &node) {
    SumTarget t;
    if (node.op == NodeOp::linear) {
        auto &p = std::get<mkc_linear_params>(node.params);
        t.open = p.activation == MKC_ACTIVATION_NONE && !p.sum && !p.training;
        t.sum = &p.sum;
    } else if (row(node).convolution) {
        auto &p = std::get<mkc_conv_params>(node.params);
        t.open = p.activation == MKC_ACTIVATION_NONE && !p.sum && concrete(p.data_format);
        t.labelled = true;
        t.layout = p.data_format;
        t.sum = &p.sum;
    }
    return t;
}

} // namespace

bool fuse_sum(Rewriter &r, int p, int c) {
    const Node &consumer = r.node(c);
    if (consumer.op != NodeOp::binary ||
        std::get<BinaryParams>(consumer.params).kind != MKC_BINARY_ADD)
        return false;
    Node fused = r.node(p);
    const SumTarget target = sum_target(fused);
    if (!target.open)
        return false;
    const int y = fused.outputs[0];
    const int residual = consumer.inputs[0] == y ? consumer.inputs[1] : consumer.inputs[0];
    // The sum adds the residual element by element in the node's
    // arrangement: the same dims under the same label, for every run.
    const Shape ys = r.shape(y), rs = r.shape(residual);
    if (!same_shape(ys, rs) || (target.labelled && ys.layout != target.layout) ||
        r.value(residual).dtype != MKC_DTYPE_F32)
        return false;
    fused.inputs.resize(3, kNoValue);
    fused.inputs.push_back(residual);
    *target.sum = 1;
    std::string line = r.describe(c) + " fused into " + r.describe(p) + " as its sum with " +
                       r.describe_value(residual);
    r.merge(p, c, std::move(fused), std::move(line));
    ++r.report().sums;
    return true;
}

} // namespace mkc::graph::fusion
