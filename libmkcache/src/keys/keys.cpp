#include "keys/keys.hpp"

#include "common/thread_state.hpp"
#include "tensor/tensor.hpp"

#include <charconv>

#include <oneapi/dnnl/dnnl_debug.h>
#include <functional>
#include <thread>

namespace mkc::keys {

void append_escaped(std::string &out, const char *text) {
    if (text == nullptr) return;
    for (const char *p = text; *p; ++p) {
        if (*p == '|' || *p == '\\') out += '\\';
        out += *p;
    }
}

void append_int(std::string &out, int64_t value) {
    char buf[24];
    auto res = std::to_chars(buf, buf + sizeof buf, value);
    out.append(buf, res.ptr);
}

void append_hex(std::string &out, uint64_t value) {
    char buf[24];
    auto res = std::to_chars(buf, buf + sizeof buf, value, 16);
    out.append(buf, res.ptr);
}

void append_shape(std::string &out, const int64_t *dims, int ndims) {
    for (int i = 0; i < ndims; ++i) {
        if (i) out += 'x';
        append_int(out, dims[i]);
    }
}

void append_dtype(std::string &out, mkc_dtype dtype) {
    if (dtype == MKC_DTYPE_F32) return;
    out += ':';
    out += known_dtype(dtype) ? dtype_name(dtype) : "dtype" + std::to_string(static_cast<int>(dtype));
}

void append_dtype(std::string &out, dnnl::memory::data_type dtype) {
    if (dtype == dnnl::memory::data_type::f32) return;
    out += ':';
    out += dnnl_dt2str(static_cast<dnnl_data_type_t>(dtype));
}

void append_value(std::string &out, const int64_t *dims, int ndims, mkc_dtype dtype) {
    append_shape(out, dims, ndims);
    append_dtype(out, dtype);
}

void append_value(std::string &out, const dnnl::memory::desc &desc) {
    // The C queries point into the descriptor (no copy of its dims).
    const const_dnnl_memory_desc_t md = desc.get();
    int ndims = 0;
    const dnnl_dims_t *dims = nullptr;
    if (dnnl_memory_desc_query(md, dnnl_query_ndims_s32, &ndims) != dnnl_success ||
        dnnl_memory_desc_query(md, dnnl_query_dims, &dims) != dnnl_success || dims == nullptr)
        ndims = 0;
    append_shape(out, ndims > 0 ? *dims : nullptr, ndims);
    append_dtype(out, desc.get_data_type());
}

void parse_fields(const std::string &key, std::string &name, std::string &suffix) {
    size_t i = 0;
    auto field = [&](std::string &out) {
        out.clear();
        for (; i < key.size() && key[i] != '|'; ++i) {
            if (key[i] == '\\' && i + 1 < key.size()) ++i;
            out += key[i];
        }
        ++i; // the '|' ending the field
    };
    field(name);
    field(suffix);
}

uint64_t thread_hash() { return thread_state().thread_hash; }

void make(std::string &out, const char *name, const char *suffix, const int64_t *dims,
          int ndims, uint64_t executor, bool with_thread, uint64_t thread) {
    // Hot path: write into a stack buffer, then one assign (no per-piece
    // string growth). Long names fall back to the general appenders.
    // Name and suffix may fill the first half; the numeric fields (at most
    // 21 chars each, ndims + 2 of them, 3 separators) fit in the second.
    char buf[512];
    char *p = buf;
    char *const end = buf + 256;
    auto put_escaped = [&](const char *text) {
        for (const char *c = text; c && *c; ++c) {
            if (p >= end) return false;
            if (*c == '|' || *c == '\\') *p++ = '\\';
            *p++ = *c;
        }
        return true;
    };
    bool fits = put_escaped(name);
    if (fits) {
        *p++ = '|';
        fits = put_escaped(suffix);
    }
    if (fits && ndims <= 8) {
        *p++ = '|';
        for (int i = 0; i < ndims; ++i) {
            if (i) *p++ = 'x';
            p = std::to_chars(p, p + 21, dims[i]).ptr;
        }
        *p++ = '|';
        *p++ = 'e';
        p = std::to_chars(p, p + 21, executor, 16).ptr;
        if (with_thread) {
            *p++ = '|';
            *p++ = 't';
            p = std::to_chars(p, p + 21, thread, 16).ptr;
        }
        out.assign(buf, p);
        return;
    }
    out.clear();
    append_escaped(out, name);
    out += '|';
    append_escaped(out, suffix);
    out += '|';
    append_shape(out, dims, ndims);
    out += "|e";
    append_hex(out, executor);
    if (with_thread) {
        out += "|t";
        append_hex(out, thread);
    }
}

} // namespace mkc::keys
