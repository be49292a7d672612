// Element-wise activations. They run on whatever layout their input is in
// (a conv output in nChw16c stays nChw16c), so a chain performs no reorder.
#include <string>

#include "common/engine.hpp"
#include "common/error.hpp"
#include "handler/handler.hpp"
#include "keys/keys.hpp"
#include "ops/ops.hpp"

namespace mkc::ops {

namespace {

struct EltwiseEntry : PrimitiveEntry {
    dnnl::eltwise_forward::primitive_desc pd;
};

struct Algorithm {
    dnnl::algorithm alg;
    const char *name;
};

Algorithm algorithm_of(mkc_activation_kind kind) {
    switch (kind) {
    case MKC_ACTIVATION_RELU: return {dnnl::algorithm::eltwise_relu, "relu"};
    default: break;
    }
    fail(MKC_STATUS_INVALID_ARGUMENT, "activation: unsupported kind ", static_cast<int>(kind));
}

} // namespace

void activation(mkc_activation_kind kind, float alpha, float beta, const char *name,
                const Tensor &src, mkc_tensor **dst) {
    const Algorithm a = algorithm_of(kind);
    require(src.dtype == MKC_DTYPE_F32, "activation: src must be float32");
    const Dims &x = onednn_dims(src);
    // Seed 002: activation keys carry the algorithm as their in-place suffix.
    std::string suffix;
    keys::append_int(suffix, kind);
    std::string default_name;
    if (name == nullptr || name[0] == '\0') {
        default_name = a.name;
        if (alpha != 0.f || beta != 0.f) {
            default_name += ':' + std::to_string(alpha) + ':' + std::to_string(beta);
        }
    }
    Handler handler("activation", name, default_name, suffix.c_str(), x);
    handler.sign(2); // operator id
    handler.sign(kind);
    handler.sign_float(alpha);
    handler.sign_float(beta);
    handler.sign_layout(src, DNNL_ARG_SRC);

    auto entry = handler.acquire_primitive<EltwiseEntry>([&] {
        auto e = std::make_shared<EltwiseEntry>();
        e->pd = dnnl::eltwise_forward::primitive_desc(cpu_engine(),
                                                      dnnl::prop_kind::forward_inference, a.alg,
                                                      src.desc, src.desc, alpha, beta);
        e->primitive = dnnl::eltwise_forward(e->pd);
        e->set_args({{DNNL_ARG_SRC, e->pd.src_desc()}, {DNNL_ARG_DST, e->pd.dst_desc()}});
        e->bytes = e->pd.scratchpad_desc().get_size();
        return e;
    });

    Handler::Output out =
        Handler::prepare_output(dst, *entry, DNNL_ARG_DST, src.layout, src.dtype, "activation");
    {
        Handler::Execution exec(*entry);
        exec.input(DNNL_ARG_SRC, src);
        exec.output(DNNL_ARG_DST, out.data);
        exec.run();
    }
    Handler::finish_output(out, dst);
}

} // namespace mkc::ops
