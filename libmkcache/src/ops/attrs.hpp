// An operator family's attributes, written once.
//
// Each family keeps its attributes in one struct whose `each(v)` lists every
// field once, in a fixed order: v.field(tag, value) for an attribute, or
// v.in_suffix(tag, value) for one that also goes into the key's suffix (the
// in-place tag that keeps, say, two activation kinds under one caller name
// apart). Everything a call is told apart by derives from that one list:
//   sign_attrs      the primitive's signature (what a cached entry must match),
//   add_attrs       the words the thread's argument cache remembers a call by,
//   attrs_name      the default cache name of an unnamed call,
//   attrs_suffix    the key's suffix.
// So an attribute added to the struct and to `each` reaches all four, and one
// missing from `each` reaches none - which the attribute test notices, as a
// change of that attribute alone then finds the entry built for the old value.
#pragma once

#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "handler/handler.hpp"
#include "keys/keys.hpp"
#include "mkcache/mkcache.h"
#include "ops/call_words.hpp"

namespace mkc::ops {

// A spatial attribute (stride, padding, ...): a params struct's array of
// three, of which the first `size` count (the operator's spatial rank).
struct Values {
    const int64_t *data;
    int size;
};

// A multiplier whose default is 1 (a default name leaves it out then).
struct Factor {
    float value;
};

// Text of an activation kind, for names ("" for none).
const char *activation_name(mkc_activation_kind kind);
// The one-letter tag of a binary kind in its keys' suffix.
const char *binary_letter(mkc_binary_kind kind);
const char *binary_name(mkc_binary_kind kind);
const char *pool_kind_name(mkc_pool_kind kind);

namespace attrs_detail {

inline int64_t word(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    return bits;
}
template <typename T>
int64_t word(T v) {
    static_assert(std::is_integral_v<T> || std::is_enum_v<T>, "an attribute is a number");
    return static_cast<int64_t>(v);
}

struct Sign {
    Handler &h;
    void field(const char *, float v) { h.sign_float(v); }
    void field(const char *, Factor v) { h.sign_float(v.value); }
    void field(const char *, Values v) { h.sign(v.data, static_cast<size_t>(v.size)); }
    template <typename T>
    void field(const char *, T v) { h.sign(word(v)); }
    template <typename T>
    void in_suffix(const char *tag, T v) { field(tag, v); }
};

// Words per attribute (a constant the compiler folds): three for a spatial
// one, else one.
struct Count {
    int n = 0;
    void field(const char *, Values) { n += 3; }
    template <typename T>
    void field(const char *, T) { n += 1; }
    template <typename T>
    void in_suffix(const char *, T) { n += 1; }
};

// The words, after one check for room (this runs on every call): a
// spatial attribute's three slots as they are, whatever the rank.
template <typename Words>
struct Add {
    Words &w;
    void field(const char *, Values v) { w.add_three_unchecked(v.data); }
    void field(const char *, Factor v) { w.add_unchecked(word(v.value)); }
    template <typename T>
    void field(const char *, T v) { w.add_unchecked(word(v)); }
    template <typename T>
    void in_suffix(const char *tag, T v) { field(tag, v); }
};

inline void append_float(std::string &out, float v) {
    char buf[32];
    out.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

// ":<tag><value>" for every attribute that is set (non-zero), so a call
// with the defaults gets a short name; kinds by their names.
struct Name {
    std::string &out;
    void field(const char *tag, float v) {
        if (v == 0.f) return;
        out += ':';
        out += tag;
        append_float(out, v);
    }
    void field(const char *tag, Factor v) {
        if (v.value == 1.f) return;
        out += ':';
        out += tag;
        append_float(out, v.value);
    }
    void field(const char *tag, Values v) {
        out += ':';
        out += tag;
        keys::append_shape(out, v.data, v.size);
    }
    void field(const char *, mkc_activation_kind v) {
        if (v == MKC_ACTIVATION_NONE) return;
        out += ':';
        out += activation_name(v);
    }
    void field(const char *, mkc_binary_kind v) {
        out += ':';
        out += binary_name(v);
    }
    void field(const char *, mkc_pool_kind v) {
        out += ':';
        out += pool_kind_name(v);
    }
    template <typename T>
    void field(const char *tag, T v) {
        if (word(v) == 0) return;
        out += ':';
        out += tag;
        keys::append_int(out, word(v));
    }
    template <typename T>
    void in_suffix(const char *tag, T v) { field(tag, v); }
};

// The suffix: the in_suffix values only, each as a number (a binary kind as
// its letter), joined by ','.
struct Suffix {
    std::string &out;
    template <typename T>
    void field(const char *, const T &) {}
    void in_suffix(const char *, mkc_binary_kind v) { out += binary_letter(v); }
    template <typename T>
    void in_suffix(const char *, T v) {
        if (!out.empty() && out.back() != ',' && !std::isalpha(out.back())) out += ',';
        keys::append_int(out, word(v));
    }
};

} // namespace attrs_detail

template <typename Attrs>
void sign_attrs(Handler &h, const Attrs &a) {
    attrs_detail::Sign v{h};
    a.each(v);
}

template <typename Attrs, typename Words>
void add_attrs(Words &w, const Attrs &a) {
    attrs_detail::Count count;
    a.each(count);
    if (!w.reserve(count.n)) return;
    attrs_detail::Add<Words> v{w};
    a.each(v);
}

// Appends the attributes that are set (":s1x1:p1x1:...").
template <typename Attrs>
void append_attrs_name(std::string &out, const Attrs &a) {
    attrs_detail::Name v{out};
    a.each(v);
}

// `op` followed by the attributes that are set ("max_pool:k3x3:s2x2").
template <typename Attrs>
void attrs_name(std::string &out, const char *op, const Attrs &a) {
    out = op;
    append_attrs_name(out, a);
}

// attrs_name() in a per-thread buffer (one per attributes type): valid until
// the thread's next call, and allocates nothing once the buffer has grown.
template <typename Attrs>
const char *default_attrs_name(const char *op, const Attrs &a) {
    thread_local std::string name;
    attrs_name(name, op, a);
    return name.c_str();
}

// An unnamed call's default name and the key's suffix (`suffix_prefix`
// followed by the in_suffix attributes), in per-thread buffers: valid until
// the thread's next call. An empty `op` leaves the name to the attributes
// ("relu", "elu:a0.5").
struct KeyText {
    const char *name;
    const char *suffix;
};
template <typename Attrs>
KeyText key_text(const char *op, const char *suffix_prefix, const Attrs &a);

// `prefix` followed by the in_suffix attributes.
template <typename Attrs>
void attrs_suffix(std::string &out, const char *prefix, const Attrs &a) {
    out = prefix;
    attrs_detail::Suffix v{out};
    a.each(v);
}

template <typename Attrs>
KeyText key_text(const char *op, const char *suffix_prefix, const Attrs &a) {
    thread_local std::string name, suffix;
    attrs_name(name, op, a);
    attrs_suffix(suffix, suffix_prefix, a);
    const bool bare = op[0] == '\0' && !name.empty(); // drop the ':' before the first
    return {name.c_str() + (bare ? 1 : 0), suffix.c_str()};
}

} // namespace mkc::ops
