// C ABI: the public enums' values by name and back (mkcache.h, "Enum values
// by name"), so a binding takes its ids from the library it loaded.
//
// A value's name is its enumerator's name after the enum's prefix, in
// lowercase: what a reader of mkcache.h derives without a list. That is
// why these tables do not reuse the words the operators put into cache
// names (attrs.hpp's activation_name gives "gelu" for GELU_ERF, binary_name
// "maximum" for MAX): those are key text, free to differ from the ABI's.
// mkc_op's names are the operator table's, the names plans and overrides
// already use, which follow the same rule.
#include <cstring>
#include <string>

#include "api/guard.hpp"
#include "graph/op_table.hpp"

using namespace mkc;

namespace {

struct Named {
    const char *name;
    int32_t value;
};

// Each value's first name is the one mkc_enum_name gives; aliases follow.
constexpr Named kStatus[] = {
    {"ok", MKC_STATUS_OK},
    {"invalid_argument", MKC_STATUS_INVALID_ARGUMENT},
    {"invalid_handle", MKC_STATUS_INVALID_HANDLE},
    {"unsupported", MKC_STATUS_UNSUPPORTED},
    {"out_of_memory", MKC_STATUS_OUT_OF_MEMORY},
    {"buffer_too_small", MKC_STATUS_BUFFER_TOO_SMALL},
    {"onednn_error", MKC_STATUS_ONEDNN_ERROR},
    {"internal_error", MKC_STATUS_INTERNAL_ERROR},
};

constexpr Named kStructId[] = {
    {"conv_params", MKC_STRUCT_CONV_PARAMS},
    {"pool_params", MKC_STRUCT_POOL_PARAMS},
    {"linear_params", MKC_STRUCT_LINEAR_PARAMS},
    {"matmul_params", MKC_STRUCT_MATMUL_PARAMS},
    {"layer_norm_params", MKC_STRUCT_LAYER_NORM_PARAMS},
    {"batch_norm_params", MKC_STRUCT_BATCH_NORM_PARAMS},
    {"lrn_params", MKC_STRUCT_LRN_PARAMS},
    {"cache_stats", MKC_STRUCT_CACHE_STATS},
    {"activation_call", MKC_STRUCT_ACTIVATION_CALL},
    {"activation_params", MKC_STRUCT_ACTIVATION_PARAMS},
    {"softmax_params", MKC_STRUCT_SOFTMAX_PARAMS},
    {"binary_params", MKC_STRUCT_BINARY_PARAMS},
    {"concat_params", MKC_STRUCT_CONCAT_PARAMS},
    {"transpose_params", MKC_STRUCT_TRANSPOSE_PARAMS},
    {"reshape_params", MKC_STRUCT_RESHAPE_PARAMS},
    {"program_options", MKC_STRUCT_PROGRAM_OPTIONS},
    {"program_memory", MKC_STRUCT_PROGRAM_MEMORY},
    {"reduce_params", MKC_STRUCT_REDUCE_PARAMS},
    {"gather_params", MKC_STRUCT_GATHER_PARAMS},
    {"cast_params", MKC_STRUCT_CAST_PARAMS},
    {"slice_params", MKC_STRUCT_SLICE_PARAMS},
    {"expand_params", MKC_STRUCT_EXPAND_PARAMS},
    {"compare_params", MKC_STRUCT_COMPARE_PARAMS},
    {"pad_params", MKC_STRUCT_PAD_PARAMS},
    {"resize_params", MKC_STRUCT_RESIZE_PARAMS},
    {"logical_params", MKC_STRUCT_LOGICAL_PARAMS},
    {"range_params", MKC_STRUCT_RANGE_PARAMS},
    {"gather_nd_params", MKC_STRUCT_GATHER_ND_PARAMS},
    {"quantize_params", MKC_STRUCT_QUANTIZE_PARAMS},
    {"quantized_conv_params", MKC_STRUCT_QUANTIZED_CONV_PARAMS},
    {"quantized_linear_params", MKC_STRUCT_QUANTIZED_LINEAR_PARAMS},
    {"quantized_matmul_params", MKC_STRUCT_QUANTIZED_MATMUL_PARAMS},
    {"calibrate_options", MKC_STRUCT_CALIBRATE_OPTIONS},
};

constexpr Named kDtype[] = {
    {"f32", MKC_DTYPE_F32},
    {"s32", MKC_DTYPE_S32},
    {"s64", MKC_DTYPE_S64},
    {"bool", MKC_DTYPE_BOOL},
    {"s8", MKC_DTYPE_S8},
    {"u8", MKC_DTYPE_U8},
    {"bf16", MKC_DTYPE_BF16},
    {"f16", MKC_DTYPE_F16},
};

constexpr Named kLayout[] = {
    {"target", MKC_LAYOUT_TARGET},
    {"channels_first", MKC_LAYOUT_CHANNELS_FIRST},
    {"channels_last", MKC_LAYOUT_CHANNELS_LAST},
    {"nchw", MKC_LAYOUT_NCHW},
    {"nhwc", MKC_LAYOUT_NHWC},
    {"ncdhw", MKC_LAYOUT_NCDHW},
    {"ndhwc", MKC_LAYOUT_NDHWC},
};

constexpr Named kActivationKind[] = {
    {"none", MKC_ACTIVATION_NONE},
    {"relu", MKC_ACTIVATION_RELU},
    {"elu", MKC_ACTIVATION_ELU},
    {"gelu_erf", MKC_ACTIVATION_GELU_ERF},
    {"gelu_tanh", MKC_ACTIVATION_GELU_TANH},
    {"tanh", MKC_ACTIVATION_TANH},
    {"sigmoid", MKC_ACTIVATION_SIGMOID},
    {"swish", MKC_ACTIVATION_SWISH},
    {"hardswish", MKC_ACTIVATION_HARDSWISH},
    {"mish", MKC_ACTIVATION_MISH},
    {"clip", MKC_ACTIVATION_CLIP},
    {"sqrt", MKC_ACTIVATION_SQRT},
    {"abs", MKC_ACTIVATION_ABS},
    {"exp", MKC_ACTIVATION_EXP},
    {"log", MKC_ACTIVATION_LOG},
    {"square", MKC_ACTIVATION_SQUARE},
    {"softplus", MKC_ACTIVATION_SOFTPLUS},
};

constexpr Named kBinaryKind[] = {
    {"add", MKC_BINARY_ADD}, {"sub", MKC_BINARY_SUB}, {"mul", MKC_BINARY_MUL},
    {"div", MKC_BINARY_DIV}, {"max", MKC_BINARY_MAX}, {"min", MKC_BINARY_MIN},
};

constexpr Named kPoolKind[] = {
    {"max", MKC_POOL_MAX},
    {"avg_include_pad", MKC_POOL_AVG_INCLUDE_PAD},
    {"avg_exclude_pad", MKC_POOL_AVG_EXCLUDE_PAD},
};

constexpr Named kReduceKind[] = {
    {"sum", MKC_REDUCE_SUM},
    {"mean", MKC_REDUCE_MEAN},
    {"max", MKC_REDUCE_MAX},
    {"min", MKC_REDUCE_MIN},
};

constexpr Named kCompareKind[] = {
    {"equal", MKC_COMPARE_EQUAL},
    {"less", MKC_COMPARE_LESS},
    {"less_equal", MKC_COMPARE_LESS_EQUAL},
    {"greater", MKC_COMPARE_GREATER},
    {"greater_equal", MKC_COMPARE_GREATER_EQUAL},
};

constexpr Named kLogicalKind[] = {
    {"and", MKC_LOGICAL_AND},
    {"or", MKC_LOGICAL_OR},
    {"xor", MKC_LOGICAL_XOR},
    {"not", MKC_LOGICAL_NOT},
};

constexpr Named kPadMode[] = {
    {"constant", MKC_PAD_CONSTANT},
    {"reflect", MKC_PAD_REFLECT},
    {"edge", MKC_PAD_EDGE},
    {"wrap", MKC_PAD_WRAP},
};

constexpr Named kResizeMode[] = {
    {"nearest", MKC_RESIZE_NEAREST},
    {"linear", MKC_RESIZE_LINEAR},
    {"cubic", MKC_RESIZE_CUBIC},
};

constexpr Named kResizeCoordinates[] = {
    {"half_pixel", MKC_COORDINATES_HALF_PIXEL},
    {"pytorch_half_pixel", MKC_COORDINATES_PYTORCH_HALF_PIXEL},
    {"align_corners", MKC_COORDINATES_ALIGN_CORNERS},
    {"asymmetric", MKC_COORDINATES_ASYMMETRIC},
    {"half_pixel_symmetric", MKC_COORDINATES_HALF_PIXEL_SYMMETRIC},
};

constexpr Named kResizeNearest[] = {
    {"round_prefer_floor", MKC_NEAREST_ROUND_PREFER_FLOOR},
    {"round_prefer_ceil", MKC_NEAREST_ROUND_PREFER_CEIL},
    {"floor", MKC_NEAREST_FLOOR},
    {"ceil", MKC_NEAREST_CEIL},
};

// An enum's values: a table above, or (null table) the operator table's rows.
struct Enum {
    const char *name;
    const Named *values;
    size_t count;
};

template <size_t N>
constexpr Enum table(const char *name, const Named (&values)[N]) {
    return {name, values, N};
}

constexpr Enum kEnums[] = {
    table("mkc_status", kStatus),
    table("mkc_struct_id", kStructId),
    table("mkc_dtype", kDtype),
    table("mkc_layout", kLayout),
    table("mkc_activation_kind", kActivationKind),
    table("mkc_binary_kind", kBinaryKind),
    table("mkc_pool_kind", kPoolKind),
    table("mkc_reduce_kind", kReduceKind),
    table("mkc_compare_kind", kCompareKind),
    table("mkc_logical_kind", kLogicalKind),
    table("mkc_pad_mode", kPadMode),
    table("mkc_resize_mode", kResizeMode),
    table("mkc_resize_coordinates", kResizeCoordinates),
    table("mkc_resize_nearest", kResizeNearest),
    {"mkc_op", nullptr, 0},
};

const Enum &find_enum(const char *op, const char *enum_name) {
    require(enum_name != nullptr, op, ": enum_name is NULL");
    for (const Enum &e : kEnums)
        if (std::strcmp(e.name, enum_name) == 0) return e;
    std::string known;
    for (const Enum &e : kEnums) known += std::string(known.empty() ? "" : ", ") + e.name;
    fail(MKC_STATUS_INVALID_ARGUMENT, op, ": unknown enum '", enum_name, "' (known: ", known,
         ")");
}

} // namespace

extern "C" {

MKC_API mkc_status mkc_enum_value(const char *enum_name, const char *value_name,
                                  int32_t *value) {
    return api::guard([&] {
        const Enum &e = find_enum("enum_value", enum_name);
        require(value_name != nullptr, "enum_value: value_name is NULL");
        api::require_out(value, "enum_value: value");
        if (e.values == nullptr) {
            if (const graph::OpRow *row = graph::op_named(value_name)) {
                *value = static_cast<int32_t>(row->op);
                return;
            }
        } else {
            for (size_t i = 0; i < e.count; ++i)
                if (std::strcmp(e.values[i].name, value_name) == 0) {
                    *value = e.values[i].value;
                    return;
                }
        }
        fail(MKC_STATUS_INVALID_ARGUMENT, "enum_value: ", e.name, " has no value named '",
             value_name, "'");
    });
}

MKC_API mkc_status mkc_enum_name(const char *enum_name, int32_t value, const char **name) {
    return api::guard([&] {
        const Enum &e = find_enum("enum_name", enum_name);
        api::require_out(name, "enum_name: name");
        if (e.values == nullptr) {
            if (const graph::OpRow *row = graph::op_by_id(value)) {
                *name = row->name;
                return;
            }
        } else {
            for (size_t i = 0; i < e.count; ++i)
                if (e.values[i].value == value) {
                    *name = e.values[i].name;
                    return;
                }
        }
        fail(MKC_STATUS_INVALID_ARGUMENT, "enum_name: ", e.name, " has no value ", value);
    });
}

} // extern "C"
