// An operator's four phases, for callers that hold descriptions of values
// rather than tensors - a program being compiled:
//   infer    the outputs' descriptions for these inputs, or the error the
//            eager call would raise (an mkc::Error, the same message);
//   check    the same verdict as a value: ok, or the status and reason;
//   prepare  the cached entry built for the inputs' exact arrangements, in
//            a given scope, with the arrangement it reads per input and
//            writes per output;
//   run      one execution on buffers already arranged as prepare said.
//
// Each operator family declares them in its own header (ops/activation.hpp,
// ops/conv.hpp, ...) as a struct of static functions, the attributes it
// takes as `Attrs`. The eager entry points (ops.hpp) are the same phases on
// tensors: the family's checks and prepare through the thread's argument
// cache, then a run that first converts inputs arriving in another
// arrangement - which a program does once, when it is compiled.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "common/dims.hpp"
#include "common/error.hpp"
#include "handler/handler.hpp"
#include "mkcache/mkcache.h"
#include "tensor/tensor.hpp"

namespace mkc::ops {

// What is known of a value before it holds data. The fields are named as
// mkc_tensor's, so an operator's checks are written once for both.
struct ValueDesc {
    mkc_dtype dtype = MKC_DTYPE_F32;
    mkc_layout layout = MKC_LAYOUT_CHANNELS_FIRST; // order of the caller's dims
    Dims dims;                                     // oneDNN order
    // The bytes' arrangement: plain for `layout`, unless the value comes
    // from a primitive that chose another (nChw16c, ...).
    dnnl::memory::desc desc = empty_desc();
};

// A tensor's description (its arrangement as it is now).
ValueDesc describe(const Tensor &t);
// A dense plain value of oneDNN-order `dims` in `layout`.
ValueDesc plain_value(mkc_dtype dtype, mkc_layout layout, Dims dims);
// The arrangement `desc` for a value of `like`'s dtype and caller layout.
ValueDesc arranged_as(const ValueDesc &like, const dnnl::memory::desc &desc);

// The same queries as a tensor's (those stay visible beside these).
using mkc::caller_dims;
using mkc::element_count;
using mkc::onednn_dims;
inline const Dims &onednn_dims(const ValueDesc &v) { return v.dims; }
inline int64_t element_count(const ValueDesc &v) {
    int64_t n = 1;
    for (auto d : v.dims) n *= d;
    return n;
}
inline Dims caller_dims(const ValueDesc &v) { return layout::to_caller_order(v.dims, v.layout); }

// check's answer: ok, or the status and message the eager call would fail
// with.
struct Verdict {
    mkc_status status = MKC_STATUS_OK;
    std::string reason;
    bool ok() const { return status == MKC_STATUS_OK; }
};

// Runs `f` (an infer) and turns what it throws into a verdict.
template <typename F>
Verdict verdict_of(F &&f) noexcept {
    Verdict v;
    try {
        f();
    } catch (...) {
        v.status = status_of_current_exception(v.reason);
    }
    return v;
}

// check for any family: `Op::infer(attrs, inputs...)` as a verdict.
template <typename Op, typename... Inputs>
Verdict check(const typename Op::Attrs &attrs, const Inputs &...inputs) {
    return verdict_of([&] { Op::infer(attrs, inputs...); });
}

// What prepare gives: the entry (shared with the cache, which may drop it
// while the caller keeps it), the arrangement run() reads each input in
// (port order; absent optional inputs get an empty one) and each output's
// description as run() writes it.
//
// When run() is exactly "bind each port's buffer to one argument of the
// entry's primitive and execute it" - most operators - `in_args` and
// `out_args` name that argument per port (0: a port run() does not bind):
// a caller running the entry many times on fixed buffers (a program) may
// then bind once and execute the primitive itself. Empty: only run() knows
// how. `serial_elements`: run() executes on the calling thread alone
// (SerialRegion) for a primitive built for this many elements; INT64_MAX:
// no such rule.
//
// `views`: per port (or none at all), an input the primitive reads through
// a view of its bytes with other dims - grouped or transposed conv weights,
// [O, I, k...] read as [G, O/G, I, k...]: the value's bytes arranged as
// `base` are read as `view`, which `takes` is converted from (a program
// does that once for a constant). Empty descs: the input is read as it is.
struct InputView {
    dnnl::memory::desc base, view;
};
struct Prepared {
    std::shared_ptr<PrimitiveEntry> entry;
    std::vector<dnnl::memory::desc> takes;
    std::vector<ValueDesc> outputs;
    std::vector<int> in_args, out_args;
    int64_t serial_elements = INT64_MAX;
    std::vector<InputView> views;
};

// One run's data: the inputs' and outputs' buffers in port order (an absent
// optional input: null), each arranged as Prepared says.
struct Buffers {
    const void *const *in;
    void *const *out;
    // The 8-bit weights are a program's constant, checked when it compiled
    // the step: the run need not scan them again.
    bool weights_checked = false;
};

// Executes `entry` once with inputs bound to `in_args` and outputs to
// `out_args` (DNNL_ARG_* per port; a null buffer is skipped).
void run_bound(const CacheScope &scope, PrimitiveEntry &entry, const Buffers &buffers,
               std::initializer_list<int> in_args, std::initializer_list<int> out_args);

} // namespace mkc::ops

namespace mkc::ops {

// Signs an input's arrangement for the entry's hit check: a tensor also
// lets the check use its remembered match.
inline void sign_input_layout(Handler &h, const Tensor &t, int arg_id) { h.sign_layout(t, arg_id); }
inline void sign_input_layout(Handler &h, const ValueDesc &v, int) { h.sign_layout(v.desc); }

} // namespace mkc::ops
