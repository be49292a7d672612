// The tensor behind the opaque mkc_tensor handle: a oneDNN memory descriptor
// (dims always in oneDNN order), a data pointer that is either the caller's
// or owned, and the caller-facing layout the shape is reported in.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "layout/layout.hpp"
#include "mkcache/mkcache.h"

namespace mkc {
// One shared empty descriptor. A default-constructed dnnl::memory::desc
// allocates a descriptor too big for malloc's per-thread bins and frees it
// when assigned over, for every tensor an operator creates. Descriptors are
// immutable handles, so one can be shared.
const dnnl::memory::desc &empty_desc();

// 64-byte aligned blocks from plain malloc (freed with aligned_free):
// glibc's posix_memalign/aligned_alloc carve every block out of a larger
// chunk past malloc's per-thread cache, paid twice by every tensor an
// operator creates (the tensor and its buffer). Null when out of memory.
void *aligned_malloc(size_t nbytes);
void aligned_free(void *p);
} // namespace mkc

// The fields every operator call reads come first and share one cache line
// (alignas): a call touches each argument's tensor once, and a primitive's
// execution may have evicted it from L1 since the last call.
struct alignas(64) mkc_tensor {
    mkc_tensor() = default;
    // Described by `d` from the start (no empty descriptor made first).
    explicit mkc_tensor(const dnnl::memory::desc &d)
        : dims(d.get_dims()), nbytes(d.get_size()), desc(d) {}
    // alignas(64) through mkc::aligned_malloc (see there).
    static void *operator new(size_t n) {
        if (void *p = mkc::aligned_malloc(n)) return p;
        throw std::bad_alloc();
    }
    static void *operator new(size_t n, std::align_val_t) { return operator new(n); }
    static void operator delete(void *p) { mkc::aligned_free(p); }
    static void operator delete(void *p, std::align_val_t) { mkc::aligned_free(p); }

    void *data = nullptr;
    std::vector<int64_t> dims; // desc's dims, kept to avoid querying per call
    size_t nbytes = 0;         // desc's size, kept alike (changed with desc)
    mkc_dtype dtype = MKC_DTYPE_F32;
    mkc_layout layout = MKC_LAYOUT_CHANNELS_FIRST; // order of the caller's shape
    bool constant = false;       // caller promised data never changes

    // Hit-path shortcut: "desc equals (or, with the top bit set, differs
    // from) the layout primitive entry E wants for argument A" is remembered
    // as (E.id << 20) | A (entry ids are never reused), so a repeated call
    // skips oneDNN's descriptor comparison - also for constant weights kept
    // converted, which never match. Reset whenever desc changes.
    mutable std::atomic<uint64_t> layout_match{0};
    // Names the current `converted` copies for lock-free memos of them
    // (Execution::input): drawn from a process-wide counter when a copy is
    // first handed out, so never reused (not even by another tensor at this
    // address); back to 0 (none drawn) whenever the copies or desc change.
    mutable std::atomic<uint64_t> converted_stamp{0};

    dnnl::memory::desc desc = mkc::empty_desc(); // actual arrangement, oneDNN dim order
    std::shared_ptr<void> owned; // set when the tensor owns `data`

    mutable std::mutex mutex;    // guards the two lazily filled fields below
    mutable std::string format;  // oneDNN format name, filled on first query
    // Converted copies of a constant tensor, one per layout asked for.
    struct Converted {
        dnnl::memory::desc desc = mkc::empty_desc();
        std::shared_ptr<void> data;
        uint64_t match = 0; // last entry/argument it served, as layout_match
    };
    mutable std::vector<Converted> converted;
};

namespace mkc {

using Tensor = mkc_tensor;

dnnl::memory::data_type to_onednn(mkc_dtype dtype);
size_t dtype_size(mkc_dtype dtype);
// "float32", ... for messages and dumps.
const char *dtype_name(mkc_dtype dtype);
// Every mkc_dtype value, in enum order.
constexpr mkc_dtype kDtypes[] = {MKC_DTYPE_F32, MKC_DTYPE_S32, MKC_DTYPE_S64, MKC_DTYPE_BOOL,
                                 MKC_DTYPE_S8,  MKC_DTYPE_U8,  MKC_DTYPE_BF16, MKC_DTYPE_F16};
// Whether `dtype` is one of mkc_dtype's values.
bool known_dtype(mkc_dtype dtype);
// "float32, int32, ..." for messages.
const char *dtype_names();

// Checks rank, dims >= 1 and that the element count * size fits in memory;
// `what` names the argument in messages.
void check_dims(const char *what, int ndims, const int64_t *dims, mkc_dtype dtype);
// The same bound for an operator's result, computed from its arguments:
// refused ("op: the result <shape> is too large") before anything is built.
void check_result_dims(const char *op, const int64_t *dims, size_t ndims, mkc_dtype dtype);
template <typename D>
void check_result_dims(const char *op, const D &dims, mkc_dtype dtype) {
    check_result_dims(op, dims.data(), dims.size(), dtype);
}

// 64-byte aligned storage, optionally zero-filled; throws OUT_OF_MEMORY.
std::shared_ptr<void> allocate(size_t nbytes, bool zero);

// A new tensor owning uninitialised storage for `desc`.
std::unique_ptr<Tensor> make_owned_tensor(const dnnl::memory::desc &desc, mkc_layout layout,
                                          mkc_dtype dtype);

inline const Dims &onednn_dims(const Tensor &t) { return t.dims; }
// Number of elements (padding of blocked layouts not counted).
inline int64_t element_count(const Tensor &t) {
    int64_t n = 1;
    for (auto d : t.dims) n *= d;
    return n;
}
// Sets desc and the cached dims together.
void set_desc(Tensor &t, const dnnl::memory::desc &desc);
Dims caller_dims(const Tensor &t);
// oneDNN's name of an arrangement: "abcd", "aBcd16b", ... ("opaque" when
// not blocked). The buffer form writes it, NUL-terminated, into `out`
// (kFormatNameSize chars) and returns where its NUL is: no allocation, for
// names built on every call.
constexpr size_t kFormatNameSize = DNNL_MAX_NDIMS * 22 + 8;
char *format_name(const dnnl::memory::desc &desc, char *out);
std::string format_name(const dnnl::memory::desc &desc);
size_t plain_nbytes(const Tensor &t);
Dims row_major_strides(const Dims &dims);
std::string shape_text(const Dims &dims); // "[2, 3, 4]" for messages

// Makes `dst` hold a result of `desc`: if it is owned and its storage is big
// enough it is re-described in place (no allocation), otherwise it must be a
// wrapped tensor of the same dims, and false is returned to ask the caller to
// write to a temporary and reorder.
bool adopt_result_layout(Tensor &dst, const dnnl::memory::desc &desc);
// Makes owned `dst` hold `storage`, laid out as `desc` (same dims).
void adopt_storage(Tensor &dst, const dnnl::memory::desc &desc, std::shared_ptr<void> storage);

} // namespace mkc
