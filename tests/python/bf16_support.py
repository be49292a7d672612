"""bfloat16 tensors and the error bounds of bfloat16 results, for the tests
of the operators computing in bfloat16 (inference and training).

One rounding to bfloat16 (8 significant bits) is within 2^-9 of the value;
a result computed in float32 from bfloat16 inputs and rounded once is
within twice that, plus float32's own accumulation error over the terms
(benchdnn's bound, as reference.assert_close)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mkcache
import reference as ref

INFO = mkcache.build_info()
ISA = INFO["isa"]
HAS_KERNELS = INFO["bf16"] != "none"
needs_bf16 = pytest.mark.skipif(
    not HAS_KERNELS, reason=f"oneDNN has no bfloat16 kernels for {ISA} (needs AVX-512 or "
                            "AVX2-VNNI-2)")

ROUNDING = 2.0 ** -8


def run_child(code: str, env: dict) -> subprocess.CompletedProcess:
    """`code` (after `import numpy as np, mkcache` and `from mkcache import
    grad`) in a new interpreter with `env` set on top of this process's: how
    a test runs on another ISA's kernels (ONEDNN_MAX_CPU_ISA)."""
    prelude = "import numpy as np, mkcache\nfrom mkcache import grad\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def rand(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def bf16(a):
    """a rounded to bfloat16: the Tensor, and its values as float64."""
    t = mkcache.Tensor(np.ascontiguousarray(a, np.float32)).astype("bf16")
    return t, t.numpy().astype(np.float64)


def values(t):
    assert t.dtype == mkcache.bfloat16, t.dtype
    return t.numpy().astype(np.float64)


def assert_bf16_close(got, exact, magnitude=None, reduction=1, floor=0.0, roundings=1,
                      inner=0, what="result"):
    """|got - exact| <= roundings * 2^-8 |exact| (the result's roundings)
    + inner * 2^-8 * magnitude (roundings of intermediate values, each at
    most 2^-8 of its terms' magnitude) + float32's reduction error over the
    terms' magnitude + `floor`. roundings=0: a float32 result."""
    got = np.asarray(got, np.float64)
    exact = np.asarray(exact, np.float64)
    magnitude = np.abs(exact) if magnitude is None else magnitude
    assert got.shape == exact.shape, f"{what}: shape {got.shape} != {exact.shape}"
    assert np.all(np.isfinite(got)), f"{what}: non-finite values"
    bound = (roundings * ROUNDING * np.abs(exact) + inner * ROUNDING * magnitude
             + 4.0 * (reduction + 1) * ref.EPS_F32 * magnitude + floor)
    err = np.abs(got - exact)
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (f"{what}: at {worst} got {got[worst]}, want {exact[worst]}, "
                                  f"error {err[worst]:.3g} > bound {bound[worst]:.3g}")
