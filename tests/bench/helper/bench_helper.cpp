// libmkcache_bench: operator calls in C loops, so the Python benchmark suite
// can time, in one run and without ctypes overhead inside the loop:
//   BARE        the oneDNN primitive created once and executed directly
//   CACHED      mkcache's C ABI on a cache hit, writing into an existing dst
//   CACHED_NEW  the same, letting mkcache create the output tensor each call
//   RECREATE    descriptor + primitive re-created on every call, served by
//               oneDNN's own primitive cache (what a framework without ours pays)
//   BARE_USER_SCRATCHPAD  (conv2d) BARE with the scratchpad passed at execution,
//               as mkcache's primitives take it (oneDNN's own scratchpad is not
//               safe to share between threads): what that choice costs.
// A bench is set up once (mkcb_create: build, warm up); mkcb_run(bench, n)
// then makes n calls. Not part of the library's ABI.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "bench_common.hpp"
#include "mkcache/mkcache.h"

#define MKCB_API extern "C" __attribute__((visibility("default")))

namespace {

using namespace mkcb;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

thread_local std::string last_error;

// --------------------------------------------------------------------- conv

struct ConvShape {
    int64_t n, ic, oc, h, w, k, stride, pad;
    dnnl::memory::dims src() const { return {n, ic, h, w}; }
    dnnl::memory::dims wei() const { return {oc, ic, k, k}; }
    dnnl::memory::dims dst() const {
        return {n, oc, (h + 2 * pad - k) / stride + 1, (w + 2 * pad - k) / stride + 1};
    }
};

dnnl::convolution_forward::primitive_desc conv_pd(const ConvShape &s,
                                                 bool user_scratchpad = false) {
    dnnl::primitive_attr attr;
    if (user_scratchpad) attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return dnnl::convolution_forward::primitive_desc(
        engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        dnnl::memory::desc(s.src(), dt::f32, tag::any),
        dnnl::memory::desc(s.wei(), dt::f32, tag::any), dnnl::memory::desc({s.oc}, dt::f32, tag::a),
        dnnl::memory::desc(s.dst(), dt::f32, tag::any), {s.stride, s.stride}, {0, 0},
        {s.pad, s.pad}, {s.pad, s.pad}, attr);
}

struct ConvBare : Bench {
    dnnl::convolution_forward prim;
    dnnl::memory src, wei, bias, dst, scratchpad;
    dnnl::stream stream{engine()};
    dnnl_exec_arg_t args[5];
    int nargs = 4;
    ConvBare(const ConvShape &s, bool user_scratchpad) {
        auto pd = conv_pd(s, user_scratchpad);
        prim = dnnl::convolution_forward(pd);
        src = dnnl::memory(pd.src_desc(), engine());
        wei = dnnl::memory(pd.weights_desc(), engine());
        bias = dnnl::memory(pd.bias_desc(), engine());
        dst = dnnl::memory(pd.dst_desc(), engine());
        for (auto *m : {&src, &wei, &bias})
            std::memset(m->get_data_handle(), 0, m->get_desc().get_size());
        args[0] = {DNNL_ARG_SRC, src.get()};
        args[1] = {DNNL_ARG_WEIGHTS, wei.get()};
        args[2] = {DNNL_ARG_BIAS, bias.get()};
        args[3] = {DNNL_ARG_DST, dst.get()};
        if (user_scratchpad && pd.scratchpad_desc().get_size() > 0) {
            scratchpad = dnnl::memory(pd.scratchpad_desc(), engine());
            args[nargs++] = {DNNL_ARG_SCRATCHPAD, scratchpad.get()};
        }
    }
    void call() override {
        dnnl_primitive_execute(prim.get(), stream.get(), nargs, args);
        dnnl_stream_wait(stream.get());
    }
};

struct ConvRecreate : Bench {
    ConvShape s;
    std::vector<float> src, wei, bias, dst;
    dnnl::stream stream{engine()};
    explicit ConvRecreate(const ConvShape &shape) : s(shape) {
        // Buffers in the layouts the primitive picks, so a call is descriptor
        // + primitive creation + execution, no reorders.
        auto pd = conv_pd(s);
        src.assign(pd.src_desc().get_size() / 4, 0.f);
        wei.assign(pd.weights_desc().get_size() / 4, 0.f);
        bias.assign(s.oc, 0.f);
        dst.assign(pd.dst_desc().get_size() / 4, 0.f);
    }
    void call() override {
        auto pd = conv_pd(s);
        dnnl::convolution_forward prim(pd);
        dnnl::memory m_src(pd.src_desc(), engine(), src.data()),
            m_wei(pd.weights_desc(), engine(), wei.data()),
            m_bias(pd.bias_desc(), engine(), bias.data()),
            m_dst(pd.dst_desc(), engine(), dst.data());
        prim.execute(stream, {{DNNL_ARG_SRC, m_src}, {DNNL_ARG_WEIGHTS, m_wei},
                              {DNNL_ARG_BIAS, m_bias}, {DNNL_ARG_DST, m_dst}});
        stream.wait();
    }
};

struct ConvCached : Bench {
    AlignedBuffer xs, ws, bs, ids;
    mkc_tensor *x_plain = nullptr, *w = nullptr, *b = nullptr, *w_id = nullptr, *x = nullptr,
               *y = nullptr;
    mkc_conv_params p;
    bool new_output;
    ConvCached(const ConvShape &s, bool new_out)
        : xs(s.n * s.ic * s.h * s.w, 0.5f), ws(s.oc * s.ic * s.k * s.k, 0.01f), bs(s.oc, 0.f),
          ids(s.ic * s.ic, 0.f), new_output(new_out) {
        try {
            const int64_t xd[4] = {s.n, s.h, s.w, s.ic}, wd[4] = {s.oc, s.ic, s.k, s.k},
                          bd[1] = {s.oc}, idd[4] = {s.ic, s.ic, 1, 1};
            check(mkc_tensor_wrap(MKC_DTYPE_F32, 4, xd, MKC_LAYOUT_NHWC, xs.data, &x_plain));
            check(mkc_tensor_wrap(MKC_DTYPE_F32, 4, wd, MKC_LAYOUT_NCHW, ws.data, &w));
            check(mkc_tensor_wrap(MKC_DTYPE_F32, 1, bd, MKC_LAYOUT_NCHW, bs.data, &b));
            check(mkc_tensor_wrap(MKC_DTYPE_F32, 4, idd, MKC_LAYOUT_NCHW, ids.data, &w_id));
            check(mkc_tensor_set_constant(w, 1));
            check(mkc_tensor_set_constant(w_id, 1));
            // The input comes from a library op (a 1x1 conv), as inside a
            // model: in the layout oneDNN's convolutions produce and consume.
            mkc_conv_params p1;
            check(mkc_conv_params_init(&p1));
            p1.data_format = MKC_LAYOUT_NHWC;
            p1.name = "bench_producer";
            check(mkc_conv2d(&p1, x_plain, w_id, nullptr, &x));
            check(mkc_conv_params_init(&p));
            p.stride[0] = p.stride[1] = s.stride;
            p.pad_begin[0] = p.pad_begin[1] = p.pad_end[0] = p.pad_end[1] = s.pad;
            p.data_format = MKC_LAYOUT_NHWC;
            p.name = "bench_conv";
            check(mkc_conv2d(&p, x, w, b, &y)); // builds the entry, converts weights once
        } catch (...) {
            release();
            throw;
        }
    }
    void release() {
        for (mkc_tensor *t : {x_plain, w, b, w_id, x, y}) mkc_tensor_destroy(t);
    }
    ~ConvCached() override { release(); }
    void call() override {
        if (new_output) {
            mkc_tensor *out = nullptr;
            mkc_conv2d(&p, x, w, b, &out);
            mkc_tensor_destroy(out);
        } else {
            mkc_conv2d(&p, x, w, b, &y);
        }
    }
};

// --------------------------------------------------------------------- relu

dnnl::eltwise_forward::primitive_desc relu_pd(const dnnl::memory::desc &md) {
    return dnnl::eltwise_forward::primitive_desc(engine(), dnnl::prop_kind::forward_inference,
                                                 dnnl::algorithm::eltwise_relu, md, md, 0.f, 0.f);
}

struct ReluBare : Bench {
    dnnl::eltwise_forward prim;
    dnnl::memory src, dst;
    dnnl::stream stream{engine()};
    dnnl_exec_arg_t args[2];
    explicit ReluBare(const dnnl::memory::dims &dims) {
        const dnnl::memory::desc md(dims, dt::f32, dims.size() == 2 ? tag::ab : tag::abcd);
        prim = dnnl::eltwise_forward(relu_pd(md));
        src = dnnl::memory(md, engine());
        dst = dnnl::memory(md, engine());
        std::memset(src.get_data_handle(), 0, md.get_size());
        args[0] = {DNNL_ARG_SRC, src.get()};
        args[1] = {DNNL_ARG_DST, dst.get()};
    }
    void call() override {
        dnnl_primitive_execute(prim.get(), stream.get(), 2, args);
        dnnl_stream_wait(stream.get());
    }
};

struct ReluRecreate : Bench {
    dnnl::memory::desc md;
    std::vector<float> src, dst;
    dnnl::stream stream{engine()};
    explicit ReluRecreate(const dnnl::memory::dims &dims)
        : md(dims, dt::f32, dims.size() == 2 ? tag::ab : tag::abcd), src(md.get_size() / 4),
          dst(md.get_size() / 4) {}
    void call() override {
        auto pd = relu_pd(md);
        dnnl::eltwise_forward prim(pd);
        dnnl::memory m_src(md, engine(), src.data()), m_dst(md, engine(), dst.data());
        prim.execute(stream, {{DNNL_ARG_SRC, m_src}, {DNNL_ARG_DST, m_dst}});
        stream.wait();
    }
};

struct ReluCached : Bench {
    static size_t count(const dnnl::memory::dims &dims) {
        size_t n = 1;
        for (auto d : dims) n *= static_cast<size_t>(d);
        return n;
    }
    AlignedBuffer src, dst;
    mkc_tensor *x = nullptr, *y = nullptr;
    bool new_output;
    ReluCached(const dnnl::memory::dims &dims, bool new_out)
        : src(count(dims), -1.f), dst(count(dims), 0.f), new_output(new_out) {
        try {
            check(mkc_tensor_wrap(MKC_DTYPE_F32, static_cast<int>(dims.size()), dims.data(),
                                  MKC_LAYOUT_NCHW, src.data, &x));
            check(mkc_tensor_wrap(MKC_DTYPE_F32, static_cast<int>(dims.size()), dims.data(),
                                  MKC_LAYOUT_NCHW, dst.data, &y));
            check(mkc_activation(MKC_ACTIVATION_RELU, 0.f, 0.f, "bench_relu", x, &y));
        } catch (...) {
            release();
            throw;
        }
    }
    void release() {
        mkc_tensor_destroy(x);
        mkc_tensor_destroy(y);
    }
    ~ReluCached() override { release(); }
    void call() override {
        if (new_output) {
            mkc_tensor *out = nullptr;
            mkc_activation(MKC_ACTIVATION_RELU, 0.f, 0.f, "bench_relu", x, &out);
            mkc_tensor_destroy(out);
        } else {
            mkc_activation(MKC_ACTIVATION_RELU, 0.f, 0.f, "bench_relu", x, &y);
        }
    }
};

} // namespace

MKCB_API const char *mkcb_last_error(void) { return last_error.c_str(); }

// op "conv2d": params = {n, ic, oc, h, w, k, stride, pad}
// op "relu":   params = dims (rank 2 or 4)
// others (bench_ops.cpp): "max_pool" {n, c, h, w, k, stride, pad}, "lrn" {n, c, h,
// w, size}, "batch_norm" {n, c, h, w}, "softmax" {4 dims, last axis}, "linear"
// {m, k, n}, "gelu" {m, n}, "layer_norm" {m, n}, "add" dims (rank 2 or 4)
// Returns NULL on failure (see mkcb_last_error).
MKCB_API void *mkcb_create(const char *op, int mode, const int64_t *params, int nparams) {
    try {
        std::unique_ptr<Bench> b;
        const std::string name = op ? op : "";
        if (name == "conv2d" && nparams == 8) {
            const ConvShape s{params[0], params[1], params[2], params[3],
                              params[4], params[5], params[6], params[7]};
            if (mode == BARE || mode == BARE_USER_SCRATCHPAD)
                b = std::make_unique<ConvBare>(s, mode == BARE_USER_SCRATCHPAD);
            else if (mode == CACHED || mode == CACHED_NEW) b = std::make_unique<ConvCached>(s, mode == CACHED_NEW);
            else if (mode == RECREATE) b = std::make_unique<ConvRecreate>(s);
        } else if (name == "relu" && (nparams == 2 || nparams == 4)) {
            const dnnl::memory::dims dims(params, params + nparams);
            if (mode == BARE) b = std::make_unique<ReluBare>(dims);
            else if (mode == CACHED || mode == CACHED_NEW) b = std::make_unique<ReluCached>(dims, mode == CACHED_NEW);
            else if (mode == RECREATE) b = std::make_unique<ReluRecreate>(dims);
        }
        if (!b && name != "conv2d" && name != "relu")
            b = make_op_bench(name, mode, std::vector<int64_t>(params, params + nparams));
        if (!b) throw std::runtime_error("unknown op/mode/params: " + name);
        b->call(); // warm-up
        check(mkc_get_reorder_count(&b->reorders_before));
        return b.release();
    } catch (const std::exception &e) {
        last_error = e.what();
    }
    return nullptr;
}

// `iters` runs of a program with one input and one output through the C
// entry a binding uses (mkc_program_run_plain): what a run costs without
// the binding. Returns the first failure's status (0: all ran).
MKCB_API int mkcb_program_run(void *program, const int64_t *input_dims, const void *x, void *y,
                              int64_t iters) {
    const void *inputs[] = {x};
    void *outputs[] = {y};
    auto *p = static_cast<mkc_program *>(program);
    for (int64_t i = 0; i < iters; ++i)
        if (const mkc_status s = mkc_program_run_plain(p, input_dims, inputs, outputs)) return s;
    return 0;
}

MKCB_API void mkcb_run(void *bench, int64_t iters) {
    auto *b = static_cast<Bench *>(bench);
    for (int64_t i = 0; i < iters; ++i) b->call();
}

// Layout conversions mkcache executed since mkcb_create (0 for BARE/RECREATE
// unless other mkcache work ran meanwhile).
MKCB_API uint64_t mkcb_reorders_since_create(void *bench) {
    uint64_t now = 0;
    mkc_get_reorder_count(&now);
    return now - static_cast<Bench *>(bench)->reorders_before;
}

MKCB_API void mkcb_destroy(void *bench) { delete static_cast<Bench *>(bench); }

// Paired timing, robust to a noisy shared machine: alternates blocks of
// `calls` calls of bench `a` and bench `b`, `blocks` times, and returns the
// median seconds per call of each and the median of the per-block
// differences (b - a).
namespace {

// This thread's OpenMP thread count (omp_set_num_threads of the runtime
// libdnnl loaded); returns the previous one, 0 if the runtime is not found.
int set_openmp_threads(int threads) {
    void *omp = dlopen("libiomp5.so", RTLD_LAZY | RTLD_NOLOAD);
    if (omp == nullptr) return 0;
    auto get = reinterpret_cast<int (*)()>(dlsym(omp, "omp_get_max_threads"));
    auto set = reinterpret_cast<void (*)(int)>(dlsym(omp, "omp_set_num_threads"));
    int previous = 0;
    if (get && set) {
        previous = get();
        set(threads);
    }
    dlclose(omp);
    return previous;
}

} // namespace

// `openmp_threads` > 0: measured with that many OpenMP threads (e.g. 1, so
// the serial parts of bare and cached calls are compared like for like).
MKCB_API void mkcb_paired(void *a, void *b, int64_t calls, int blocks, int openmp_threads,
                          double *median_a, double *median_b, double *median_diff) {
    const int previous = openmp_threads > 0 ? set_openmp_threads(openmp_threads) : 0;
    std::vector<double> ta, tb, diff;
    auto time_block = [calls](Bench *bench) {
        auto t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < calls; ++i) bench->call();
        auto t1 = std::chrono::steady_clock::now();
        return std::chrono::duration<double>(t1 - t0).count() / static_cast<double>(calls);
    };
    for (int i = 0; i < blocks; ++i) {
        const double x = time_block(static_cast<Bench *>(a));
        const double y = time_block(static_cast<Bench *>(b));
        ta.push_back(x);
        tb.push_back(y);
        diff.push_back(y - x);
    }
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    *median_a = median(ta);
    *median_b = median(tb);
    *median_diff = median(diff);
    if (previous > 0) set_openmp_threads(previous);
}

// Cache microbenchmark through the C ABI: `threads` threads look up keys
// of `entries` caller blobs (hit) or absent keys (miss) in one session for
// about `seconds`; returns lookups per second (0 on failure). A hit includes
// taking and releasing the blob reference.
MKCB_API double mkcb_cache_lookups(int entries, int threads, int hit, double seconds) {
    static int payload = 0;
    const uint64_t executor = 0xBE7C4;
    const int64_t session = 0x5E55;
    std::vector<std::string> keys(entries), absent(entries);
    for (int i = 0; i < entries; ++i) {
        keys[i] = "bench_key_" + std::to_string(i);
        absent[i] = "bench_absent_" + std::to_string(i);
    }
    mkc_set_executor(executor);
    mkc_cache_set_session(session);
    for (int i = 0; i < entries; ++i)
        if (mkc_cache_set_blob(keys[i].c_str(), &payload, 0, nullptr) != MKC_STATUS_OK) return 0;
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> total{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            mkc_cache_set_session(session);
            const auto &names = hit ? keys : absent;
            uint64_t n = 0;
            size_t i = static_cast<size_t>(t) * 7919;
            while (!stop.load(std::memory_order_relaxed)) {
                for (int k = 0; k < 256; ++k, ++n) {
                    mkc_blob *blob = nullptr;
                    mkc_cache_get_blob(names[i++ % names.size()].c_str(), &blob);
                    mkc_blob_release(blob);
                }
            }
            total.fetch_add(n);
        });
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    for (auto &th : pool) th.join();
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    mkc_cache_reset_executor(executor);
    mkc_set_executor(0);
    mkc_cache_set_session(0);
    return static_cast<double>(total.load()) / elapsed;
}
