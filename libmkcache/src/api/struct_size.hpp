// The `size_t struct_size` every struct passed by pointer starts with
// (mkcache.h, "Struct sizes"): the size of the struct the caller was built
// against. A call whose struct has the library's size uses it as it is (the
// common case, on every operator call: one comparison, no copy); an older
// caller's smaller struct is read over the defaults; anything else is
// refused with a message naming the struct and both sizes.
//
// Growing a struct: append the field at its end, never into what was the
// struct's trailing padding (an older caller leaves those bytes
// indeterminate), and append its end to the struct's `sizes` below. If the
// struct had trailing padding, its old size is then no field's end: keep it
// in `sizes` too, so that every size a released header declared stays
// accepted.
#pragma once

#include <cstddef>
#include <cstring>
#include <iterator>

#include "common/error.hpp"
#include "mkcache/mkcache.h"

namespace mkc::api {

// What a struct_size may be, for one struct.
struct SizeRule {
    const char *type;    // "mkc_conv_params", for messages
    const char *hint;    // how a caller gets struct_size right
    const size_t *sizes; // ascending; the last is sizeof
    size_t count;
};

// Returns if `given` is one of rule's sizes, else fails with
// INVALID_ARGUMENT: "<op>: <type>.struct_size is <given> (expected ...)".
// Called only for a struct_size other than the library's own.
void check_struct_size(const char *op, const SizeRule &rule, size_t given);

// One specialisation per struct: its SizeRule (whose sizes are the end of
// every field after struct_size: an older header's struct ends at one of
// them) and its defaults, the ones its _init function gives.
template <typename T>
struct Sized;

#define MKC_FIELD_END(T, field) (offsetof(T, field) + sizeof(T::field))

template <>
struct Sized<mkc_conv_params> {
    using T = mkc_conv_params;
    static constexpr size_t sizes[] = {
        MKC_FIELD_END(T, stride),           MKC_FIELD_END(T, pad_begin),
        MKC_FIELD_END(T, pad_end),          MKC_FIELD_END(T, dilation),
        MKC_FIELD_END(T, output_padding),   MKC_FIELD_END(T, groups),
        MKC_FIELD_END(T, data_format),      MKC_FIELD_END(T, activation),
        MKC_FIELD_END(T, activation_alpha), MKC_FIELD_END(T, activation_beta),
        MKC_FIELD_END(T, sum),              MKC_FIELD_END(T, training),
        MKC_FIELD_END(T, name)};
    static constexpr SizeRule rule{"mkc_conv_params",
                                   "initialise params with mkc_conv_params_init", sizes,
                                   std::size(sizes)};
    static void defaults(T *p) { mkc_conv_params_init(p); }
};

template <>
struct Sized<mkc_pool_params> {
    using T = mkc_pool_params;
    static constexpr size_t sizes[] = {
        MKC_FIELD_END(T, kind),      MKC_FIELD_END(T, kernel),      MKC_FIELD_END(T, stride),
        MKC_FIELD_END(T, pad_begin), MKC_FIELD_END(T, pad_end),     MKC_FIELD_END(T, ceil_mode),
        MKC_FIELD_END(T, global),    MKC_FIELD_END(T, data_format), MKC_FIELD_END(T, training),
        MKC_FIELD_END(T, name),      MKC_FIELD_END(T, dilation)};
    static constexpr SizeRule rule{"mkc_pool_params",
                                   "initialise params with mkc_pool_params_init", sizes,
                                   std::size(sizes)};
    static void defaults(T *p) { mkc_pool_params_init(p); }
};

template <>
struct Sized<mkc_linear_params> {
    using T = mkc_linear_params;
    static constexpr size_t sizes[] = {
        MKC_FIELD_END(T, activation), MKC_FIELD_END(T, activation_alpha),
        MKC_FIELD_END(T, activation_beta), MKC_FIELD_END(T, training), MKC_FIELD_END(T, name),
        MKC_FIELD_END(T, sum), sizeof(T)}; // sum leaves trailing padding
    static constexpr SizeRule rule{"mkc_linear_params",
                                   "initialise params with mkc_linear_params_init", sizes,
                                   std::size(sizes)};
    static void defaults(T *p) { mkc_linear_params_init(p); }
};

template <>
struct Sized<mkc_matmul_params> {
    using T = mkc_matmul_params;
    static constexpr size_t sizes[] = {
        MKC_FIELD_END(T, transpose_a),      MKC_FIELD_END(T, transpose_b),
        MKC_FIELD_END(T, activation),       MKC_FIELD_END(T, activation_alpha),
        MKC_FIELD_END(T, activation_beta),  MKC_FIELD_END(T, name),
        MKC_FIELD_END(T, scale),            sizeof(T)}; // scale ends before its padding
    static constexpr SizeRule rule{"mkc_matmul_params",
                                   "initialise params with mkc_matmul_params_init", sizes,
                                   std::size(sizes)};
    static void defaults(T *p) { mkc_matmul_params_init(p); }
};

template <>
struct Sized<mkc_layer_norm_params> {
    using T = mkc_layer_norm_params;
    static constexpr size_t sizes[] = {MKC_FIELD_END(T, begin_norm_axis),
                                       MKC_FIELD_END(T, epsilon), MKC_FIELD_END(T, training),
                                       MKC_FIELD_END(T, name)};
    static constexpr SizeRule rule{"mkc_layer_norm_params",
                                   "initialise params with mkc_layer_norm_params_init", sizes,
                                   std::size(sizes)};
    static void defaults(T *p) { mkc_layer_norm_params_init(p); }
};

template <>
struct Sized<mkc_batch_norm_params> {
    using T = mkc_batch_norm_params;
    static constexpr size_t sizes[] = {MKC_FIELD_END(T, epsilon), MKC_FIELD_END(T, momentum),
                                       MKC_FIELD_END(T, training), MKC_FIELD_END(T, data_format),
                                       MKC_FIELD_END(T, name)};
    static constexpr SizeRule rule{"mkc_batch_norm_params",
                                   "initialise params with mkc_batch_norm_params_init", sizes,
                                   std::size(sizes)};
    static void defaults(T *p) { mkc_batch_norm_params_init(p); }
};

template <>
struct Sized<mkc_lrn_params> {
    using T = mkc_lrn_params;
    static constexpr size_t sizes[] = {
        MKC_FIELD_END(T, size),        MKC_FIELD_END(T, alpha),    MKC_FIELD_END(T, beta),
        MKC_FIELD_END(T, k),           MKC_FIELD_END(T, data_format),
        MKC_FIELD_END(T, training),    MKC_FIELD_END(T, name)};
    static constexpr SizeRule rule{"mkc_lrn_params", "initialise params with mkc_lrn_params_init",
                                   sizes, std::size(sizes)};
    static void defaults(T *p) { mkc_lrn_params_init(p); }
};

template <>
struct Sized<mkc_cache_stats> {
    using T = mkc_cache_stats;
    static constexpr size_t sizes[] = {
        MKC_FIELD_END(T, hits),     MKC_FIELD_END(T, misses),  MKC_FIELD_END(T, insertions),
        MKC_FIELD_END(T, evictions), MKC_FIELD_END(T, evicted_entries),
        MKC_FIELD_END(T, entries),  MKC_FIELD_END(T, groups),  MKC_FIELD_END(T, sessions),
        MKC_FIELD_END(T, bytes),    MKC_FIELD_END(T, transfers)};
    static constexpr SizeRule rule{"mkc_cache_stats",
                                   "initialise stats with mkc_cache_stats_init", sizes,
                                   std::size(sizes)};
};

template <>
struct Sized<mkc_activation_params> {
    using T = mkc_activation_params;
    static constexpr size_t sizes[] = {MKC_FIELD_END(T, kind), MKC_FIELD_END(T, alpha),
                                       MKC_FIELD_END(T, beta), MKC_FIELD_END(T, name)};
    static constexpr SizeRule rule{"mkc_activation_params",
                                   "initialise params with mkc_activation_params_init", sizes,
                                   std::size(sizes)};
    static void defaults(T *p) { mkc_activation_params_init(p); }
};

template <>
struct Sized<mkc_softmax_params> {
    using T = mkc_softmax_params;
    static constexpr size_t sizes[] = {MKC_FIELD_END(T, axis), MKC_FIELD_END(T, log),
                                       MKC_FIELD_END(T, name)};
    static constexpr SizeRule rule{"mkc_softmax_params",
                                   "initialise params with mkc_softmax_params_init", sizes,
                                   std::size(sizes)};
    static void defaults(T *p) { mkc_softmax_params_init(p); }
};

template <>
struct Sized<mkc_binary_params> {
    using T = mkc_binary_params;
    static constexpr size_t sizes[] = {MKC_FIELD_END(T, kind), MKC_FIELD_END(T, name)};
    static constexpr SizeRule rule{"mkc_binary_params",
                                   "initialise params with mkc_binary_params_init", sizes,
                                   std::size(sizes)};
    static void defaults(T *p) { mkc_binary_params_init(p); }
};

template <>
struct Sized<mkc_concat_params> {
    using T = mkc_concat_params;
    static constexpr size_t sizes[] = {MKC_FIELD_END(T, axis), MKC_FIELD_END(T, name)};
    static constexpr SizeRule rule{"mkc_concat_params",
                                   "initialise params with mkc_concat_params_init", sizes,
                                   std::size(sizes)};
    static void defaults(T *p) { mkc_concat_params_init(p); }
};

template <>
struct Sized<mkc_transpose_params> {
    using T = mkc_transpose_params;
    // Trailing padding: sizeof is no field's end.
    static constexpr size_t sizes[] = {MKC_FIELD_END(T, ndims), MKC_FIELD_END(T, perm),
                                       sizeof(T)};
    static constexpr SizeRule rule{"mkc_transpose_params",
                                   "initialise params with mkc_transpose_params_init", sizes,
                                   std::size(sizes)};
    static void defaults(T *p) { mkc_transpose_params_init(p); }
};

template <>
struct Sized<mkc_reshape_params> {
    using T = mkc_reshape_params;
    static constexpr size_t sizes[] = {MKC_FIELD_END(T, ndims), MKC_FIELD_END(T, dims)};
    static constexpr SizeRule rule{"mkc_reshape_params",
                                   "initialise params with mkc_reshape_params_init", sizes,
                                   std::size(sizes)};
    static void defaults(T *p) { mkc_reshape_params_init(p); }
};

// A params struct that came in one piece: its one size is sizeof.
#define MKC_SIZED_IN_ONE_PIECE(T)                                                                  \
    template <> struct Sized<T> {                                                                  \
        static constexpr size_t sizes[] = {sizeof(T)};                                             \
        static constexpr SizeRule rule{#T, "initialise params with " #T "_init", sizes, 1};        \
        static void defaults(T *p) { T##_init(p); }                                                \
    };
MKC_SIZED_IN_ONE_PIECE(mkc_reduce_params)
MKC_SIZED_IN_ONE_PIECE(mkc_gather_params)
MKC_SIZED_IN_ONE_PIECE(mkc_cast_params)
MKC_SIZED_IN_ONE_PIECE(mkc_slice_params)
MKC_SIZED_IN_ONE_PIECE(mkc_expand_params)
MKC_SIZED_IN_ONE_PIECE(mkc_compare_params)
MKC_SIZED_IN_ONE_PIECE(mkc_pad_params)
MKC_SIZED_IN_ONE_PIECE(mkc_logical_params)
MKC_SIZED_IN_ONE_PIECE(mkc_range_params)
MKC_SIZED_IN_ONE_PIECE(mkc_gather_nd_params)
MKC_SIZED_IN_ONE_PIECE(mkc_quantized_matmul_params)
#undef MKC_SIZED_IN_ONE_PIECE

template <>
struct Sized<mkc_resize_params> {
    using T = mkc_resize_params;
    // It came as one piece ending at name; cubic's fields were appended.
    static constexpr size_t sizes[] = {MKC_FIELD_END(T, name), MKC_FIELD_END(T, cubic_coeff_a),
                                       MKC_FIELD_END(T, exclude_outside),
                                       MKC_FIELD_END(T, antialias)};
    static constexpr SizeRule rule{"mkc_resize_params",
                                   "initialise params with mkc_resize_params_init", sizes,
                                   std::size(sizes)};
    static void defaults(T *p) { mkc_resize_params_init(p); }
};

template <>
struct Sized<mkc_quantize_params> {
    using T = mkc_quantize_params;
    static constexpr size_t sizes[] = {MKC_FIELD_END(T, name), MKC_FIELD_END(T, fast), sizeof(T)};
    static constexpr SizeRule rule{"mkc_quantize_params",
                                   "initialise params with mkc_quantize_params_init", sizes,
                                   std::size(sizes)};
    static void defaults(T *p) { mkc_quantize_params_init(p); }
};

template <>
struct Sized<mkc_quantized_conv_params> {
    using T = mkc_quantized_conv_params;
    static constexpr size_t sizes[] = {MKC_FIELD_END(T, name), MKC_FIELD_END(T, sum_scale),
                                       MKC_FIELD_END(T, sum_zero_point)};
    static constexpr SizeRule rule{"mkc_quantized_conv_params",
                                   "initialise params with mkc_quantized_conv_params_init", sizes,
                                   std::size(sizes)};
    static void defaults(T *p) { mkc_quantized_conv_params_init(p); }
};

template <>
struct Sized<mkc_quantized_linear_params> {
    using T = mkc_quantized_linear_params;
    static constexpr size_t sizes[] = {MKC_FIELD_END(T, name), MKC_FIELD_END(T, sum),
                                       MKC_FIELD_END(T, sum_scale),
                                       MKC_FIELD_END(T, sum_zero_point), sizeof(T)};
    static constexpr SizeRule rule{"mkc_quantized_linear_params",
                                   "initialise params with mkc_quantized_linear_params_init",
                                   sizes, std::size(sizes)};
    static void defaults(T *p) { mkc_quantized_linear_params_init(p); }
};

template <>
struct Sized<mkc_program_options> {
    using T = mkc_program_options;
    static constexpr size_t sizes[] = {MKC_FIELD_END(T, fuse), MKC_FIELD_END(T, inplace),
                                       MKC_FIELD_END(T, reuse), MKC_FIELD_END(T, capacity),
                                       MKC_FIELD_END(T, impl),  MKC_FIELD_END(T, measure),
                                       MKC_FIELD_END(T, choices), MKC_FIELD_END(T, dump),
                                       MKC_FIELD_END(T, calibration),
                                       MKC_FIELD_END(T, exact_plans)};
    static constexpr SizeRule rule{"mkc_program_options",
                                   "initialise options with mkc_program_options_init", sizes,
                                   std::size(sizes)};
    static void defaults(T *p) { mkc_program_options_init(p); }
};

template <>
struct Sized<mkc_calibrate_options> {
    using T = mkc_calibrate_options;
    static constexpr size_t sizes[] = {MKC_FIELD_END(T, method), MKC_FIELD_END(T, percentile)};
    static constexpr SizeRule rule{"mkc_calibrate_options",
                                   "initialise options with mkc_calibrate_options_init", sizes,
                                   std::size(sizes)};
    static void defaults(T *p) { mkc_calibrate_options_init(p); }
};

template <>
struct Sized<mkc_program_memory> {
    using T = mkc_program_memory;
    static constexpr size_t sizes[] = {
        MKC_FIELD_END(T, arena_bytes), MKC_FIELD_END(T, lower_bound_bytes),
        MKC_FIELD_END(T, naive_bytes), MKC_FIELD_END(T, constant_bytes),
        MKC_FIELD_END(T, steps),       MKC_FIELD_END(T, converters),
        MKC_FIELD_END(T, plans),       MKC_FIELD_END(T, in_place), // the size before in_place
        MKC_FIELD_END(T, views),
        offsetof(T, held_constant_bytes), // the size before it (views and padding)
        MKC_FIELD_END(T, held_constant_bytes)};
    static constexpr SizeRule rule{"mkc_program_memory",
                                   "set struct_size to sizeof(mkc_program_memory)", sizes,
                                   std::size(sizes)};
};

// A binding helper (mkcache.h says it may change between minor versions):
// no older layout to read, its own size only.
template <>
struct Sized<mkc_activation_call> {
    static constexpr size_t sizes[] = {sizeof(mkc_activation_call)};
    static constexpr SizeRule rule{"mkc_activation_call",
                                   "set it to sizeof(mkc_activation_call) of this mkcache.h",
                                   sizes, std::size(sizes)};
};

#undef MKC_FIELD_END

// The caller's params as the library reads them: `params` itself when its
// struct_size is the library's, else an older layout's fields copied over
// the defaults into `older` (which is returned). `older` is the caller's
// local: nothing is written to it on the common path.
template <typename T>
[[gnu::noinline, gnu::cold]] const T &older_params(const char *op, const T &params, T &older) {
    check_struct_size(op, Sized<T>::rule, params.struct_size);
    Sized<T>::defaults(&older);
    std::memcpy(static_cast<void *>(&older), &params, params.struct_size);
    older.struct_size = sizeof(T);
    return older;
}

template <typename T>
inline const T &sized_params(const char *op, const T &params, T &older) {
    if (params.struct_size == sizeof(T)) return params;
    return older_params(op, params, older);
}

// Writes `value` into the caller's struct `out` (checked not NULL): the
// fields within out->struct_size, which is checked as for params and left
// as it is. Nothing is written if it is refused.
template <typename T>
void write_sized(const char *op, T *out, const T &value) {
    const size_t given = out->struct_size;
    if (given != sizeof(T)) check_struct_size(op, Sized<T>::rule, given);
    constexpr size_t skip = sizeof(out->struct_size);
    std::memcpy(reinterpret_cast<char *>(out) + skip, reinterpret_cast<const char *>(&value) + skip,
                given - skip);
}

} // namespace mkc::api
