// A residual add as a sum post-op: a convolution or linear layer without
// activation or sum whose output only a binary ADD reads, the other operand
// of the same shape and layout label for every run, becomes a convolution
// (linear layer) with sum = 1 whose 4th input is that operand (its
// residual; see fuse.hpp).
#include "fusion/fusions.hpp"

#include <string>

namespace mkc::graph::fusion {

namespace {

// The linear layer's case: its result is channels-first [..., out].
bool fuse_linear_sum(Rewriter &r, int p, int c) {
    const Node &consumer = r.node(c);
    Node fused = r.node(p);
    auto &params = std::get<mkc_linear_params>(fused.params);
    if (params.activation != MKC_ACTIVATION_NONE || params.sum || params.training)
        return false;
    const int y = fused.outputs[0];
    const int residual = consumer.inputs[0] == y ? consumer.inputs[1] : consumer.inputs[0];
    const Shape ys = r.shape(y), rs = r.shape(residual);
    if (!same_shape(ys, rs) || rs.layout != ys.layout ||
        r.value(residual).dtype != MKC_DTYPE_F32)
        return false;
    fused.inputs.resize(3, kNoValue);
    fused.inputs.push_back(residual);
    params.sum = 1;
    std::string line = r.describe(c) + " fused into " + r.describe(p) + " as its sum with " +
                       r.describe_value(residual);
    r.merge(p, c, std::move(fused), std::move(line));
    ++r.report().sums;
    return true;
}

} // namespace

bool fuse_sum(Rewriter &r, int p, int c) {
    const Node &consumer = r.node(c);
    if (consumer.op != NodeOp::binary ||
        std::get<BinaryParams>(consumer.params).kind != MKC_BINARY_ADD)
        return false;
    if (r.node(p).op == NodeOp::linear)
        return fuse_linear_sum(r, p, c);
    Node fused = r.node(p);
    if (!row(fused).convolution)
        return false;
    auto &params = std::get<mkc_conv_params>(fused.params);
    if (params.activation != MKC_ACTIVATION_NONE || params.sum || !concrete(params.data_format))
        return false;
    const int y = fused.outputs[0];
    const int residual = consumer.inputs[0] == y ? consumer.inputs[1] : consumer.inputs[0];
    // The sum adds the residual element by element in the convolution's
    // arrangement: the same dims under the same label, for every run.
    const Shape ys = r.shape(y), rs = r.shape(residual);
    if (!same_shape(ys, rs) || ys.layout != params.data_format ||
        r.value(residual).dtype != MKC_DTYPE_F32)
        return false;
    fused.inputs.resize(3, kNoValue);
    fused.inputs.push_back(residual);
    params.sum = 1;
    std::string line = r.describe(c) + " fused into " + r.describe(p) + " as its sum with " +
                       r.describe_value(residual);
    r.merge(p, c, std::move(fused), std::move(line));
    ++r.report().sums;
    return true;
}

} // namespace mkc::graph::fusion
