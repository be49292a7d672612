// An attention's 1/sqrt(head dim) as a matmul's scale: a matmul without
// activation whose output only a binary MUL by (or DIV by) a one-element
// float32 constant reads takes the constant into its scale.
#include "fusion/fusions.hpp"

#include <cfloat>
#include <cmath>
#include <string>

namespace mkc::graph::fusion {

bool fuse_scale(Rewriter &r, int p, int c) {
    const Node &consumer = r.node(c);
    Node fused = r.node(p);
    if (fused.op != NodeOp::matmul || consumer.op != NodeOp::binary)
        return false;
    auto &params = std::get<mkc_matmul_params>(fused.params);
    const mkc_binary_kind kind = std::get<BinaryParams>(consumer.params).kind;
    const int y = fused.outputs[0];
    const int other = consumer.inputs[0] == y ? consumer.inputs[1] : consumer.inputs[0];
    // y * c, c * y or y / c with c one float32 constant of rank <= 2
    // (a matmul's result has rank >= 2: its shape stays), after no
    // activation (the scale comes before it).
    // The addend is added after the scale: a scale after it would take it too.
    const bool has_addend = fused.inputs.size() > 3 && fused.inputs[3] != kNoValue;
    if (params.activation != MKC_ACTIVATION_NONE || has_addend || !r.is_constant(other) ||
        !(kind == MKC_BINARY_MUL || (kind == MKC_BINARY_DIV && consumer.inputs[0] == y)))
        return false;
    const Tensor &t = *r.value(other).constant;
    if (t.dtype != MKC_DTYPE_F32 || element_count(t) != 1 || t.dims.size() > 2)
        return false;
    const double c_value = plain_values(t)[0];
    const double factor = kind == MKC_BINARY_MUL ? c_value : 1.0 / c_value;
    const double scaled = params.scale * factor;
    if (!std::isfinite(factor) || !std::isfinite(scaled) || std::fabs(scaled) > FLT_MAX)
        return false; // the binary's own infinities are not ours to move
    params.scale = static_cast<float>(scaled);
    std::string line = r.describe(c) + " fused into " + r.describe(p) + " as its scale";
    r.merge(p, c, std::move(fused), std::move(line));
    ++r.report().scales;
    return true;
}

} // namespace mkc::graph::fusion
