// Cache keys:
//   <name>|<suffix>|<d0>x<d1>x...|e<executor hex>[|t<thread hash hex>]
// Dims are joined with 'x' so {1,64,56,56} and {16,4,56,56} never collide;
// '|' and '\' in free-form parts are escaped so fields cannot run together.
#pragma once

#include <cstdint>
#include <string>

namespace mkc::keys {

// Appends `text` with '|' and '\' escaped.
void append_escaped(std::string &out, const char *text);
// Appends "1x64x56x56".
void append_shape(std::string &out, const int64_t *dims, int ndims);
void append_hex(std::string &out, uint64_t value);
void append_int(std::string &out, int64_t value);

// A hash of the calling thread's id, computed once per thread.
uint64_t thread_hash();

// The (unescaped) name and suffix a key make() wrote was made from.
void parse_fields(const std::string &key, std::string &name, std::string &suffix);

// Writes the full key into `out` (replacing its content). `with_thread`
// adds the thread field (default mode) holding `thread`.
void make(std::string &out, const char *name, const char *suffix, const int64_t *dims,
          int ndims, uint64_t executor, bool with_thread, uint64_t thread);

} // namespace mkc::keys
