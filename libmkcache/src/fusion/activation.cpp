// An activation as a post-op: a convolution, linear or matmul without a
// fused activation, whose output only an activation node reads, takes the
// activation's kind, alpha and beta (its row's set_activation).
#include "fusion/fusions.hpp"

#include <string>

namespace mkc::graph::fusion {

bool fuse_activation(Rewriter &r, int p, int c) {
    const Node &consumer = r.node(c);
    if (consumer.op != NodeOp::activation)
        return false;
    const auto &a = std::get<ActivationParams>(consumer.params);
    if (a.kind == MKC_ACTIVATION_NONE)
        return false; // an error of the activation's own, kept as it is
    Node fused = r.node(p);
    const OpRow &op = row(fused);
    if (!op.set_activation || !op.set_activation(fused.params, a))
        return false;
    std::string line = r.describe(c) + " fused into " + r.describe(p);
    r.merge(p, c, std::move(fused), std::move(line));
    ++r.report().activations;
    return true;
}

} // namespace mkc::graph::fusion
