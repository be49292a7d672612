"""Helpers of the property-based tests in test_fuzz.py: example budgets,
operands in every layout, NaN-aware comparisons, float64 references the
shared reference.py does not have, the call-expression language of the
bad-input cases, and a worker process for calls that may crash.

Reproducing a bad-input case by hand: every case prints as Python source
over the names defined here, e.g.

    from fuzz_strategies import *
    mkcache.conv2d(ramp(1, 4, 6, 6), ramp(8, 4, 3, 3), stride=18446744073709551618)

(run from tests/python with the library on PYTHONPATH / MKCACHE_LIBRARY).
"""
from __future__ import annotations

import os
import pickle
import select
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import numpy as np

import mkcache
from reference import EPS_F32, conv2d_nchw

# ---------------------------------------------------------------- budgets


def _asan() -> bool:
    return "libasan" in os.environ.get("LD_PRELOAD", "") or "ASAN_OPTIONS" in os.environ


# MKCACHE_FUZZ_PROFILE: "ci" (default: bounded, ~1 minute for the module)
# or "long" (20x the examples, failures shrunk to minimal examples).
PROFILE = os.environ.get("MKCACHE_FUZZ_PROFILE", "ci").strip().lower() or "ci"
if PROFILE not in ("ci", "long"):
    raise ValueError(f"MKCACHE_FUZZ_PROFILE must be 'ci' or 'long', got {PROFILE!r}")


def _scale() -> float:
    text = os.environ.get("MKCACHE_FUZZ_SCALE")
    if text:
        return max(float(text), 0.0)
    if PROFILE == "long":
        return 20.0
    return 0.5 if _asan() else 1.0  # an ASan build of the library runs slower


SCALE = _scale()
# An absolute number of examples for every test (overrides SCALE).
FIXED = (int(os.environ["MKCACHE_FUZZ_EXAMPLES"]) if os.environ.get("MKCACHE_FUZZ_EXAMPLES")
         else None)
# MKCACHE_FUZZ_RANDOM=1: a new random seed per run (exploration), instead of
# the derandomized, reproducible sequence CI runs.
RANDOM = os.environ.get("MKCACHE_FUZZ_RANDOM", "") not in ("", "0")
# MKCACHE_FUZZ_SHRINK=1: shrink failures to a minimal example (slower).
SHRINK = os.environ.get("MKCACHE_FUZZ_SHRINK", "1" if PROFILE == "long" else "") not in ("", "0")


def examples(ci: int) -> int:
    """The number of examples of a test whose CI budget is `ci` (scaled
    down, never below min(ci, 3): a few examples of every case still run)."""
    if FIXED is not None:
        return max(FIXED, 1)
    return max(int(round(ci * SCALE)), min(ci, 3))


# ------------------------------------------------------------ expressions
# Bad-input cases are Python source over these names, so that a failing
# case prints as a reproducer.


def ramp(*shape, dtype=np.float32):
    """Deterministic non-constant data: (i % 7 - 3) / 4 in row-major order."""
    size = int(np.prod(shape)) if shape else 1
    return ((np.arange(size) % 7 - 3) / 4).astype(dtype).reshape(shape)


def zeros(*shape, dtype=np.float32):
    return np.zeros(shape, dtype)


def ones(*shape, dtype=np.float32):
    return np.ones(shape, dtype)


def readonly(a):
    """`a` made read-only (the caller may not write through it)."""
    a.flags.writeable = False
    return a


def T(a, layout=None, **kwargs):
    return mkcache.Tensor(a, layout, **kwargs)


def blocked(a, fmt="nChw8c"):
    """A library-owned Tensor with `a`'s values in oneDNN layout `fmt`."""
    return mkcache.to_layout(a, fmt)


def data(seed, *shape, scale=1.0):
    """Standard-normal float32 data from a seed (the isolated worker makes
    the same arrays as the test process)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype(np.float32)


NAMESPACE = {"np": np, "mkcache": mkcache, "ramp": ramp, "zeros": zeros, "ones": ones,
             "readonly": readonly, "T": T, "blocked": blocked, "data": data}


@dataclass(frozen=True)
class Case:
    """A call as source: `setup` assigns names (in order), `call` is the
    expression under test; `unchanged` names arrays no failed call may
    modify; `note` says what is wrong with it (shown with the case)."""

    call: str
    setup: tuple = ()
    unchanged: tuple = ()
    note: str = ""

    def __repr__(self):
        lines = [f"{name} = {expr}" for name, expr in self.setup] + [self.call]
        text = "; ".join(lines)
        return f"<{text}>  # {self.note}" if self.note else f"<{text}>"

    def source(self) -> str:
        return "\n".join([f"{name} = {expr}" for name, expr in self.setup] + [self.call])

    def environment(self) -> dict:
        env = dict(NAMESPACE)
        for name, expr in self.setup:
            env[name] = eval(expr, env)  # noqa: S307 - our own case text
        return env


def _describe(value) -> str:
    if isinstance(value, mkcache.Tensor):
        try:
            return f"Tensor(shape={value.shape}, format={value.format})"
        except Exception as exc:  # noqa: BLE001 - describing only
            return f"Tensor (unreadable: {type(exc).__name__})"
    if isinstance(value, tuple):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    return type(value).__name__


def check_refused(case: Case) -> None:
    """The call must raise mkcache.Error (and nothing else), leave the arrays
    it was not allowed to write unchanged, and leave the library working."""
    env = dict(NAMESPACE)
    before = {}
    try:
        for name, expr in case.setup:  # a Tensor refused while set up: refused
            env[name] = eval(expr, env)  # noqa: S307 - our own case text
            if name in case.unchanged:
                before[name] = np.array(env[name], copy=True)
        result = eval(case.call, env)  # noqa: S307
    except mkcache.Error:
        pass
    except Exception as exc:  # noqa: BLE001 - anything else is the failure
        raise AssertionError(
            f"{case!r}\n  raised {type(exc).__module__}.{type(exc).__name__}: {exc}\n"
            f"  instead of mkcache.Error") from exc
    else:
        raise AssertionError(f"{case!r}\n  was accepted (returned {_describe(result)}); "
                             f"expected mkcache.Error")
    for name, old in before.items():
        now = np.asarray(env[name])
        assert np.array_equal(now, old, equal_nan=True), (
            f"{case!r}\n  failed but modified {name}: {_changed(old, now)}")
    check_still_works()


def _changed(old, new) -> str:
    diff = ~((old == new) | (np.isnan(old) & np.isnan(new)))
    idx = np.argwhere(diff)
    return f"{diff.sum()} elements differ, first at {tuple(idx[0])}: {old[tuple(idx[0])]} -> " \
           f"{new[tuple(idx[0])]}"


# ------------------------------------------------------------ still works

_HEALTH = {}


def _health_inputs():
    if not _HEALTH:
        x = data(7, 2, 3, 5, 6)
        w = data(8, 4, 3, 3, 3)
        b = data(9, 4)
        exact, mag = conv2d_nchw(x, w, b, pads=(1, 1, 1, 1))
        _HEALTH.update(x=x, w=w, b=b, exact=exact, mag=mag, a=data(10, 3, 7), c=data(11, 7, 2))
    return _HEALTH


def check_still_works() -> None:
    """A few small valid calls give the right answers (nothing was lost by a
    previous failed call: cache, thread state, oneDNN's state)."""
    h = _health_inputs()
    x, w, b = h["x"], h["w"], h["b"]
    try:
        y = mkcache.conv2d(x, w, b, padding=1)
        out = y.numpy("NCHW")
        err = np.abs(out - h["exact"])
        bound = 4.0 * (3 * 9 + 1) * EPS_F32 * h["mag"] + 1e-30
        assert np.all(err <= bound), f"conv2d off by {err.max():.3g}"
        s = mkcache.relu(mkcache.add(y, x.sum(axis=1, keepdims=True)[:, :, :, :]))
        want = np.maximum(out.astype(np.float64) + x.sum(axis=1, keepdims=True), 0)
        assert np.allclose(s.numpy("NCHW"), want, rtol=1e-5, atol=1e-5), "add+relu off"
        p = mkcache.max_pool2d(x, 2)
        want_p = x[:, :, :4, :6].reshape(2, 3, 2, 2, 3, 2).max(axis=(3, 5))
        assert np.array_equal(np.asarray(p), want_p), "max_pool2d off"
        m = mkcache.matmul(h["a"], h["c"])
        assert np.allclose(np.asarray(m), h["a"].astype(np.float64) @ h["c"], rtol=1e-5,
                           atol=1e-5), "matmul off"
        sm = np.asarray(mkcache.softmax(h["a"], axis=1))
        assert np.allclose(sm.sum(axis=1), 1, rtol=1e-5), "softmax off"
    except AssertionError as exc:
        raise AssertionError(f"a valid call no longer works after the call above: {exc}") from exc
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"a valid call no longer works after the call above: "
                             f"{type(exc).__name__}: {exc}") from exc


# -------------------------------------------------------------- operands
# A test draws a logical array (what the caller sees: values in the order
# of the reported shape) and one of these kinds; `operand` makes the
# argument, `logical` reads any Tensor back in its reported order.

PLAIN_KINDS = ("numpy", "readonly", "tensor")


def operand_kinds(rank: int, finite: bool = True, nhwc: bool = True) -> list:
    kinds = list(PLAIN_KINDS)
    if rank == 4:
        kinds += ["nChw8c", "nChw16c"]
        if finite:
            kinds.append("conv")  # a real conv output (blocked by oneDNN's choice)
    if rank == 5:
        kinds += ["nCdhw8c", "nCdhw16c"]
    if nhwc and rank in (4, 5):
        kinds += ["tensor_nhwc", "owned_nhwc"]
    return kinds


def channels_last_label(kind: str) -> bool:
    return kind in ("tensor_nhwc", "owned_nhwc")


def operand(arr: np.ndarray, kind: str):
    """An argument whose reported shape and values are `arr`'s."""
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if kind == "numpy":
        return arr.copy()
    if kind == "readonly":
        return readonly(arr.copy())
    if kind == "tensor":
        return mkcache.Tensor(arr.copy())
    if kind == "tensor_nhwc":  # a wrapped array labelled channels-last
        return mkcache.Tensor(arr.copy(), "NHWC" if arr.ndim == 4 else "NDHWC")
    if kind == "owned_nhwc":  # a library-owned channels-last tensor
        return mkcache.to_layout(np.ascontiguousarray(np.moveaxis(arr, -1, 1)), "NHWC")
    if kind in ("nChw8c", "nChw16c", "nCdhw8c", "nCdhw16c"):
        return mkcache.to_layout(arr, kind)
    if kind == "conv":  # identity 1x1 convolution: exact, laid out as oneDNN likes
        c = arr.shape[1]
        return mkcache.conv2d(arr, np.eye(c, dtype=np.float32)[:, :, None, None])
    raise ValueError(kind)


def logical(value) -> np.ndarray:
    """Values in the order of the reported shape."""
    if isinstance(value, mkcache.Tensor):
        return value.numpy()
    return np.asarray(value)


def inject_nonfinite(arr: np.ndarray, seed: int, fraction: float, infinities: bool) -> np.ndarray:
    """A copy of arr with about `fraction` of its elements NaN (and, with
    `infinities`, some +-inf), at least one when fraction > 0."""
    out = arr.copy()
    if fraction <= 0 or out.size == 0:
        return out
    rng = np.random.default_rng(seed)
    flat = out.reshape(-1)
    count = max(1, int(round(fraction * flat.size)))
    where = rng.choice(flat.size, size=min(count, flat.size), replace=False)
    values = [np.nan, np.inf, -np.inf] if infinities else [np.nan]
    flat[where] = rng.choice(values, size=where.size)
    return out


# ------------------------------------------------------------ comparisons

def assert_close_nan(out, exact, what="result", ulps=64, nan_unspecified=False):
    """reference.assert_close_elementwise with numpy's NaN semantics: where
    the exact result is NaN the output must be NaN, where it is +-inf it
    must be that infinity, elsewhere within `ulps` f32 epsilons relative to
    max(|exact|, 1) (assert_allclose(..., equal_nan=True) in spirit).
    nan_unspecified: for the operators whose NaN the README leaves
    unspecified (oneDNN's max/min-based and approximated kernels): results
    numpy computes from a NaN are not checked, and a max over only -inf may
    be the lowest finite float; every other element is."""
    out = np.asarray(out, dtype=np.float64)
    exact = np.asarray(exact, dtype=np.float64)
    assert out.shape == exact.shape, f"{what}: shape {out.shape} != {exact.shape}"
    if nan_unspecified:
        out = np.where(np.isnan(exact), np.nan, out)
        lowest = float(np.finfo(np.float32).min)
        out = np.where((exact == -np.inf) & (out == lowest), -np.inf, out)
    nan = np.isnan(exact)
    inf = np.isinf(exact)
    bad_nan = nan & ~np.isnan(out)
    assert not bad_nan.any(), (
        f"{what}: {bad_nan.sum()} results should be NaN (numpy propagates NaN), first at "
        f"{tuple(np.argwhere(bad_nan)[0])}: got {out[tuple(np.argwhere(bad_nan)[0])]}")
    bad_inf = inf & (out != exact)
    assert not bad_inf.any(), (
        f"{what}: {bad_inf.sum()} results should be infinite, first at "
        f"{tuple(np.argwhere(bad_inf)[0])}: got {out[tuple(np.argwhere(bad_inf)[0])]}, "
        f"want {exact[tuple(np.argwhere(bad_inf)[0])]}")
    finite = ~(nan | inf)
    bound = ulps * EPS_F32 * np.maximum(np.abs(exact), 1.0)
    with np.errstate(invalid="ignore"):
        err = np.where(finite, np.abs(out - exact), 0.0)
    bad = finite & ~(err <= bound)
    if bad.any():
        first = tuple(np.argwhere(bad)[0])
        raise AssertionError(
            f"{what}: {bad.sum()} elements off (bound {ulps} ulps), first at {first}: got "
            f"{out[first]}, want {exact[first]}")


def assert_equal_nan(out, exact, what="result"):
    out = np.asarray(out)
    assert out.shape == exact.shape, f"{what}: shape {out.shape} != {exact.shape}"
    same = (out == exact) | (np.isnan(out) & np.isnan(exact))
    if not same.all():
        first = tuple(np.argwhere(~same)[0])
        raise AssertionError(f"{what}: {(~same).sum()} elements differ, first at {first}: "
                             f"got {out[first]}, want {exact[first]}")


# ------------------------------------------------- gather-form references
# For huge strides / paddings / dilations with a small output: only the
# taps that land inside the input are gathered (no padded array is made).


def _taps(out_size, kernel, stride, pad_begin, dilation, in_size):
    pos = (np.arange(out_size, dtype=np.int64)[:, None] * stride - pad_begin
           + np.arange(kernel, dtype=np.int64)[None, :] * dilation)
    valid = (pos >= 0) & (pos < in_size)
    return np.where(valid, pos, 0), valid


def conv2d_gather(x, w, b, stride, pad_begin, pad_end, dilation, groups):
    """Direct float64 convolution, NCHW/OIHW. Returns (exact, magnitude)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    og = o // groups
    oh = (h + pad_begin[0] + pad_end[0] - ((kh - 1) * dilation[0] + 1)) // stride[0] + 1
    ow = (wd + pad_begin[1] + pad_end[1] - ((kw - 1) * dilation[1] + 1)) // stride[1] + 1
    rows, rv = _taps(oh, kh, stride[0], pad_begin[0], dilation[0], h)
    cols, cv = _taps(ow, kw, stride[1], pad_begin[1], dilation[1], wd)

    def run(xv, wv, bv):
        patches = xv.astype(np.float64)[:, :, rows[:, :, None, None], cols[None, None, :, :]]
        patches = patches * (rv[:, :, None, None] & cv[None, None, :, :])  # n c oh kh ow kw
        out = np.zeros((n, o, oh, ow))
        for g in range(groups):
            out[:, g * og:(g + 1) * og] = np.einsum(
                "nchkwl,ockl->nohw", patches[:, g * cg:(g + 1) * cg],
                wv[g * og:(g + 1) * og].astype(np.float64))
        if bv is not None:
            out += bv.astype(np.float64)[None, :, None, None]
        return out

    return run(x, w, b), run(np.abs(x), np.abs(w), None if b is None else np.abs(b))


def conv_transpose2d_gather(x, w, b, stride, pad_begin, pad_end, output_padding, dilation,
                            groups):
    """Transposed convolution (PyTorch's), w [C_in, C_out/g, KH, KW], as a
    gather: y[o] sums x[i] * w[k] over o + pad_begin = i * stride + k * dil.
    Returns (exact, magnitude)."""
    n, c, h, wd = x.shape
    ci, og, kh, kw = w.shape
    cg = c // groups
    sizes = []
    for i, (size, k) in enumerate(((h, kh), (wd, kw))):
        sizes.append((size - 1) * stride[i] - pad_begin[i] - pad_end[i]
                     + dilation[i] * (k - 1) + 1 + output_padding[i])

    def taps(out_size, k, i, in_size):
        t = (np.arange(out_size, dtype=np.int64)[:, None] + pad_begin[i]
             - np.arange(k, dtype=np.int64)[None, :] * dilation[i])
        valid = (t >= 0) & (t % stride[i] == 0) & (t // stride[i] < in_size)
        return np.where(valid, t // stride[i], 0), valid

    rows, rv = taps(sizes[0], kh, 0, h)
    cols, cv = taps(sizes[1], kw, 1, wd)

    def run(xv, wv, bv):
        patches = xv.astype(np.float64)[:, :, rows[:, :, None, None], cols[None, None, :, :]]
        patches = patches * (rv[:, :, None, None] & cv[None, None, :, :])
        out = np.zeros((n, og * groups, sizes[0], sizes[1]))
        for g in range(groups):
            out[:, g * og:(g + 1) * og] = np.einsum(
                "nchkwl,cokl->nohw", patches[:, g * cg:(g + 1) * cg],
                wv[g * cg:(g + 1) * cg].astype(np.float64))
        if bv is not None:
            out += bv.astype(np.float64)[None, :, None, None]
        return out

    return run(x, w, b), run(np.abs(x), np.abs(w), None if b is None else np.abs(b))


def max_pool2d_gather(x, kernel, stride, pad_begin, out_size):
    """Max pooling over the given number of outputs per dim; windows read
    only the input cells they cover (padding never wins)."""
    n, c, h, wd = x.shape
    rows, rv = _taps(out_size[0], kernel[0], stride[0], pad_begin[0], 1, h)
    cols, cv = _taps(out_size[1], kernel[1], stride[1], pad_begin[1], 1, wd)
    patches = x.astype(np.float64)[:, :, rows[:, :, None, None], cols[None, None, :, :]]
    mask = rv[:, :, None, None] & cv[None, None, :, :]
    patches = np.where(mask, patches, -np.inf)
    return patches.max(axis=(3, 5))


def conv_output(size, kernel, stride, pad_begin, pad_end, dilation):
    return (size + pad_begin + pad_end - ((kernel - 1) * dilation + 1)) // stride + 1


def same_padding(size, kernel, stride, dilation):
    """TensorFlow's "same": ceil(size / stride) outputs, the odd padding
    cell at the end."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


# ------------------------------------------------------ isolated worker

_WORKER_SOURCE = r"""
import os, pickle, struct, sys, traceback
sys.path[:0] = pickle.loads(bytes.fromhex(sys.argv[1]))
channel = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)   # anything printed (oneDNN verbose, ...) goes to stderr
import numpy as np
import mkcache
import fuzz_strategies as fs

def reply(obj):
    blob = pickle.dumps(obj)
    channel.write(struct.pack("<Q", len(blob)) + blob)
    channel.flush()

reply(("ready",))
while True:
    head = sys.stdin.buffer.read(8)
    if len(head) < 8:
        break
    case, want_health = pickle.loads(sys.stdin.buffer.read(struct.unpack("<Q", head)[0]))
    try:
        env = case.environment()
        value = eval(case.call, env)
        if isinstance(value, mkcache.Tensor):
            value = value.numpy()
        outcome = ("ok", np.asarray(value))
    except Exception as exc:
        outcome = ("raised", [f"{k.__module__}.{k.__qualname__}" for k in type(exc).__mro__],
                   f"{type(exc).__name__}: {exc}")
    health = None
    if want_health:
        try:
            fs.check_still_works()
        except AssertionError as exc:
            health = str(exc)
    reply((outcome, health))
"""


class WorkerDied(AssertionError):
    pass


class IsolatedWorker:
    """A Python process running cases one after another (the library's state
    carries over between them, as in a real program), so that a crash or a
    hang is reported as a failure of the test instead of killing pytest."""

    def __init__(self, timeout: float = 90.0 if _asan() else 30.0, env: dict | None = None):
        """env: variables set for the child on top of this process's (e.g.
        ONEDNN_MAX_CPU_ISA, which oneDNN reads once, at its first use)."""
        self.timeout = timeout
        self.stderr = tempfile.TemporaryFile()
        paths = [p for p in sys.path if p]
        here = os.path.dirname(os.path.abspath(__file__))
        if here not in paths:
            paths.insert(0, here)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_SOURCE, pickle.dumps(paths).hex()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
            env=None if env is None else {**os.environ, **env})
        self.history = []
        ready = self._read()
        assert ready == ("ready",), ready

    def _read(self):
        head = self._read_exactly(8)
        return pickle.loads(self._read_exactly(struct.unpack("<Q", head)[0]))

    def _read_exactly(self, size):
        fd = self.proc.stdout.fileno()
        chunks, left = [], size
        while left:
            ready, _, _ = select.select([fd], [], [], self.timeout)
            if not ready:
                self.proc.kill()
                self.proc.wait()
                raise WorkerDied(self._death("hung (no answer within "
                                             f"{self.timeout:.0f} s; killed)"))
            chunk = os.read(fd, left)
            if not chunk:
                code = self.proc.wait()
                how = (f"killed by signal {-code} ({_signal_name(-code)})" if code < 0
                       else f"exited with status {code}")
                raise WorkerDied(self._death(f"died: {how}"))
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _death(self, what: str) -> str:
        self.stderr.seek(0)
        tail = self.stderr.read().decode(errors="replace")[-1500:]
        calls = "\n".join(f"    {c.source()}".replace("\n", "\n    ") for c in self.history)
        return (f"the process running these calls (in order, from a fresh interpreter) {what}:\n"
                f"{calls}\n  its stderr ends with:\n{tail}")

    def run(self, case: Case, health: bool = True):
        """-> (("ok", array) | ("raised", mro names, message), health error or None)."""
        self.history.append(case)
        blob = pickle.dumps((case, health))
        try:
            self.proc.stdin.write(struct.pack("<Q", len(blob)) + blob)
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # reported by the read below
        return self._read()

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except Exception:  # noqa: BLE001
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()


def _signal_name(number: int) -> str:
    import signal
    try:
        return signal.Signals(number).name
    except ValueError:
        return "?"


def is_library_error(mro_names) -> bool:
    return "mkcache.errors.Error" in mro_names


def ceil_div(a, b):
    return -(-a // b)


# `from fuzz_strategies import *` gives what the printed cases use.
__all__ = ["np", "mkcache", "ramp", "zeros", "ones", "readonly", "T", "blocked", "data"]
