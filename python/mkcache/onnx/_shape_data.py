"""Inputs given as shape data: axes, shapes, scales, sizes, bounds, pads and
counts that a model takes as graph inputs where the library's operators
take them as attributes. They are bound by value at each run, and the model
is compiled once per distinct set of their values.

The rule: a graph input is shape data when every use of it is one of

  - a port that takes shape data (``SHAPE_PORTS``: Reshape's shape,
    Expand's shape, Tile's repeats, Slice's starts, ends, axes and steps,
    Split's split, Squeeze's and Unsqueeze's axes, the reductions' axes,
    Pad's pads, constant_value and axes, Resize's roi, scales and sizes,
    Upsample's scales, ConstantOfShape's shape, Range's start, limit and
    delta, Dropout's ratio and training_mode);
  - an input of shape arithmetic (``ARITHMETIC``: Cast, Concat, Gather, Add,
    ...) whose every result is itself used so, by this rule;
  - Shape or Size, which read its shape only;

at least one use reaching such a port, and neither the input nor what is
computed from it a graph output. Any other input is data, given to the
compiled program as before (a Pow exponent, for one, stays data: it is not
shape data, and a converter that needs it constant still refuses it).
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from .. import errors
from ..graph import _Closed
from ..tensor import Tensor
from ._base import KNOWN_TYPES

# Operator -> the ports (input indices) that take shape data.
_REDUCTIONS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
               "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
SHAPE_PORTS = {
    "Reshape": {1}, "Expand": {1}, "Tile": {1}, "Slice": {1, 2, 3, 4}, "Split": {1},
    "Squeeze": {1}, "Unsqueeze": {1}, "Pad": {1, 2, 3}, "Resize": {1, 2, 3}, "Upsample": {1},
    "ConstantOfShape": {0}, "Range": {0, 1, 2}, "Dropout": {1, 2},
    **{op: {1} for op in _REDUCTIONS},
}
# Operators computing on small values, as exporters write shape arithmetic:
# operator -> the ports whose values their results are made from (None: all).
ARITHMETIC = {
    **{op: None for op in ("Identity", "Cast", "Concat", "Gather", "Add", "Sub", "Mul", "Div",
                           "Neg", "Abs", "Max", "Min", "Sum", "Round", "Equal", "Less",
                           "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or",
                           "Where", "Range", "Sign")},
    "CastLike": {0}, "Squeeze": {0}, "Unsqueeze": {0}, "Reshape": {0}, "Flatten": {0},
    "Slice": {0}, "Expand": {0},
}
# Operators that read their input's shape only.
SHAPE_READERS = {"Shape": {0}, "Size": {0}, "CastLike": {1}}

_NO, _NEUTRAL, _YES = 0, 1, 2  # a value's uses: not shape data / no use that says / shape data


def inputs_of(graph, initializers: dict) -> list:
    """The names of `graph`'s inputs that are shape data (the module's
    rule), in the model's order."""
    uses = {}
    for node in graph.node:
        for port, name in enumerate(node.input):
            if name:
                uses.setdefault(name, []).append((node, port))
    outputs = {o.name for o in graph.output}
    verdicts = {}  # value name -> _NO, _NEUTRAL or _YES

    def verdict(name):
        """From the verdicts of what its uses make: in a graph in order
        those come later, and are worked out first (below); a value not
        worked out (a graph out of order) counts as data."""
        if name in outputs:
            return _NO
        result = _NEUTRAL
        for node, port in uses.get(name, ()):
            op = node.op_type if node.domain in ("", "ai.onnx") else None
            if port in SHAPE_PORTS.get(op, ()):
                result = _YES
            elif port in SHAPE_READERS.get(op, ()):
                continue
            elif op in ARITHMETIC and (ARITHMETIC[op] is None or port in ARITHMETIC[op]):
                made = [verdicts.get(o, _NO) for o in node.output if o]
                if _NO in made:
                    return _NO
                if _YES in made:
                    result = _YES
            else:
                return _NO
        return result

    for node in reversed(graph.node):
        for name in node.output:
            if name:
                verdicts[name] = verdict(name)
    return [i.name for i in graph.input if i.name not in initializers and verdict(i.name) == _YES]


class _Port:
    """A shape-data input as the model declares it: its dtype and dims (None
    where a dim is symbolic; the dims None where no shape is declared)."""

    def __init__(self, info):
        t = info.type.tensor_type
        self.name = info.name
        self.dtype = KNOWN_TYPES.get(t.elem_type)
        if self.dtype is None:
            raise errors.UnsupportedError(
                f"onnx: input {info.name!r} (shape data) has ONNX element type {t.elem_type}, "
                "which this version does not hold")
        self.dtype = np.dtype(self.dtype)
        self.dims = None
        if t.HasField("shape"):
            self.dims = tuple(d.dim_value if d.HasField("dim_value") else None
                              for d in t.shape.dim)

    def value(self, given) -> np.ndarray:
        """`given` as this input's array, or InvalidArgumentError saying why
        not: numpy arrays (and Tensors) must have the declared dtype; Python
        numbers and lists are taken where the dtype holds them exactly."""
        if isinstance(given, Tensor):
            given = given.numpy()
        if isinstance(given, (np.ndarray, np.generic)):
            a = np.asarray(given)
            if a.dtype != self.dtype:
                raise errors.InvalidArgumentError(
                    f"input {self.name!r} (shape data) is {a.dtype}; the model declares "
                    f"{self.dtype}")
        else:
            try:
                plain = np.asarray(given)
                a = plain.astype(self.dtype)
                exact = plain.dtype != object and np.array_equal(a, plain)
            except (TypeError, ValueError, OverflowError):
                exact = False
            if not exact:
                raise errors.InvalidArgumentError(
                    f"input {self.name!r} (shape data) must be {self.dtype} values, got "
                    f"{given!r}")
        if self.dims is not None:
            if len(self.dims) == 0 and a.shape == (1,):
                a = a.reshape(())  # a scalar as programs take one
            if len(a.shape) != len(self.dims) or any(
                    d is not None and d != n for d, n in zip(self.dims, a.shape)):
                want = tuple("?" if d is None else d for d in self.dims)
                raise errors.InvalidArgumentError(
                    f"input {self.name!r} (shape data) has shape {a.shape}; the model "
                    f"declares {want}")
        a = np.array(a, copy=True, order="C")
        a.setflags(write=False)
        return a


class ShapeDataProgram(_Closed):
    """An ONNX model whose inputs include shape data (mkcache.onnx.load):
    run() takes every input the model declares, by name as Program.run does;
    the shape data's values select a program compiled for them (their
    values folded in as constants), compiled at the first run with those
    values and kept for the next. The last `capacity` programs are kept
    (least recently used dropped first: `specializations` counts them).
    run() may be called from many threads at once. plan(), steps(),
    choices(), memory, ... tell of the program the last run used (or
    specialize() returned)."""

    def __init__(self, model, opset: int, input_shapes: dict, initializers: dict,
                 shape_data: list, compile_options: dict, capacity: int):
        infos = {i.name: i for i in model.graph.input}
        self._model, self._opset = model, opset
        self._input_shapes, self._compile_options = input_shapes, compile_options
        # The initializers' arrays, read once for every specialization.
        for a in initializers.values():
            a.setflags(write=False)
        self._initializers = initializers
        self._ports = [_Port(infos[n]) for n in shape_data]
        self.shape_inputs = list(shape_data)
        self.input_names = [i.name for i in model.graph.input if i.name not in initializers]
        self.output_names = [o.name for o in model.graph.output]
        self._data_names = [n for n in self.input_names if n not in set(shape_data)]
        self._capacity = capacity
        self._programs = OrderedDict()  # key -> Program, least recently used first
        self._compiled = self._hits = self._evictions = 0
        self._last = None
        self._lock = threading.Lock()
        self._closed = False

    # -------------------------------------------------------- specializations

    @staticmethod
    def _require_names(given, names: list, what: str, takes: str) -> None:
        """Every name in `names` given, and no other."""
        missing = [n for n in names if n not in given]
        extra = [n for n in given if n not in names]
        if missing or extra:
            raise errors.InvalidArgumentError(
                f"{what}: {takes} {names}"
                + (f"; missing {missing}" if missing else "")
                + (f"; unknown {extra}" if extra else ""))

    def _bound(self, inputs: dict, what: str) -> dict:
        self._require_names(inputs, self.input_names, what, "the program takes inputs")
        return {p.name: p.value(inputs[p.name]) for p in self._ports}

    def _program(self, bound: dict):
        """The program compiled for these shape data values (compiled now if
        it is not kept)."""
        if self._closed:
            raise errors.InvalidArgumentError("the program is closed")
        key = tuple((n, a.dtype.str, a.shape, a.tobytes()) for n, a in bound.items())
        with self._lock:
            prog = self._programs.get(key)
            if prog is not None:
                self._programs.move_to_end(key)
                self._hits += 1
                self._last = prog
                return prog
        from ._importer import compile_model, inference_error  # noqa: PLC0415 (a cycle)
        try:
            prog = compile_model(self._model, self._opset, self._input_shapes,
                                 self._initializers, bound, self._compile_options)
        except errors.Error as e:
            # The error as compiling the model with these values as
            # constants gives it (an operator or attribute not supported
            # stays UnsupportedError), told with the values, and what ONNX's
            # shape inference says of them (a value out of range for the
            # model is found there first).
            values = ", ".join(f"{n}={a.tolist()!r}" for n, a in bound.items())
            text = str(e).removeprefix("onnx: ")
            said = inference_error(self._model, bound)
            kind, status = type(e), e.status
            if said:  # the values do not fit the model
                text += f"\n  (ONNX's shape inference with these values: {said})"
                kind, status = errors.InvalidArgumentError, None
            raise kind(f"onnx (shape data {values}): {text}", status) from None
        with self._lock:
            if self._closed:
                prog.close()
                raise errors.InvalidArgumentError("the program is closed")
            kept = self._programs.get(key)
            if kept is not None:  # another thread compiled it meanwhile: one is kept
                prog.close()
                prog = kept
                self._programs.move_to_end(key)
            else:
                self._compiled += 1
                self._programs[key] = prog
                while len(self._programs) > self._capacity:
                    # Dropped, not closed: a run in another thread may still
                    # hold it; it closes when the last one lets it go.
                    self._programs.popitem(last=False)
                    self._evictions += 1
            self._last = prog
            return prog

    def specialize(self, **shape_data):
        """The Program compiled for these shape data values (by name, every
        shape input): compiled now unless kept. Its inputs are the model's
        other inputs."""
        self._require_names(shape_data, self.shape_inputs, "specialize",
                            "the shape data inputs are")
        return self._program({p.name: p.value(shape_data[p.name]) for p in self._ports})

    @property
    def specializations(self) -> dict:
        """kept (programs kept now), capacity, compiled (so far), hits (runs
        served by a kept program), evictions (programs dropped for room)."""
        with self._lock:
            return {"kept": len(self._programs), "capacity": self._capacity,
                    "compiled": self._compiled, "hits": self._hits,
                    "evictions": self._evictions}

    # ------------------------------------------------------- Program's calls

    def run(self, outputs: dict | None = None, **inputs) -> dict:
        """Runs the model on the inputs (every input it declares, by name):
        {output name: numpy array}, as Program.run."""
        prog = self._program(self._bound(inputs, "run"))
        return prog.run(outputs, **{n: inputs[n] for n in self._data_names})

    __call__ = run

    def profile(self, **inputs) -> list:
        prog = self._program(self._bound(inputs, "profile"))
        return prog.profile(**{n: inputs[n] for n in self._data_names})

    def calibrate(self, batches, method=None, percentile=None) -> str:
        """Program.calibrate, each batch on the program of its shape data;
        returns the calibration of the last one's."""
        count = 0
        for i, inputs in enumerate(batches):
            if not isinstance(inputs, dict):
                raise errors.InvalidArgumentError(
                    f"calibrate: batch {i} is a {type(inputs).__name__}; each batch is a dict "
                    "of inputs, as run takes them")
            prog = self._program(self._bound(inputs, f"calibrate: batch {i}"))
            prog.calibrate([{n: inputs[n] for n in self._data_names}], method, percentile)
            count += 1
        if count == 0:
            raise errors.InvalidArgumentError(
                "calibrate: no batches (give at least one input dict)")
        return self.calibration()

    def _current(self):
        if self._closed:
            raise errors.InvalidArgumentError("the program is closed")
        prog = self._last
        if prog is None:
            raise errors.InvalidArgumentError(
                f"no program is compiled yet: its shape data ({', '.join(self.shape_inputs)}) "
                "select one; run it, or call specialize() first")
        return prog

    def plan(self) -> str:
        return self._current().plan()

    def choices(self) -> str:
        return self._current().choices()

    def calibration(self) -> str:
        return self._current().calibration()

    def save_calibration(self, path) -> None:
        self._current().save_calibration(path)

    def save_choices(self, path) -> None:
        self._current().save_choices(path)

    def steps(self) -> list:
        return self._current().steps()

    @property
    def memory(self) -> dict:
        return self._current().memory

    @property
    def executor_id(self) -> int:
        return self._current().executor_id

    @property
    def handle(self):
        return self._current().handle

    def close(self) -> None:
        """Closes every program kept; runs after this are refused."""
        if getattr(self, "_closed", True):
            return
        with self._lock:
            self._closed = True
            programs, self._programs = list(self._programs.values()), OrderedDict()
            self._last = None
        for prog in programs:
            prog.close()
