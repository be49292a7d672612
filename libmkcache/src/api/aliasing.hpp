// Outputs that share memory with inputs.
//
// A caller may pass as `*dst` a tensor whose bytes are also an input's: the
// same handle (`add(a, b, out=b)`), or two handles over one buffer (a numpy
// array wrapped once as an input and once as the output). A primitive that
// reads an input while writing the output over it computes garbage unless
// it is an element-wise one reading and writing the very same layout. So
// each operator's C entry runs through write_result(): a true in-place call
// goes straight through; any other overlap runs the operator into a fresh
// tensor, whose contents then replace dst's.
#pragma once

#include <initializer_list>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "common/error.hpp"
#include "mkcache/mkcache.h"
#include "tensor/tensor.hpp"

namespace mkc::api {

// True if the byte ranges of a's and b's storage overlap (inline: every
// operator call with a dst asks it for each input).
inline bool shares_memory(const Tensor &a, const Tensor &b) {
    if (a.data == nullptr || b.data == nullptr) return false;
    const auto a0 = reinterpret_cast<uintptr_t>(a.data);
    const auto b0 = reinterpret_cast<uintptr_t>(b.data);
    return a0 < b0 + b.nbytes && b0 < a0 + a.nbytes;
}

// Refuses `out` sharing memory with any of `others` (null entries skipped):
// for outputs that cannot be produced in place (gradients, statistics).
// The message is "op: <what> must not share memory with <its name>".
struct NamedTensor {
    const Tensor *tensor;
    const char *name;
};
void require_separate(const Tensor *out, const char *op, const char *what,
                      std::initializer_list<NamedTensor> others);

namespace detail {
// A tensor marked constant promised its data never changes (operators may
// keep converted copies of it): it is never an output.
[[noreturn]] void refuse_constant(const char *op);
// Whether `dst` can be written directly: it shares no memory with any of
// `inputs`, or only with `in_place`, holding exactly its bytes in its layout.
inline bool writable_directly(const Tensor &dst, const Tensor *const *inputs, size_t n,
                              const Tensor *in_place) {
    for (size_t i = 0; i < n; ++i) {
        const Tensor *in = inputs[i];
        if (in == nullptr) continue;
        if (in->data == dst.data) {
            // The operator reads each element before writing it, in one
            // layout (the same tensor needs no descriptor comparison).
            if (in == in_place && (in == &dst || dst.desc == in->desc)) continue;
            return false;
        }
        if (shares_memory(dst, *in)) return false;
    }
    return true;
}
// A tensor the operator writes instead of dst: null (the operator creates
// it), or a copy of dst's contents when the operator accumulates into dst.
std::unique_ptr<Tensor> stand_in(const Tensor &dst, bool accumulate);
// The tensor the operator wrote: `stand_in` if there was one, else the new
// tensor it handed out (taken back from the live handles).
std::unique_ptr<Tensor> written(std::unique_ptr<Tensor> stand_in, mkc_tensor *result);
// Moves `result`'s contents into dst: an owned dst takes its storage and
// layout, a wrapped dst gets them converted into its own.
void replace_contents(Tensor &dst, Tensor &result, const char *op);
} // namespace detail

// Runs `run(dst)` so that the result is right whatever `*dst` shares with
// `inputs`. `in_place` is the input (or null) the operator may overwrite as
// it reads it: element-wise operators over the same layout. `accumulate`:
// the operator adds into dst's contents (a convolution's residual sum).
template <typename Run>
void write_result(mkc_tensor **dst, const Tensor *const *inputs, size_t n,
                  const Tensor *in_place, bool accumulate, const char *op, Run &&run) {
    if (*dst != nullptr && (*dst)->constant) detail::refuse_constant(op);
    if (*dst == nullptr || detail::writable_directly(**dst, inputs, n, in_place)) {
        run(dst);
        return;
    }
    std::unique_ptr<Tensor> copy = detail::stand_in(**dst, accumulate);
    mkc_tensor *result = copy.get();
    run(&result);
    const std::unique_ptr<Tensor> made = detail::written(std::move(copy), result);
    detail::replace_contents(**dst, *made, op);
}
template <typename Run>
void write_result(mkc_tensor **dst, std::initializer_list<const Tensor *> inputs,
                  const Tensor *in_place, bool accumulate, const char *op, Run &&run) {
    write_result(dst, inputs.begin(), inputs.size(), in_place, accumulate, op,
                 std::forward<Run>(run));
}

} // namespace mkc::api
