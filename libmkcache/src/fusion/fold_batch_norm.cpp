// Folding an inference batch_norm into the convolution before it: a
// convolution (no activation, no sum) whose output only a batch_norm reads,
// the weights, bias, mean, variance, scale and shift all constants, becomes
// one convolution with new weights and bias constants:
//   w' = w * scale / sqrt(var + eps),  b' = (b - mean) * scale / sqrt(var + eps) + shift
// per output channel, computed in double and rounded once.
#include "fusion/fusions.hpp"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace mkc::graph::fusion {

bool fold_batch_norm(Rewriter &r, int p, int c) {
    const Node &consumer = r.node(c);
    Node fused = r.node(p);
    if (!row(fused).convolution ||
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
    if (!r.is_constant(w) || (b != kNoValue && !r.is_constant(b)) || !r.is_constant(mean) ||
        !r.is_constant(var) || (scale != kNoValue && !r.is_constant(scale)) ||
        (shift != kNoValue && !r.is_constant(shift)))
        return false;

    const Tensor &wt = *r.value(w).constant;
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
        const Tensor &t = *r.value(v).constant;
        return t.dtype == MKC_DTYPE_F32 && t.dims.size() == 1 && t.dims[0] == c_out;
    };
    for (int v : {b, mean, var, scale, shift})
        if (!vector_of_c_out(v))
            return false;

    const auto values_or = [&](int v, float fill) {
        return v == kNoValue ? std::vector<float>(static_cast<size_t>(c_out), fill)
                             : plain_values(*r.value(v).constant);
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

    const std::string tag = " folded with " + r.describe(c);
    const int new_w =
        r.add_constant(constant_tensor(wt.dims, wt.layout, folded),
                     (r.value(w).name.empty() ? "weights" : r.value(w).name) + tag);
    const mkc_layout bias_label =
        b == kNoValue ? MKC_LAYOUT_CHANNELS_FIRST : r.value(b).constant->layout;
    const int new_b = r.add_constant(
        constant_tensor({c_out}, bias_label, bias),
        (b == kNoValue || r.value(b).name.empty() ? "bias" : r.value(b).name) + tag);
    fused.inputs.resize(3, kNoValue);
    fused.inputs[1] = new_w;
    fused.inputs[2] = new_b;
    std::string line = r.describe(c) + " folded into the weights and bias of " + r.describe(p);
    r.merge(p, c, std::move(fused), std::move(line));
    ++r.report().batch_norms;
    return true;
}

} // namespace mkc::graph::fusion
