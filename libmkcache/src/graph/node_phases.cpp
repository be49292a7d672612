#include "graph/node_phases.hpp"

#include <type_traits>

#include "common/error.hpp"
#include "ops/activation.hpp"
#include "ops/batch_norm.hpp"
#include "ops/binary.hpp"
#include "ops/conv.hpp"
#include "ops/layer_norm.hpp"
#include "ops/lrn.hpp"
#include "ops/matmul.hpp"
#include "ops/pool.hpp"
#include "ops/shape_ops.hpp"
#include "ops/softmax.hpp"

namespace mkc::graph {

namespace {

using ops::ValueDesc;

// The node's params struct as the phases read it: a program's nodes are
// inference (never training), named by Node::name.
template <typename P> P inference(P p) {
    p.training = 0;
    p.name = nullptr;
    return p;
}

const char *cache_name(const Node &node) { return node.name.empty() ? nullptr : node.name.c_str(); }

std::vector<ValueDesc> one(ValueDesc v) { return {std::move(v)}; }

std::vector<ValueDesc> concat_inputs(const NodeInputs &in) {
    std::vector<ValueDesc> v;
    for (const ValueDesc *d : in)
        v.push_back(*d);
    return v;
}

int conv_rank(NodeOp op) { return op == NodeOp::conv3d ? 3 : 2; }

// Calls `f(op_type, attrs)` with the node's phases type and attributes;
// `f` then calls the phase with the node's inputs.
template <typename F> auto with_phases(const Node &node, const NodeInputs &in, F &&f) {
    switch (node.op) {
    case NodeOp::conv2d:
    case NodeOp::conv3d:
    case NodeOp::conv2d_transpose: {
        const mkc_conv_params p = inference(std::get<mkc_conv_params>(node.params));
        return f(ops::ConvOp{},
                 ops::ConvAttrs(p, conv_rank(node.op), node.op == NodeOp::conv2d_transpose, false));
    }
    case NodeOp::activation: {
        const auto &p = std::get<ActivationParams>(node.params);
        return f(ops::ActivationOp{}, ops::ActivationAttrs{p.kind, p.alpha, p.beta});
    }
    case NodeOp::softmax: {
        const auto &p = std::get<SoftmaxParams>(node.params);
        return f(ops::SoftmaxOp{}, ops::SoftmaxAttrs{p.axis, p.log});
    }
    case NodeOp::binary:
        return f(ops::BinaryOp{}, ops::BinaryAttrs{std::get<BinaryParams>(node.params).kind});
    case NodeOp::pool: {
        const mkc_pool_params p = inference(std::get<mkc_pool_params>(node.params));
        const int rank = static_cast<int>(in[0]->dims.size());
        return f(ops::PoolOp{}, ops::PoolAttrs(p, rank, false));
    }
    case NodeOp::linear: {
        const mkc_linear_params p = inference(std::get<mkc_linear_params>(node.params));
        return f(ops::LinearOp{}, ops::LinearAttrs(p, false));
    }
    case NodeOp::matmul: {
        mkc_matmul_params p = std::get<mkc_matmul_params>(node.params);
        p.name = nullptr;
        return f(ops::MatmulOp{}, ops::MatmulAttrs{p});
    }
    case NodeOp::layer_norm: {
        const mkc_layer_norm_params p = inference(std::get<mkc_layer_norm_params>(node.params));
        return f(ops::LayerNormOp{}, ops::LayerNormAttrs(p, false));
    }
    case NodeOp::batch_norm: {
        const mkc_batch_norm_params p = inference(std::get<mkc_batch_norm_params>(node.params));
        return f(ops::BatchNormOp{}, ops::BatchNormAttrs(p, false));
    }
    case NodeOp::lrn: {
        const mkc_lrn_params p = inference(std::get<mkc_lrn_params>(node.params));
        return f(ops::LrnOp{}, ops::LrnAttrs(p, false));
    }
    case NodeOp::concat:
        return f(ops::ConcatOp{}, ops::ConcatAttrs{std::get<ConcatParams>(node.params).axis});
    case NodeOp::transpose: {
        const auto &p = std::get<TransposeParams>(node.params);
        return f(ops::TransposeOp{},
                 ops::TransposeAttrs{static_cast<int>(p.perm.size()), p.perm.data()});
    }
    case NodeOp::reshape: {
        // A 0 takes the input's dim at that place (so a graph with a batch
        // bound at run time can flatten); the rest is the eager reshape's.
        std::vector<int64_t> dims = std::get<ReshapeParams>(node.params).dims;
        const Dims src = caller_dims(*in[0]);
        for (size_t i = 0; i < dims.size(); ++i)
            if (dims[i] == 0 && i < src.size())
                dims[i] = src[i];
        return f(ops::ReshapeOp{}, ops::ReshapeAttrs{static_cast<int>(dims.size()), dims.data()});
    }
    }
    fail(MKC_STATUS_INVALID_ARGUMENT, "unknown operator ", static_cast<int>(node.op));
}

// The phases' arguments after the attributes, by operator: inputs as the
// family's functions take them (optional ones as pointers).
template <typename Op> struct Call;

#define MKC_ONE_INPUT(OP)                                                                          \
    template <> struct Call<OP> {                                                                  \
        static std::vector<ValueDesc> infer(const OP::Attrs &a, const NodeInputs &in) {            \
            return one(OP::infer(a, *in[0]));                                                      \
        }                                                                                          \
        static ops::Prepared prepare(const CacheScope &s, const OP::Attrs &a, const char *n,       \
                                     const NodeInputs &in) {                                       \
            return OP::prepare(s, a, n, *in[0]);                                                   \
        }                                                                                          \
    };
MKC_ONE_INPUT(ops::ActivationOp)
MKC_ONE_INPUT(ops::SoftmaxOp)
MKC_ONE_INPUT(ops::PoolOp)
MKC_ONE_INPUT(ops::LrnOp)
#undef MKC_ONE_INPUT

// Operators with a required pair and an optional bias.
#define MKC_BIASED(OP)                                                                             \
    template <> struct Call<OP> {                                                                  \
        static std::vector<ValueDesc> infer(const OP::Attrs &a, const NodeInputs &in) {            \
            return one(OP::infer(a, *in[0], *in[1], in.size() > 2 ? in[2] : nullptr));             \
        }                                                                                          \
        static ops::Prepared prepare(const CacheScope &s, const OP::Attrs &a, const char *n,       \
                                     const NodeInputs &in) {                                       \
            return OP::prepare(s, a, n, *in[0], *in[1], in.size() > 2 ? in[2] : nullptr);          \
        }                                                                                          \
    };
MKC_BIASED(ops::ConvOp)
MKC_BIASED(ops::LinearOp)
MKC_BIASED(ops::MatmulOp)
#undef MKC_BIASED

template <> struct Call<ops::BinaryOp> {
    static std::vector<ValueDesc> infer(const ops::BinaryAttrs &a, const NodeInputs &in) {
        return one(ops::BinaryOp::infer(a, *in[0], *in[1]));
    }
    static ops::Prepared prepare(const CacheScope &s, const ops::BinaryAttrs &a, const char *n,
                                 const NodeInputs &in) {
        return ops::BinaryOp::prepare(s, a, n, *in[0], *in[1]);
    }
};

const ValueDesc *port(const NodeInputs &in, size_t i) { return i < in.size() ? in[i] : nullptr; }

template <> struct Call<ops::LayerNormOp> {
    static std::vector<ValueDesc> infer(const ops::LayerNormAttrs &a, const NodeInputs &in) {
        return one(ops::LayerNormOp::infer(a, *in[0], port(in, 1), port(in, 2)));
    }
    static ops::Prepared prepare(const CacheScope &s, const ops::LayerNormAttrs &a, const char *n,
                                 const NodeInputs &in) {
        return ops::LayerNormOp::prepare(s, a, n, *in[0], port(in, 1), port(in, 2));
    }
};

template <> struct Call<ops::BatchNormOp> {
    static std::vector<ValueDesc> infer(const ops::BatchNormAttrs &a, const NodeInputs &in) {
        auto out = ops::BatchNormOp::infer(a, *in[0], in[1], in[2], port(in, 3), port(in, 4));
        out.resize(1); // inference: dst only
        return out;
    }
    static ops::Prepared prepare(const CacheScope &s, const ops::BatchNormAttrs &a, const char *n,
                                 const NodeInputs &in) {
        // All of the forward's outputs: the program binds dst and leaves
        // the training-only ones null.
        return ops::BatchNormOp::prepare(s, a, n, *in[0], in[1], in[2], port(in, 3), port(in, 4));
    }
};

template <> struct Call<ops::ConcatOp> {
    static std::vector<ValueDesc> infer(const ops::ConcatAttrs &a, const NodeInputs &in) {
        return one(ops::ConcatOp::infer(a, concat_inputs(in)));
    }
    static ops::Prepared prepare(const CacheScope &s, const ops::ConcatAttrs &a, const char *n,
                                 const NodeInputs &in) {
        return ops::ConcatOp::prepare(s, a, n, concat_inputs(in));
    }
};

// transpose and reshape have no cache name of their own (a reorder's).
#define MKC_UNNAMED(OP)                                                                            \
    template <> struct Call<OP> {                                                                  \
        static std::vector<ValueDesc> infer(const OP::Attrs &a, const NodeInputs &in) {            \
            return one(OP::infer(a, *in[0]));                                                      \
        }                                                                                          \
        static ops::Prepared prepare(const CacheScope &s, const OP::Attrs &a, const char *,        \
                                     const NodeInputs &in) {                                       \
            return OP::prepare(s, a, *in[0]);                                                      \
        }                                                                                          \
    };
MKC_UNNAMED(ops::TransposeOp)
MKC_UNNAMED(ops::ReshapeOp)
#undef MKC_UNNAMED

} // namespace

std::vector<ValueDesc> infer_node(const Node &node, const NodeInputs &inputs) {
    return with_phases(node, inputs, [&](auto op, const auto &attrs) {
        return Call<decltype(op)>::infer(attrs, inputs);
    });
}

ops::Prepared prepare_node(const CacheScope &scope, const Node &node, const NodeInputs &inputs,
                           const Dims *y_strides) {
    require(!y_strides || node.op == NodeOp::matmul,
            "only a matmul writes its result with given strides");
    return with_phases(node, inputs, [&](auto op, const auto &attrs) {
        if constexpr (std::is_same_v<decltype(op), ops::MatmulOp>)
            return ops::MatmulOp::prepare(scope, attrs, cache_name(node), *inputs[0], *inputs[1],
                                          port(inputs, 2), y_strides);
        else
            return Call<decltype(op)>::prepare(scope, attrs, cache_name(node), inputs);
    });
}

NodeRun node_run(NodeOp op) {
    switch (op) {
    case NodeOp::conv2d:
    case NodeOp::conv3d:
    case NodeOp::conv2d_transpose:
        return ops::ConvOp::run;
    case NodeOp::activation:
        return ops::ActivationOp::run;
    case NodeOp::softmax:
        return ops::SoftmaxOp::run;
    case NodeOp::binary:
        return ops::BinaryOp::run;
    case NodeOp::pool:
        return ops::PoolOp::run;
    case NodeOp::linear:
        return ops::LinearOp::run;
    case NodeOp::matmul:
        return ops::MatmulOp::run;
    case NodeOp::layer_norm:
        return ops::LayerNormOp::run;
    case NodeOp::batch_norm:
        return ops::BatchNormOp::run;
    case NodeOp::lrn:
        return ops::LrnOp::run;
    case NodeOp::concat:
        return ops::ConcatOp::run;
    case NodeOp::transpose:
        return ops::TransposeOp::run;
    case NodeOp::reshape:
        return ops::ReshapeOp::run;
    }
    fail(MKC_STATUS_INVALID_ARGUMENT, "unknown operator ", static_cast<int>(op));
}

} // namespace mkc::graph
