"""Finds and loads libmkcache and the oneDNN / Intel runtime libraries under it.

The `onednn-cpu-iomp`, `intel-openmp` and `intel-cmplr-lib-rt` wheels install
their shared libraries into ``<prefix>/lib``, which is on no loader path, and
libdnnl has no RUNPATH. So they are located through the wheels' own
``importlib.metadata`` records (never by guessing paths) and preloaded
globally, dependencies first; the dynamic linker then resolves libmkcache's
``libdnnl.so.3`` to the copy already loaded.
"""
from __future__ import annotations

import ctypes
import importlib.metadata as metadata
import os
from pathlib import Path

# (distribution, library file names in load order). libintlc is needed by
# the other three of its wheel; libiomp5 before libdnnl, which uses it.
_RUNTIME_LIBRARIES = [
    ("intel-cmplr-lib-rt", ["libintlc.so.5", "libimf.so", "libsvml.so", "libirng.so"]),
    ("intel-openmp", ["libiomp5.so"]),
    ("onednn-cpu-iomp", ["libdnnl.so.3"]),
]

LIBRARY_NAME = "libmkcache.so.0"


class LoadError(ImportError):
    """libmkcache or one of the libraries it needs could not be loaded."""


def _wheel_files(distribution: str) -> dict[str, Path]:
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return {}
    found = {}
    for f in dist.files or []:
        found.setdefault(f.name, Path(dist.locate_file(f)).resolve())
    return found


def _preload_runtime(tried: list[str]) -> None:
    mode = getattr(os, "RTLD_GLOBAL", ctypes.RTLD_GLOBAL)
    for distribution, names in _RUNTIME_LIBRARIES:
        files = _wheel_files(distribution)
        if not files:
            tried.append(f"{distribution}: not installed (relying on the system loader path)")
            continue
        for name in names:
            path = files.get(name)
            if path is None:
                tried.append(f"{distribution}: has no {name}")
                continue
            try:
                ctypes.CDLL(str(path), mode=mode)
                tried.append(f"{path}: loaded")
            except OSError as exc:
                tried.append(f"{path}: {exc}")


def load() -> ctypes.CDLL:
    """Loads libmkcache (``MKCACHE_LIBRARY`` overrides its path)."""
    tried: list[str] = []
    _preload_runtime(tried)
    override = os.environ.get("MKCACHE_LIBRARY")
    candidates = [Path(override)] if override else [Path(__file__).with_name(LIBRARY_NAME)]
    for candidate in candidates:
        try:
            return ctypes.CDLL(str(candidate))
        except OSError as exc:
            tried.append(f"{candidate}: {exc}")
    raise LoadError("could not load libmkcache; tried:\n  " + "\n  ".join(tried))


def load_bench_helper() -> ctypes.CDLL:
    """Loads libmkcache_bench, the bare-oneDNN timing helper of the benchmarks."""
    override = os.environ.get("MKCACHE_BENCH_LIBRARY")
    if override:
        path = Path(override)
    else:
        base = os.environ.get("MKCACHE_LIBRARY")
        folder = Path(base).parent if base else Path(__file__).parent
        path = folder / "libmkcache_bench.so"
    try:
        return ctypes.CDLL(str(path))
    except OSError as exc:
        raise LoadError(f"could not load the benchmark helper {path}: {exc}") from exc
