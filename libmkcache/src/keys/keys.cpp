#include "keys/keys.hpp"

#include <charconv>
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

uint64_t thread_hash() {
    thread_local const uint64_t hash = std::hash<std::thread::id>()(std::this_thread::get_id());
    return hash;
}

void make(std::string &out, const char *name, const char *suffix, const int64_t *dims,
          int ndims, uint64_t executor, bool with_thread) {
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
        append_hex(out, thread_hash());
    }
}

} // namespace mkc::keys
