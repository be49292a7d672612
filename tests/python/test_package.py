"""Package surface: versions, build info, every C function declared."""
import re
import subprocess
import sys
from pathlib import Path

import mkcache
from mkcache import _capi

HEADER = Path(__file__).resolve().parents[2] / "libmkcache/include/mkcache/mkcache.h"


def test_versions_and_build_info():
    info = mkcache.build_info()
    assert info["version"] == mkcache.__version__
    assert info["onednn_version"].startswith("3.2")
    assert info["isa"] and info["max_threads"] >= 1
    # bfloat16: computed natively from avx512_core_bf16 (and AVX2-VNNI-2),
    # through float32 on other AVX-512, not at all below.
    native = info["isa"].startswith(("avx512_core_bf16", "avx512_core_fp16", "avx512_core_amx",
                                     "avx2_vnni_2"))
    assert info["bf16"] == ("native" if native else "emulated" if info["isa"].startswith(
        "avx512_core") else "none"), info


def test_every_header_function_is_declared_in_python():
    declared = set(re.findall(r"MKC_API\s+[\w\s\*]+?\b(mkc_\w+)\s*\(", HEADER.read_text()))
    assert declared, "header parse found nothing"
    assert declared == set(_capi.declared_functions())
    for name in declared:
        fn = getattr(_capi.lib, name)
        assert fn.restype is not None or name in ("mkc_status_string", "mkc_last_error")


def test_cli_info():
    out = subprocess.run([sys.executable, "-m", "mkcache", "info"], capture_output=True,
                         text=True, check=True).stdout
    assert '"onednn_version": "3.2' in out


def test_cli_demo_runs():
    out = subprocess.run([sys.executable, "-m", "mkcache", "demo", "--image", "64", "--runs",
                          "2"], capture_output=True, text=True, check=True, timeout=300).stdout
    assert "ResNet-18" in out and "steps" in out and "op by op" in out
    diff = float(out.split("program against op-by-op calls: max |diff| / max |value| = ")[1]
                 .split()[0])
    assert diff < 1e-4
    try:
        import onnxruntime  # noqa: F401,PLC0415
        import onnx  # noqa: F401,PLC0415
    except ImportError:
        return
    assert "imported / onnxruntime" in out
    diff = float(out.split("imported against ONNX Runtime: max |diff| / max |value| = ")[1]
                 .split()[0])
    assert diff < 1e-4


def test_cli_demo_of_the_cache_runs():
    out = subprocess.run([sys.executable, "-m", "mkcache", "demo", "--ops", "--iterations", "3"],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    assert "cached call" in out and "hits=" in out


def test_cli_bench_short(tmp_path):
    md = tmp_path / "bench.md"
    out = subprocess.run([sys.executable, "-m", "mkcache", "bench", "--budget", "0.01",
                          "--markdown", str(md)], capture_output=True, text=True, check=True,
                         timeout=600).stdout
    table = md.read_text()
    assert "| relu 1x16 |" in table and "x) |" in table
    for line in table.splitlines()[2:]:
        assert line.count("|") == 8, line  # case + 6 modes, every cell filled or "-"
    assert "layer_norm 128x768" in out


def test_cli_bench_models_reports_steps_against_the_peak():
    out = subprocess.run([sys.executable, "-m", "mkcache", "bench", "--models", "--runs", "2",
                          "--top", "3"], capture_output=True, text=True, check=True,
                         timeout=600).stdout
    assert f"ISA {mkcache.build_info()['isa']}" in out
    for model in ("ResNet-18 b1 224x224", "ResNet-50 b1 224x224", "BERT-base layer seq 128"):
        section = out.split(model + ":")[1].split("\n\n")[0]
        assert "ms per run" in section and "slowest steps" in section, section
        rates = re.findall(r"GFLOP/s +(\d+)% f32", section)
        assert len(rates) >= 1, section  # convolutions or linears among the slowest
        total = re.search(r"steps with a product: (\d+)% of the time, ([\d.]+) GFLOP/s, "
                          r"(\d+)% of the peak", section)
        assert total and 50 <= int(total.group(1)) <= 100, section
        # The share is the rate over the peak the header names (measured in
        # that process: an instrumented build's is low, so no bound here).
        threads, peak = re.search(r"(\d+) threads x f32 ([\d.]+) GFLOP/s measured",
                                  section).groups()
        share = 100 * float(total.group(2)) / (int(threads) * float(peak))
        # (the peak is printed to 0.1 GFLOP/s: a relative error where it is low)
        assert abs(int(total.group(3)) - share) <= 1.5 + 0.05 / float(peak) * share, \
            (share, section)


def test_keys_are_built_from_an_explicit_scope():
    """Below the C entry points (src/api/), code that makes cache keys reads
    the CacheScope it is handed, never the calling thread's context: the
    same operator code then serves eager calls and programs alike."""
    src = HEADER.parents[2] / "src"
    context = re.compile(r"\.(session|input_shape|capacity|executor|clearing_mode)\(\)"
                         r"|context_version|\bset_(session|input_shape|capacity|executor)\(")
    readers = []
    for path in sorted(src.rglob("*.[ch]pp")):
        rel = path.relative_to(src).as_posix()
        if rel.startswith("api/") or rel.startswith("common/thread_state"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if context.search(line.split("//")[0]):
                readers.append(f"{rel}:{number}: {line.strip()}")
    assert readers == []
