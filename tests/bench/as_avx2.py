"""Runs a command as on an AVX2-only CPU: every library in it (oneDNN and so
mkcache, onnxruntime's MLAS, OpenVINO, torch, numpy) sees a CPU without
AVX-512, AMX or AVX-VNNI and picks the kernels it picks on such a machine, on
this machine's own cores, caches and memory.

ONEDNN_MAX_CPU_ISA=AVX2 caps only oneDNN: onnxruntime's MLAS has no such cap
and OpenVINO keeps AVX-512 outside oneDNN, so a comparison under it sets our
AVX2 kernels against their AVX-512 ones. This masks the CPUID instruction for
the whole process instead (helper/cpuid_mask.c, preloaded; it needs a C
compiler and a CPU or hypervisor with CPUID faulting, Linux x86-64).

    python tests/bench/as_avx2.py -- python -m pytest tests/bench/test_bench_onnx.py \\
        --benchmark-enable --benchmark-only -k test_onnx_runtimes
    python tests/bench/as_avx2.py --check     # can this machine do it?

The command runs with MKCACHE_CPUID_MASK=avx2 set, which the benchmark
reports name in their headers. What it cannot give is another CPU's speed:
the AVX2 kernels run at this CPU's clock and memory, not an AMD EPYC's."""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "helper" / "cpuid_mask.c"
# what the child reports: the shim active, and CPUID leaf 7's EBX as the
# process sees it (bit 16: AVX512F)
_PROBE = ("import ctypes; lib = ctypes.CDLL(None); "
          "lib.cpuid_mask_leaf7_ebx.restype = ctypes.c_uint; "
          "print(lib.cpuid_mask_active(), lib.cpuid_mask_leaf7_ebx())")


class Unavailable(RuntimeError):
    """This machine cannot run a command masked (the reason in the message)."""


def shim() -> Path:
    """The preload library, compiled from helper/cpuid_mask.c once per
    version of the source (in the temporary directory)."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        raise Unavailable(f"CPUID masking needs Linux on x86-64 (this is {sys.platform} "
                          f"{os.uname().machine})")
    text = SOURCE.read_bytes()
    path = Path(tempfile.gettempdir()) / f"mkcache-cpuid-mask-{hashlib.sha1(text).hexdigest()[:12]}.so"
    if path.exists():
        return path
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise Unavailable("no C compiler (cc, gcc or $CC) to build helper/cpuid_mask.c")
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    done = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(partial), str(SOURCE), "-ldl"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise Unavailable(f"building helper/cpuid_mask.c failed:\n{done.stderr}")
    partial.replace(path)  # atomic: concurrent builders each write their own
    return path


def environment(base: dict | None = None) -> dict:
    """`base` (default: this process's) with the shim preloaded, glibc's own
    string functions told to leave AVX-512 too, and MKCACHE_CPUID_MASK set;
    raises Unavailable where masking would not take."""
    env = dict(os.environ if base is None else base)
    preload = str(shim())
    env["LD_PRELOAD"] = " ".join(p for p in (preload, env.get("LD_PRELOAD", "")) if p)
    tunables = "glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD"
    env["GLIBC_TUNABLES"] = ":".join(t for t in (env.get("GLIBC_TUNABLES", ""), tunables) if t)
    env["MKCACHE_CPUID_MASK"] = "avx2"
    probe = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True)
    fields = probe.stdout.split()
    if probe.returncode != 0 or len(fields) != 2:
        raise Unavailable(f"the masked probe failed: {probe.stderr.strip() or probe.stdout}")
    if fields[0] != "1":
        raise Unavailable("the CPU or kernel offers no CPUID faulting (no 'cpuid_fault' "
                          "in /proc/cpuinfo), so CPUID cannot be masked here")
    if int(fields[1]) & (1 << 16):
        raise Unavailable("CPUID still reports AVX512F under the mask")
    return env


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="only say whether this machine can mask CPUID, and exit")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        env = environment()
    except Unavailable as e:
        print(f"as_avx2: {e}", file=sys.stderr)
        return 2
    if args.check or not command:
        print("as_avx2: CPUID masking works here; commands run as on an AVX2-only CPU")
        return 0
    return subprocess.run(command, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
