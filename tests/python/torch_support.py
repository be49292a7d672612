"""torchvision for the tests that compare with it, imported where the
installed wheels allow."""
from __future__ import annotations

import pytest

_SCHEMAS = []  # the libraries defined below, kept alive


def import_torchvision():
    """torchvision, or the test skipped where it is not installed.

    PyPI's torchvision wheels link their compiled ops against the CUDA build
    of torch; beside the CPU build those fail to load, and torchvision's
    import then fails registering fake kernels for nms and qnms. No test
    uses those ops (the models are plain modules): their schemas are defined
    so the import completes."""
    torch = pytest.importorskip("torch")
    try:
        return pytest.importorskip("torchvision")
    except RuntimeError as e:
        if "torchvision::" not in str(e):
            raise
    lib = torch.library.Library("torchvision", "DEF")  # noqa: TOR901
    for op in ("nms", "qnms"):
        if not hasattr(torch.ops.torchvision, op):
            lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _SCHEMAS.append(lib)
    return pytest.importorskip("torchvision")


def import_transformers():
    """transformers, or the test skipped where it is not installed. Its
    import reads torchvision where that is installed: torchvision is
    imported first as import_torchvision does."""
    try:
        import_torchvision()
    except pytest.skip.Exception:
        pass
    return pytest.importorskip("transformers")
