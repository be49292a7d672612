"""The benchmark tool that runs a command as on an AVX2-only CPU
(tests/bench/as_avx2.py and its preload, helper/cpuid_mask.c): under it the
libraries in the process see no AVX-512, the answers stay right, and a real
segmentation fault still ends the process (through the program's own
handler where it has one)."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import as_avx2  # noqa: E402


@pytest.fixture(scope="module")
def masked_env():
    try:
        return as_avx2.environment()
    except as_avx2.Unavailable as e:
        pytest.skip(f"CPUID cannot be masked on this machine: {e}")


def run(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=300)


def test_oneDNN_and_our_kernels_see_avx2_and_stay_right(masked_env):
    done = run("""
        import numpy as np, mkcache
        print(mkcache.build_info()["isa"])
        rng = np.random.default_rng(3)
        x = rng.standard_normal((3, 5, 11, 13)).astype(np.float32)
        w = rng.standard_normal((7, 5, 3, 3)).astype(np.float32)
        fc = rng.standard_normal((7 * 11 * 13, 9)).astype(np.float32)
        g = mkcache.Graph()
        v = g.input("x", x.shape)
        v = g.conv2d(v, g.constant(w), padding=1)
        v = g.activation(v, "gelu")
        v = g.reshape(v, (3, 7 * 11 * 13))
        g.output(g.matmul(v, g.constant(fc)), "y")
        prog = g.compile()
        got = prog.run(x=x)["y"]
        import ctypes
        answered = ctypes.CDLL(None).cpuid_mask_answered
        answered.restype = ctypes.c_long
        before = answered()
        for _ in range(5):  # a CPUID on the run path would be a trap per run here
            prog.run(x=x)
        print(answered() - before)
        # float64 reference
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        conv = np.zeros((3, 7, 11, 13))
        for i in range(3):
            for j in range(3):
                conv += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 11, j:j + 13], w[:, :, i, j])
        from math import erf
        gelu = 0.5 * conv * (1 + np.vectorize(erf)(conv / np.sqrt(2)))
        want = gelu.reshape(3, -1) @ fc.astype(np.float64)
        err = np.abs(got - want).max() / np.abs(want).max()
        print(err)
    """, masked_env)
    assert done.returncode == 0, done.stderr
    isa, traps, err = done.stdout.split()
    assert isa == "avx2"
    assert traps == "0"
    assert float(err) < 1e-5


def test_another_library_sees_the_mask(masked_env):
    pytest.importorskip("torch")
    done = run("import torch; print(torch.backends.cpu.get_cpu_capability())", masked_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() in ("AVX2", "DEFAULT")


@pytest.mark.parametrize("faulthandler", [False, True])
def test_a_real_fault_still_ends_the_process(masked_env, faulthandler):
    args = [sys.executable] + (["-X", "faulthandler"] if faulthandler else []) + \
        ["-c", "import ctypes; ctypes.string_at(0)"]
    done = subprocess.run(args, env=masked_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGSEGV
    if faulthandler:  # the program's own handler ran before the end
        assert "Segmentation fault" in done.stderr


def test_a_handler_set_later_does_not_undo_the_mask(masked_env):
    # signal() as well as sigaction(): CPUID still answers, masked, after a
    # program sets SIGSEGV's disposition (to ignore it: a trapped CPUID would
    # then end the process).
    done = run("""
        import ctypes, signal
        libc = ctypes.CDLL(None)
        libc.signal(signal.SIGSEGV, ctypes.c_void_p(1))  # SIG_IGN
        signal.signal(signal.SIGSEGV, signal.SIG_IGN)
        libc.cpuid_mask_leaf7_ebx.restype = ctypes.c_uint
        print(libc.cpuid_mask_leaf7_ebx() >> 16 & 1)
    """, masked_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"


def test_unavailable_says_why(monkeypatch):
    monkeypatch.setattr(as_avx2.sys, "platform", "darwin")
    with pytest.raises(as_avx2.Unavailable, match="Linux on x86-64"):
        as_avx2.shim()
