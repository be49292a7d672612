"""ctypes declarations of the whole C ABI (mkcache.h), one per function.

Every function returning a status is wrapped so a non-OK status raises the
matching :mod:`mkcache.errors` exception with the library's message.
"""
from __future__ import annotations

import ctypes
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_double, c_float,
                    c_int, c_int32, c_int64, c_size_t, c_uint64, c_void_p)

from . import _loader
from .errors import STATUS_ERRORS, Error

lib = _loader.load()

MAX_NDIMS = 6

tensor_p = c_void_p
blob_p = c_void_p
status_t = c_int
DELETER = CFUNCTYPE(None, c_void_p)


class _Sized(Structure):
    """The `size_t struct_size` every struct of mkcache.h passed by pointer
    starts with, as a base class. Each mirror's `_fields_` lists the fields
    after it, so positional arguments and the field list (cache.stats()
    reads it) stay what they were. A mirror is made with struct_size set to
    its own size: every struct the package (or a test) builds passes the
    library's check. The layout is C's: the base takes 8 bytes, a multiple
    of every field's alignment."""
    _fields_ = [("struct_size", c_size_t)]

    def __init__(self, *args, **kwargs):
        super().__init__(ctypes.sizeof(self), *args, **kwargs)


class CacheStats(_Sized):
    _fields_ = [(name, c_uint64) for name in (
        "hits", "misses", "insertions", "evictions", "evicted_entries",
        "entries", "groups", "sessions", "bytes", "transfers")]


class ActivationCall(_Sized):
    _fields_ = [
        ("kind", c_int),
        ("alpha", c_float),
        ("beta", c_float),
        ("name", c_char_p),
        ("ndims", c_int),
        ("dims", c_int64 * MAX_NDIMS),
    ]


class PoolParams(_Sized):
    _fields_ = [
        ("kind", c_int),
        ("kernel", c_int64 * 3),
        ("stride", c_int64 * 3),
        ("pad_begin", c_int64 * 3),
        ("pad_end", c_int64 * 3),
        ("ceil_mode", c_int),
        ("global_", c_int),
        ("data_format", c_int),
        ("training", c_int),
        ("name", c_char_p),
        ("dilation", c_int64 * 3),
    ]


class LinearParams(_Sized):
    _fields_ = [
        ("activation", c_int),
        ("activation_alpha", c_float),
        ("activation_beta", c_float),
        ("training", c_int),
        ("name", c_char_p),
        ("sum", c_int),
    ]


class MatmulParams(_Sized):
    _fields_ = [
        ("transpose_a", c_int),
        ("transpose_b", c_int),
        ("activation", c_int),
        ("activation_alpha", c_float),
        ("activation_beta", c_float),
        ("name", c_char_p),
        ("scale", c_float),
    ]


class LayerNormParams(_Sized):
    _fields_ = [("begin_norm_axis", c_int), ("epsilon", c_float), ("training", c_int),
                ("name", c_char_p)]


class BatchNormParams(_Sized):
    _fields_ = [("epsilon", c_float), ("momentum", c_float), ("training", c_int),
                ("data_format", c_int), ("name", c_char_p)]


class LrnParams(_Sized):
    _fields_ = [("size", c_int64), ("alpha", c_float), ("beta", c_float), ("k", c_float),
                ("data_format", c_int), ("training", c_int), ("name", c_char_p)]


class ConvParams(_Sized):
    _fields_ = [
        ("stride", c_int64 * 3),
        ("pad_begin", c_int64 * 3),
        ("pad_end", c_int64 * 3),
        ("dilation", c_int64 * 3),
        ("output_padding", c_int64 * 3),
        ("groups", c_int64),
        ("data_format", c_int),
        ("activation", c_int),
        ("activation_alpha", c_float),
        ("activation_beta", c_float),
        ("sum", c_int),
        ("training", c_int),
        ("name", c_char_p),
    ]


class ActivationParams(_Sized):
    _fields_ = [("kind", c_int), ("alpha", c_float), ("beta", c_float), ("name", c_char_p)]


class SoftmaxParams(_Sized):
    _fields_ = [("axis", c_int), ("log", c_int), ("name", c_char_p)]


class BinaryParams(_Sized):
    _fields_ = [("kind", c_int), ("name", c_char_p)]


class ConcatParams(_Sized):
    _fields_ = [("axis", c_int), ("name", c_char_p)]


class TransposeParams(_Sized):
    _fields_ = [("ndims", c_int), ("perm", c_int * MAX_NDIMS)]


class ReshapeParams(_Sized):
    _fields_ = [("ndims", c_int), ("dims", c_int64 * MAX_NDIMS)]


class ExpandParams(_Sized):
    _fields_ = [("ndims", c_int), ("dims", c_int64 * MAX_NDIMS), ("name", c_char_p)]


class CompareParams(_Sized):
    _fields_ = [("kind", c_int), ("name", c_char_p)]


class LogicalParams(_Sized):
    _fields_ = [("kind", c_int), ("name", c_char_p)]


class QuantizeParams(_Sized):
    _fields_ = [("axis", c_int), ("to", c_int), ("name", c_char_p), ("fast", c_int)]


class QuantizedConvParams(_Sized):
    _fields_ = [("conv", ConvParams), ("dst_dtype", c_int), ("name", c_char_p),
                ("sum_scale", c_float), ("sum_zero_point", c_int32)]


class QuantizedLinearParams(_Sized):
    _fields_ = [("activation", c_int), ("activation_alpha", c_float),
                ("activation_beta", c_float), ("dst_dtype", c_int), ("name", c_char_p),
                ("sum", c_int), ("sum_scale", c_float), ("sum_zero_point", c_int32)]


class QuantizedMatmulParams(_Sized):
    _fields_ = [("transpose_a", c_int), ("transpose_b", c_int), ("activation", c_int),
                ("activation_alpha", c_float), ("activation_beta", c_float),
                ("dst_dtype", c_int), ("name", c_char_p)]


class PadParams(_Sized):
    _fields_ = [("mode", c_int), ("value", c_double), ("naxes", c_int),
                ("axes", c_int * MAX_NDIMS), ("begin", c_int64 * MAX_NDIMS),
                ("end", c_int64 * MAX_NDIMS), ("name", c_char_p)]


class ResizeParams(_Sized):
    _fields_ = [("mode", c_int), ("coordinates", c_int), ("nearest", c_int), ("nsizes", c_int),
                ("sizes", c_int64 * MAX_NDIMS), ("nscales", c_int),
                ("scales", c_float * MAX_NDIMS), ("name", c_char_p),
                ("cubic_coeff_a", c_double), ("exclude_outside", c_int), ("antialias", c_int)]


class SliceParams(_Sized):
    _fields_ = [("naxes", c_int), ("axes", c_int * MAX_NDIMS), ("starts", c_int64 * MAX_NDIMS),
                ("ends", c_int64 * MAX_NDIMS), ("steps", c_int64 * MAX_NDIMS),
                ("name", c_char_p)]


class CastParams(_Sized):
    _fields_ = [("to", c_int), ("name", c_char_p)]


class GatherParams(_Sized):
    _fields_ = [("axis", c_int), ("name", c_char_p)]


class GatherNdParams(_Sized):
    _fields_ = [("batch_dims", c_int), ("name", c_char_p)]


class RangeParams(_Sized):
    _fields_ = [("axis", c_int), ("start", c_double), ("limit_offset", c_double),
                ("delta", c_double), ("dtype", c_int), ("name", c_char_p)]


class ReduceParams(_Sized):
    _fields_ = [("kind", c_int), ("naxes", c_int), ("axes", c_int * MAX_NDIMS),
                ("keepdims", c_int), ("name", c_char_p)]


class ProgramOptions(_Sized):
    _fields_ = [("fuse", c_int), ("inplace", c_int), ("reuse", c_int), ("capacity", c_int64),
                ("impl", c_char_p), ("measure", c_int), ("choices", c_char_p),
                ("dump", c_char_p), ("precision", c_char_p), ("calibration", c_char_p),
                ("exact_plans", c_int64)]


class CalibrateOptions(_Sized):
    _fields_ = [("method", c_char_p), ("percentile", c_double)]


class ProgramMemory(_Sized):
    _fields_ = [("arena_bytes", c_size_t), ("lower_bound_bytes", c_size_t),
                ("naive_bytes", c_size_t), ("constant_bytes", c_size_t), ("steps", c_int),
                ("converters", c_int), ("plans", c_int), ("in_place", c_int), ("views", c_int),
                ("held_constant_bytes", c_size_t)]


# The mirror of each struct, by its mkc_struct_id name (mkcache.h, "Struct sizes").
_MIRRORS = {"conv_params": ConvParams, "pool_params": PoolParams, "linear_params": LinearParams,
            "matmul_params": MatmulParams, "layer_norm_params": LayerNormParams,
            "batch_norm_params": BatchNormParams, "lrn_params": LrnParams,
            "cache_stats": CacheStats, "activation_call": ActivationCall,
            "activation_params": ActivationParams, "softmax_params": SoftmaxParams,
            "binary_params": BinaryParams, "concat_params": ConcatParams,
            "transpose_params": TransposeParams, "reshape_params": ReshapeParams,
            "program_options": ProgramOptions, "program_memory": ProgramMemory,
            "reduce_params": ReduceParams, "gather_params": GatherParams,
            "cast_params": CastParams, "slice_params": SliceParams,
            "expand_params": ExpandParams, "compare_params": CompareParams,
            "pad_params": PadParams, "resize_params": ResizeParams,
            "logical_params": LogicalParams, "range_params": RangeParams,
            "gather_nd_params": GatherNdParams, "quantize_params": QuantizeParams,
            "quantized_conv_params": QuantizedConvParams,
            "quantized_linear_params": QuantizedLinearParams,
            "quantized_matmul_params": QuantizedMatmulParams,
            "calibrate_options": CalibrateOptions}


lib.mkc_status_string.argtypes = [status_t]
lib.mkc_status_string.restype = c_char_p
lib.mkc_last_error.argtypes = []
lib.mkc_last_error.restype = c_char_p

# status value -> its exception class; filled from the library's status
# values once the lookup below is declared (a failure before that raises
# the Error base class, with the library's message all the same).
BY_STATUS: dict = {}


def raise_for(status: int) -> None:
    message = lib.mkc_last_error().decode("utf-8", "replace")
    name = lib.mkc_status_string(status).decode()
    raise BY_STATUS.get(status, Error)(message, name)


def _errcheck(status, func, args):
    if status != 0:
        raise_for(status)
    return status


_SIGNATURES = {
    "mkc_enum_value": [c_char_p, c_char_p, POINTER(c_int32)],
    "mkc_enum_name": [c_char_p, c_int32, POINTER(c_char_p)],
    "mkc_get_version": [POINTER(c_int), POINTER(c_int), POINTER(c_int)],
    "mkc_get_build_info": [POINTER(c_char_p)],
    "mkc_set_num_threads": [c_int],
    "mkc_get_num_threads": [POINTER(c_int)],
    "mkc_get_peak_flops": [POINTER(c_double)],
    "mkc_get_peak_ops": [c_int, POINTER(c_double)],
    "mkc_get_reorder_count": [POINTER(c_uint64)],
    "mkc_get_struct_size": [c_int, POINTER(c_size_t)],
    "mkc_set_target_layout": [c_int],
    "mkc_get_target_layout": [POINTER(c_int)],
    "mkc_tensor_wrap": [c_int, c_int, POINTER(c_int64), c_int, c_void_p, POINTER(tensor_p)],
    "mkc_tensor_create": [c_int, c_int, POINTER(c_int64), c_int, POINTER(tensor_p)],
    "mkc_tensor_destroy": [tensor_p],
    "mkc_tensor_get_shape": [tensor_p, POINTER(c_int), POINTER(c_int64)],
    "mkc_tensor_get_dtype": [tensor_p, POINTER(c_int)],
    "mkc_tensor_get_layout": [tensor_p, POINTER(c_int)],
    "mkc_tensor_get_format": [tensor_p, POINTER(c_char_p)],
    "mkc_tensor_get_nbytes": [tensor_p, POINTER(c_size_t)],
    "mkc_tensor_get_plain_nbytes": [tensor_p, POINTER(c_size_t)],
    "mkc_tensor_set_constant": [tensor_p, c_int],
    "mkc_tensor_export": [tensor_p, c_int, c_void_p, c_size_t],
    "mkc_set_executor": [c_uint64],
    "mkc_get_executor": [POINTER(c_uint64)],
    "mkc_cache_set_session": [c_int64],
    "mkc_cache_get_session": [POINTER(c_int64)],
    "mkc_cache_set_input_shape": [c_char_p],
    "mkc_cache_get_input_shape": [POINTER(c_char_p)],
    "mkc_cache_set_capacity": [c_int64],
    "mkc_cache_get_capacity": [POINTER(c_int64)],
    "mkc_key_make": [c_char_p, c_char_p, c_int, POINTER(c_int64), POINTER(c_char), c_size_t,
                     POINTER(c_size_t)],
    "mkc_cache_set_blob": [c_char_p, c_void_p, c_size_t, DELETER],
    "mkc_cache_get_blob": [c_char_p, POINTER(blob_p)],
    "mkc_blob_get_data": [blob_p, POINTER(c_void_p)],
    "mkc_blob_release": [blob_p],
    "mkc_cache_reset": [],
    "mkc_cache_reset_executor": [c_uint64],
    "mkc_cache_stats_init": [POINTER(CacheStats)],
    "mkc_cache_get_stats": [POINTER(CacheStats)],
    "mkc_cache_get_session_stats": [c_int64, POINTER(CacheStats)],
    "mkc_cache_get_keys": [c_int64, POINTER(c_char), c_size_t, POINTER(c_size_t)],
    "mkc_conv_params_init": [POINTER(ConvParams)],
    "mkc_conv2d": [POINTER(ConvParams), tensor_p, tensor_p, tensor_p, POINTER(tensor_p)],
    "mkc_conv3d": [POINTER(ConvParams), tensor_p, tensor_p, tensor_p, POINTER(tensor_p)],
    "mkc_conv2d_transpose": [POINTER(ConvParams), tensor_p, tensor_p, tensor_p, POINTER(tensor_p)],
    "mkc_activation": [c_int, c_float, c_float, c_char_p, tensor_p, POINTER(tensor_p)],
    "mkc_activation_plain": [POINTER(ActivationCall), c_void_p, c_void_p],
    "mkc_activation_plain_ref": [POINTER(ActivationCall), c_void_p, c_void_p],
    "mkc_softmax": [c_int, c_int, c_char_p, tensor_p, POINTER(tensor_p)],
    "mkc_binary": [c_int, c_char_p, tensor_p, tensor_p, POINTER(tensor_p)],
    "mkc_pool_params_init": [POINTER(PoolParams)],
    "mkc_pool": [POINTER(PoolParams), tensor_p, POINTER(tensor_p)],
    "mkc_linear_params_init": [POINTER(LinearParams)],
    "mkc_linear": [POINTER(LinearParams), tensor_p, tensor_p, tensor_p, POINTER(tensor_p)],
    "mkc_matmul_params_init": [POINTER(MatmulParams)],
    "mkc_matmul": [POINTER(MatmulParams), tensor_p, tensor_p, tensor_p, POINTER(tensor_p)],
    "mkc_layer_norm_params_init": [POINTER(LayerNormParams)],
    "mkc_layer_norm": [POINTER(LayerNormParams), tensor_p, tensor_p, tensor_p, POINTER(tensor_p)],
    "mkc_batch_norm_params_init": [POINTER(BatchNormParams)],
    "mkc_batch_norm": [POINTER(BatchNormParams), tensor_p, tensor_p, tensor_p, tensor_p, tensor_p,
                       tensor_p, tensor_p, POINTER(tensor_p)],
    "mkc_lrn_params_init": [POINTER(LrnParams)],
    "mkc_lrn": [POINTER(LrnParams), tensor_p, POINTER(tensor_p)],
    "mkc_concat": [c_int, c_int, POINTER(tensor_p), c_char_p, POINTER(tensor_p)],
    "mkc_transpose": [c_int, POINTER(c_int), tensor_p, POINTER(tensor_p)],
    "mkc_tensor_to_layout": [tensor_p, c_char_p, POINTER(tensor_p)],
    # Backward operators: every POINTER(tensor_p) gradient may be None.
    "mkc_conv2d_backward": [POINTER(ConvParams), tensor_p, tensor_p, tensor_p, POINTER(tensor_p),
                            POINTER(tensor_p), POINTER(tensor_p)],
    "mkc_conv3d_backward": [POINTER(ConvParams), tensor_p, tensor_p, tensor_p, POINTER(tensor_p),
                            POINTER(tensor_p), POINTER(tensor_p)],
    "mkc_conv2d_transpose_backward": [POINTER(ConvParams), tensor_p, tensor_p, tensor_p,
                                      POINTER(tensor_p), POINTER(tensor_p), POINTER(tensor_p)],
    "mkc_pool_backward": [POINTER(PoolParams), tensor_p, tensor_p, POINTER(tensor_p)],
    "mkc_activation_backward": [c_int, c_float, c_float, c_char_p, tensor_p, tensor_p,
                                POINTER(tensor_p)],
    "mkc_softmax_backward": [c_int, c_int, c_char_p, tensor_p, tensor_p, POINTER(tensor_p)],
    "mkc_linear_backward": [POINTER(LinearParams), tensor_p, tensor_p, tensor_p,
                            POINTER(tensor_p), POINTER(tensor_p), POINTER(tensor_p)],
    "mkc_layer_norm_backward": [POINTER(LayerNormParams), tensor_p, tensor_p, tensor_p, tensor_p,
                                POINTER(tensor_p), POINTER(tensor_p), POINTER(tensor_p)],
    "mkc_batch_norm_backward": [POINTER(BatchNormParams), tensor_p, tensor_p, tensor_p, tensor_p,
                                tensor_p, tensor_p, POINTER(tensor_p), POINTER(tensor_p),
                                POINTER(tensor_p)],
    "mkc_lrn_backward": [POINTER(LrnParams), tensor_p, tensor_p, POINTER(tensor_p)],
    "mkc_binary_backward": [c_int, c_char_p, tensor_p, tensor_p, tensor_p, POINTER(tensor_p),
                            POINTER(tensor_p)],
    "mkc_matmul_backward": [POINTER(MatmulParams), tensor_p, tensor_p, tensor_p, tensor_p,
                            POINTER(tensor_p), POINTER(tensor_p), POINTER(tensor_p)],
    "mkc_concat_backward": [c_int, c_int, POINTER(tensor_p), tensor_p, POINTER(tensor_p)],
    "mkc_reshape": [tensor_p, c_int, POINTER(c_int64), POINTER(tensor_p)],
    # Programs.
    "mkc_activation_params_init": [POINTER(ActivationParams)],
    "mkc_softmax_params_init": [POINTER(SoftmaxParams)],
    "mkc_binary_params_init": [POINTER(BinaryParams)],
    "mkc_concat_params_init": [POINTER(ConcatParams)],
    "mkc_transpose_params_init": [POINTER(TransposeParams)],
    "mkc_reshape_params_init": [POINTER(ReshapeParams)],
    "mkc_program_options_init": [POINTER(ProgramOptions)],
    "mkc_graph_create": [POINTER(c_void_p)],
    "mkc_graph_destroy": [c_void_p],
    "mkc_graph_input": [c_void_p, c_char_p, c_int, c_int, POINTER(c_int64), c_int,
                        POINTER(c_int)],
    "mkc_graph_constant": [c_void_p, tensor_p, c_char_p, POINTER(c_int)],
    "mkc_graph_node": [c_void_p, c_int, c_void_p, c_int, POINTER(c_int), POINTER(c_int)],
    "mkc_reduce_params_init": [POINTER(ReduceParams)],
    "mkc_gather_params_init": [POINTER(GatherParams)],
    "mkc_cast_params_init": [POINTER(CastParams)],
    "mkc_slice_params_init": [POINTER(SliceParams)],
    "mkc_expand_params_init": [POINTER(ExpandParams)],
    "mkc_compare_params_init": [POINTER(CompareParams)],
    "mkc_pad_params_init": [POINTER(PadParams)],
    "mkc_resize_params_init": [POINTER(ResizeParams)],
    "mkc_logical_params_init": [POINTER(LogicalParams)],
    "mkc_range_params_init": [POINTER(RangeParams)],
    "mkc_gather_nd_params_init": [POINTER(GatherNdParams)],
    "mkc_quantize_params_init": [POINTER(QuantizeParams)],
    "mkc_quantized_conv_params_init": [POINTER(QuantizedConvParams)],
    "mkc_quantized_linear_params_init": [POINTER(QuantizedLinearParams)],
    "mkc_quantized_matmul_params_init": [POINTER(QuantizedMatmulParams)],
    "mkc_op_run": [c_int, c_void_p, c_int, POINTER(tensor_p), POINTER(tensor_p)],
    "mkc_program_output_dtype": [c_void_p, POINTER(c_int64), c_int, POINTER(c_int)],
    "mkc_graph_output": [c_void_p, c_int, c_char_p],
    "mkc_program_compile": [c_void_p, POINTER(ProgramOptions), POINTER(c_void_p)],
    "mkc_program_destroy": [c_void_p],
    "mkc_program_inputs": [c_void_p, POINTER(c_int)],
    "mkc_program_input_name": [c_void_p, c_int, POINTER(c_char_p)],
    "mkc_program_outputs": [c_void_p, POINTER(c_int)],
    "mkc_program_output_name": [c_void_p, c_int, POINTER(c_char_p)],
    "mkc_program_run": [c_void_p, c_int, POINTER(tensor_p), c_int, POINTER(tensor_p)],
    "mkc_program_executor": [c_void_p, POINTER(c_uint64)],
    "mkc_program_profile": [c_void_p, c_int, POINTER(tensor_p), c_int, POINTER(tensor_p)],
    "mkc_program_profile_text": [c_void_p, POINTER(c_char), c_size_t, POINTER(c_size_t)],
    "mkc_program_plan": [c_void_p, POINTER(c_char), c_size_t, POINTER(c_size_t)],
    "mkc_program_steps": [c_void_p, POINTER(c_char), c_size_t, POINTER(c_size_t)],
    "mkc_program_choices": [c_void_p, POINTER(c_char), c_size_t, POINTER(c_size_t)],
    "mkc_program_calibrate": [c_void_p, c_int, POINTER(tensor_p)],
    "mkc_calibrate_options_init": [POINTER(CalibrateOptions)],
    "mkc_program_calibrate_with": [c_void_p, c_int, POINTER(tensor_p), POINTER(CalibrateOptions)],
    "mkc_program_calibration": [c_void_p, POINTER(c_char), c_size_t, POINTER(c_size_t)],
    "mkc_program_memory_info": [c_void_p, POINTER(ProgramMemory)],
    "mkc_program_output_shape": [c_void_p, POINTER(c_int64), c_int, POINTER(c_int),
                                 POINTER(c_int64)],
    "mkc_program_run_plain": [c_void_p, POINTER(c_int64), POINTER(c_void_p), POINTER(c_void_p)],
    "mkc_program_run_plain_ref": [c_void_p, POINTER(c_int64), POINTER(c_void_p),
                                  POINTER(c_void_p)],
}

for _name, _argtypes in _SIGNATURES.items():
    _fn = getattr(lib, _name)
    _fn.argtypes = _argtypes
    _fn.restype = status_t
    _fn.errcheck = _errcheck


def enum_value(enum: str, name: str) -> int:
    """The value of `enum`'s enumerator `name` (mkcache.h, "Enum values by
    name": "mkc_op", "conv2d" -> MKC_OP_CONV2D), as the loaded library has it."""
    value = c_int32()
    lib.mkc_enum_value(enum.encode(), name.encode(), ctypes.byref(value))
    return value.value


def enum_name(enum: str, value: int) -> str:
    """The name of `enum`'s value `value` (its first, for an aliased value)."""
    name = c_char_p()
    lib.mkc_enum_name(enum.encode(), value, ctypes.byref(name))
    return name.value.decode()


def enum_values(enum: str, names) -> dict:
    """{name: value} for each of `names`, read from the library."""
    return {name: enum_value(enum, name) for name in names}


# The enums' values this package passes, read once from the library rather
# than copied from mkcache.h: a library whose numbers moved is then still
# called right, and one that lost a name fails here, at import, naming it.
BY_STATUS.update({enum_value("mkc_status", cls.status[len("MKC_STATUS_"):].lower()): cls
                  for cls in STATUS_ERRORS})
DTYPE_F32 = enum_value("mkc_dtype", "f32")
LAYOUT_TARGET, LAYOUT_CHANNELS_FIRST, LAYOUT_CHANNELS_LAST = (
    enum_value("mkc_layout", name) for name in ("target", "channels_first", "channels_last"))
ACTIVATION_NONE, ACTIVATION_RELU = (
    enum_value("mkc_activation_kind", name) for name in ("none", "relu"))


def _every_value(enum: str, limit: int = 256) -> dict:
    """{name: value} of every value of `enum` below `limit`, as the
    library names them."""
    lookup = lib["mkc_enum_name"]  # its own object: no errcheck, a miss is no error
    lookup.argtypes = _SIGNATURES["mkc_enum_name"]
    lookup.restype = status_t
    found = {}
    for value in range(1, limit):
        name = ctypes.c_char_p()
        if lookup(enum.encode(), value, ctypes.byref(name)) == 0:
            found[name.value.decode()] = value
    return found


# mkc_op by operator name: every operator the library's table has.
OPS = _every_value("mkc_op")
# mkc_struct_id -> the mirror of that struct.
STRUCTS = {enum_value("mkc_struct_id", name): mirror for name, mirror in _MIRRORS.items()}


# The same functions without errcheck, for hot paths that check the status
# inline (an errcheck hook costs a Python call on every call).
fast = {name: lib[name] for name in ("mkc_tensor_wrap", "mkc_tensor_destroy", "mkc_conv2d",
                                     "mkc_conv3d", "mkc_conv2d_transpose",
                                     "mkc_activation", "mkc_tensor_export", "mkc_softmax",
                                     "mkc_binary", "mkc_pool", "mkc_matmul", "mkc_layer_norm",
                                     "mkc_batch_norm", "mkc_lrn", "mkc_linear")}
for _name, _fn in fast.items():
    _fn.argtypes = _SIGNATURES[_name]
    _fn.restype = status_t

# The hottest calls without argtypes at all: ctypes then converts nothing,
# so callers pass exactly typed values (c_void_p for pointers, c_float for
# floats; a bare Python int is a C int and would truncate a pointer).
raw = {name: lib[name] for name in ("mkc_tensor_wrap", "mkc_tensor_destroy", "mkc_activation",
                                    "mkc_tensor_export", "mkc_activation_plain",
                                    "mkc_program_run_plain", "mkc_program_run_plain_ref")}
for _fn in raw.values():
    _fn.restype = status_t

# Calls made with the GIL held (ctypes.PyDLL over the same handle): for work
# shorter than releasing and re-taking the GIL. Arrays of up to
# SERIAL_ELEMENTS run on the calling thread inside the library (mkcache.h,
# mkc_activation) and take well under a microsecond.
SERIAL_ELEMENTS = 1024
gil_held = ctypes.PyDLL(lib._name, handle=lib._handle)
activation_plain_held = gil_held["mkc_activation_plain"]
activation_plain_held.restype = status_t

# mkc_activation_plain_ref with every argument an address passed as a Python
# int (the call struct's, and those of two arrays' data-pointer fields): the
# activation fast path's calls, with and without the GIL.
activation_plain_ref, activation_plain_ref_held = lib["mkc_activation_plain_ref"], \
    gil_held["mkc_activation_plain_ref"]
for _fn in (activation_plain_ref, activation_plain_ref_held):
    _fn.argtypes = (c_void_p, c_void_p, c_void_p)
    _fn.restype = status_t

def call_with_buffer(fn, *args) -> str:
    """Calls a function following the (buf, size, needed) convention."""
    needed = c_size_t(0)
    size = 256
    while True:
        buf = ctypes.create_string_buffer(size)
        status = fn.__call__  # keep the errcheck path for real errors
        try:
            status(*args, buf, size, ctypes.byref(needed))
            return buf.value.decode("utf-8", "replace")
        except Error as exc:
            if exc.status != "MKC_STATUS_BUFFER_TOO_SMALL":
                raise
            size = needed.value


def declared_functions() -> list[str]:
    """Names of every C function this module declares (used by the tests)."""
    return sorted(list(_SIGNATURES) + ["mkc_status_string", "mkc_last_error"])
