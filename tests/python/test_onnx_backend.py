"""ONNX's own backend tests (onnx.backend.test, the node tests its package
ships: models with inputs and expected outputs) on mkcache.onnx.backend, for
every operator mkcache.onnx converts. The tests this version does not pass
are listed, each with its reason, in onnx_backend_excluded.txt."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
import onnx.backend.test  # noqa: E402

import mkcache.onnx.backend as backend  # noqa: E402

# The node tests of each operator the importer converts (ONNX's test names:
# the operator in lower case, words joined by '_' for some).
OPERATOR_TESTS = [
    "abs", "add", "averagepool", "batchnorm", "cast", "clip", "concat", "constant",
    "constantofshape", "conv", "range", "slice", "split", "expand", "equal", "less",
    "less_equal", "greater", "greater_equal",
    "div", "dropout", "elu", "erf", "exp", "flatten", "gather", "gelu", "gemm",
    "globalaveragepool", "globalmaxpool", "hardswish", "identity", "layer_normalization",
    "leakyrelu", "log", "logsoftmax", "lrn", "matmul", "max", "maxpool", "min", "mish", "mul",
    "neg", "pow", "reciprocal", "reduce_max", "reduce_mean", "reduce_min", "reduce_sum",
    "relu", "reshape", "shape", "sigmoid", "size", "softmax", "softplus", "sqrt", "squeeze", "sub", "sum", "tanh",
    "transpose", "unsqueeze", "where",
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


backend_test = onnx.backend.test.BackendTest(backend, __name__)
for op in OPERATOR_TESTS:
    backend_test.include(rf"^test_{op}(_.*)?_cpu$")
for pattern, _ in excluded():
    backend_test.exclude(rf"^{pattern}_cpu$")
globals().update(backend_test.test_cases)


def test_exclusions_are_well_formed():
    patterns = [p for p, _ in excluded()]
    assert len(patterns) == len(set(patterns))
    for p in patterns:
        re.compile(p)
