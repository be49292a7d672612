"""ONNX's own backend tests (onnx.backend.test, the node tests its package
ships: models with inputs and expected outputs) on mkcache.onnx.backend, for
every operator mkcache.onnx converts. The tests this version does not pass
are listed, each with its reason, in onnx_backend_excluded.txt."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
import onnx.backend.test  # noqa: E402
import onnx.backend.test.loader  # noqa: E402

import mkcache  # noqa: E402
import mkcache.onnx.backend as backend  # noqa: E402

# The node tests of each operator the importer converts (ONNX's test names:
# the operator in lower case, words joined by '_' for some).
OPERATOR_TESTS = [
    "abs", "add", "and", "averagepool", "batchnorm", "cast", "castlike", "clip", "concat",
    "constant", "constantofshape", "conv", "convinteger", "dequantizelinear", "div",
    "dynamicquantizelinear", "dropout", "edge_pad", "elu", "equal",
    "erf", "exp", "expand", "flatten", "gather", "gathernd", "gelu", "gemm", "globalaveragepool",
    "globalmaxpool", "greater", "greater_equal", "hardswish", "identity", "instancenorm",
    "layer_normalization", "leakyrelu", "less", "less_equal", "log", "logsoftmax", "lrn",
    "matmul", "matmulinteger", "max", "maxpool", "min", "mish", "mul", "neg", "not", "or", "pow", "qlinearconv", "qlinearmatmul", "quantizelinear", "range",
    "reciprocal", "round", "reduce_l1", "reduce_l2", "reduce_log_sum", "reduce_log_sum_exp",
    "reduce_max", "reduce_mean", "reduce_min", "reduce_sum", "reduce_sum_square",
    "reflect_pad", "relu", "reshape", "resize", "shape", "sigmoid", "size", "slice",
    "shrink", "sign", "softmax", "softplus", "split", "sqrt", "squeeze", "sub", "sum", "tanh", "tile",
    "transpose", "unsqueeze", "upsample", "where", "wrap_pad", "xor",
    # PyTorch's exported Pads (the converted-model tests).
    "ConstantPad2d", "ZeroPad2d", "ReplicationPad2d", "ReflectionPad2d", "operator_pad",
]

EXCLUDED_FILE = Path(__file__).with_name("onnx_backend_excluded.txt")


def excluded() -> list:
    """(pattern, reason) of every excluded test, from the file."""
    out = []
    for line in EXCLUDED_FILE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        pattern, _, reason = line.partition("#")
        assert reason.strip(), f"{pattern.strip()}: every exclusion says why"
        out.append((pattern.strip(), reason.strip()))
    return out


# And every model the onnx package ships beside them (PyTorch's converted
# modules and operators, the simple models), whatever operators they use.
SHIPPED_MODEL_KINDS = ("pytorch-converted", "pytorch-operator", "simple")

backend_test = onnx.backend.test.BackendTest(backend, __name__)
for op in OPERATOR_TESTS:
    backend_test.include(rf"^test_{op}(_.*)?_cpu$")
for kind in SHIPPED_MODEL_KINDS:
    for case in onnx.backend.test.loader.load_model_tests(kind=kind):
        backend_test.include(rf"^{case.name}_cpu$")
for pattern, _ in excluded():
    backend_test.exclude(rf"^{pattern}_cpu$")
globals().update(backend_test.test_cases)


def test_exclusions_are_well_formed():
    patterns = [p for p, _ in excluded()]
    assert len(patterns) == len(set(patterns))
    for p in patterns:
        re.compile(p)


# ONNX's node tests of Pad, Resize and Upsample give pads, scales and sizes
# as inputs, at run time: shape data, which the importer binds by value at
# each run (the tests above). The same models with those inputs made
# initializers, the constants the importer folds at load, against the tests'
# expected outputs: each passes, or is refused for a reason this version
# states.
BOUNDS_TESTS = re.compile(r"^test_(resize_.*|upsample_.*|(constant|edge|reflect|wrap)_pad.*)$")
REFUSED_BOUNDS_TESTS = {
    "tf_crop_and_resize": "'tf_crop_and_resize' is not supported",
    "not_larger": "keep_aspect_ratio_policy='not_larger' is not supported",
    "not_smaller": "keep_aspect_ratio_policy='not_smaller' is not supported",
}


def _bounds_cases():
    import onnx.backend.test.loader as loader  # noqa: PLC0415
    return {c.name: c for c in loader.load_model_tests(kind="node") if BOUNDS_TESTS.match(c.name)}


_BOUNDS_CASES = _bounds_cases()


@pytest.mark.parametrize("name", sorted(_BOUNDS_CASES))
def test_pad_and_resize_node_tests_with_constant_bounds(name):
    from onnx import numpy_helper  # noqa: PLC0415
    case = _BOUNDS_CASES[name]
    (inputs, outputs), = case.data_sets
    m = onnx.ModelProto()
    m.CopyFrom(case.model)
    data = m.graph.input[0].name
    for info, value in list(zip(list(m.graph.input), inputs))[1:]:
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(value), info.name))
        m.graph.input.remove(info)
    refused = [why for key, why in REFUSED_BOUNDS_TESTS.items() if key in name]
    if refused:
        with pytest.raises(mkcache.UnsupportedError, match=re.escape(refused[0])):
            backend.prepare(m)
        return
    got = backend.prepare(m).run({data: inputs[0]})
    for g, want in zip(got, outputs):
        np.testing.assert_allclose(g, want, rtol=case.rtol, atol=case.atol)
