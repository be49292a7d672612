"""The competitors the benchmarks time when they are installed."""
from __future__ import annotations

_FOUND: dict = {}
WHY_NOT: dict = {}  # name -> why installed() gave None


def installed(name: str):
    """The module, or None with the reason in WHY_NOT. An install that
    fails to import (a torchvision built for CUDA beside torch's CPU build)
    counts as not installed, with its error as the reason. Asked once: a
    second import of a half-imported package fails differently."""
    if name not in _FOUND:
        _FOUND[name] = None
        try:
            _FOUND[name] = __import__(name)
        except ImportError:
            WHY_NOT[name] = f"{name} is not installed"
        except Exception as e:  # noqa: BLE001 (a broken install raises anything)
            WHY_NOT[name] = f"{name} does not import ({type(e).__name__}: {e})"
    return _FOUND[name]
