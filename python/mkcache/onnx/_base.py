"""What the importer and the converters share."""
from __future__ import annotations

import numpy as np

try:  # numpy has no bfloat16; onnx reads it as ml_dtypes' (onnx requires that package)
    from ml_dtypes import bfloat16 as NUMPY_BFLOAT16
except ImportError:  # pragma: no cover - an onnx without ml_dtypes
    NUMPY_BFLOAT16 = None

from ..tensor import bfloat16

# ONNX's TensorProto.DataType -> numpy: the dtypes graph inputs take (bfloat16
# as mkcache names it), and those a value computed at load time may have
# (shape arithmetic, constants cast or quantized).
INPUT_TYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 9: np.bool_,
               10: np.float16, 16: bfloat16}
KNOWN_TYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 9: np.bool_,
               10: np.float16, 11: np.float64}
if NUMPY_BFLOAT16 is not None:
    KNOWN_TYPES[16] = NUMPY_BFLOAT16


class Refusal(Exception):
    """A node this version cannot convert, and why (collected, then raised
    as one UnsupportedError listing every such node)."""


class Pending(Refusal):
    """A node that reads shape data not given yet (a model's check at load,
    before the values select a program): it is converted when they are."""


def attributes(node) -> dict:
    """A node's attributes as Python values (tensors as numpy arrays,
    strings as str)."""
    from onnx import helper, numpy_helper  # noqa: PLC0415 (the optional dependency)
    out = {}
    for attr in node.attribute:
        value = helper.get_attribute_value(attr)
        if hasattr(value, "data_type") and hasattr(value, "dims"):  # a TensorProto
            value = numpy_helper.to_array(value)
        elif isinstance(value, bytes):
            value = value.decode()
        out[attr.name] = value
    return out
