"""What the importer and the converters share."""
from __future__ import annotations

import numpy as np

# ONNX's TensorProto.DataType -> numpy: the dtypes graph inputs take, and
# those a value computed at load time may have (shape arithmetic).
INPUT_TYPES = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_}
KNOWN_TYPES = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64}


class Refusal(Exception):
    """A node this version cannot convert, and why (collected, then raised
    as one UnsupportedError listing every such node)."""


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
