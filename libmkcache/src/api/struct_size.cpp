// C ABI: struct sizes (mkcache.h, "Struct sizes") and the check of a
// caller's struct_size.
#include "api/struct_size.hpp"

#include <cstring>

#include "api/guard.hpp"

using namespace mkc;

namespace mkc::api {

namespace {

// Every size list ascends from the end of the first field after
// struct_size to sizeof: a struct appended to without its list fails here.
template <typename T>
constexpr bool well_formed() {
    const auto &sizes = Sized<T>::sizes;
    for (size_t i = 1; i < std::size(sizes); ++i)
        if (sizes[i] <= sizes[i - 1]) return false;
    return sizes[0] > sizeof(size_t) && sizes[std::size(sizes) - 1] == sizeof(T);
}
static_assert(well_formed<mkc_conv_params>());
static_assert(well_formed<mkc_pool_params>());
static_assert(well_formed<mkc_linear_params>());
static_assert(well_formed<mkc_matmul_params>());
static_assert(well_formed<mkc_layer_norm_params>());
static_assert(well_formed<mkc_batch_norm_params>());
static_assert(well_formed<mkc_lrn_params>());
static_assert(well_formed<mkc_cache_stats>());
static_assert(well_formed<mkc_activation_call>());
static_assert(well_formed<mkc_activation_params>());
static_assert(well_formed<mkc_softmax_params>());
static_assert(well_formed<mkc_binary_params>());
static_assert(well_formed<mkc_concat_params>());
static_assert(well_formed<mkc_transpose_params>());
static_assert(well_formed<mkc_reshape_params>());
static_assert(well_formed<mkc_program_options>());
static_assert(well_formed<mkc_program_memory>());
static_assert(well_formed<mkc_reduce_params>());
static_assert(well_formed<mkc_gather_params>());
static_assert(well_formed<mkc_cast_params>());
static_assert(well_formed<mkc_slice_params>());
static_assert(well_formed<mkc_expand_params>());
static_assert(well_formed<mkc_compare_params>());
static_assert(well_formed<mkc_pad_params>());
static_assert(well_formed<mkc_resize_params>());
static_assert(well_formed<mkc_logical_params>());
static_assert(well_formed<mkc_range_params>());
static_assert(well_formed<mkc_gather_nd_params>());
static_assert(well_formed<mkc_quantize_params>());
static_assert(well_formed<mkc_quantized_conv_params>());
static_assert(well_formed<mkc_quantized_linear_params>());
static_assert(well_formed<mkc_quantized_matmul_params>());
static_assert(well_formed<mkc_calibrate_options>());

} // namespace

void check_struct_size(const char *op, const SizeRule &rule, size_t given) {
    const size_t own = rule.sizes[rule.count - 1];
    for (size_t i = 0; i < rule.count; ++i)
        if (given == rule.sizes[i]) return;
    if (given > own)
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": ", rule.type, ".struct_size is ", given,
             " (expected ", own, "; a larger size is a struct of a newer mkcache.h than this ",
             "library's, or one never initialised: ", rule.hint, ")");
    if (given < rule.sizes[0]) // 0 included; an exact-size struct gets here for any other
        fail(MKC_STATUS_INVALID_ARGUMENT, op, ": ", rule.type, ".struct_size is ", given,
             " (expected ", own, "; ", rule.hint, ")");
    fail(MKC_STATUS_INVALID_ARGUMENT, op, ": ", rule.type, ".struct_size is ", given,
         ", which is not the end of a field (expected ", own,
         ", or an older layout's size, which ends at the end of a field; ", rule.hint, ")");
}

} // namespace mkc::api

extern "C" {

MKC_API mkc_status mkc_get_struct_size(mkc_struct_id id, size_t *size) {
    return api::guard([&] {
        api::require_out(size, "size");
        // Read as a plain integer: a caller may pass any value, and loading
        // one outside the enum's range as the enum is undefined behaviour.
        static_assert(sizeof(mkc_struct_id) == sizeof(int32_t));
        int32_t raw;
        std::memcpy(&raw, &id, sizeof raw);
        switch (raw) {
        case MKC_STRUCT_CONV_PARAMS: *size = sizeof(mkc_conv_params); return;
        case MKC_STRUCT_POOL_PARAMS: *size = sizeof(mkc_pool_params); return;
        case MKC_STRUCT_LINEAR_PARAMS: *size = sizeof(mkc_linear_params); return;
        case MKC_STRUCT_MATMUL_PARAMS: *size = sizeof(mkc_matmul_params); return;
        case MKC_STRUCT_LAYER_NORM_PARAMS: *size = sizeof(mkc_layer_norm_params); return;
        case MKC_STRUCT_BATCH_NORM_PARAMS: *size = sizeof(mkc_batch_norm_params); return;
        case MKC_STRUCT_LRN_PARAMS: *size = sizeof(mkc_lrn_params); return;
        case MKC_STRUCT_CACHE_STATS: *size = sizeof(mkc_cache_stats); return;
        case MKC_STRUCT_ACTIVATION_CALL: *size = sizeof(mkc_activation_call); return;
        case MKC_STRUCT_ACTIVATION_PARAMS: *size = sizeof(mkc_activation_params); return;
        case MKC_STRUCT_SOFTMAX_PARAMS: *size = sizeof(mkc_softmax_params); return;
        case MKC_STRUCT_BINARY_PARAMS: *size = sizeof(mkc_binary_params); return;
        case MKC_STRUCT_CONCAT_PARAMS: *size = sizeof(mkc_concat_params); return;
        case MKC_STRUCT_TRANSPOSE_PARAMS: *size = sizeof(mkc_transpose_params); return;
        case MKC_STRUCT_RESHAPE_PARAMS: *size = sizeof(mkc_reshape_params); return;
        case MKC_STRUCT_PROGRAM_OPTIONS: *size = sizeof(mkc_program_options); return;
        case MKC_STRUCT_PROGRAM_MEMORY: *size = sizeof(mkc_program_memory); return;
        case MKC_STRUCT_REDUCE_PARAMS: *size = sizeof(mkc_reduce_params); return;
        case MKC_STRUCT_GATHER_PARAMS: *size = sizeof(mkc_gather_params); return;
        case MKC_STRUCT_CAST_PARAMS: *size = sizeof(mkc_cast_params); return;
        case MKC_STRUCT_SLICE_PARAMS: *size = sizeof(mkc_slice_params); return;
        case MKC_STRUCT_EXPAND_PARAMS: *size = sizeof(mkc_expand_params); return;
        case MKC_STRUCT_COMPARE_PARAMS: *size = sizeof(mkc_compare_params); return;
        case MKC_STRUCT_PAD_PARAMS: *size = sizeof(mkc_pad_params); return;
        case MKC_STRUCT_RESIZE_PARAMS: *size = sizeof(mkc_resize_params); return;
        case MKC_STRUCT_LOGICAL_PARAMS: *size = sizeof(mkc_logical_params); return;
        case MKC_STRUCT_RANGE_PARAMS: *size = sizeof(mkc_range_params); return;
        case MKC_STRUCT_GATHER_ND_PARAMS: *size = sizeof(mkc_gather_nd_params); return;
        case MKC_STRUCT_QUANTIZE_PARAMS: *size = sizeof(mkc_quantize_params); return;
        case MKC_STRUCT_QUANTIZED_CONV_PARAMS: *size = sizeof(mkc_quantized_conv_params); return;
        case MKC_STRUCT_QUANTIZED_LINEAR_PARAMS:
            *size = sizeof(mkc_quantized_linear_params);
            return;
        case MKC_STRUCT_QUANTIZED_MATMUL_PARAMS:
            *size = sizeof(mkc_quantized_matmul_params);
            return;
        case MKC_STRUCT_CALIBRATE_OPTIONS: *size = sizeof(mkc_calibrate_options); return;
        case MKC_STRUCT_MAX_ENUM: break;
        }
        fail(MKC_STATUS_INVALID_ARGUMENT, "get_struct_size: unknown struct id ", raw);
    });
}

} // extern "C"
