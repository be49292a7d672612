// The C++ tests of internal interfaces: registration, checks, and helpers
// for running an operator's phases beside its eager entry point.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/cache_scope.hpp"
#include "common/error.hpp"
#include "common/thread_state.hpp"
#include "graph/program.hpp"
#include "ops/phases.hpp"
#include "tensor/tensor.hpp"

namespace mkc::test {

// TEST(name) { ... }: registered at start-up, run by test_main in order.
struct Registration {
    Registration(const char *name, void (*fn)());
};
#define MKC_TEST_CONCAT2(a, b) a##b
#define MKC_TEST_CONCAT(a, b) MKC_TEST_CONCAT2(a, b)
#define TEST(name)                                                                \
    static void name();                                                           \
    static const ::mkc::test::Registration MKC_TEST_CONCAT(registration_, name)(#name, name); \
    static void name()

void report_failure(const char *file, int line, const std::string &what);
#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) ::mkc::test::report_failure(__FILE__, __LINE__, #cond);     \
    } while (0)
#define CHECK_EQ_TEXT(a, b)                                                      \
    do {                                                                         \
        const std::string check_a_ = (a), check_b_ = (b);                        \
        if (check_a_ != check_b_)                                                \
            ::mkc::test::report_failure(__FILE__, __LINE__,                      \
                                        "\"" + check_a_ + "\" != \"" + check_b_ + "\""); \
    } while (0)

// A scope as a program fills it: its own executor, keys without a thread,
// a memo context of its own.
CacheScope program_scope(uint64_t executor);

// An owned tensor of oneDNN-order `dims` in `layout`, plain, filled with
// values from a fixed sequence (seeded), or zeros.
std::unique_ptr<Tensor> tensor(const Dims &dims, mkc_layout layout = MKC_LAYOUT_CHANNELS_FIRST,
                               unsigned seed = 1, mkc_dtype dtype = MKC_DTYPE_F32);
std::unique_ptr<Tensor> zeros(const Dims &dims, mkc_layout layout = MKC_LAYOUT_CHANNELS_FIRST);
// `t`'s values converted to `dtype` (bfloat16: rounded), plain in its layout.
std::unique_ptr<Tensor> converted(const Tensor &t, mkc_dtype dtype);

// A tensor's values, plain in its caller layout.
std::vector<float> values(const Tensor &t);
// Bytes arranged as `desc`, plain in `layout` (caller order).
std::vector<float> values(const dnnl::memory::desc &desc, const void *data, mkc_layout layout);

// The error an eager call raises (status and message), or OK.
ops::Verdict error_of(const std::function<void()> &call);

using RunPhase = void (*)(const CacheScope &, PrimitiveEntry &, const ops::Buffers &);

// The tensors' values in fresh buffers arranged as `prepared.takes` says
// (an input with a view converted from its bytes read through it), as a
// run reads them; `held` keeps the buffers. A null input stays null.
std::vector<const void *> arranged_inputs(const CacheScope &scope, const ops::Prepared &prepared,
                                          const std::vector<const Tensor *> &inputs,
                                          std::vector<std::shared_ptr<void>> &held);

// Runs prepared phases on fresh buffers: the inputs (converted from the
// tensors to what `prepared.takes` says), the outputs' values returned
// plain. A null input stays absent (or unread).
std::vector<std::vector<float>> run_prepared(const CacheScope &scope, const ops::Prepared &prepared,
                                             const std::vector<const Tensor *> &inputs,
                                             RunPhase run);
// The same with buffers only for the outputs `wanted` says (the others get
// none); an output's values are empty where it got no buffer.
std::vector<std::vector<float>> run_some(const CacheScope &scope, const ops::Prepared &prepared,
                                         const std::vector<const Tensor *> &inputs,
                                         const std::vector<bool> &wanted, RunPhase run);

// A program of `graph` compiled with `options` and run once on `inputs`
// (one per graph input): every output's values, and the plan it ran.
struct ProgramRun {
    std::vector<std::vector<float>> outputs;
    std::shared_ptr<const graph::Plan> plan;
};
ProgramRun run_program(const graph::Graph &graph, const graph::ProgramOptions &options,
                       const std::vector<const Tensor *> &inputs);

// tensor() marked constant (a graph's weights), channels-first.
std::shared_ptr<Tensor> constant(const Dims &dims, unsigned seed);

// A tensor's description, or none for an absent optional one (`holder`
// keeps it).
const ops::ValueDesc *described(const Tensor *t, ops::ValueDesc &holder);

// `t`'s values re-arranged as nChw16c (a conv output's arrangement).
std::unique_ptr<Tensor> blocked(const Tensor &t);

// An eager result handed back as a new tensor: its values, and the handle
// released.
std::vector<float> take_values(mkc_tensor *t);

// Largest |a - b| / max(1, |b|) over the elements (inf on a size mismatch).
double max_rel_diff(const std::vector<float> &a, const std::vector<float> &b);

} // namespace mkc::test
