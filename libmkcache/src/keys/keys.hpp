// Cache keys:
//   <name>|<suffix>|<d0>x<d1>x...|e<executor hex>[|t<thread hash hex>]
// Dims are joined with 'x' so {1,64,56,56} and {16,4,56,56} never collide;
// '|' and '\' in free-form parts are escaped so fields cannot run together.
#pragma once

#include <cstdint>
#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "mkcache/mkcache.h"

namespace mkc::keys {

// Appends `text` with '|' and '\' escaped.
void append_escaped(std::string &out, const char *text);
// Appends "1x64x56x56".
void append_shape(std::string &out, const int64_t *dims, int ndims);
void append_hex(std::string &out, uint64_t value);
void append_int(std::string &out, int64_t value);

// A value's element type in a text key: nothing for float32, else ':' and
// its name (":bf16", ":s8"). Float32 writes nothing because it is the type
// every text key was made for before others existed: those keys (measured
// choices saved to files among them) keep their text, and no other type's
// tag is empty, so two types never share a key.
void append_dtype(std::string &out, mkc_dtype dtype);
void append_dtype(std::string &out, dnnl::memory::data_type dtype);
// A value's description in a text key: its shape then its type
// ("1x64x56x56", "1x64x56x56:bf16"). A text key names a value's dims
// through these (or append_dtype after a shape of its own form), never
// the dims alone.
void append_value(std::string &out, const int64_t *dims, int ndims, mkc_dtype dtype);
void append_value(std::string &out, const dnnl::memory::desc &desc); // its dims and data type

// A hash of the calling thread's id, computed once per thread.
uint64_t thread_hash();

// The (unescaped) name and suffix a key make() wrote was made from.
void parse_fields(const std::string &key, std::string &name, std::string &suffix);

// Writes the full key into `out` (replacing its content). `with_thread`
// adds the thread field (default mode) holding `thread`.
void make(std::string &out, const char *name, const char *suffix, const int64_t *dims,
          int ndims, uint64_t executor, bool with_thread, uint64_t thread);

} // namespace mkc::keys
