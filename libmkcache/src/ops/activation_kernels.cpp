// Our own activation kernels (see activation_kernels.hpp): each element
// evaluated in double (ops/double_math.hpp) and rounded once. Each loop
// vectorizes; it is compiled for the x86-64 levels v4 (AVX-512), v3 (AVX2,
// FMA) and the baseline, and the loader picks one by the CPU's features
// (not its model, which an "arch=<cpu>" clone would require).
#include "ops/activation_kernels.hpp"

#include <cmath>
#include <cstring>
#include <vector>

#include "common/serial.hpp"
#include "ops/double_math.hpp"

namespace mkc::ops {

namespace {

using namespace double_math;

// One version per vector width, chosen by the CPU's features when the
// library is loaded (an ifunc). ThreadSanitizer's runtime is not started
// yet when the loader runs ifunc resolvers, and its instrumented resolver
// crashes there: such builds keep the default version only.
#if defined(__SANITIZE_THREAD__)
#define MKC_CLONES
#else
#define MKC_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif

// x f(x) with f(x) -> 0 as x -> -inf, where inf * (a tiny f) would give
// -inf: -0 there, the limit.
MKC_INLINE double vanishing(double x, double y) { return x == -INFINITY ? -0.0 : y; }

// One loop per kind, so the kind is decided once per call; `alpha` is the
// kind's parameter where it has one. Written out rather than through a
// lambda, which the compiler would not inline into the per-CPU clones.
#define MKC_ACTIVATION_LOOP(loop, expression)                                                    \
    MKC_CLONES void loop(const float *src, float *dst, int64_t n, double alpha) {               \
        (void)alpha;                                                                             \
        for (int64_t i = 0; i < n; ++i) {                                                        \
            const double x = src[i];                                                             \
            dst[i] = static_cast<float>(expression);                                             \
        }                                                                                        \
    }

MKC_ACTIVATION_LOOP(exp_loop, exp_double(x))
MKC_ACTIVATION_LOOP(log_loop, log_double(x))
MKC_ACTIVATION_LOOP(sigmoid_loop, sigmoid_double(x))
MKC_ACTIVATION_LOOP(swish_loop, std::fabs(x) == INFINITY && alpha * x < 0
                                    ? (x < 0 ? -0.0 : 0.0)
                                    : x * sigmoid_double(alpha * x))
MKC_ACTIVATION_LOOP(elu_loop, x > 0 ? x : alpha * expm1_double(x))
MKC_ACTIVATION_LOOP(gelu_erf_loop, vanishing(x, gelu_erf_double(x)))
MKC_ACTIVATION_LOOP(gelu_tanh_loop, vanishing(x, gelu_tanh_double(x)))
MKC_ACTIVATION_LOOP(mish_loop, vanishing(x, mish_double(x)))
MKC_ACTIVATION_LOOP(softplus_loop, softplus_double(x, alpha))

#undef MKC_ACTIVATION_LOOP

// The gradients' loops: diff_src = diff_dst * the derivative at src.
#define MKC_GRADIENT_LOOP(loop, expression)                                                      \
    MKC_CLONES void loop(const float *src, const float *diff_dst, float *diff_src, int64_t n,   \
                         double alpha) {                                                         \
        (void)alpha;                                                                             \
        for (int64_t i = 0; i < n; ++i) {                                                        \
            const double x = src[i];                                                             \
            diff_src[i] = static_cast<float>(diff_dst[i] * (expression));                        \
        }                                                                                        \
    }

MKC_GRADIENT_LOOP(exp_grad_loop, exp_double(x))
MKC_GRADIENT_LOOP(tanh_grad_loop, tanh_grad(x))
MKC_GRADIENT_LOOP(sigmoid_grad_loop, sigmoid_grad(x))
MKC_GRADIENT_LOOP(swish_grad_loop, swish_grad(x, alpha))
MKC_GRADIENT_LOOP(elu_grad_loop, elu_grad(x, alpha))
MKC_GRADIENT_LOOP(gelu_erf_grad_loop, gelu_erf_grad(x))
MKC_GRADIENT_LOOP(gelu_tanh_grad_loop, gelu_tanh_grad(x))
MKC_GRADIENT_LOOP(mish_grad_loop, mish_grad(x))
MKC_GRADIENT_LOOP(softplus_grad_loop, softplus_grad(x, alpha))

#undef MKC_GRADIENT_LOOP

// Sets every element of a blocked arrangement that lies beyond the value's
// dims (the padding of a blocked channel axis) to zero. The physical offset
// of a (padded) index is oneDNN's: the inner blocks, innermost last, then
// the outer strides.
void zero_padding(const dnnl::memory::desc &desc, float *data) {
    const auto dims = desc.get_dims();
    const auto padded = desc.get_padded_dims();
    if (dims == padded) return;
    const auto strides = desc.get_strides();
    const auto blocks = desc.get_inner_blks();
    const auto block_axes = desc.get_inner_idxs();
    const size_t rank = dims.size();
    std::vector<int64_t> index(rank, 0), pos(rank);
    for (;;) {
        bool in_padding = false;
        for (size_t d = 0; d < rank; ++d)
            in_padding = in_padding || index[d] >= dims[d];
        if (in_padding) {
            pos = index;
            int64_t offset = 0, step = 1;
            for (size_t k = blocks.size(); k-- > 0;) {
                const auto d = static_cast<size_t>(block_axes[k]);
                offset += (pos[d] % blocks[k]) * step;
                step *= blocks[k];
                pos[d] /= blocks[k];
            }
            for (size_t d = 0; d < rank; ++d)
                offset += pos[d] * strides[d];
            data[offset] = 0.0f;
        }
        size_t d = rank;
        while (d-- > 0 && ++index[d] == padded[d])
            index[d] = 0;
        if (d == static_cast<size_t>(-1)) break;
    }
}

} // namespace

bool own_activation_backward_kernel(mkc_activation_kind kind) {
    switch (kind) {
    case MKC_ACTIVATION_ELU:
    case MKC_ACTIVATION_GELU_ERF:
    case MKC_ACTIVATION_GELU_TANH:
    case MKC_ACTIVATION_TANH: // its forward is accurate, 1 - tanh^2 is not
    case MKC_ACTIVATION_SIGMOID:
    case MKC_ACTIVATION_SWISH:
    case MKC_ACTIVATION_MISH:
    case MKC_ACTIVATION_SOFTPLUS:
    case MKC_ACTIVATION_EXP:
        return true;
    default: // log's and sqrt's are accurate
        return false;
    }
}

bool own_activation_kernel(mkc_activation_kind kind) {
    switch (kind) {
    case MKC_ACTIVATION_ELU:
    case MKC_ACTIVATION_GELU_ERF:
    case MKC_ACTIVATION_GELU_TANH:
    case MKC_ACTIVATION_SIGMOID:
    case MKC_ACTIVATION_SWISH:
    case MKC_ACTIVATION_MISH:
    case MKC_ACTIVATION_SOFTPLUS:
    case MKC_ACTIVATION_EXP:
    case MKC_ACTIVATION_LOG:
        return true;
    default: // oneDNN's eltwise is accurate (or exact) for the others
        return false;
    }
}

namespace {

struct Job {
    mkc_activation_kind kind;
    double alpha;
    const float *src;
    float *dst;
    const float *diff_dst = nullptr; // a gradient's: dst is then diff_src
};

void run_gradient_part(void *context, int64_t begin, int64_t end) {
    const Job &job = *static_cast<const Job *>(context);
    const float *src = job.src + begin, *diff_dst = job.diff_dst + begin;
    float *diff_src = job.dst + begin;
    const int64_t n = end - begin;
    const double alpha = job.alpha;
    switch (job.kind) {
    case MKC_ACTIVATION_ELU: elu_grad_loop(src, diff_dst, diff_src, n, alpha); break;
    case MKC_ACTIVATION_GELU_ERF: gelu_erf_grad_loop(src, diff_dst, diff_src, n, alpha); break;
    case MKC_ACTIVATION_GELU_TANH: gelu_tanh_grad_loop(src, diff_dst, diff_src, n, alpha); break;
    case MKC_ACTIVATION_TANH: tanh_grad_loop(src, diff_dst, diff_src, n, alpha); break;
    case MKC_ACTIVATION_SIGMOID: sigmoid_grad_loop(src, diff_dst, diff_src, n, alpha); break;
    case MKC_ACTIVATION_SWISH: swish_grad_loop(src, diff_dst, diff_src, n, alpha); break;
    case MKC_ACTIVATION_MISH: mish_grad_loop(src, diff_dst, diff_src, n, alpha); break;
    case MKC_ACTIVATION_SOFTPLUS: softplus_grad_loop(src, diff_dst, diff_src, n, alpha); break;
    case MKC_ACTIVATION_EXP: exp_grad_loop(src, diff_dst, diff_src, n, alpha); break;
    default: break; // own_activation_backward_kernel said no
    }
}

void run_part(void *context, int64_t begin, int64_t end) {
    const Job &job = *static_cast<const Job *>(context);
    const float *src = job.src + begin;
    float *dst = job.dst + begin;
    const int64_t n = end - begin;
    const double alpha = job.alpha;
    switch (job.kind) {
    case MKC_ACTIVATION_ELU: elu_loop(src, dst, n, alpha); break;
    case MKC_ACTIVATION_GELU_ERF: gelu_erf_loop(src, dst, n, alpha); break;
    case MKC_ACTIVATION_GELU_TANH: gelu_tanh_loop(src, dst, n, alpha); break;
    case MKC_ACTIVATION_SIGMOID: sigmoid_loop(src, dst, n, alpha); break;
    case MKC_ACTIVATION_SWISH: swish_loop(src, dst, n, alpha); break;
    case MKC_ACTIVATION_MISH: mish_loop(src, dst, n, alpha); break;
    case MKC_ACTIVATION_SOFTPLUS: softplus_loop(src, dst, n, alpha); break;
    case MKC_ACTIVATION_EXP: exp_loop(src, dst, n, alpha); break;
    case MKC_ACTIVATION_LOG: log_loop(src, dst, n, alpha); break;
    default: break; // own_activation_kernel said no
    }
}

// Arrays up to this size run on the calling thread, where waking the team
// would cost a large part of the work.
constexpr int64_t kParallelElements = 1 << 15;

} // namespace

void activation_kernel(mkc_activation_kind kind, float alpha, float, const float *src, float *dst,
                       int64_t n) {
    Job job{kind, alpha, src, dst};
    parallel_parts(n, kParallelElements, run_part, &job);
}

void activation_kernel(mkc_activation_kind kind, float alpha, float beta,
                       const dnnl::memory::desc &desc, const float *src, float *dst) {
    activation_kernel(kind, alpha, beta, src, dst,
                      static_cast<int64_t>(desc.get_size() / sizeof(float)));
    zero_padding(desc, dst);
}

void activation_backward_kernel(mkc_activation_kind kind, float alpha, float,
                                const dnnl::memory::desc &desc, const float *src,
                                const float *diff_dst, float *diff_src) {
    Job job{kind, alpha, src, diff_src, diff_dst};
    parallel_parts(static_cast<int64_t>(desc.get_size() / sizeof(float)), kParallelElements,
                   run_gradient_part, &job);
    zero_padding(desc, diff_src);
}

} // namespace mkc::ops
