// libmkcache_bench: times operator calls in C loops, so the Python benchmark
// suite can compare, in one run and without ctypes overhead in the loop:
//   BARE      the oneDNN primitive created once and executed directly
//   CACHED    mkcache's C ABI on a cache hit, writing into a preallocated dst
//   CACHED_NEW  the same, letting mkcache create the output tensor
//   RECREATE  descriptor + primitive re-created on every call, served by
//             oneDNN's own primitive cache (what a framework without ours pays)
// Each function returns 0 and the mean nanoseconds per call over `iters`
// calls, or -1 with a message in mkcb_last_error(). Not part of the ABI.
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "mkcache/mkcache.h"

#define MKCB_API extern "C" __attribute__((visibility("default")))

namespace {

enum Mode { BARE = 0, CACHED = 1, CACHED_NEW = 2, RECREATE = 3 };
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

thread_local std::string last_error;

const dnnl::engine &engine() {
    static dnnl::engine e(dnnl::engine::kind::cpu, 0);
    return e;
}

template <typename F>
double time_loop(int iters, F &&call) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) call();
    auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / iters;
}

void check(mkc_status s) {
    if (s != MKC_STATUS_OK) throw std::runtime_error(mkc_last_error());
}

struct ConvShape {
    int64_t n, ic, oc, h, w, kh, kw, stride, pad;
    dnnl::memory::dims src() const { return {n, ic, h, w}; }
    dnnl::memory::dims wei() const { return {oc, ic, kh, kw}; }
    dnnl::memory::dims dst() const {
        return {n, oc, (h + 2 * pad - kh) / stride + 1, (w + 2 * pad - kw) / stride + 1};
    }
};

dnnl::convolution_forward::primitive_desc conv_pd(const ConvShape &s) {
    return dnnl::convolution_forward::primitive_desc(
        engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        dnnl::memory::desc(s.src(), dt::f32, tag::any), dnnl::memory::desc(s.wei(), dt::f32, tag::any),
        dnnl::memory::desc({s.oc}, dt::f32, tag::a), dnnl::memory::desc(s.dst(), dt::f32, tag::any),
        {s.stride, s.stride}, {0, 0}, {s.pad, s.pad}, {s.pad, s.pad});
}

double conv_bare(const ConvShape &s, int iters) {
    auto pd = conv_pd(s);
    dnnl::convolution_forward prim(pd);
    dnnl::memory src(pd.src_desc(), engine()), wei(pd.weights_desc(), engine()),
        bias(pd.bias_desc(), engine()), dst(pd.dst_desc(), engine());
    std::memset(src.get_data_handle(), 0, pd.src_desc().get_size());
    std::memset(wei.get_data_handle(), 0, pd.weights_desc().get_size());
    std::memset(bias.get_data_handle(), 0, pd.bias_desc().get_size());
    dnnl::stream stream(engine());
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, src.get()}, {DNNL_ARG_WEIGHTS, wei.get()},
                               {DNNL_ARG_BIAS, bias.get()}, {DNNL_ARG_DST, dst.get()}};
    auto call = [&] {
        dnnl_primitive_execute(prim.get(), stream.get(), 4, args);
        dnnl_stream_wait(stream.get());
    };
    call();
    return time_loop(iters, call);
}

double conv_recreate(const ConvShape &s, int iters) {
    // Buffers in the layouts the primitive picks (queried once), so the loop
    // measures descriptor + primitive creation + execution, no reorders.
    auto pd0 = conv_pd(s);
    std::vector<float> src(pd0.src_desc().get_size() / 4), wei(pd0.weights_desc().get_size() / 4),
        bias(s.oc), dst(pd0.dst_desc().get_size() / 4);
    dnnl::stream stream(engine());
    auto call = [&] {
        auto pd = conv_pd(s);
        dnnl::convolution_forward prim(pd);
        dnnl::memory m_src(pd.src_desc(), engine(), src.data()),
            m_wei(pd.weights_desc(), engine(), wei.data()),
            m_bias(pd.bias_desc(), engine(), bias.data()),
            m_dst(pd.dst_desc(), engine(), dst.data());
        prim.execute(stream, {{DNNL_ARG_SRC, m_src}, {DNNL_ARG_WEIGHTS, m_wei},
                              {DNNL_ARG_BIAS, m_bias}, {DNNL_ARG_DST, m_dst}});
        stream.wait();
    };
    call();
    return time_loop(iters, call);
}

double conv_cached(const ConvShape &s, int iters, bool new_output, double *reorders_per_call) {
    mkc_tensor *x_plain = nullptr, *w = nullptr, *b = nullptr, *w_id = nullptr, *x = nullptr,
               *y = nullptr;
    std::vector<float> xs(s.n * s.ic * s.h * s.w, 0.5f), ws(s.oc * s.ic * s.kh * s.kw, 0.01f),
        bs(s.oc, 0.f), ids(s.ic * s.ic, 0.f);
    auto cleanup = [&] {
        for (mkc_tensor *t : {x_plain, w, b, w_id, x, y}) mkc_tensor_destroy(t);
    };
    try {
        const int64_t xd[4] = {s.n, s.h, s.w, s.ic}, wd[4] = {s.oc, s.ic, s.kh, s.kw},
                      bd[1] = {s.oc}, idd[4] = {s.ic, s.ic, 1, 1};
        check(mkc_tensor_wrap(MKC_DTYPE_F32, 4, xd, MKC_LAYOUT_NHWC, xs.data(), &x_plain));
        check(mkc_tensor_wrap(MKC_DTYPE_F32, 4, wd, MKC_LAYOUT_NCHW, ws.data(), &w));
        check(mkc_tensor_wrap(MKC_DTYPE_F32, 1, bd, MKC_LAYOUT_NCHW, bs.data(), &b));
        check(mkc_tensor_wrap(MKC_DTYPE_F32, 4, idd, MKC_LAYOUT_NCHW, ids.data(), &w_id));
        check(mkc_tensor_set_constant(w, 1));
        check(mkc_tensor_set_constant(w_id, 1));
        // The input comes from a library op (a 1x1 conv), as inside a model:
        // it is in the layout oneDNN's convolutions produce and consume.
        mkc_conv2d_params p1;
        check(mkc_conv2d_params_init(&p1));
        p1.data_format = MKC_LAYOUT_NHWC;
        p1.name = "bench_producer";
        check(mkc_conv2d(&p1, x_plain, w_id, nullptr, &x));
        mkc_conv2d_params p;
        check(mkc_conv2d_params_init(&p));
        p.stride[0] = p.stride[1] = s.stride;
        p.pad_begin[0] = p.pad_begin[1] = p.pad_end[0] = p.pad_end[1] = s.pad;
        p.data_format = MKC_LAYOUT_NHWC;
        p.name = "bench_conv";
        check(mkc_conv2d(&p, x, w, b, &y)); // warm-up: builds the entry
        uint64_t r0 = 0, r1 = 0;
        check(mkc_get_reorder_count(&r0));
        double ns;
        if (new_output) {
            ns = time_loop(iters, [&] {
                mkc_tensor *out = nullptr;
                mkc_conv2d(&p, x, w, b, &out);
                mkc_tensor_destroy(out);
            });
        } else {
            ns = time_loop(iters, [&] { mkc_conv2d(&p, x, w, b, &y); });
        }
        check(mkc_get_reorder_count(&r1));
        *reorders_per_call = double(r1 - r0) / iters;
        cleanup();
        return ns;
    } catch (...) {
        cleanup();
        throw;
    }
}

double relu_bare(int64_t n, int iters) {
    dnnl::memory::desc md({1, n}, dt::f32, tag::ab);
    dnnl::eltwise_forward::primitive_desc pd(engine(), dnnl::prop_kind::forward_inference,
                                             dnnl::algorithm::eltwise_relu, md, md, 0.f, 0.f);
    dnnl::eltwise_forward prim(pd);
    dnnl::memory src(md, engine()), dst(md, engine());
    std::memset(src.get_data_handle(), 0, md.get_size());
    dnnl::stream stream(engine());
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_SRC, src.get()}, {DNNL_ARG_DST, dst.get()}};
    auto call = [&] {
        dnnl_primitive_execute(prim.get(), stream.get(), 2, args);
        dnnl_stream_wait(stream.get());
    };
    call();
    return time_loop(iters, call);
}

double relu_recreate(int64_t n, int iters) {
    std::vector<float> src(n), dst(n);
    dnnl::memory::desc md({1, n}, dt::f32, tag::ab);
    dnnl::stream stream(engine());
    auto call = [&] {
        dnnl::eltwise_forward::primitive_desc pd(engine(), dnnl::prop_kind::forward_inference,
                                                 dnnl::algorithm::eltwise_relu, md, md, 0.f, 0.f);
        dnnl::eltwise_forward prim(pd);
        dnnl::memory m_src(md, engine(), src.data()), m_dst(md, engine(), dst.data());
        prim.execute(stream, {{DNNL_ARG_SRC, m_src}, {DNNL_ARG_DST, m_dst}});
        stream.wait();
    };
    call();
    return time_loop(iters, call);
}

double relu_cached(int64_t n, int iters, bool new_output, double *reorders_per_call) {
    std::vector<float> src(n, -1.f), dst(n);
    mkc_tensor *x = nullptr, *y = nullptr;
    auto cleanup = [&] {
        mkc_tensor_destroy(x);
        mkc_tensor_destroy(y);
    };
    try {
        const int64_t d[2] = {1, n};
        check(mkc_tensor_wrap(MKC_DTYPE_F32, 2, d, MKC_LAYOUT_NCHW, src.data(), &x));
        check(mkc_tensor_wrap(MKC_DTYPE_F32, 2, d, MKC_LAYOUT_NCHW, dst.data(), &y));
        check(mkc_activation(MKC_ACTIVATION_RELU, 0.f, 0.f, "bench_relu", x, &y));
        uint64_t r0 = 0, r1 = 0;
        check(mkc_get_reorder_count(&r0));
        double ns;
        if (new_output) {
            ns = time_loop(iters, [&] {
                mkc_tensor *out = nullptr;
                mkc_activation(MKC_ACTIVATION_RELU, 0.f, 0.f, "bench_relu", x, &out);
                mkc_tensor_destroy(out);
            });
        } else {
            ns = time_loop(iters, [&] {
                mkc_activation(MKC_ACTIVATION_RELU, 0.f, 0.f, "bench_relu", x, &y);
            });
        }
        check(mkc_get_reorder_count(&r1));
        *reorders_per_call = double(r1 - r0) / iters;
        cleanup();
        return ns;
    } catch (...) {
        cleanup();
        throw;
    }
}

template <typename F>
int run(F &&f) {
    try {
        f();
        return 0;
    } catch (const std::exception &e) {
        last_error = e.what();
    } catch (...) {
        last_error = "unknown error";
    }
    return -1;
}

} // namespace

MKCB_API const char *mkcb_last_error(void) { return last_error.c_str(); }

// Conv: src [n, ic, h, w], weights [oc, ic, k, k], bias, square stride/pad.
MKCB_API int mkcb_conv2d(int mode, int64_t n, int64_t ic, int64_t oc, int64_t h, int64_t w,
                         int64_t k, int64_t stride, int64_t pad, int iters, double *ns_per_call,
                         double *reorders_per_call) {
    return run([&] {
        const ConvShape s{n, ic, oc, h, w, k, k, stride, pad};
        *reorders_per_call = 0;
        switch (mode) {
        case BARE: *ns_per_call = conv_bare(s, iters); break;
        case CACHED: *ns_per_call = conv_cached(s, iters, false, reorders_per_call); break;
        case CACHED_NEW: *ns_per_call = conv_cached(s, iters, true, reorders_per_call); break;
        case RECREATE: *ns_per_call = conv_recreate(s, iters); break;
        default: throw std::runtime_error("unknown mode");
        }
    });
}

// ReLU on a [1, n] tensor.
MKCB_API int mkcb_relu(int mode, int64_t n, int iters, double *ns_per_call,
                       double *reorders_per_call) {
    return run([&] {
        *reorders_per_call = 0;
        switch (mode) {
        case BARE: *ns_per_call = relu_bare(n, iters); break;
        case CACHED: *ns_per_call = relu_cached(n, iters, false, reorders_per_call); break;
        case CACHED_NEW: *ns_per_call = relu_cached(n, iters, true, reorders_per_call); break;
        case RECREATE: *ns_per_call = relu_recreate(n, iters); break;
        default: throw std::runtime_error("unknown mode");
        }
    });
}
