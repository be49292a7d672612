#include "tensor/tensor.hpp"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "common/error.hpp"
#include "common/headroom.hpp"

namespace mkc {

dnnl::memory::data_type to_onednn(mkc_dtype dtype) {
    switch (dtype) {
    case MKC_DTYPE_F32: return dnnl::memory::data_type::f32;
    case MKC_DTYPE_S32: return dnnl::memory::data_type::s32;
    case MKC_DTYPE_BOOL: return dnnl::memory::data_type::u8;
    case MKC_DTYPE_S8: return dnnl::memory::data_type::s8;
    case MKC_DTYPE_U8: return dnnl::memory::data_type::u8;
    case MKC_DTYPE_BF16: return dnnl::memory::data_type::bf16;
    case MKC_DTYPE_F16: return dnnl::memory::data_type::f16;
    // oneDNN has no 64-bit integer type: s64 bytes are described as f64 of
    // the same size, for their size and strides only. reorder() refuses
    // them, so no oneDNN kernel ever reads them as doubles.
    case MKC_DTYPE_S64: return dnnl::memory::data_type::f64;
    default: break;
    }
    fail(MKC_STATUS_UNSUPPORTED, "unsupported dtype ", static_cast<int>(dtype), " (",
         dtype_names(), ")");
}

size_t dtype_size(mkc_dtype dtype) {
    switch (dtype) {
    case MKC_DTYPE_F32: return 4;
    case MKC_DTYPE_S32: return 4;
    case MKC_DTYPE_S64: return 8;
    case MKC_DTYPE_BOOL: return 1;
    case MKC_DTYPE_S8: return 1;
    case MKC_DTYPE_U8: return 1;
    case MKC_DTYPE_BF16: return 2;
    case MKC_DTYPE_F16: return 2;
    default: break;
    }
    fail(MKC_STATUS_UNSUPPORTED, "unsupported dtype ", static_cast<int>(dtype), " (",
         dtype_names(), ")");
}

const char *dtype_name(mkc_dtype dtype) {
    switch (dtype) {
    case MKC_DTYPE_F32: return "float32";
    case MKC_DTYPE_S32: return "int32";
    case MKC_DTYPE_S64: return "int64";
    case MKC_DTYPE_BOOL: return "bool";
    case MKC_DTYPE_S8: return "int8";
    case MKC_DTYPE_U8: return "uint8";
    case MKC_DTYPE_BF16: return "bfloat16";
    case MKC_DTYPE_F16: return "float16";
    default: break;
    }
    return "an unknown dtype";
}

bool known_dtype(mkc_dtype dtype) {
    for (mkc_dtype d : kDtypes)
        if (d == dtype) return true;
    return false;
}

const char *dtype_names() {
    static const std::string names = [] {
        std::string s;
        for (mkc_dtype d : kDtypes) s += std::string(s.empty() ? "" : ", ") + dtype_name(d);
        return s;
    }();
    return names.c_str();
}

void check_dims(const char *what, int ndims, const int64_t *dims, mkc_dtype dtype) {
    require(ndims >= 1 && ndims <= MKC_MAX_NDIMS, what, ": rank must be 1..", MKC_MAX_NDIMS,
            ", got ", ndims);
    require(dims != nullptr, what, ": dims is NULL");
    const size_t elem = dtype_size(dtype);
    // Bound the byte size well below what an int64/size_t can hold, so no
    // later offset computation overflows (oneDNN uses int64 offsets).
    const uint64_t limit = uint64_t(1) << 56;
    uint64_t bytes = elem;
    for (int i = 0; i < ndims; ++i) {
        require(dims[i] >= 1, what, ": dim ", i, " must be >= 1, got ", dims[i]);
        require(static_cast<uint64_t>(dims[i]) <= limit / bytes, what,
                ": shape is too large (more than 2^56 bytes)");
        bytes *= static_cast<uint64_t>(dims[i]);
    }
}

void check_result_dims(const char *op, const int64_t *dims, size_t ndims, mkc_dtype dtype) {
    const uint64_t limit = uint64_t(1) << 56;
    uint64_t bytes = dtype_size(dtype);
    for (size_t i = 0; i < ndims; ++i) {
        const bool fits = dims[i] >= 1 && static_cast<uint64_t>(dims[i]) <= limit / bytes;
        if (!fits)
            fail(MKC_STATUS_INVALID_ARGUMENT, op, ": the result ",
                 shape_text(Dims(dims, dims + ndims)),
                 dims[i] < 1 ? " is empty" : " is too large (more than 2^56 bytes)");
        bytes *= static_cast<uint64_t>(dims[i]);
    }
}

const dnnl::memory::desc &empty_desc() {
    static const auto *desc = new dnnl::memory::desc(); // never destroyed: used up to exit
    return *desc;
}

void *aligned_malloc(size_t nbytes) {
    // The raw pointer is kept in the word below the aligned block.
    void *raw = std::malloc(nbytes + 64 + sizeof(void *));
    if (raw == nullptr) return nullptr;
    const uintptr_t at = (reinterpret_cast<uintptr_t>(raw) + sizeof(void *) + 63) & ~uintptr_t(63);
    reinterpret_cast<void **>(at)[-1] = raw;
    return reinterpret_cast<void *>(at);
}

void aligned_free(void *p) {
    if (p != nullptr) std::free(static_cast<void **>(p)[-1]);
}

std::shared_ptr<void> allocate(size_t nbytes, bool zero) {
    void *p = aligned_malloc(nbytes == 0 ? 64 : nbytes);
    if (p == nullptr) fail(MKC_STATUS_OUT_OF_MEMORY, "cannot allocate ", nbytes, " bytes");
    if (nbytes >= kHeadroomCheckedAllocation) {
        try {
            require_headroom("allocating a buffer");
        } catch (...) {
            aligned_free(p);
            throw;
        }
    }
    if (zero) std::memset(p, 0, nbytes);
    return std::shared_ptr<void>(p, aligned_free);
}

std::unique_ptr<Tensor> make_owned_tensor(const dnnl::memory::desc &desc, mkc_layout layout,
                                          mkc_dtype dtype) {
    auto t = std::make_unique<Tensor>(desc);
    t->layout = layout;
    t->dtype = dtype;
    t->owned = allocate(desc.get_size(), false);
    t->data = t->owned.get();
    return t;
}

void set_desc(Tensor &t, const dnnl::memory::desc &desc) {
    t.desc = desc;
    t.dims = desc.get_dims();
    t.nbytes = desc.get_size();
    t.layout_match.store(0, std::memory_order_relaxed);
    t.converted_stamp.store(0, std::memory_order_relaxed);
}

Dims caller_dims(const Tensor &t) { return layout::to_caller_order(t.dims, t.layout); }

size_t plain_nbytes(const Tensor &t) {
    size_t n = dtype_size(t.dtype);
    for (auto d : t.dims) n *= static_cast<size_t>(d);
    return n;
}

Dims row_major_strides(const Dims &dims) {
    Dims s(dims.size(), 1);
    for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
    return s;
}

std::string shape_text(const Dims &dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}

char *format_name(const dnnl::memory::desc &desc, char *out) {
    // Name the arrangement the way oneDNN's format tags do: dims as letters
    // ordered outermost to innermost by stride, then inner blocks. The
    // queries return pointers into the descriptor (no copies).
    const const_dnnl_memory_desc_t md = desc.get();
    dnnl_format_kind_t kind = dnnl_format_kind_undef;
    int n = 0, nblks = 0;
    const dnnl_dims_t *strides = nullptr, *blks = nullptr, *idxs = nullptr;
    if (dnnl_memory_desc_query(md, dnnl_query_format_kind, &kind) != dnnl_success ||
        kind != dnnl_blocked || dnnl_memory_desc_query(md, dnnl_query_ndims_s32, &n) ||
        dnnl_memory_desc_query(md, dnnl_query_strides, &strides) ||
        dnnl_memory_desc_query(md, dnnl_query_inner_nblks_s32, &nblks) ||
        dnnl_memory_desc_query(md, dnnl_query_inner_blks, &blks) ||
        dnnl_memory_desc_query(md, dnnl_query_inner_idxs, &idxs)) {
        std::memcpy(out, "opaque", 7);
        return out + 6;
    }
    bool blocked[DNNL_MAX_NDIMS] = {};
    for (int k = 0; k < nblks; ++k) blocked[(*idxs)[k]] = true;
    int order[DNNL_MAX_NDIMS];
    for (int i = 0; i < n; ++i) order[i] = i;
    // Stable sort by descending stride; ties (size-1 dims) keep logical order.
    for (int i = 1; i < n; ++i)
        for (int j = i; j > 0 && (*strides)[order[j]] > (*strides)[order[j - 1]]; --j)
            std::swap(order[j], order[j - 1]);
    char *p = out;
    for (int i = 0; i < n; ++i)
        *p++ = static_cast<char>((blocked[order[i]] ? 'A' : 'a') + order[i]);
    for (int k = 0; k < nblks; ++k) {
        p = std::to_chars(p, out + kFormatNameSize - 2, (*blks)[k]).ptr;
        *p++ = static_cast<char>('a' + (*idxs)[k]);
    }
    *p = '\0';
    return p;
}

std::string format_name(const dnnl::memory::desc &desc) {
    char name[kFormatNameSize];
    return std::string(name, format_name(desc, name));
}

namespace {
// Describes dst's bytes as `desc` (same dims: the cached dims stay valid)
// and forgets what was derived from the old description. Under dst.mutex.
void redescribe(Tensor &dst, const dnnl::memory::desc &desc) {
    dst.desc = desc;
    dst.nbytes = desc.get_size();
    dst.layout_match.store(0, std::memory_order_relaxed);
    dst.format.clear();
    dst.converted.clear();
    dst.converted_stamp.store(0, std::memory_order_relaxed);
}
} // namespace

bool adopt_result_layout(Tensor &dst, const dnnl::memory::desc &desc) {
    if (dst.desc == desc) return true;
    if (dst.owned && desc.get_size() <= dst.nbytes) {
        std::lock_guard<std::mutex> lock(dst.mutex);
        redescribe(dst, desc);
        return true;
    }
    if (dst.owned) {
        adopt_storage(dst, desc, allocate(desc.get_size(), false));
        return true;
    }
    return false;
}

void adopt_storage(Tensor &dst, const dnnl::memory::desc &desc, std::shared_ptr<void> storage) {
    std::lock_guard<std::mutex> lock(dst.mutex);
    dst.owned = std::move(storage);
    dst.data = dst.owned.get();
    redescribe(dst, desc);
}

} // namespace mkc
