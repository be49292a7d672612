"""Batch inference on Ray Data with compiled programs.

    import ray, mkcache.ray
    ds = ray.data.read_parquet("images/")          # a column "x": float32 [3, 224, 224]
    out = ds.map_batches(mkcache.ray.Predictor, fn_constructor_args=("resnet50.onnx",),
                         concurrency=2, batch_format="numpy")

Ray makes one Predictor per worker: it loads the model once, compiles it for
the worker's thread count, and runs every batch the worker is given (a dict
of numpy columns) through the program. The columns named like the program's
inputs are its inputs, taken in their own dtypes (nothing is cast: a float64
column for a float32 input is an error); the batch that comes back holds the
program's outputs, each of its own dtype, and the batch's other columns
unchanged (ids, paths), so rows stay identifiable. A batch that cannot be
run raises BatchError naming the batch, which fails the Ray job at once.

This module does not import ray (``pip install 'mkcache[ray]'`` brings it):
a Predictor is a plain callable, and runs the same outside Ray.
"""
from __future__ import annotations

import os
import threading

import numpy as np

import mkcache

from ._checks import INT32, integer
from .errors import Error, InvalidArgumentError

__all__ = ["Predictor", "BatchError"]


class BatchError(Error, RuntimeError):
    """A batch could not be run. ``batch``: its index among the batches this
    Predictor was given (the first is 0); the message also names the
    worker's process and the batch's columns. The error that stopped it is
    the ``__cause__``."""

    def __init__(self, message: str, batch: int | None = None):
        super().__init__(message)
        self.batch = batch

    def __reduce__(self):  # Ray sends it to the driver pickled
        return type(self), (str(self), self.batch)


def _load(model, compile_options: dict):
    """The Program of a model: the path of an ONNX file or its bytes
    (mkcache.onnx.load), or a callable returning a Graph (compiled here) or a
    Program, for models built in Python (a callable pickles where a Graph
    cannot)."""
    if isinstance(model, (str, os.PathLike, bytes)):
        from . import onnx  # noqa: PLC0415 (needs the onnx package)
        return onnx.load(model, **compile_options)
    if callable(model):
        made = model()
        if isinstance(made, mkcache.Graph):
            try:
                return made.compile(**compile_options)
            finally:
                made.close()
        if isinstance(made, mkcache.Program):
            if compile_options:
                raise InvalidArgumentError("Predictor: compile options given, but the model "
                                           "callable returned a Program already compiled")
            return made
        raise InvalidArgumentError("Predictor: the model callable must return a mkcache.Graph "
                                   f"or Program, got {type(made).__name__}")
    raise InvalidArgumentError("Predictor: model must be an ONNX file's path or bytes, or a "
                               f"callable returning a Graph or Program; got {type(model).__name__}")


def _describe(batch: dict) -> str:
    return ", ".join(f"{name} {getattr(v, 'dtype', type(v).__name__)} "
                     f"{getattr(v, 'shape', '')}" for name, v in batch.items())


class Predictor:
    """``Predictor(model, *, threads=1, **compile_options)``: a callable
    taking a batch {column: numpy array} and returning {column: numpy array}.

    model: the path of an ONNX file, its bytes, or a zero-argument callable
    returning a mkcache.Graph or Program. threads: the OpenMP threads of this
    process's runs (mkcache.set_num_threads), set before the model is
    compiled, since plans are made per thread count, and again at every
    batch, since OpenMP keeps the count per calling thread. compile_options
    go to mkcache.onnx.load / Graph.compile (input_shapes, fuse, ...)."""

    def __init__(self, model, *, threads: int = 1, **compile_options):
        self.threads = integer(threads, "threads", (1, INT32[1]))
        mkcache.set_num_threads(self.threads)
        self.program = _load(model, compile_options)
        self.batches = 0  # batches given so far: the next one's index
        self._lock = threading.Lock()  # a worker may call from several threads

    def __call__(self, batch: dict) -> dict:
        with self._lock:
            index, self.batches = self.batches, self.batches + 1
        try:
            return self._run(batch)
        except Exception as e:
            raise BatchError(
                f"mkcache.ray.Predictor: batch {index} (of this worker, pid {os.getpid()}; "
                f"columns {_describe(batch) if isinstance(batch, dict) else '?'}) failed: "
                f"{type(e).__name__}: {e}", index) from e

    def _run(self, batch: dict) -> dict:
        if not isinstance(batch, dict):
            raise InvalidArgumentError(
                f"a batch must be a dict of numpy columns (map_batches(..., "
                f"batch_format='numpy')), got {type(batch).__name__}")
        prog = self.program
        missing = [n for n in prog.input_names if n not in batch]
        if missing:
            raise InvalidArgumentError(f"no column {missing} (the program's inputs are "
                                       f"{prog.input_names})")
        clash = [n for n in prog.output_names if n in batch and n not in prog.input_names]
        if clash:
            raise InvalidArgumentError(f"columns {clash} are named like outputs of the program, "
                                       "which would replace them")
        inputs = {n: np.ascontiguousarray(batch[n]) for n in prog.input_names}
        rows = {len(v) if v.ndim else None for v in inputs.values()}
        if len(rows) != 1 or None in rows:
            raise InvalidArgumentError("the input columns must have the same number of rows")
        (n_rows,) = rows
        if mkcache.get_num_threads() != self.threads:
            mkcache.set_num_threads(self.threads)
        if n_rows == 0:  # a program takes no empty dim: run one row, keep none
            one = {n: np.zeros((1,) + v.shape[1:], v.dtype) for n, v in inputs.items()}
            outputs = {n: v[:0] for n, v in prog.run(**one).items()}
        else:
            outputs = prog.run(**inputs)
        for n, v in outputs.items():
            if v.ndim == 0 or len(v) != n_rows:
                raise InvalidArgumentError(
                    f"output {n!r} has shape {v.shape}, not one row per input row ({n_rows})")
        kept = {n: v for n, v in batch.items() if n not in prog.input_names}
        return {**kept, **outputs}
