// What the 8-bit operators (quantized_conv2d, quantized_linear,
// quantized_matmul) share: their entry, the primitive argument of each
// port, the checks of scales and ports, the attributes that bind scales
// and zero points at run time.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "handler/handler.hpp"
#include "ops/quantized.hpp"

namespace mkc::ops {

// The primitive's argument per port.
inline constexpr int kQArg[kQPorts] = {DNNL_ARG_SRC,
                                       DNNL_ARG_WEIGHTS,
                                       DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC,
                                       DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS,
                                       DNNL_ARG_BIAS,
                                       DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC,
                                       DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST,
                                       DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST,
                                       0}; // port 8: a residual (the output buffer
                                           // holds it) or an addend (its post-op's)
inline constexpr const char *kQPortName[kQPorts] = {
    "src",       "weights",        "src_scale", "weight_scale", "bias", "src_zero_point",
    "dst_scale", "dst_zero_point", "residual"};

struct QuantizedEntry : PrimitiveEntry {
    dnnl::memory::desc y_md; // the result as the primitive writes it
    const char *op = "";
    size_t weight_bytes = 0; // checked on each run, without VNNI only (else 0)
    size_t weight_scales = 1;
    int addend_arg = 0;      // quantized_matmul's addend (its post-op's SRC_1); 0: none
};

// The weights' own bytes in a packed arrangement: its padded elements,
// without the compensation oneDNN may append after them.
size_t weight_elements(const dnnl::memory::desc &packed);

// Scales are data: checked on each run (a handful of floats).
void check_scales(const QuantizedEntry &e, const Buffers &buffers);
// Without VNNI: weights outside -63..63 are refused (UNSUPPORTED).
void check_weight_range(const QuantizedEntry &e, const void *weights);

bool quantized_dtype(mkc_dtype d);
// A scale or zero point: rank 1, of `dtype`, `n` elements (or 1).
void check_vector(const char *op, const QuantizedInputs &in, int port, mkc_dtype dtype,
                  int64_t n);
// The checks the operators share; `channels` is the output channels.
void check_ports(const char *op, mkc_dtype dst, const QuantizedInputs &in, int64_t channels);

// `sum`: a residual added before the activation (its scale, zero point).
struct SumPostOp {
    bool on = false;
    float scale = 1;
    int32_t zero_point = 0;
};

// Scales and zero points bound at run time (per output channel along
// `weights_mask` when weight_scale has more than one element), then the
// post-ops: a sum, an addend (whose argument `addend_arg` gets), the
// activation.
dnnl::primitive_attr quantization_attr(const QuantizedInputs &in, mkc_dtype dst,
                                       int weights_mask, mkc_activation_kind activation,
                                       float alpha, float beta, SumPostOp sum,
                                       const dnnl::memory::desc *addend, int *addend_arg);

// Everything a primitive depends on besides its attributes: the ports
// given and their dtypes and sizes.
void sign_ports(Handler &h, const QuantizedInputs &in);

// The scale and zero point ports' run-time arguments: plain vectors.
void add_quantization_args(std::vector<std::pair<int, dnnl::memory::desc>> &args,
                           const QuantizedInputs &in);

// No in_args: a program calls run() for every execution (rather than
// binding the primitive's arguments once), as run() checks the scales and,
// without VNNI, the weights it is given.
// What the operators' entries hold past the primitive: its arguments (the
// scales and zero points among them, and `extra` ones), the checks run()
// makes.
template <typename PrimitiveDesc>
void finish_entry(QuantizedEntry &e, const PrimitiveDesc &pd, const QuantizedInputs &in,
                  const char *op,
                  const std::vector<std::pair<int, dnnl::memory::desc>> &extra = {}) {
    std::vector<std::pair<int, dnnl::memory::desc>> args = {{DNNL_ARG_SRC, pd.src_desc()},
                                                            {DNNL_ARG_WEIGHTS, pd.weights_desc()},
                                                            {DNNL_ARG_DST, pd.dst_desc()}};
    if (in[kQBias]) args.push_back({DNNL_ARG_BIAS, pd.bias_desc()});
    add_quantization_args(args, in);
    args.insert(args.end(), extra.begin(), extra.end());
    e.set_args(args);
    e.add_scratchpad(pd);
    e.op = op;
    e.weight_scales = static_cast<size_t>(in[kQWeightScale]->dims[0]);
    e.weight_bytes = int8_pairs_saturate() ? weight_elements(pd.weights_desc()) : 0;
}

// What a quantized step reads per port: src as `src_takes`, the weights as
// the entry has them, the scales and zero points plain, a residual not at
// all (the output holds it).
Prepared prepared(const std::shared_ptr<QuantizedEntry> &entry, const QuantizedInputs &in,
                  const dnnl::memory::desc &src_takes, const ValueDesc &y);

} // namespace mkc::ops
