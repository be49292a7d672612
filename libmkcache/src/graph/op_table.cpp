// The operator table's rows (graph/op_table.hpp) and the small adapters
// they are written with: per operator, the params read from the ABI, the
// attributes its ops/ family takes, and the call of its reference kernel.
#include "graph/op_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "api/struct_size.hpp"
#include "common/error.hpp"
#include "graph/views.hpp"
#include "layout/layout.hpp"
#include "ops/attrs.hpp"
#include "ops/activation.hpp"
#include "ops/batch_norm.hpp"
#include "ops/binary.hpp"
#include "ops/conv.hpp"
#include "ops/layer_norm.hpp"
#include "ops/lrn.hpp"
#include "ops/matmul.hpp"
#include "ops/pool.hpp"
#include "ops/quantize.hpp"
#include "ops/quantized.hpp"
#include "ops/reduce.hpp"
#include "ops/resize.hpp"
#include "ops/shape_ops.hpp"
#include "ops/softmax.hpp"
#include "reference/kernels.hpp"

namespace mkc::graph {

namespace {

using ops::ValueDesc;

// ------------------------------------------------------------ ABI params

template <typename T, typename = void> struct has_name : std::false_type {};
template <typename T>
struct has_name<T, std::void_t<decltype(std::declval<T &>().name)>> : std::true_type {};

// A params struct of the caller's: sized (older layouts read over the
// defaults), its name copied out, the copy's name cleared (the node keeps
// its own).
template <typename T>
T abi_params(const void *params, const char *op, std::string &name, const char *call) {
    require(params != nullptr, call, " (", op, "): params is NULL");
    T older;
    T p = api::sized_params(op, *static_cast<const T *>(params), older);
    if constexpr (has_name<T>::value) {
        name = p.name ? p.name : "";
        p.name = nullptr;
    }
    return p;
}

// Operators whose node params are their ABI struct as it is.
template <typename T, const char *Op>
NodeParams read_as_is(const void *params, std::string &name, const char *call) {
    return abi_params<T>(params, Op, name, call);
}

NodeParams read_conv(const char *op, const void *params, std::string &name, const char *call) {
    const auto p = abi_params<mkc_conv_params>(params, op, name, call);
    // A node has no dst to add into: fusion sets sum on a conv whose
    // result an add reads.
    require(p.sum == 0, call, " (", op,
            "): sum must be 0 (add the residual with an add node; fusion merges it)");
    return p;
}
template <const char *Op>
NodeParams read_conv_as(const void *params, std::string &name, const char *call) {
    return read_conv(Op, params, name, call);
}
NodeParams read_linear(const void *params, std::string &name, const char *call) {
    const auto p = abi_params<mkc_linear_params>(params, "linear", name, call);
    require(p.sum == 0, call,
            " (linear): sum must be 0 (add the residual with an add node; fusion merges it)");
    return p;
}

NodeParams read_activation(const void *params, std::string &name, const char *call) {
    const auto p = abi_params<mkc_activation_params>(params, "activation", name, call);
    return ActivationParams{p.kind, p.alpha, p.beta};
}
NodeParams read_softmax(const void *params, std::string &name, const char *call) {
    const auto p = abi_params<mkc_softmax_params>(params, "softmax", name, call);
    return SoftmaxParams{p.axis, p.log != 0};
}
NodeParams read_binary(const void *params, std::string &name, const char *call) {
    return BinaryParams{abi_params<mkc_binary_params>(params, "binary", name, call).kind};
}
NodeParams read_concat(const void *params, std::string &name, const char *call) {
    return ConcatParams{abi_params<mkc_concat_params>(params, "concat", name, call).axis};
}
NodeParams read_transpose(const void *params, std::string &name, const char *call) {
    const auto p = abi_params<mkc_transpose_params>(params, "transpose", name, call);
    require(p.ndims >= 1 && p.ndims <= MKC_MAX_NDIMS, call, " (transpose): ndims must be 1..",
            MKC_MAX_NDIMS, ", got ", p.ndims);
    return TransposeParams{std::vector<int>(p.perm, p.perm + p.ndims)};
}
NodeParams read_no_params(const char *op, const void *params, const char *call) {
    require(params == nullptr, call, " (", op, "): takes no params (pass NULL)");
    return std::monostate{};
}
template <const char *Op>
NodeParams read_none(const void *params, std::string &, const char *call) {
    return read_no_params(Op, params, call);
}

NodeParams read_reshape(const void *params, std::string &name, const char *call) {
    const auto p = abi_params<mkc_reshape_params>(params, "reshape", name, call);
    require(p.ndims >= 1 && p.ndims <= MKC_MAX_NDIMS, call, " (reshape): ndims must be 1..",
            MKC_MAX_NDIMS, ", got ", p.ndims);
    return ReshapeParams{std::vector<int64_t>(p.dims, p.dims + p.ndims)};
}

// ------------------------------------------------------------ param traits

template <typename T> mkc_layout data_format_of(const NodeParams &p) {
    return std::get<T>(p).data_format;
}
template <> mkc_layout data_format_of<mkc_quantized_conv_params>(const NodeParams &p) {
    return std::get<mkc_quantized_conv_params>(p).conv.data_format;
}

const int64_t *conv_stride(const NodeParams &p, bool &global) {
    global = false;
    return std::get<mkc_conv_params>(p).stride;
}
const int64_t *pool_stride(const NodeParams &p, bool &global) {
    const auto &pool = std::get<mkc_pool_params>(p);
    global = pool.global != 0;
    return pool.stride;
}

template <typename T> bool set_activation_of(NodeParams &params, const ActivationParams &a) {
    auto &p = std::get<T>(params);
    if (p.activation != MKC_ACTIVATION_NONE)
        return false;
    p.activation = a.kind;
    p.activation_alpha = a.alpha;
    p.activation_beta = a.beta;
    return true;
}

// A convolution with a fused sum reads its residual at port 3.
int conv_residual(const Node &node) {
    return std::get<mkc_conv_params>(node.params).sum != 0 && node.inputs.size() > 3 ? 3
                                                                                      : kNoValue;
}
int no_residual(const Node &) { return kNoValue; }
// A linear layer with a fused sum reads its residual at port 3.
int linear_residual(const Node &node) {
    return std::get<mkc_linear_params>(node.params).sum != 0 && node.inputs.size() > 3 ? 3
                                                                                        : kNoValue;
}
// A matmul's addend port, free while no activation follows the product.
int matmul_addend_port(const Node &node) {
    return std::get<mkc_matmul_params>(node.params).activation == MKC_ACTIVATION_NONE ? 3
                                                                                     : kNoValue;
}
// An 8-bit matmul's at port 8, for a float32 result.
int quantized_matmul_addend_port(const Node &node) {
    const auto &p = std::get<mkc_quantized_matmul_params>(node.params);
    return p.activation == MKC_ACTIVATION_NONE && p.dst_dtype == MKC_DTYPE_F32 ? 8 : kNoValue;
}
// A quantized linear layer's at port 8.
int quantized_linear_residual(const Node &node) {
    return std::get<mkc_quantized_linear_params>(node.params).sum != 0 &&
                   node.inputs.size() > ops::kQResidual
               ? ops::kQResidual
               : kNoValue;
}
// A quantized convolution's at port 8.
int quantized_conv_residual(const Node &node) {
    return std::get<mkc_quantized_conv_params>(node.params).conv.sum != 0 &&
                   node.inputs.size() > ops::kQResidual
               ? ops::kQResidual
               : kNoValue;
}

bool transpose_view(const Node &node, const ValueDesc &src, const ValueDesc &,
                    ValueDesc &result) {
    return transposed_view(src, std::get<TransposeParams>(node.params).perm, result);
}
const std::vector<int> *transpose_perm(const Node &node) {
    return &std::get<TransposeParams>(node.params).perm;
}
bool reshape_view(const Node &, const ValueDesc &src, const ValueDesc &out, ValueDesc &result) {
    if (!row_major_bytes(src))
        return false;
    result = ops::plain_value(src.dtype, MKC_LAYOUT_CHANNELS_FIRST, out.dims);
    return true;
}

// ---------------------------------------------------------------- phases

// The node's params struct as the phases read it: a program's nodes are
// inference (never training), named by Node::name.
template <typename P> P inference(P p) {
    p.training = 0;
    p.name = nullptr;
    return p;
}

const char *cache_name(const Node &node) { return node.name.empty() ? nullptr : node.name.c_str(); }

const ValueDesc *port(const NodeInputs &in, size_t i) { return i < in.size() ? in[i] : nullptr; }

std::vector<ValueDesc> one(ValueDesc v) { return {std::move(v)}; }

std::vector<ValueDesc> all_inputs(const NodeInputs &in) {
    std::vector<ValueDesc> v;
    for (const ValueDesc *d : in)
        v.push_back(*d);
    return v;
}

// Per operator, `with(node, inputs, f)` calls f(family, attributes) with
// its ops/ family and the attributes it takes (which may refer to locals of
// `with`, so they live only for the call).
template <int Rank, bool Transposed> struct Conv {
    template <typename F> static auto with(const Node &n, const NodeInputs &, F &&f) {
        const mkc_conv_params p = inference(std::get<mkc_conv_params>(n.params));
        return f(ops::ConvOp{}, ops::ConvAttrs(p, Rank, Transposed, false));
    }
};
struct Activation {
    template <typename F> static auto with(const Node &n, const NodeInputs &, F &&f) {
        const auto &p = std::get<ActivationParams>(n.params);
        return f(ops::ActivationOp{}, ops::ActivationAttrs{p.kind, p.alpha, p.beta});
    }
};
struct Softmax {
    template <typename F> static auto with(const Node &n, const NodeInputs &, F &&f) {
        const auto &p = std::get<SoftmaxParams>(n.params);
        return f(ops::SoftmaxOp{}, ops::SoftmaxAttrs{p.axis, p.log});
    }
};
struct Binary {
    template <typename F> static auto with(const Node &n, const NodeInputs &, F &&f) {
        return f(ops::BinaryOp{}, ops::BinaryAttrs{std::get<BinaryParams>(n.params).kind});
    }
};
struct Pool {
    template <typename F> static auto with(const Node &n, const NodeInputs &in, F &&f) {
        const mkc_pool_params p = inference(std::get<mkc_pool_params>(n.params));
        return f(ops::PoolOp{}, ops::PoolAttrs(p, static_cast<int>(in[0]->dims.size()), false));
    }
};
struct Linear {
    template <typename F> static auto with(const Node &n, const NodeInputs &, F &&f) {
        const mkc_linear_params p = inference(std::get<mkc_linear_params>(n.params));
        return f(ops::LinearOp{}, ops::LinearAttrs(p, false));
    }
};
struct Matmul {
    template <typename F> static auto with(const Node &n, const NodeInputs &, F &&f) {
        mkc_matmul_params p = std::get<mkc_matmul_params>(n.params);
        p.name = nullptr;
        return f(ops::MatmulOp{}, ops::MatmulAttrs{p});
    }
};
struct LayerNorm {
    template <typename F> static auto with(const Node &n, const NodeInputs &, F &&f) {
        const mkc_layer_norm_params p = inference(std::get<mkc_layer_norm_params>(n.params));
        return f(ops::LayerNormOp{}, ops::LayerNormAttrs(p, false));
    }
};
struct BatchNorm {
    template <typename F> static auto with(const Node &n, const NodeInputs &, F &&f) {
        const mkc_batch_norm_params p = inference(std::get<mkc_batch_norm_params>(n.params));
        return f(ops::BatchNormOp{}, ops::BatchNormAttrs(p, false));
    }
};
struct Lrn {
    template <typename F> static auto with(const Node &n, const NodeInputs &, F &&f) {
        const mkc_lrn_params p = inference(std::get<mkc_lrn_params>(n.params));
        return f(ops::LrnOp{}, ops::LrnAttrs(p, false));
    }
};
struct Concat {
    template <typename F> static auto with(const Node &n, const NodeInputs &, F &&f) {
        return f(ops::ConcatOp{}, ops::ConcatAttrs{std::get<ConcatParams>(n.params).axis});
    }
};
struct Transpose {
    template <typename F> static auto with(const Node &n, const NodeInputs &, F &&f) {
        const auto &p = std::get<TransposeParams>(n.params);
        return f(ops::TransposeOp{},
                 ops::TransposeAttrs{static_cast<int>(p.perm.size()), p.perm.data()});
    }
};
struct Reduce {
    template <typename F> static auto with(const Node &n, const NodeInputs &in, F &&f) {
        const auto &p = std::get<mkc_reduce_params>(n.params);
        return f(ops::ReduceOp{},
                 ops::reduce_attrs(p, static_cast<int>(caller_dims(*in[0]).size())));
    }
};
struct Reshape {
    template <typename F> static auto with(const Node &n, const NodeInputs &in, F &&f) {
        // A 0 takes the input's dim at that place (so a graph with a batch
        // bound at run time can flatten); the rest is the eager reshape's.
        std::vector<int64_t> dims = std::get<ReshapeParams>(n.params).dims;
        const Dims src = caller_dims(*in[0]);
        for (size_t i = 0; i < dims.size(); ++i)
            if (dims[i] == 0 && i < src.size())
                dims[i] = src[i];
        return f(ops::ReshapeOp{}, ops::ReshapeAttrs{static_cast<int>(dims.size()), dims.data()});
    }
};

// resize's geometry (below) gives the result's dims.
struct ResizeGeometry {
    Dims out;                    // caller order
    std::vector<double> lengths; // per axis: the extent its coordinates map with
};
ResizeGeometry resize_geometry(const Node &node, const Dims &src);

struct Resize {
    template <typename F> static auto with(const Node &n, const NodeInputs &in, F &&f) {
        const Dims out =
            layout::to_onednn_order(resize_geometry(n, caller_dims(*in[0])).out, in[0]->layout);
        ops::ResizeAttrs a;
        a.mode = std::get<mkc_resize_params>(n.params).mode;
        a.spatial = static_cast<int>(out.size()) - 2;
        for (int i = 0; i < a.spatial && i < 3; ++i)
            a.out[i] = out[static_cast<size_t>(2 + i)];
        return f(ops::ResizeOp{}, a);
    }
};

// The phases' arguments after the attributes, by family: inputs as the
// family's functions take them (optional ones as pointers).
template <typename Op> struct Call {
    // One input, and a cache name of its own.
    static std::vector<ValueDesc> infer(const typename Op::Attrs &a, const NodeInputs &in) {
        return one(Op::infer(a, *in[0]));
    }
    static ops::Prepared prepare(const CacheScope &s, const typename Op::Attrs &a, const char *n,
                                 const NodeInputs &in, const Dims *) {
        return Op::prepare(s, a, n, *in[0]);
    }
};

// A required pair and an optional bias.
template <typename Op> struct Biased {
    static std::vector<ValueDesc> infer(const typename Op::Attrs &a, const NodeInputs &in) {
        return one(Op::infer(a, *in[0], *in[1], port(in, 2)));
    }
    static ops::Prepared prepare(const CacheScope &s, const typename Op::Attrs &a, const char *n,
                                 const NodeInputs &in, const Dims *) {
        return Op::prepare(s, a, n, *in[0], *in[1], port(in, 2));
    }
};
template <> struct Call<ops::ConvOp> {
    static std::vector<ValueDesc> infer(const ops::ConvAttrs &a, const NodeInputs &in) {
        return one(ops::ConvOp::infer(a, *in[0], *in[1], port(in, 2)));
    }
    static ops::Prepared prepare(const CacheScope &s, const ops::ConvAttrs &a, const char *n,
                                 const NodeInputs &in, const Dims *y_strides) {
        return ops::ConvOp::prepare(s, a, n, *in[0], *in[1], port(in, 2), y_strides);
    }
};
template <> struct Call<ops::LinearOp> : Biased<ops::LinearOp> {};

template <> struct Call<ops::MatmulOp> {
    static std::vector<ValueDesc> infer(const ops::MatmulAttrs &a, const NodeInputs &in) {
        return one(ops::MatmulOp::infer(a, *in[0], *in[1], port(in, 2), port(in, 3)));
    }
    static ops::Prepared prepare(const CacheScope &s, const ops::MatmulAttrs &a, const char *n,
                                 const NodeInputs &in, const Dims *y_strides) {
        return ops::MatmulOp::prepare(s, a, n, *in[0], *in[1], port(in, 2), port(in, 3),
                                      y_strides);
    }
};

template <> struct Call<ops::BinaryOp> {
    static std::vector<ValueDesc> infer(const ops::BinaryAttrs &a, const NodeInputs &in) {
        return one(ops::BinaryOp::infer(a, *in[0], *in[1]));
    }
    static ops::Prepared prepare(const CacheScope &s, const ops::BinaryAttrs &a, const char *n,
                                 const NodeInputs &in, const Dims *) {
        return ops::BinaryOp::prepare(s, a, n, *in[0], *in[1]);
    }
};

template <> struct Call<ops::LayerNormOp> {
    static std::vector<ValueDesc> infer(const ops::LayerNormAttrs &a, const NodeInputs &in) {
        return one(ops::LayerNormOp::infer(a, *in[0], port(in, 1), port(in, 2)));
    }
    static ops::Prepared prepare(const CacheScope &s, const ops::LayerNormAttrs &a, const char *n,
                                 const NodeInputs &in, const Dims *) {
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
                                 const NodeInputs &in, const Dims *) {
        // All of the forward's outputs: the program binds dst and leaves
        // the training-only ones null.
        return ops::BatchNormOp::prepare(s, a, n, *in[0], in[1], in[2], port(in, 3), port(in, 4));
    }
};

template <> struct Call<ops::ConcatOp> {
    static std::vector<ValueDesc> infer(const ops::ConcatAttrs &a, const NodeInputs &in) {
        return one(ops::ConcatOp::infer(a, all_inputs(in)));
    }
    static ops::Prepared prepare(const CacheScope &s, const ops::ConcatAttrs &a, const char *n,
                                 const NodeInputs &in, const Dims *) {
        return ops::ConcatOp::prepare(s, a, n, all_inputs(in));
    }
};

// The quantized operators' eight ports, absent ones (and those past the
// inputs given) null.
ops::QuantizedInputs quantized_inputs(const NodeInputs &in) {
    ops::QuantizedInputs q{};
    for (size_t i = 0; i < q.size() && i < in.size(); ++i)
        q[i] = in[i];
    return q;
}
template <typename Op> struct QuantizedCall {
    static ops::Prepared prepare(const CacheScope &s, const typename Op::Attrs &a, const char *n,
                                 const NodeInputs &in, const Dims *) {
        return Op::prepare(s, a, n, quantized_inputs(in));
    }
};
template <> struct Call<ops::QuantizedConvOp> : QuantizedCall<ops::QuantizedConvOp> {
    static std::vector<ValueDesc> infer(const ops::QuantizedConvAttrs &a, const NodeInputs &in) {
        return one(ops::quantized_conv_infer(a.p, quantized_inputs(in)));
    }
};
template <> struct Call<ops::QuantizedLinearOp> : QuantizedCall<ops::QuantizedLinearOp> {
    static std::vector<ValueDesc> infer(const ops::QuantizedLinearAttrs &a, const NodeInputs &in) {
        return one(ops::quantized_linear_infer(a.p, quantized_inputs(in)));
    }
};
template <> struct Call<ops::QuantizedMatmulOp> {
    static std::vector<ValueDesc> infer(const ops::QuantizedMatmulAttrs &a, const NodeInputs &in) {
        return one(ops::quantized_matmul_infer(a.p, quantized_inputs(in)));
    }
    static ops::Prepared prepare(const CacheScope &s, const ops::QuantizedMatmulAttrs &a,
                                 const char *n, const NodeInputs &in, const Dims *y_strides) {
        return ops::QuantizedMatmulOp::prepare(s, a, n, quantized_inputs(in), y_strides);
    }
};
struct QuantizedMatmul {
    template <typename F> static auto with(const Node &n, const NodeInputs &, F &&f) {
        return f(ops::QuantizedMatmulOp{},
                 ops::QuantizedMatmulAttrs{std::get<mkc_quantized_matmul_params>(n.params)});
    }
};
ops::Verdict quantized_matmul_onednn_supports(const Node &node, const NodeInputs &in) {
    return ops::quantized_matmul_onednn_supports(
        std::get<mkc_quantized_matmul_params>(node.params), quantized_inputs(in));
}
template <> struct Call<ops::QuantizeOp> {
    static std::vector<ValueDesc> infer(const ops::QuantizeAttrs &, const NodeInputs &) {
        return {}; // the row's own inference (infer_quantize) serves
    }
    static ops::Prepared prepare(const CacheScope &s, const ops::QuantizeAttrs &a, const char *n,
                                 const NodeInputs &in, const Dims *) {
        return ops::QuantizeOp::prepare(s, a, n, *in[0], *in[1], port(in, 2));
    }
};
struct Quantize {
    template <typename F> static auto with(const Node &n, const NodeInputs &, F &&f) {
        return f(ops::QuantizeOp{}, ops::QuantizeAttrs{std::get<mkc_quantize_params>(n.params)});
    }
};
ops::Verdict quantize_onednn_supports(const Node &node, const NodeInputs &in) {
    return ops::quantize_onednn_supports(std::get<mkc_quantize_params>(node.params), *in[0],
                                         *in[1]);
}
struct QuantizedConv {
    template <typename F> static auto with(const Node &n, const NodeInputs &, F &&f) {
        return f(ops::QuantizedConvOp{},
                 ops::QuantizedConvAttrs{std::get<mkc_quantized_conv_params>(n.params)});
    }
};
struct QuantizedLinear {
    template <typename F> static auto with(const Node &n, const NodeInputs &, F &&f) {
        return f(ops::QuantizedLinearOp{},
                 ops::QuantizedLinearAttrs{std::get<mkc_quantized_linear_params>(n.params)});
    }
};
ops::Verdict quantized_conv_onednn_supports(const Node &node, const NodeInputs &in) {
    return ops::quantized_conv_onednn_supports(std::get<mkc_quantized_conv_params>(node.params),
                                               quantized_inputs(in));
}
NodeParams read_quantized_conv(const void *params, std::string &name, const char *call) {
    const auto p = abi_params<mkc_quantized_conv_params>(params, "quantized_conv2d", name, call);
    require(p.conv.struct_size == sizeof(mkc_conv_params), call,
            " (quantized_conv2d): conv.struct_size is ", p.conv.struct_size,
            "; initialise params with mkc_quantized_conv_params_init");
    return p;
}

// transpose and reshape have no cache name of their own (a reorder's).
template <typename Op> struct Unnamed {
    static std::vector<ValueDesc> infer(const typename Op::Attrs &a, const NodeInputs &in) {
        return one(Op::infer(a, *in[0]));
    }
    static ops::Prepared prepare(const CacheScope &s, const typename Op::Attrs &a, const char *,
                                 const NodeInputs &in, const Dims *) {
        return Op::prepare(s, a, *in[0]);
    }
};
template <> struct Call<ops::TransposeOp> : Unnamed<ops::TransposeOp> {};
template <> struct Call<ops::ReduceOp> {
    static std::vector<ValueDesc> infer(const ops::ReduceAttrs &a, const NodeInputs &in) {
        return one(ops::ReduceOp::infer(a, *in[0]));
    }
    static ops::Prepared prepare(const CacheScope &s, const ops::ReduceAttrs &a, const char *n,
                                 const NodeInputs &in, const Dims *) {
        return ops::ReduceOp::prepare(s, a, n, *in[0]);
    }
};
template <> struct Call<ops::ReshapeOp> : Unnamed<ops::ReshapeOp> {};

template <typename W> std::vector<ValueDesc> infer_with(const Node &node, const NodeInputs &in) {
    return W::with(node, in, [&](auto op, const auto &attrs) {
        return Call<decltype(op)>::infer(attrs, in);
    });
}

template <typename W>
ops::Prepared prepare_with(const CacheScope &scope, const Node &node, const NodeInputs &in,
                           const Dims *y_strides) {
    return W::with(node, in, [&](auto op, const auto &attrs) {
        return Call<decltype(op)>::prepare(scope, attrs, cache_name(node), in, y_strides);
    });
}

ops::Prepared prepare_linear_on(const CacheScope &scope, const Node &node,
                                const NodeInputs &in, ops::LinearKernel kernel, bool row_parts) {
    return Linear::with(node, in, [&](ops::LinearOp, const ops::LinearAttrs &attrs) {
        return ops::LinearOp::prepare_on(scope, attrs, cache_name(node), *in[0], *in[1],
                                         port(in, 2), kernel, row_parts);
    });
}

template <typename T, typename = void> struct has_each : std::false_type {};
template <typename T>
struct has_each<T, std::void_t<decltype(std::declval<const T &>().each(
                       std::declval<ops::attrs_detail::Count &>()))>> : std::true_type {};

template <typename W> std::string attrs_text_with(const Node &node, const NodeInputs &in) {
    return W::with(node, in, [&](auto, const auto &attrs) {
        std::string s;
        if constexpr (has_each<std::decay_t<decltype(attrs)>>::value)
            ops::append_attrs_name(s, attrs);
        return s;
    });
}

std::string list_text(const char *tag, const std::vector<int64_t> &v) {
    std::string s = std::string(":") + tag;
    for (size_t i = 0; i < v.size(); ++i)
        s += (i ? "," : "") + std::to_string(v[i]);
    return s;
}
std::string transpose_text(const Node &node, const NodeInputs &) {
    const auto &perm = std::get<TransposeParams>(node.params).perm;
    return list_text("perm", std::vector<int64_t>(perm.begin(), perm.end()));
}
std::string reshape_text(const Node &node, const NodeInputs &) {
    return list_text("dims", std::get<ReshapeParams>(node.params).dims);
}

// ------------------------------------------------------------- flops

int64_t product(const Dims &d, size_t from = 0, size_t to = SIZE_MAX) {
    int64_t n = 1;
    for (size_t i = from; i < d.size() && i < to; ++i)
        n *= d[i];
    return n;
}
// A convolution: each output element sums C/groups x kernel products (a
// transposed one: each input element spreads over C_out/groups x kernel).
// Dims in oneDNN's order; the weights are the caller's.
template <bool Transposed>
int64_t conv_flops(const Node &, const NodeInputs &in, const ValueDesc &out) {
    const Dims &w = in[1]->dims;
    const int64_t kernel = product(w, 2);
    if (Transposed)
        return 2 * product(in[0]->dims) * w[1] * kernel;
    return 2 * product(out.dims) * w[1] * kernel;
}
// src [..., K] times weights [N, K]: the result's elements times K.
int64_t linear_flops(const Node &, const NodeInputs &in, const ValueDesc &out) {
    return 2 * product(out.dims) * in[1]->dims.back();
}
template <typename P>
int64_t matmul_flops(const Node &node, const NodeInputs &in, const ValueDesc &out) {
    const Dims a = caller_dims(*in[0]);
    const bool ta = std::get<P>(node.params).transpose_a != 0;
    const int64_t k = a.size() < 2 ? a.back() : ta ? a[a.size() - 2] : a.back();
    return 2 * product(out.dims) * k;
}

// ------------------------------------------------------ reference kernels

const float *in_f(const ReferenceCall &c, size_t i) {
    return static_cast<const float *>(c.buffers.in[i]);
}
const float *opt_f(const ReferenceCall &c, size_t i) {
    return i < c.in.size() && c.buffers.in[i] ? in_f(c, i) : nullptr;
}
float *out_f(const ReferenceCall &c) { return static_cast<float *>(c.buffers.out[0]); }
int axis_of(int axis, size_t rank) { return axis < 0 ? axis + static_cast<int>(rank) : axis; }

template <bool Transposed> void ref_conv(const ReferenceCall &c) {
    reference::conv(std::get<mkc_conv_params>(c.node.params), Transposed, c.channels_last, c.in[0],
                    in_f(c, 0), c.in[1], in_f(c, 1), opt_f(c, 2), c.out, out_f(c));
}
void ref_activation(const ReferenceCall &c) {
    const auto &p = std::get<ActivationParams>(c.node.params);
    reference::activation(p.kind, p.alpha, p.beta, in_f(c, 0), out_f(c), dims_product(c.out));
}
void ref_softmax(const ReferenceCall &c) {
    const auto &p = std::get<SoftmaxParams>(c.node.params);
    reference::softmax(c.out, axis_of(p.axis, c.out.size()), p.log, in_f(c, 0), out_f(c));
}
void ref_binary(const ReferenceCall &c) {
    reference::binary(std::get<BinaryParams>(c.node.params).kind, c.in[0], in_f(c, 0), c.in[1],
                      in_f(c, 1), c.out, out_f(c));
}
void ref_pool(const ReferenceCall &c) {
    reference::pool(std::get<mkc_pool_params>(c.node.params), c.channels_last, c.in[0], in_f(c, 0),
                    c.out, out_f(c));
}
void ref_linear(const ReferenceCall &c) {
    const auto &p = std::get<mkc_linear_params>(c.node.params);
    const int64_t in = c.in[0].back(), out = c.in[1][0];
    if (!p.sum) {
        reference::linear(dims_product(c.in[0]) / in, in, out, in_f(c, 0), in_f(c, 1), opt_f(c, 2),
                          p.activation, p.activation_alpha, p.activation_beta, out_f(c));
        return;
    }
    // The output buffer holds the residual: added before the activation.
    float *y = out_f(c);
    const std::vector<float> residual(y, y + dims_product(c.out));
    reference::linear(dims_product(c.in[0]) / in, in, out, in_f(c, 0), in_f(c, 1), opt_f(c, 2),
                      MKC_ACTIVATION_NONE, 0, 0, y);
    for (size_t i = 0; i < residual.size(); ++i) {
        const float sum = y[i] + residual[i];
        y[i] = p.activation == MKC_ACTIVATION_NONE
                   ? sum
                   : reference::activate(p.activation, p.activation_alpha, p.activation_beta, sum);
    }
}
void ref_matmul(const ReferenceCall &c) {
    const float *addend = opt_f(c, 3);
    reference::matmul(std::get<mkc_matmul_params>(c.node.params), c.in[0], in_f(c, 0), c.in[1],
                      in_f(c, 1), opt_f(c, 2), c.out, out_f(c), addend ? &c.in[3] : nullptr,
                      addend);
}
void ref_layer_norm(const ReferenceCall &c) {
    const auto &p = std::get<mkc_layer_norm_params>(c.node.params);
    reference::layer_norm(c.out, axis_of(p.begin_norm_axis, c.out.size()), p.epsilon, in_f(c, 0),
                          opt_f(c, 1), opt_f(c, 2), out_f(c));
}
void ref_batch_norm(const ReferenceCall &c) {
    const auto &p = std::get<mkc_batch_norm_params>(c.node.params);
    reference::batch_norm(c.out, c.channels_last, p.epsilon, in_f(c, 0), in_f(c, 1), in_f(c, 2),
                          opt_f(c, 3), opt_f(c, 4), out_f(c));
}
void ref_lrn(const ReferenceCall &c) {
    const auto &p = std::get<mkc_lrn_params>(c.node.params);
    reference::lrn(c.out, c.channels_last, p.size, p.alpha, p.beta, p.k, in_f(c, 0), out_f(c));
}
void ref_concat(const ReferenceCall &c) {
    std::vector<const float *> srcs;
    for (size_t i = 0; i < c.in.size(); ++i)
        srcs.push_back(in_f(c, i));
    reference::concat(axis_of(std::get<ConcatParams>(c.node.params).axis, c.out.size()), c.in, srcs,
                      out_f(c));
}
void ref_transpose(const ReferenceCall &c) {
    reference::transpose(c.in[0], std::get<TransposeParams>(c.node.params).perm,
                         dtype_size(c.dtypes[0]), c.buffers.in[0], c.buffers.out[0]);
}
void ref_reshape(const ReferenceCall &c) {
    std::memcpy(c.buffers.out[0], c.buffers.in[0],
                static_cast<size_t>(dims_product(c.out)) * dtype_size(c.dtypes[0]));
}

// Element-wise operators without oneDNN phases: float32 in, the same
// shape, layout label and dtype out.
template <const char *Op>
std::vector<ValueDesc> infer_float_elementwise(const Node &, const NodeInputs &in) {
    const ValueDesc &x = *in[0];
    require(x.dtype == MKC_DTYPE_F32, Op, ": src must be float32, got ", dtype_name(x.dtype));
    return {ops::plain_value(x.dtype, x.layout, x.dims)};
}
std::string no_attrs_text(const Node &, const NodeInputs &) { return {}; }

void ref_erf(const ReferenceCall &c) { reference::erf(in_f(c, 0), out_f(c), dims_product(c.out)); }
void ref_round(const ReferenceCall &c) { reference::round(in_f(c, 0), out_f(c), dims_product(c.out)); }

// gather: data of any dtype, int32 or int64 indices (the row's dtypes);
// the result channels-first, data's dims around the indices' at the axis.
int gather_axis(const Node &node, size_t rank) {
    const int axis = std::get<mkc_gather_params>(node.params).axis;
    const int r = static_cast<int>(rank);
    require(axis >= -r && axis < r, "gather: axis ", axis, " is out of range for rank ", r);
    return axis < 0 ? axis + r : axis;
}
std::vector<ValueDesc> infer_gather(const Node &node, const NodeInputs &in) {
    const Dims data = caller_dims(*in[0]), indices = caller_dims(*in[1]);
    const int axis = gather_axis(node, data.size());
    Dims out(data.begin(), data.begin() + axis);
    out.insert(out.end(), indices.begin(), indices.end());
    out.insert(out.end(), data.begin() + axis + 1, data.end());
    require(out.size() <= MKC_MAX_NDIMS, "gather: the result's rank ", out.size(),
            " is past ", MKC_MAX_NDIMS);
    check_dims("gather: the result", static_cast<int>(out.size()), out.data(), in[0]->dtype);
    return {ops::plain_value(in[0]->dtype, MKC_LAYOUT_CHANNELS_FIRST, out)};
}

// gather_elements: indices of data's rank, no larger off the axis; the
// result has the indices' dims and data's dtype.
std::vector<ValueDesc> infer_gather_elements(const Node &node, const NodeInputs &in) {
    const Dims data = caller_dims(*in[0]), indices = caller_dims(*in[1]);
    require(data.size() == indices.size(), "gather_elements: indices have rank ", indices.size(),
            ", data ", data.size(), " (the same rank)");
    const int axis = gather_axis(node, data.size());
    for (size_t i = 0; i < data.size(); ++i)
        require(static_cast<int>(i) == axis || indices[i] <= data[i],
                "gather_elements: indices of ", shape_text(indices), " are larger than data of ",
                shape_text(data), " off the axis (", axis, ")");
    return {ops::plain_value(in[0]->dtype, MKC_LAYOUT_CHANNELS_FIRST, indices)};
}
void ref_gather_elements(const ReferenceCall &c) {
    reference::gather_elements(c.in[0], c.buffers.in[0], gather_axis(c.node, c.in[0].size()),
                               c.in[1], c.buffers.in[1], c.dtypes[1] == MKC_DTYPE_S64,
                               dtype_size(c.dtypes[0]), c.buffers.out[0]);
}

// gather_nd: ONNX's GatherND (mkcache.h).
Dims gather_nd_dims(const Node &node, const Dims &data, const Dims &indices) {
    const int b = std::get<mkc_gather_nd_params>(node.params).batch_dims;
    const int r = static_cast<int>(data.size()), q = static_cast<int>(indices.size());
    require(b >= 0 && b < std::min(r, q), "gather_nd: batch_dims must be 0..",
            std::min(r, q) - 1, " (below both ranks), got ", b);
    for (int i = 0; i < b; ++i)
        require(data[static_cast<size_t>(i)] == indices[static_cast<size_t>(i)],
                "gather_nd: the batch dims of data ", shape_text(data), " and indices ",
                shape_text(indices), " differ");
    const int64_t k = indices.back();
    require(k >= 1 && k <= r - b, "gather_nd: indices' last dim (", k, ") must be 1..", r - b,
            " (data's rank less batch_dims)");
    Dims out(indices.begin(), indices.end() - 1);
    out.insert(out.end(), data.begin() + b + k, data.end());
    require(out.size() <= MKC_MAX_NDIMS, "gather_nd: the result's rank ", out.size(),
            " is past ", MKC_MAX_NDIMS);
    if (out.empty())
        out.push_back(1);
    return out;
}
std::vector<ValueDesc> infer_gather_nd(const Node &node, const NodeInputs &in) {
    const Dims out = gather_nd_dims(node, caller_dims(*in[0]), caller_dims(*in[1]));
    check_dims("gather_nd: the result", static_cast<int>(out.size()), out.data(), in[0]->dtype);
    return {ops::plain_value(in[0]->dtype, MKC_LAYOUT_CHANNELS_FIRST, out)};
}
std::string gather_nd_text(const Node &node, const NodeInputs &) {
    return ":batch" + std::to_string(std::get<mkc_gather_nd_params>(node.params).batch_dims);
}
void ref_gather_nd(const ReferenceCall &c) {
    reference::gather_nd(c.in[0], c.buffers.in[0],
                         std::get<mkc_gather_nd_params>(c.node.params).batch_dims, c.in[1],
                         c.buffers.in[1], c.dtypes[1] == MKC_DTYPE_S64, dtype_size(c.dtypes[0]),
                         c.buffers.out[0]);
}

// range: a 1-D sequence whose limit is a dim of `like` plus an offset.
int64_t range_length(const Node &node, const Dims &like) {
    const auto &p = std::get<mkc_range_params>(node.params);
    const int r = static_cast<int>(like.size());
    require(p.axis >= -r && p.axis < r, "range: axis ", p.axis, " is out of range for rank ", r);
    require(std::isfinite(p.start) && std::isfinite(p.limit_offset) && std::isfinite(p.delta),
            "range: start, limit_offset and delta must be finite");
    require(p.delta != 0, "range: delta is 0");
    const double limit = static_cast<double>(like[static_cast<size_t>(axis_of(p.axis, like.size()))]) +
                         p.limit_offset;
    const double n = std::ceil((limit - p.start) / p.delta);
    require(n >= 1, "range: the sequence from ", p.start, " to ", limit, " by ", p.delta,
            " is empty");
    require(n <= static_cast<double>(int64_t{1} << 40), "range: the sequence from ", p.start,
            " to ", limit, " by ", p.delta, " is longer than 2^40");
    // Integers: every value within the dtype (its ends are the extremes).
    const double last = p.start + (n - 1) * p.delta;
    const double bound = p.dtype == MKC_DTYPE_S32 ? 2147483647.0 : 9.2e18;
    require(p.dtype == MKC_DTYPE_F32 || (std::abs(p.start) <= bound && std::abs(last) <= bound),
            "range: the sequence from ", p.start, " to ", last, " leaves ",
            dtype_name(p.dtype), "'s range");
    return static_cast<int64_t>(n);
}
std::vector<ValueDesc> infer_range(const Node &node, const NodeInputs &in) {
    const mkc_dtype dtype = std::get<mkc_range_params>(node.params).dtype;
    require(dtype == MKC_DTYPE_F32 || dtype == MKC_DTYPE_S32 || dtype == MKC_DTYPE_S64,
            "range: dtype must be f32, s32 or s64, got ", static_cast<int>(dtype));
    const Dims out{range_length(node, caller_dims(*in[0]))};
    check_dims("range: the result", 1, out.data(), dtype);
    return {ops::plain_value(dtype, MKC_LAYOUT_CHANNELS_FIRST, out)};
}
std::string range_text(const Node &node, const NodeInputs &) {
    const auto &p = std::get<mkc_range_params>(node.params);
    return ":axis" + std::to_string(p.axis) + ":to_" + dtype_name(p.dtype);
}
void ref_range(const ReferenceCall &c) {
    const auto &p = std::get<mkc_range_params>(c.node.params);
    reference::range(p.start, p.delta, c.out[0], p.dtype, c.buffers.out[0]);
}

Dims broadcast(const std::vector<Dims> &shapes, const char *op); // below

// integer_binary: two int32 or two int64 values, broadcast.
std::vector<ValueDesc> infer_integer_binary(const Node &node, const NodeInputs &in) {
    const mkc_binary_kind kind = std::get<mkc_binary_params>(node.params).kind;
    require(kind >= MKC_BINARY_ADD && kind <= MKC_BINARY_MIN,
            "integer_binary: kind must be ADD, SUB, MUL, DIV, MAX or MIN, got ",
            static_cast<int>(kind));
    require(in[0]->dtype == in[1]->dtype, "integer_binary: a is ", dtype_name(in[0]->dtype),
            ", b ", dtype_name(in[1]->dtype), " (both of one dtype)");
    const Dims out = broadcast({caller_dims(*in[0]), caller_dims(*in[1])}, "integer_binary");
    return {ops::plain_value(in[0]->dtype, MKC_LAYOUT_CHANNELS_FIRST, out)};
}
void ref_integer_binary(const ReferenceCall &c) {
    const mkc_binary_kind kind = std::get<mkc_binary_params>(c.node.params).kind;
    if (c.dtypes[0] == MKC_DTYPE_S64)
        reference::integer_binary(kind, c.in[0], static_cast<const int64_t *>(c.buffers.in[0]),
                                  c.in[1], static_cast<const int64_t *>(c.buffers.in[1]), c.out,
                                  static_cast<int64_t *>(c.buffers.out[0]));
    else
        reference::integer_binary(kind, c.in[0], static_cast<const int32_t *>(c.buffers.in[0]),
                                  c.in[1], static_cast<const int32_t *>(c.buffers.in[1]), c.out,
                                  static_cast<int32_t *>(c.buffers.out[0]));
}
// cast: any dtype in, `to` out; the same dims and label.
std::vector<ValueDesc> infer_cast(const Node &node, const NodeInputs &in) {
    const mkc_dtype to = std::get<mkc_cast_params>(node.params).to;
    require(known_dtype(to), "cast: to must be one of ", dtype_names(), "; got ",
            static_cast<int>(to));
    return {ops::plain_value(to, in[0]->layout, in[0]->dims)};
}
std::string cast_text(const Node &node, const NodeInputs &) {
    return std::string(":to_") + dtype_name(std::get<mkc_cast_params>(node.params).to);
}
void ref_cast(const ReferenceCall &c) {
    reference::cast(c.dtypes[0], c.buffers.in[0], std::get<mkc_cast_params>(c.node.params).to,
                    c.buffers.out[0], dims_product(c.out));
}

// numpy's broadcast of several caller-order shapes; `op` names the caller
// in the error.
Dims broadcast(const std::vector<Dims> &shapes, const char *op) {
    size_t rank = 0;
    for (const Dims &d : shapes)
        rank = std::max(rank, d.size());
    Dims out(rank, 1);
    for (const Dims &d : shapes) {
        for (size_t i = 0; i < d.size(); ++i) {
            int64_t &o = out[rank - d.size() + i];
            if (d[i] != o && d[i] != 1 && o != 1) {
                std::string text;
                for (const Dims &e : shapes)
                    text += (text.empty() ? "" : ", ") + shape_text(e);
                fail(MKC_STATUS_INVALID_ARGUMENT, op, ": shapes ", text, " do not broadcast");
            }
            o = std::max(o, d[i]);
        }
    }
    return out;
}

// where: numpy broadcasting of condition, x and y in their caller orders.
std::vector<ValueDesc> infer_where(const Node &, const NodeInputs &in) {
    const Dims out = broadcast({caller_dims(*in[0]), caller_dims(*in[1]), caller_dims(*in[2])},
                               "where");
    return {ops::plain_value(MKC_DTYPE_F32, MKC_LAYOUT_CHANNELS_FIRST, out)};
}

// expand: src broadcast with the params' dims, src's dtype.
Dims expand_target(const Node &node) {
    const auto &p = std::get<mkc_expand_params>(node.params);
    require(p.ndims >= 1 && p.ndims <= MKC_MAX_NDIMS, "expand: ndims must be 1..",
            MKC_MAX_NDIMS, ", got ", p.ndims);
    return Dims(p.dims, p.dims + p.ndims);
}
std::vector<ValueDesc> infer_expand(const Node &node, const NodeInputs &in) {
    const Dims target = expand_target(node);
    for (int64_t d : target)
        require(d >= 1, "expand: dims must be >= 1, got ", shape_text(target));
    const Dims out = broadcast({caller_dims(*in[0]), target}, "expand");
    check_dims("expand: the result", static_cast<int>(out.size()), out.data(), in[0]->dtype);
    return {ops::plain_value(in[0]->dtype, MKC_LAYOUT_CHANNELS_FIRST, out)};
}
void ref_expand(const ReferenceCall &c) {
    reference::expand(c.in[0], c.buffers.in[0], c.out, dtype_size(c.dtypes[0]), c.buffers.out[0]);
}

// compare: a and b of one dtype, broadcast; a bool result.
std::vector<ValueDesc> infer_compare(const Node &node, const NodeInputs &in) {
    const mkc_compare_kind kind = std::get<mkc_compare_params>(node.params).kind;
    require(kind >= MKC_COMPARE_EQUAL && kind <= MKC_COMPARE_GREATER_EQUAL,
            "compare: kind must be EQUAL, LESS, LESS_EQUAL, GREATER or GREATER_EQUAL, got ",
            static_cast<int>(kind));
    require(in[0]->dtype == in[1]->dtype, "compare: a is ", dtype_name(in[0]->dtype), ", b ",
            dtype_name(in[1]->dtype), " (both of one dtype)");
    const Dims out = broadcast({caller_dims(*in[0]), caller_dims(*in[1])}, "compare");
    return {ops::plain_value(MKC_DTYPE_BOOL, MKC_LAYOUT_CHANNELS_FIRST, out)};
}
void ref_compare(const ReferenceCall &c) {
    reference::compare(std::get<mkc_compare_params>(c.node.params).kind, c.dtypes[0], c.in[0],
                       c.buffers.in[0], c.in[1], c.buffers.in[1], c.out,
                       static_cast<uint8_t *>(c.buffers.out[0]));
}

// logical: and, or, xor of two bool values, broadcast; not of one.
std::vector<ValueDesc> infer_logical(const Node &node, const NodeInputs &in) {
    const mkc_logical_kind kind = std::get<mkc_logical_params>(node.params).kind;
    require(kind >= MKC_LOGICAL_AND && kind <= MKC_LOGICAL_NOT,
            "logical: kind must be AND, OR, XOR or NOT, got ", static_cast<int>(kind));
    const bool unary = kind == MKC_LOGICAL_NOT;
    const bool has_b = in.size() > 1 && in[1] != nullptr;
    require(has_b != unary, "logical: ", unary ? "NOT takes one input" : "AND, OR and XOR take two inputs");
    const Dims out = unary ? caller_dims(*in[0])
                           : broadcast({caller_dims(*in[0]), caller_dims(*in[1])}, "logical");
    return {ops::plain_value(MKC_DTYPE_BOOL, MKC_LAYOUT_CHANNELS_FIRST, out)};
}
void ref_logical(const ReferenceCall &c) {
    const mkc_logical_kind kind = std::get<mkc_logical_params>(c.node.params).kind;
    const bool unary = kind == MKC_LOGICAL_NOT;
    reference::logical(kind, c.in[0], static_cast<const uint8_t *>(c.buffers.in[0]),
                       unary ? c.in[0] : c.in[1],
                       static_cast<const uint8_t *>(c.buffers.in[unary ? 0 : 1]), c.out,
                       static_cast<uint8_t *>(c.buffers.out[0]));
}

void ref_where(const ReferenceCall &c) {
    reference::where(c.in[0], static_cast<const uint8_t *>(c.buffers.in[0]), c.in[1], in_f(c, 1),
                     c.in[2], in_f(c, 2), c.out, out_f(c));
}

// slice: numpy's a[start:end:step] per axis, with ONNX's clamping.
struct SliceGeometry {
    Dims start, step, out;
};
SliceGeometry slice_geometry(const Node &node, const Dims &src) {
    const auto &p = std::get<mkc_slice_params>(node.params);
    const int rank = static_cast<int>(src.size());
    require(p.naxes >= 1 && p.naxes <= rank, "slice: naxes must be 1..", rank, ", got ", p.naxes);
    SliceGeometry g{Dims(src.size(), 0), Dims(src.size(), 1), src};
    std::vector<bool> seen(src.size(), false);
    for (int k = 0; k < p.naxes; ++k) {
        const int axis = p.axes[k];
        require(axis >= -rank && axis < rank, "slice: axis ", axis, " is out of range for rank ",
                rank);
        const size_t a = static_cast<size_t>(axis < 0 ? axis + rank : axis);
        require(!seen[a], "slice: axis ", axis, " is given twice");
        seen[a] = true;
        const int64_t n = src[a], step = p.steps[k];
        require(step != 0, "slice: a step is 0 (axis ", axis, ")");
        int64_t begin = p.starts[k], end = p.ends[k];
        if (begin < 0)
            begin += n;
        if (end < 0)
            end += n;
        if (step > 0) {
            begin = std::clamp<int64_t>(begin, 0, n);
            end = std::clamp<int64_t>(end, 0, n);
        } else {
            begin = std::clamp<int64_t>(begin, 0, n - 1);
            end = std::clamp<int64_t>(end, -1, n - 1);
        }
        const int64_t count = step > 0 ? (end - begin + step - 1) / step
                                       : (begin - end - step - 1) / -step;
        require(count > 0, "slice: axis ", axis, " is empty (start ", p.starts[k], ", end ",
                p.ends[k], ", step ", step, " of ", n, ")");
        g.start[a] = begin;
        g.step[a] = step;
        g.out[a] = count;
    }
    return g;
}
std::vector<ValueDesc> infer_slice(const Node &node, const NodeInputs &in) {
    const SliceGeometry g = slice_geometry(node, caller_dims(*in[0]));
    return {ops::plain_value(in[0]->dtype, MKC_LAYOUT_CHANNELS_FIRST, g.out)};
}
void ref_slice(const ReferenceCall &c) {
    const SliceGeometry g = slice_geometry(c.node, c.in[0]);
    reference::slice(c.in[0], c.buffers.in[0], g.start, g.step, g.out, dtype_size(c.dtypes[0]),
                     c.buffers.out[0]);
}
std::string slice_text(const Node &node, const NodeInputs &) {
    const auto &p = std::get<mkc_slice_params>(node.params);
    std::string s;
    for (int k = 0; k < p.naxes && k < MKC_MAX_NDIMS; ++k)
        s += ":a" + std::to_string(p.axes[k]) + "[" + std::to_string(p.starts[k]) + ":" +
             std::to_string(p.ends[k]) + ":" + std::to_string(p.steps[k]) + "]";
    return s;
}

std::string gather_text(const Node &node, const NodeInputs &) {
    return ":axis" + std::to_string(std::get<mkc_gather_params>(node.params).axis);
}
void ref_gather(const ReferenceCall &c) {
    reference::gather(c.in[0], c.buffers.in[0], gather_axis(c.node, c.in[0].size()), c.in[1],
                      c.buffers.in[1], c.dtypes[1] == MKC_DTYPE_S64, dtype_size(c.dtypes[0]),
                      c.buffers.out[0]);
}

void ref_reduce(const ReferenceCall &c) {
    const auto &p = std::get<mkc_reduce_params>(c.node.params);
    const Dims &src = c.in[0];
    const ops::ReduceAttrs a = ops::reduce_attrs(p, static_cast<int>(src.size()));
    const uint32_t every = (1u << src.size()) - 1;
    reference::reduce(p.kind, src, a.axes ? a.axes : every, in_f(c, 0), out_f(c));
}

// quantize / dequantize: one scale (and zero point) for the tensor, or
// one per index of the axis.
struct QuantizeGeometry {
    int64_t channels = 1, inner = 1;
};
QuantizeGeometry quantize_geometry(const Node &node, const NodeInputs &in, const char *op) {
    const auto &p = std::get<mkc_quantize_params>(node.params);
    const Dims src = caller_dims(*in[0]);
    const int64_t scales = element_count(*in[1]);
    if (in.size() > 2 && in[2])
        require(element_count(*in[2]) == scales, op, ": zero_point has ", element_count(*in[2]),
                " elements, scale ", scales, " (one zero point per scale)");
    QuantizeGeometry g;
    if (scales == 1)
        return g;
    const int rank = static_cast<int>(src.size());
    const int axis = axis_of(p.axis, src.size());
    require(axis >= 0 && axis < rank, op, ": axis ", p.axis, " is out of range for src of rank ",
            rank);
    g.channels = src[static_cast<size_t>(axis)];
    for (int i = axis + 1; i < rank; ++i)
        g.inner *= src[static_cast<size_t>(i)];
    require(in[1]->dims.size() == 1 && scales == g.channels, op, ": scale has ", scales,
            " elements; one, or one per index of axis ", axis, " (", g.channels, ")");
    return g;
}
template <bool Quantize> std::vector<ValueDesc> infer_quantize(const Node &node, const NodeInputs &in) {
    const char *op = Quantize ? "quantize" : "dequantize";
    const bool has_zero = in.size() > 2 && in[2];
    mkc_dtype out = MKC_DTYPE_F32;
    if (Quantize) {
        out = std::get<mkc_quantize_params>(node.params).to;
        require(out == MKC_DTYPE_U8 || out == MKC_DTYPE_S8, "quantize: to must be U8 or S8, got ",
                dtype_name(out));
        if (has_zero)
            require(in[2]->dtype == out, "quantize: zero_point is ", dtype_name(in[2]->dtype),
                    ", the result ", dtype_name(out), " (to)");
    } else if (has_zero) {
        require(in[2]->dtype == in[0]->dtype, "dequantize: zero_point is ",
                dtype_name(in[2]->dtype), ", src ", dtype_name(in[0]->dtype));
    }
    quantize_geometry(node, in, op);
    return {ops::plain_value(out, in[0]->layout, in[0]->dims)}; // src's dims and label
}
void check_scales(const ReferenceCall &c, const char *op) {
    const float *scale = in_f(c, 1);
    for (int64_t i = 0, n = dims_product(c.in[1]); i < n; ++i)
        if (!(std::isfinite(scale[i]) && scale[i] > 0.0f))
            fail(MKC_STATUS_INVALID_ARGUMENT, op, ": scale[", i, "] is ", scale[i],
                 "; every scale must be finite and > 0");
}
QuantizeGeometry quantize_geometry(const ReferenceCall &c, const char *op) {
    std::vector<ops::ValueDesc> held;
    NodeInputs in;
    for (size_t i = 0; i < c.in.size(); ++i)
        held.push_back(c.in[i].empty() ? ops::ValueDesc{}
                                       : ops::plain_value(c.dtypes[i], MKC_LAYOUT_CHANNELS_FIRST,
                                                          c.in[i]));
    for (size_t i = 0; i < c.in.size(); ++i)
        in.push_back(c.in[i].empty() ? nullptr : &held[i]);
    return quantize_geometry(c.node, in, op);
}
void ref_quantize(const ReferenceCall &c) {
    check_scales(c, "quantize");
    const QuantizeGeometry g = quantize_geometry(c, "quantize");
    reference::quantize(in_f(c, 0), in_f(c, 1), c.in.size() > 2 ? c.buffers.in[2] : nullptr,
                        g.channels, g.inner, dims_product(c.out),
                        std::get<mkc_quantize_params>(c.node.params).to, c.buffers.out[0]);
}
void ref_dequantize(const ReferenceCall &c) {
    check_scales(c, "dequantize");
    const QuantizeGeometry g = quantize_geometry(c, "dequantize");
    reference::dequantize(c.dtypes[0], c.buffers.in[0], in_f(c, 1),
                          c.in.size() > 2 ? c.buffers.in[2] : nullptr, g.channels, g.inner,
                          dims_product(c.out), out_f(c));
}

// quantized_conv2d / quantized_linear: the integer sums by the float
// reference kernels on the zero-point-shifted values (exact in double),
// then scaled, biased, activated and requantized per output channel.
struct QuantizedValues {
    std::vector<float> src, weights;
    float src_scale = 1, dst_scale = 1;
    int32_t dst_zero = 0;
    const float *weight_scale = nullptr;
    int64_t weight_scales = 1;
};
QuantizedValues quantized_values(const ReferenceCall &c) {
    using namespace ops;
    QuantizedValues v;
    const auto element = [&](int port) {
        return c.in.size() > static_cast<size_t>(port) && !c.in[port].empty() &&
               c.buffers.in[port];
    };
    v.src_scale = in_f(c, kQSrcScale)[0];
    v.weight_scale = in_f(c, kQWeightScale);
    v.weight_scales = dims_product(c.in[kQWeightScale]);
    const int32_t src_zero =
        element(kQSrcZeroPoint) ? static_cast<const int32_t *>(c.buffers.in[kQSrcZeroPoint])[0] : 0;
    if (element(kQDstScale)) v.dst_scale = in_f(c, kQDstScale)[0];
    if (element(kQDstZeroPoint))
        v.dst_zero = static_cast<const int32_t *>(c.buffers.in[kQDstZeroPoint])[0];
    for (int64_t i = 0; i < v.weight_scales; ++i)
        if (!(std::isfinite(v.weight_scale[i]) && v.weight_scale[i] > 0))
            fail(MKC_STATUS_INVALID_ARGUMENT, row(c.node).name, ": weight_scale[", i, "] is ",
                 v.weight_scale[i], "; every scale must be finite and > 0");
    for (float scale : {v.src_scale, v.dst_scale})
        if (!(std::isfinite(scale) && scale > 0))
            fail(MKC_STATUS_INVALID_ARGUMENT, row(c.node).name, ": a scale is ", scale,
                 "; every scale must be finite and > 0");
    v.src.resize(static_cast<size_t>(dims_product(c.in[kQSrc])));
    for (size_t i = 0; i < v.src.size(); ++i)
        v.src[i] = static_cast<float>(
            (c.dtypes[kQSrc] == MKC_DTYPE_S8 ? static_cast<const int8_t *>(c.buffers.in[kQSrc])[i]
                                             : static_cast<const uint8_t *>(c.buffers.in[kQSrc])[i]) -
            src_zero);
    v.weights.resize(static_cast<size_t>(dims_product(c.in[kQWeights])));
    for (size_t i = 0; i < v.weights.size(); ++i)
        v.weights[i] = static_cast<const int8_t *>(c.buffers.in[kQWeights])[i];
    return v;
}
// A fused sum's residual, which `out` holds before the kernel runs: its
// real value sum_scale * (out[i] - zero_point).
struct Residual {
    bool on = false;
    float scale = 1;
    int32_t zero_point = 0;
};
// dst[i] from the integer sum acc[i] of output channel `channel`.
void finish_quantized(const QuantizedValues &v, mkc_dtype dst, const float *bias,
                      mkc_activation_kind activation, float alpha, float beta,
                      const std::vector<float> &acc, int64_t channels, int64_t inner, void *out,
                      Residual residual = {}) {
    for (size_t i = 0; i < acc.size(); ++i) {
        const int64_t o = (static_cast<int64_t>(i) / inner) % channels;
        const double scale =
            static_cast<double>(v.src_scale) * v.weight_scale[v.weight_scales > 1 ? o : 0];
        double y = acc[i] * scale + (bias ? bias[o] : 0.0);
        if (residual.on) {
            const double r = dst == MKC_DTYPE_F32 ? static_cast<const float *>(out)[i]
                             : dst == MKC_DTYPE_U8 ? static_cast<const uint8_t *>(out)[i]
                                                   : static_cast<const int8_t *>(out)[i];
            y += static_cast<double>(residual.scale) * (r - residual.zero_point);
        }
        if (activation != MKC_ACTIVATION_NONE)
            y = reference::activate(activation, alpha, beta, static_cast<float>(y));
        if (dst == MKC_DTYPE_F32) {
            static_cast<float *>(out)[i] = static_cast<float>(y);
            continue;
        }
        const double q = std::nearbyint(y / v.dst_scale) + v.dst_zero;
        const double lo = dst == MKC_DTYPE_S8 ? -128 : 0, hi = dst == MKC_DTYPE_S8 ? 127 : 255;
        reference::store(dst, std::isnan(q) ? v.dst_zero : q < lo ? lo : q > hi ? hi : q, out,
                         static_cast<int64_t>(i));
    }
}
void ref_quantized_conv(const ReferenceCall &c) {
    const auto &p = std::get<mkc_quantized_conv_params>(c.node.params);
    const QuantizedValues v = quantized_values(c);
    mkc_conv_params sums = p.conv;
    sums.activation = MKC_ACTIVATION_NONE;
    sums.sum = 0; // the residual is added by finish_quantized
    std::vector<float> acc(static_cast<size_t>(dims_product(c.out)));
    reference::conv(sums, false, c.channels_last, c.in[ops::kQSrc], v.src.data(),
                    c.in[ops::kQWeights], v.weights.data(), nullptr, c.out, acc.data());
    const int64_t channels = c.in[ops::kQWeights][0];
    const int64_t inner = c.channels_last ? 1 : c.out[2] * c.out[3];
    finish_quantized(v, p.dst_dtype, opt_f(c, ops::kQBias), p.conv.activation,
                     p.conv.activation_alpha, p.conv.activation_beta, acc, channels, inner,
                     c.buffers.out[0], Residual{p.conv.sum != 0, p.sum_scale, p.sum_zero_point});
}
void ref_quantized_linear(const ReferenceCall &c) {
    const auto &p = std::get<mkc_quantized_linear_params>(c.node.params);
    const QuantizedValues v = quantized_values(c);
    const Dims &w = c.in[ops::kQWeights];
    const int64_t rows = dims_product(c.in[ops::kQSrc]) / w[1];
    std::vector<float> acc(static_cast<size_t>(rows * w[0]));
    reference::linear(rows, w[1], w[0], v.src.data(), v.weights.data(), nullptr,
                      MKC_ACTIVATION_NONE, 0, 0, acc.data());
    finish_quantized(v, p.dst_dtype, opt_f(c, ops::kQBias), p.activation, p.activation_alpha,
                     p.activation_beta, acc, w[0], 1, c.buffers.out[0],
                     Residual{p.sum != 0, p.sum_scale, p.sum_zero_point});
}

// quantized_matmul: the integer sums by the float reference matmul on
// the zero-point-shifted values (exact in double), then scaled per column,
// biased, the addend added in float32 (as oneDNN's post-op adds it),
// activated and requantized.
void ref_quantized_matmul(const ReferenceCall &c) {
    using namespace ops;
    const auto &p = std::get<mkc_quantized_matmul_params>(c.node.params);
    const QuantizedValues v = quantized_values(c);
    mkc_matmul_params sums{};
    sums.transpose_a = p.transpose_a;
    sums.transpose_b = p.transpose_b;
    sums.scale = 1;
    sums.activation = MKC_ACTIVATION_NONE;
    std::vector<float> acc(static_cast<size_t>(dims_product(c.out)));
    reference::matmul(sums, c.in[kQSrc], v.src.data(), c.in[kQWeights], v.weights.data(), nullptr,
                      c.out, acc.data());
    // The addend broadcast into the result: the reference matmul of a
    // zero `a` adds it at the indices the post-op would.
    const float *addend = opt_f(c, kQResidual);
    std::vector<float> added;
    if (addend) {
        const std::vector<float> zeros(v.src.size(), 0.0f);
        added.resize(acc.size());
        reference::matmul(sums, c.in[kQSrc], zeros.data(), c.in[kQWeights], v.weights.data(),
                          nullptr, c.out, added.data(), &c.in[kQResidual], addend);
    }
    const float *bias = opt_f(c, kQBias);
    const int64_t n = c.out.back();
    void *out = c.buffers.out[0];
    for (size_t i = 0; i < acc.size(); ++i) {
        const int64_t o = static_cast<int64_t>(i) % n;
        const double scale =
            static_cast<double>(v.src_scale) * v.weight_scale[v.weight_scales > 1 ? o : 0];
        float y = static_cast<float>(acc[i] * scale + (bias ? bias[o] : 0.0));
        if (addend) y += added[i];
        if (p.activation != MKC_ACTIVATION_NONE)
            y = reference::activate(p.activation, p.activation_alpha, p.activation_beta, y);
        if (p.dst_dtype == MKC_DTYPE_F32) {
            static_cast<float *>(out)[i] = y;
            continue;
        }
        const double q = std::nearbyint(y / v.dst_scale) + v.dst_zero;
        const double lo = p.dst_dtype == MKC_DTYPE_S8 ? -128 : 0,
                     hi = p.dst_dtype == MKC_DTYPE_S8 ? 127 : 255;
        reference::store(p.dst_dtype, std::isnan(q) ? v.dst_zero : q < lo ? lo : q > hi ? hi : q,
                         out, static_cast<int64_t>(i));
    }
}

// pad: ONNX's Pad along some axes (mkcache.h, mkc_pad_params): per axis of
// src, what is added before and after (negative: removed); the result
// channels-first.
struct PadGeometry {
    Dims begin, end, out;
};
PadGeometry pad_geometry(const Node &node, const Dims &src, mkc_dtype dtype) {
    const auto &p = std::get<mkc_pad_params>(node.params);
    require(p.mode >= MKC_PAD_CONSTANT && p.mode <= MKC_PAD_WRAP,
            "pad: mode must be CONSTANT, REFLECT, EDGE or WRAP, got ", static_cast<int>(p.mode));
    const int rank = static_cast<int>(src.size());
    require(p.naxes >= 1 && p.naxes <= rank, "pad: naxes must be 1..", rank, " (src's rank), got ",
            p.naxes);
    PadGeometry g{Dims(src.size(), 0), Dims(src.size(), 0), src};
    std::vector<bool> seen(src.size(), false);
    // Growth past this on a side is refused before the dims are added up
    // (any int64 count could overflow the sum).
    constexpr int64_t kMaxPad = int64_t{1} << 40;
    for (int k = 0; k < p.naxes; ++k) {
        const int axis = p.axes[k];
        require(axis >= -rank && axis < rank, "pad: axis ", axis, " is out of range for rank ",
                rank);
        const size_t a = static_cast<size_t>(axis < 0 ? axis + rank : axis);
        require(!seen[a], "pad: axis ", axis, " is given twice");
        seen[a] = true;
        const int64_t n = src[a], b = p.begin[k], e = p.end[k];
        require(b <= kMaxPad && e <= kMaxPad, "pad: axis ", axis, " grows by ", b, " and ", e,
                " (at most 2^40 on a side)");
        require(b >= -n && e >= -n, "pad: axis ", axis, " removes more than its ", n,
                " elements (", b, " before, ", e, " after)");
        const int64_t kept = n + std::min<int64_t>(b, 0) + std::min<int64_t>(e, 0);
        require(kept >= 1, "pad: axis ", axis, " removes ", -std::min<int64_t>(b, 0),
                " before and ", -std::min<int64_t>(e, 0), " after of its ", n,
                " elements (one must be left)");
        if (p.mode == MKC_PAD_REFLECT)
            require(b <= kept - 1 && e <= kept - 1, "pad: REFLECT adds at most ", kept - 1,
                    " on a side of axis ", axis, " (its ", kept, " elements left, less one), got ",
                    b, " and ", e);
        g.begin[a] = b;
        g.end[a] = e;
        g.out[a] = kept + std::max<int64_t>(b, 0) + std::max<int64_t>(e, 0);
    }
    check_dims("pad: the result", rank, g.out.data(), dtype);
    return g;
}

// CONSTANT's value as an element of `dtype`: integer dtypes must hold it
// exactly (0 or 1 for bool); a float dtype takes any value, rounded.
struct PadFill {
    alignas(8) unsigned char bytes[8] = {};
};
PadFill pad_fill(const Node &node, mkc_dtype dtype) {
    const double v = std::get<mkc_pad_params>(node.params).value;
    const auto integral = [&](double lo, double hi) {
        require(std::isfinite(v) && std::trunc(v) == v && v >= lo && v < hi, "pad: value ", v,
                " is not ", dtype == MKC_DTYPE_BOOL ? "a bool (0 or 1)" : "an integer", " of ",
                dtype_name(dtype), " (src's dtype)");
    };
    switch (dtype) {
    case MKC_DTYPE_S32: integral(-2147483648.0, 2147483648.0); break;
    case MKC_DTYPE_S64: integral(-9223372036854775808.0, 9223372036854775808.0); break;
    case MKC_DTYPE_S8: integral(-128.0, 128.0); break;
    case MKC_DTYPE_U8: integral(0.0, 256.0); break;
    case MKC_DTYPE_BOOL: integral(0.0, 2.0); break;
    default: break; // the floats
    }
    PadFill f;
    reference::store(dtype, v, f.bytes, 0);
    return f;
}

std::vector<ValueDesc> infer_pad(const Node &node, const NodeInputs &in) {
    const PadGeometry g = pad_geometry(node, caller_dims(*in[0]), in[0]->dtype);
    if (std::get<mkc_pad_params>(node.params).mode == MKC_PAD_CONSTANT)
        pad_fill(node, in[0]->dtype);
    return {ops::plain_value(in[0]->dtype, MKC_LAYOUT_CHANNELS_FIRST, g.out)};
}
void ref_pad(const ReferenceCall &c) {
    const auto &p = std::get<mkc_pad_params>(c.node.params);
    const PadGeometry g = pad_geometry(c.node, c.in[0], c.dtypes[0]);
    const PadFill fill = p.mode == MKC_PAD_CONSTANT ? pad_fill(c.node, c.dtypes[0]) : PadFill{};
    reference::pad(p.mode, c.in[0], c.buffers.in[0], g.begin, g.end, fill.bytes,
                   dtype_size(c.dtypes[0]), c.buffers.out[0]);
}

constexpr const char *kPadModes[] = {"", "constant", "reflect", "edge", "wrap"};
constexpr const char *kResizeModes[] = {"", "nearest", "linear", "cubic"};
constexpr const char *kCoordinates[] = {"",           "half_pixel", "pytorch_half_pixel",
                                        "align_corners", "asymmetric", "half_pixel_symmetric"};
constexpr const char *kNearest[] = {"", "round_prefer_floor", "round_prefer_ceil", "floor",
                                    "ceil"};
// The name of enum value v in `names` (index = value), or its number.
template <size_t N> std::string enum_text(const char *const (&names)[N], int v) {
    return v > 0 && static_cast<size_t>(v) < N ? names[v] : std::to_string(v);
}

std::string pad_text(const Node &node, const NodeInputs &) {
    const auto &p = std::get<mkc_pad_params>(node.params);
    std::string s = ":" + enum_text(kPadModes, p.mode);
    if (p.mode == MKC_PAD_CONSTANT && p.value != 0.0)
        s += ":v" + std::to_string(p.value);
    for (int k = 0; k < p.naxes && k < MKC_MAX_NDIMS; ++k)
        s += ":a" + std::to_string(p.axes[k]) + "[" + std::to_string(p.begin[k]) + "," +
             std::to_string(p.end[k]) + "]";
    return s;
}

// resize: ONNX's Resize without its region of interest (mkcache.h,
// mkc_resize_params). Each axis's coordinates map with the result's dim
// when sizes are given, with src's dim times the scale when scales are
// (ONNX's rule: the scale as given, the dim its floor).
ResizeGeometry resize_geometry(const Node &node, const Dims &src) {
    const auto &p = std::get<mkc_resize_params>(node.params);
    require(p.mode == MKC_RESIZE_NEAREST || p.mode == MKC_RESIZE_LINEAR ||
                p.mode == MKC_RESIZE_CUBIC,
            "resize: mode must be NEAREST, LINEAR or CUBIC, got ", static_cast<int>(p.mode));
    require(p.coordinates >= MKC_COORDINATES_HALF_PIXEL &&
                p.coordinates <= MKC_COORDINATES_HALF_PIXEL_SYMMETRIC,
            "resize: coordinates must be HALF_PIXEL, PYTORCH_HALF_PIXEL, ALIGN_CORNERS, "
            "ASYMMETRIC or HALF_PIXEL_SYMMETRIC, got ", static_cast<int>(p.coordinates));
    require(p.nearest >= MKC_NEAREST_ROUND_PREFER_FLOOR && p.nearest <= MKC_NEAREST_CEIL,
            "resize: nearest must be ROUND_PREFER_FLOOR, ROUND_PREFER_CEIL, FLOOR or CEIL, got ",
            static_cast<int>(p.nearest));
    require(std::isfinite(p.cubic_coeff_a), "resize: cubic_coeff_a is ", p.cubic_coeff_a,
            " (it must be finite)");
    require(p.exclude_outside == 0 || p.exclude_outside == 1,
            "resize: exclude_outside must be 0 or 1, got ", p.exclude_outside);
    require(p.antialias == 0 || p.antialias == 1, "resize: antialias must be 0 or 1, got ",
            p.antialias);
    // NEAREST reads one element: weighing it 0 outside src, or filtering
    // around it, is not what it means.
    require(p.mode != MKC_RESIZE_NEAREST || (p.exclude_outside == 0 && p.antialias == 0),
            "resize: exclude_outside and antialias apply to LINEAR and CUBIC, not NEAREST");
    const int rank = static_cast<int>(src.size());
    require(p.nsizes == 0 || p.nscales == 0, "resize: sizes and scales are both given (give one)");
    require(p.nsizes != 0 || p.nscales != 0, "resize: neither sizes nor scales is given");
    const bool by_sizes = p.nsizes != 0;
    const int given = by_sizes ? p.nsizes : p.nscales;
    require(given == rank, "resize: ", by_sizes ? "nsizes" : "nscales", " must be src's rank ",
            rank, ", got ", given);
    ResizeGeometry g{Dims(src.size()), std::vector<double>(src.size())};
    for (size_t a = 0; a < src.size(); ++a) {
        if (by_sizes) {
            require(p.sizes[a] >= 1, "resize: sizes[", a, "] is ", p.sizes[a], " (each >= 1)");
            g.out[a] = p.sizes[a];
            g.lengths[a] = static_cast<double>(p.sizes[a]);
            continue;
        }
        const float s = p.scales[a];
        require(std::isfinite(s) && s > 0.f, "resize: scales[", a, "] is ", s, " (each > 0)");
        // Exact: a float times an int below 2^53 / 2^24.
        const double length = static_cast<double>(s) * static_cast<double>(src[a]);
        require(length >= 1.0, "resize: scales[", a, "] = ", s, " leaves dim ", a, " of ",
                src[a], " empty (", src[a], " * ", s, " < 1)");
        require(length < 9.0e15, "resize: scales[", a, "] = ", s, " makes dim ", a,
                " too large");
        g.out[a] = static_cast<int64_t>(std::floor(length));
        g.lengths[a] = length;
    }
    check_dims("resize: the result", rank, g.out.data(), MKC_DTYPE_F32);
    return g;
}

std::vector<ValueDesc> infer_resize(const Node &node, const NodeInputs &in) {
    const ValueDesc &x = *in[0];
    const ResizeGeometry g = resize_geometry(node, caller_dims(x));
    return {ops::plain_value(x.dtype, x.layout, layout::to_onednn_order(g.out, x.layout))};
}
void ref_resize(const ReferenceCall &c) {
    const auto &p = std::get<mkc_resize_params>(c.node.params);
    const ResizeGeometry g = resize_geometry(c.node, c.in[0]);
    reference::resize(p, c.in[0], in_f(c, 0), g.lengths, c.out, out_f(c));
}

// oneDNN's max and min reductions compare without ordering NaN: their
// result depends on where a NaN stands ([1, NaN, -1] gives -1). The
// operator propagates NaN, so those run on the reference kernel.
ops::Verdict reduce_onednn_supports(const Node &node, const NodeInputs &) {
    ops::Verdict v;
    const mkc_reduce_kind kind = std::get<mkc_reduce_params>(node.params).kind;
    if (kind == MKC_REDUCE_MAX || kind == MKC_REDUCE_MIN) {
        v.status = MKC_STATUS_UNSUPPORTED;
        v.reason = "oneDNN's max and min reductions do not propagate NaN";
    }
    return v;
}

// oneDNN's resampling maps a result index y to src's (y + 0.5) * n / m -
// 0.5 (n, m src's and the result's extents, in float), reads the border
// outside, and rounds a nearest coordinate half away from zero. That is
// the operator's HALF_PIXEL (PYTORCH_HALF_PIXEL but where a dim becomes
// 1, HALF_PIXEL_SYMMETRIC) where the mapping length is m - sizes given, or a scale whose product
// with the dim is whole - with ROUND_PREFER_CEIL for NEAREST (a coordinate
// there is never below -0.5), on the spatial dims of a 3-D to 5-D src.
// Its float coordinate lies within a float's rounding of n of the exact
// one, and a coordinate that is not a half lies at least 1 / (2m) from
// one: nearest is taken while n * m stays below 2^21, where that rounding
// cannot cross a half. It has no cubic interpolation and no antialiasing
// filter (taken where no axis shrinks: the filter is then the plain one).
// LINEAR's exclude_outside changes nothing it computes: an element outside
// src lies beside the border element the other weight reads, and clamping
// it there gives that element whole either way.
ops::Verdict resize_onednn_supports(const Node &node, const NodeInputs &in) {
    return ops::verdict_of([&] {
        const auto &p = std::get<mkc_resize_params>(node.params);
        const ValueDesc &x = *in[0];
        const Dims src = caller_dims(x);
        const int rank = static_cast<int>(src.size());
        if (p.mode == MKC_RESIZE_CUBIC)
            fail(MKC_STATUS_UNSUPPORTED, "oneDNN's resampling has no cubic interpolation");
        if (rank < 3 || rank > 5)
            fail(MKC_STATUS_UNSUPPORTED, "oneDNN resizes 3-D to 5-D values, got rank ", rank);
        if (p.coordinates != MKC_COORDINATES_HALF_PIXEL &&
            p.coordinates != MKC_COORDINATES_PYTORCH_HALF_PIXEL &&
            p.coordinates != MKC_COORDINATES_HALF_PIXEL_SYMMETRIC)
            fail(MKC_STATUS_UNSUPPORTED, "oneDNN maps coordinates as HALF_PIXEL only, got ",
                 enum_text(kCoordinates, p.coordinates));
        if (p.mode == MKC_RESIZE_NEAREST && p.nearest != MKC_NEAREST_ROUND_PREFER_CEIL)
            fail(MKC_STATUS_UNSUPPORTED, "oneDNN's nearest rounds halves up (ROUND_PREFER_CEIL), ",
                 "got ", enum_text(kNearest, p.nearest));
        const ResizeGeometry g = resize_geometry(node, src);
        // The caller's axis at each oneDNN position: N, C, then the spatial ones.
        Dims caller_axis(src.size());
        for (size_t i = 0; i < src.size(); ++i)
            caller_axis[i] = static_cast<int64_t>(i);
        caller_axis = layout::to_onednn_order(caller_axis, x.layout);
        for (size_t i = 0; i < src.size(); ++i) {
            const auto a = static_cast<size_t>(caller_axis[i]);
            const int64_t n = src[a], m = g.out[a];
            if (i < 2) {
                if (g.lengths[a] != static_cast<double>(n))
                    fail(MKC_STATUS_UNSUPPORTED, "oneDNN resizes the spatial dims only (axis ", a,
                         " is N or C)");
                continue;
            }
            if (g.lengths[a] != static_cast<double>(m))
                fail(MKC_STATUS_UNSUPPORTED, "oneDNN maps coordinates by the result's dims (axis ",
                     a, ": ", n, " times the scale is not whole)");
            if (p.antialias && m < n)
                fail(MKC_STATUS_UNSUPPORTED, "oneDNN's resampling does not antialias (axis ", a,
                     " shrinks from ", n, " to ", m, ")");
            if (p.coordinates == MKC_COORDINATES_PYTORCH_HALF_PIXEL && m == 1 && n > 1)
                fail(MKC_STATUS_UNSUPPORTED,
                     "oneDNN maps a dim resized to 1 as HALF_PIXEL, not PYTORCH_HALF_PIXEL");
            if (p.mode == MKC_RESIZE_NEAREST && n * m >= (int64_t{1} << 21))
                fail(MKC_STATUS_UNSUPPORTED, "oneDNN's float coordinates may round differently ",
                     "for nearest on axis ", a, " (", n, " to ", m, ")");
        }
    });
}

std::string resize_text(const Node &node, const NodeInputs &) {
    const auto &p = std::get<mkc_resize_params>(node.params);
    std::string s = ":" + enum_text(kResizeModes, p.mode) + ":" +
                    enum_text(kCoordinates, p.coordinates);
    if (p.mode == MKC_RESIZE_NEAREST)
        s += ":" + enum_text(kNearest, p.nearest);
    if (p.mode == MKC_RESIZE_CUBIC)
        s += ":a" + std::to_string(p.cubic_coeff_a);
    if (p.exclude_outside)
        s += ":exclude_outside";
    if (p.antialias)
        s += ":antialias";
    if (p.nsizes > 0) {
        std::vector<int64_t> v(p.sizes, p.sizes + std::min(p.nsizes, MKC_MAX_NDIMS));
        s += list_text("sizes", v);
    } else {
        s += ":scales";
        for (int i = 0; i < p.nscales && i < MKC_MAX_NDIMS; ++i) {
            std::string v = std::to_string(p.scales[i]);
            v.erase(v.find_last_not_of('0') + 1);
            if (!v.empty() && v.back() == '.')
                v.pop_back();
            s += (i ? "," : "") + v;
        }
    }
    return s;
}

// ------------------------------------------------------------------- rows

constexpr char kPool[] = "pool", kLinear[] = "linear", kMatmul[] = "matmul",
               kLayerNorm[] = "layer_norm", kBatchNorm[] = "batch_norm", kLrn[] = "lrn",
               kConv2d[] = "conv2d", kConv3d[] = "conv3d", kConv2dT[] = "conv2d_transpose",
               kErf[] = "erf", kReduce[] = "reduce", kGather[] = "gather", kCast[] = "cast",
               kWhere[] = "where", kSlice[] = "slice", kExpand[] = "expand",
               kCompare[] = "compare", kPad[] = "pad", kResize[] = "resize",
               kLogical[] = "logical", kRange[] = "range",
               kGatherElements[] = "gather_elements", kGatherNd[] = "gather_nd",
               kIntegerBinary[] = "integer_binary", kQuantize[] = "quantize",
               kDequantize[] = "dequantize", kQuantizedConv2d[] = "quantized_conv2d",
               kQuantizedLinear[] = "quantized_linear", kRound[] = "round",
               kQuantizedMatmul[] = "quantized_matmul",
               kQuantizedMatmulPorts[] = "a,b,a_scale,b_scale,bias,a_zero_point,dst_scale,"
                                         "dst_zero_point,addend",
               kQuantizedPorts[] =
                   "src,weights,src_scale,weight_scale,bias,src_zero_point,dst_scale,dst_zero_point,"
                   "residual";

// A row written as a sequence of named parts, so the table below reads as
// one: what an operator is (its name, ports, shaping), what it may do, and
// the functions behind it.
class Row {
public:
    Row(NodeOp op, const char *name) {
        r_.op = op;
        r_.name = name;
        r_.dtypes.fill(dtype_bit(MKC_DTYPE_F32));
        r_.residual_port = no_residual;
        r_.attrs_text = no_attrs_text;
    }
    // Its ports' names, how many it takes (at least, at most) and from
    // which port they may be absent.
    Row &ports(const char *names, int min, int max, int first_optional) {
        r_.ports = names;
        r_.arity = {min, max, 1};
        r_.first_optional = first_optional;
        return *this;
    }
    // The dtypes port `port` and every later one take.
    Row &port_dtypes(size_t port, uint32_t dtypes) {
        for (size_t i = port; i < r_.dtypes.size(); ++i)
            r_.dtypes[i] = dtypes;
        return *this;
    }
    // Its ports take float32 or bfloat16 (one of them for the data: its
    // checks say which ports must agree); its reference kernel computes on
    // float32.
    Row &floats() {
        r_.reference_widens_bf16 = true;
        return port_dtypes(0, dtype_bit(MKC_DTYPE_F32) | dtype_bit(MKC_DTYPE_BF16));
    }
    Row &shaping(Shaping s) {
        r_.shaping = s;
        return *this;
    }
    Row &params(NodeParams (*read)(const void *, std::string &, const char *)) {
        r_.read_params = read;
        return *this;
    }
    // Its phases on oneDNN through the ops/ family `W::with` names.
    template <typename W> Row &onednn(NodeRun run) {
        r_.infer = infer_with<W>;
        r_.attrs_text = attrs_text_with<W>;
        r_.prepare = prepare_with<W>;
        r_.run = run;
        return *this;
    }
    // Its inference where oneDNN has no phases for it.
    Row &infer(std::vector<ValueDesc> (*f)(const Node &, const NodeInputs &)) {
        r_.infer = f;
        return *this;
    }
    // The cases of its oneDNN phases (null: all its infer accepts).
    Row &onednn_supports(ops::Verdict (*supports)(const Node &, const NodeInputs &)) {
        r_.onednn_supports = supports;
        return *this;
    }
    Row &attrs(std::string (*text)(const Node &, const NodeInputs &)) {
        r_.attrs_text = text;
        return *this;
    }
    Row &reference(void (*kernel)(const ReferenceCall &)) {
        r_.reference = kernel;
        return *this;
    }
    Row &flops(int64_t (*count)(const Node &, const NodeInputs &, const ValueDesc &)) {
        r_.flops = count;
        return *this;
    }
    // Writes dst over its first input (oneDNN and reference kernels alike).
    Row &in_place() {
        r_.onednn_in_place = r_.reference_in_place = true;
        return *this;
    }
    // A data_format in params struct T: its data is read in that order.
    template <typename T> Row &channel_axis() {
        r_.channel_axis = true;
        r_.data_format = data_format_of<T>;
        return *this;
    }
    template <typename T> Row &post_op_activation() {
        r_.set_activation = set_activation_of<T>;
        return *this;
    }
    Row &window(const int64_t *(*stride)(const NodeParams &, bool &)) {
        r_.window_stride = stride;
        return *this;
    }
    Row &convolution() {
        r_.convolution = true;
        r_.residual_port = conv_residual;
        return channel_axis<mkc_conv_params>()
            .post_op_activation<mkc_conv_params>()
            .window(conv_stride);
    }
    Row &residual(int (*port)(const Node &)) {
        r_.residual_port = port;
        return *this;
    }
    Row &addend(int (*port)(const Node &)) {
        r_.addend_port = port;
        return *this;
    }
    Row &seven_bit_weights(int port) {
        r_.seven_bit_weights_port = port;
        return *this;
    }
    Row &strided_operands() {
        r_.onednn_reads_views = true;
        return *this;
    }
    Row &other_kernels(ops::Prepared (*prepare)(const CacheScope &, const Node &,
                                                const NodeInputs &, ops::LinearKernel, bool)) {
        r_.prepare_on_kernel = prepare;
        return *this;
    }
    Row &held_weights(int port) {
        r_.held_weights_port = port;
        return *this;
    }
    Row &view(bool (*of)(const Node &, const ValueDesc &, const ValueDesc &, ValueDesc &),
              std::string (*text)(const Node &, const NodeInputs &),
              const std::vector<int> *(*permutation)(const Node &) = nullptr) {
        r_.view = true;
        r_.view_of = of;
        r_.attrs_text = text;
        r_.permutation = permutation;
        return *this;
    }
    operator OpRow() const { return r_; }

private:
    OpRow r_{};
};

std::vector<OpRow> build_rows() {
    using S = Shaping;
    constexpr int kAll = 4096; // concat's inputs: none optional
    std::vector<OpRow> rows = {
        Row(NodeOp::conv2d, kConv2d)
            .ports("src,weights,bias", 2, 3, 2).floats().shaping(S::spatial).convolution()
            .params(read_conv_as<kConv2d>).onednn<Conv<2, false>>(ops::ConvOp::run)
            .reference(ref_conv<false>).flops(conv_flops<false>),
        Row(NodeOp::conv3d, kConv3d)
            .ports("src,weights,bias", 2, 3, 2).floats().shaping(S::spatial).convolution()
            .params(read_conv_as<kConv3d>).onednn<Conv<3, false>>(ops::ConvOp::run)
            .reference(ref_conv<false>).flops(conv_flops<false>),
        Row(NodeOp::conv2d_transpose, kConv2dT)
            .ports("src,weights,bias", 2, 3, 2).floats().shaping(S::spatial).convolution()
            .params(read_conv_as<kConv2dT>).onednn<Conv<2, true>>(ops::ConvOp::run)
            .reference(ref_conv<true>).flops(conv_flops<true>),
        Row(NodeOp::activation, "activation")
            .ports("src", 1, 1, 1).floats().shaping(S::same_as_input).in_place()
            .params(read_activation).onednn<Activation>(ops::ActivationOp::run)
            .reference(ref_activation),
        Row(NodeOp::softmax, "softmax")
            .ports("src", 1, 1, 1).floats().shaping(S::same_as_input).in_place()
            .params(read_softmax).onednn<Softmax>(ops::SoftmaxOp::run)
            .reference(ref_softmax),
        Row(NodeOp::binary, "binary")
            .ports("a,b", 2, 2, 2).floats().shaping(S::broadcast).in_place()
            .params(read_binary).onednn<Binary>(ops::BinaryOp::run)
            .reference(ref_binary),
        Row(NodeOp::pool, kPool)
            .ports("src", 1, 1, 1).floats().shaping(S::spatial).channel_axis<mkc_pool_params>()
            .window(pool_stride)
            .params(read_as_is<mkc_pool_params, kPool>).onednn<Pool>(ops::PoolOp::run)
            .reference(ref_pool),
        Row(NodeOp::linear, kLinear)
            .ports("src,weights,bias,residual", 2, 4, 2).floats()
            .shaping(S::leading)
            .post_op_activation<mkc_linear_params>()
            .residual(linear_residual)
            .held_weights(1)
            .params(read_linear).onednn<Linear>(ops::LinearOp::run).other_kernels(prepare_linear_on)
            .reference(ref_linear).flops(linear_flops),
        Row(NodeOp::matmul, kMatmul)
            .ports("a,b,bias,addend", 2, 4, 2).floats().shaping(S::moved)
            .post_op_activation<mkc_matmul_params>()
            .addend(matmul_addend_port).strided_operands()
            .params(read_as_is<mkc_matmul_params, kMatmul>).onednn<Matmul>(ops::MatmulOp::run)
            .reference(ref_matmul).flops(matmul_flops<mkc_matmul_params>),
        Row(NodeOp::layer_norm, kLayerNorm)
            .ports("src,scale,shift", 1, 3, 1).floats()
            .port_dtypes(1, dtype_bit(MKC_DTYPE_F32)).shaping(S::same_as_input).in_place()
            .params(read_as_is<mkc_layer_norm_params, kLayerNorm>)
            .onednn<LayerNorm>(ops::LayerNormOp::run)
            .reference(ref_layer_norm),
        Row(NodeOp::batch_norm, kBatchNorm) // inference: the running statistics are inputs
            .ports("src,mean,variance,scale,shift", 3, 5, 3).floats()
            .port_dtypes(1, dtype_bit(MKC_DTYPE_F32)).shaping(S::same_as_input)
            .in_place().channel_axis<mkc_batch_norm_params>()
            .params(read_as_is<mkc_batch_norm_params, kBatchNorm>)
            .onednn<BatchNorm>(ops::BatchNormOp::run)
            .reference(ref_batch_norm),
        Row(NodeOp::lrn, kLrn)
            .ports("src", 1, 1, 1).channel_axis<mkc_lrn_params>()
            .params(read_as_is<mkc_lrn_params, kLrn>).onednn<Lrn>(ops::LrnOp::run)
            .reference(ref_lrn),
        Row(NodeOp::concat, "concat")
            .ports(nullptr, 1, kAll, kAll).floats().shaping(S::moved)
            .params(read_concat).onednn<Concat>(ops::ConcatOp::run)
            .reference(ref_concat),
        // Moves bytes: the float dtypes (bfloat16 plans keep it bfloat16)
        // and the 8-bit and int32 ones, which oneDNN's reorder permutes too.
        Row(NodeOp::transpose, "transpose")
            .ports("src", 1, 1, 1).floats().shaping(S::moved)
            .port_dtypes(0, dtype_bit(MKC_DTYPE_F32) | dtype_bit(MKC_DTYPE_BF16) |
                                dtype_bit(MKC_DTYPE_U8) | dtype_bit(MKC_DTYPE_S8) |
                                dtype_bit(MKC_DTYPE_S32))
            .params(read_transpose).onednn<Transpose>(ops::TransposeOp::run)
            .view(transpose_view, transpose_text, transpose_perm)
            .reference(ref_transpose),
        // Any dtype: a view of the bytes, or a copy of them (int64 by the
        // reference kernel: oneDNN cannot copy it).
        Row(NodeOp::reshape, "reshape")
            .ports("src", 1, 1, 1).shaping(S::moved)
            .port_dtypes(0, kAnyDtype)
            .params(read_reshape).onednn<Reshape>(ops::ReshapeOp::run)
            .view(reshape_view, reshape_text)
            .reference(ref_reshape),
        // No oneDNN primitive computes erf alone: the reference kernel.
        Row(NodeOp(MKC_OP_ERF), kErf)
            .ports("src", 1, 1, 1).shaping(S::same_as_input).in_place()
            .params(read_none<kErf>).infer(infer_float_elementwise<kErf>)
            .reference(ref_erf),
        // oneDNN's eltwise round is not bound: rounding is exact, so the
        // reference kernel's result is every implementation's.
        Row(NodeOp(MKC_OP_ROUND), kRound)
            .ports("src", 1, 1, 1).shaping(S::same_as_input).in_place()
            .params(read_none<kRound>).infer(infer_float_elementwise<kRound>)
            .reference(ref_round),
        // No oneDNN primitive in this version: rows copied by the reference
        // kernel (an embedding lookup).
        Row(NodeOp(MKC_OP_GATHER), kGather)
            .ports("data,indices", 2, 2, 2).port_dtypes(0, kAnyDtype)
            .port_dtypes(1, dtype_bit(MKC_DTYPE_S32) | dtype_bit(MKC_DTYPE_S64))
            .params(read_as_is<mkc_gather_params, kGather>).infer(infer_gather)
            .attrs(gather_text).reference(ref_gather),
        Row(NodeOp(MKC_OP_GATHER_ELEMENTS), kGatherElements)
            .ports("data,indices", 2, 2, 2).port_dtypes(0, kAnyDtype)
            .port_dtypes(1, dtype_bit(MKC_DTYPE_S32) | dtype_bit(MKC_DTYPE_S64))
            .params(read_as_is<mkc_gather_params, kGatherElements>)
            .infer(infer_gather_elements).attrs(gather_text).reference(ref_gather_elements),
        Row(NodeOp(MKC_OP_GATHER_ND), kGatherNd)
            .ports("data,indices", 2, 2, 2).port_dtypes(0, kAnyDtype)
            .port_dtypes(1, dtype_bit(MKC_DTYPE_S32) | dtype_bit(MKC_DTYPE_S64))
            .params(read_as_is<mkc_gather_nd_params, kGatherNd>).infer(infer_gather_nd)
            .attrs(gather_nd_text).reference(ref_gather_nd),
        // The length is the dim of `like` the node reads: a sequence as long
        // as a dim bound at run time.
        Row(NodeOp(MKC_OP_RANGE), kRange)
            .ports("like", 1, 1, 1).port_dtypes(0, kAnyDtype)
            .params(read_as_is<mkc_range_params, kRange>).infer(infer_range)
            .attrs(range_text).reference(ref_range),
        Row(NodeOp(MKC_OP_INTEGER_BINARY), kIntegerBinary)
            .ports("a,b", 2, 2, 2)
            .port_dtypes(0, dtype_bit(MKC_DTYPE_S32) | dtype_bit(MKC_DTYPE_S64))
            .params(read_as_is<mkc_binary_params, kIntegerBinary>).infer(infer_integer_binary)
            .reference(ref_integer_binary),
        Row(NodeOp(MKC_OP_CAST), kCast)
            .ports("src", 1, 1, 1)
            .port_dtypes(0, kAnyDtype)
            .params(read_as_is<mkc_cast_params, kCast>).infer(infer_cast).attrs(cast_text)
            .reference(ref_cast),
        Row(NodeOp(MKC_OP_WHERE), kWhere)
            .ports("condition,x,y", 3, 3, 3)
            .port_dtypes(0, dtype_bit(MKC_DTYPE_BOOL)).port_dtypes(1, dtype_bit(MKC_DTYPE_F32))
            .params(read_none<kWhere>).infer(infer_where).reference(ref_where),
        Row(NodeOp(MKC_OP_SLICE), kSlice)
            .ports("src", 1, 1, 1)
            .port_dtypes(0, kAnyDtype)
            .params(read_as_is<mkc_slice_params, kSlice>).infer(infer_slice).attrs(slice_text)
            .reference(ref_slice),
        Row(NodeOp(MKC_OP_EXPAND), kExpand)
            .ports("src", 1, 1, 1)
            .port_dtypes(0, kAnyDtype)
            .params(read_as_is<mkc_expand_params, kExpand>).infer(infer_expand)
            .reference(ref_expand),
        Row(NodeOp(MKC_OP_COMPARE), kCompare)
            .ports("a,b", 2, 2, 2)
            .port_dtypes(0, dtype_bit(MKC_DTYPE_F32) | dtype_bit(MKC_DTYPE_S32) |
                                dtype_bit(MKC_DTYPE_S64))
            .params(read_as_is<mkc_compare_params, kCompare>).infer(infer_compare)
            .reference(ref_compare),
        Row(NodeOp(MKC_OP_PAD), kPad)
            .ports("src", 1, 1, 1)
            .port_dtypes(0, kAnyDtype)
            .params(read_as_is<mkc_pad_params, kPad>).infer(infer_pad).attrs(pad_text)
            .reference(ref_pad),
        // oneDNN's resampling where it computes the operator's coordinates
        // and rounding; the reference kernel for every other case.
        Row(NodeOp(MKC_OP_RESIZE), kResize)
            .ports("src", 1, 1, 1)
            .params(read_as_is<mkc_resize_params, kResize>).onednn<Resize>(ops::ResizeOp::run)
            .infer(infer_resize).attrs(resize_text).onednn_supports(resize_onednn_supports)
            .reference(ref_resize),
        Row(NodeOp(MKC_OP_LOGICAL), kLogical)
            .ports("a,b", 1, 2, 1).port_dtypes(0, dtype_bit(MKC_DTYPE_BOOL))
            .params(read_as_is<mkc_logical_params, kLogical>).infer(infer_logical)
            .reference(ref_logical),
        Row(NodeOp(MKC_OP_QUANTIZE), kQuantize)
            .ports("src,scale,zero_point", 2, 3, 2)
            .port_dtypes(2, dtype_bit(MKC_DTYPE_U8) | dtype_bit(MKC_DTYPE_S8))
            .params(read_as_is<mkc_quantize_params, kQuantize>)
            .onednn<Quantize>(ops::QuantizeOp::run).infer(infer_quantize<true>)
            .onednn_supports(quantize_onednn_supports)
            .reference(ref_quantize),
        Row(NodeOp(MKC_OP_DEQUANTIZE), kDequantize)
            .ports("src,scale,zero_point", 2, 3, 2)
            .port_dtypes(0, dtype_bit(MKC_DTYPE_U8) | dtype_bit(MKC_DTYPE_S8) |
                                dtype_bit(MKC_DTYPE_S32))
            .port_dtypes(1, dtype_bit(MKC_DTYPE_F32))
            .port_dtypes(2, dtype_bit(MKC_DTYPE_U8) | dtype_bit(MKC_DTYPE_S8) |
                                dtype_bit(MKC_DTYPE_S32))
            .params(read_as_is<mkc_quantize_params, kDequantize>).infer(infer_quantize<false>)
            .reference(ref_dequantize),
        // 8-bit src and weights with their scales: oneDNN's int8 kernels, the
        // reference kernel where those do not compute the operator.
        Row(NodeOp(MKC_OP_QUANTIZED_CONV2D), kQuantizedConv2d)
            .ports(kQuantizedPorts, 4, 9, 4).port_dtypes(0, kAnyDtype)
            .residual(quantized_conv_residual).seven_bit_weights(ops::kQWeights)
            .params(read_quantized_conv).onednn<QuantizedConv>(ops::QuantizedConvOp::run)
            .onednn_supports(quantized_conv_onednn_supports).channel_axis<mkc_quantized_conv_params>()
            .reference(ref_quantized_conv).flops(conv_flops<false>),
        Row(NodeOp(MKC_OP_QUANTIZED_LINEAR), kQuantizedLinear)
            .ports(kQuantizedPorts, 4, 9, 4).port_dtypes(0, kAnyDtype)
            .residual(quantized_linear_residual).seven_bit_weights(ops::kQWeights)
            .params(read_as_is<mkc_quantized_linear_params, kQuantizedLinear>)
            .onednn<QuantizedLinear>(ops::QuantizedLinearOp::run)
            .reference(ref_quantized_linear).flops(linear_flops),
        Row(NodeOp(MKC_OP_QUANTIZED_MATMUL), kQuantizedMatmul)
            .ports(kQuantizedMatmulPorts, 4, 9, 4).port_dtypes(0, kAnyDtype)
            .addend(quantized_matmul_addend_port).strided_operands()
            .params(read_as_is<mkc_quantized_matmul_params, kQuantizedMatmul>)
            .onednn<QuantizedMatmul>(ops::QuantizedMatmulOp::run)
            .onednn_supports(quantized_matmul_onednn_supports)
            .reference(ref_quantized_matmul).flops(matmul_flops<mkc_quantized_matmul_params>),
        Row(NodeOp(MKC_OP_REDUCE), kReduce)
            .ports("src", 1, 1, 1)
            .params(read_as_is<mkc_reduce_params, kReduce>).onednn<Reduce>(ops::ReduceOp::run)
            .onednn_supports(reduce_onednn_supports).reference(ref_reduce),
    };
    std::sort(rows.begin(), rows.end(),
              [](const OpRow &a, const OpRow &b) { return a.op < b.op; });
    return rows;
}

} // namespace

const std::vector<OpRow> &op_rows() {
    static const std::vector<OpRow> rows = build_rows();
    return rows;
}

const OpRow *op_by_id(int64_t id) {
    for (const OpRow &r : op_rows())
        if (static_cast<int64_t>(r.op) == id)
            return &r;
    return nullptr;
}

const OpRow &op_row(NodeOp op) {
    const OpRow *r = op_by_id(static_cast<int64_t>(op));
    if (!r)
        fail(MKC_STATUS_INTERNAL_ERROR, "no operator row for ", static_cast<int>(op));
    return *r;
}

namespace {

// The `port`-th name of a row's comma-separated port list ("" past it).
std::string port_name(const OpRow &r, size_t port) {
    std::string names = r.ports ? r.ports : "";
    size_t at = 0;
    for (size_t i = 0; i < port; ++i) {
        at = names.find(',', at);
        if (at == std::string::npos)
            return {};
        ++at;
    }
    return names.substr(at, names.find(',', at) - at);
}

std::string dtype_list(uint32_t dtypes) {
    std::string s;
    for (mkc_dtype d : kDtypes)
        if (dtypes & dtype_bit(d))
            s += std::string(s.empty() ? "" : " or ") + dtype_name(d);
    return s;
}

} // namespace

bool bf16_port(const OpRow &r, size_t port) {
    return r.reference_widens_bf16 && (port_dtypes(r, port) & dtype_bit(MKC_DTYPE_BF16)) &&
           port_name(r, port) != "bias";
}

std::vector<ValueDesc> infer_node(const Node &node, const NodeInputs &inputs) {
    const OpRow &r = row(node);
    for (size_t i = 0; i < inputs.size(); ++i) {
        const uint32_t takes = port_dtypes(r, i);
        if (!inputs[i] || (takes & dtype_bit(inputs[i]->dtype)))
            continue;
        const std::string name = port_name(r, i);
        fail(MKC_STATUS_INVALID_ARGUMENT, "input ", i, name.empty() ? "" : " (" + name + ")",
             " is ", dtype_name(inputs[i]->dtype), "; ", r.name, " takes ", dtype_list(takes),
             i ? " there" : "");
    }
    return r.infer(node, inputs);
}

ops::Prepared prepare_node(const CacheScope &scope, const Node &node, const NodeInputs &inputs,
                           const Dims *y_strides) {
    const OpRow &r = row(node);
    require(!y_strides || r.onednn_reads_views || r.convolution, r.name,
            " does not write its result with given strides");
    return r.prepare(scope, node, inputs, y_strides);
}

const OpRow *op_named(const std::string &name) {
    for (const OpRow &r : op_rows())
        if (name == r.name)
            return &r;
    return nullptr;
}

} // namespace mkc::graph
