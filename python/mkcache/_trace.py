"""mkcache.trace (this module is private; mkcache.trace is its function): a Program from a function written with the eager operators.

    def net(x):
        y = mkcache.conv2d(x, w, b, padding=1, activation="relu")
        return mkcache.linear(mkcache.flatten(mkcache.global_avg_pool(y)), w2, b2)

    prog = mkcache.trace(net, example)          # prog.run(x=batch) -> {"output": ...}

The function runs once on symbolic values (graph.Value): while it runs,
the operators in the mkcache namespace that a Graph has (mkcache.conv2d,
mkcache.relu, ...) add nodes to a graph instead of computing, for the
calling thread only; numpy arrays and Tensors it passes become constants.
Other threads keep computing eagerly meanwhile.

How: the module's operator names are swapped for recording ones for the
duration of the outermost trace (in any thread), under a lock, and restored
after; the recording ones compute eagerly unless called by a tracing thread
with a graph value among their arguments. So a name bound before the trace
(`from mkcache import relu`) keeps the eager function, which refuses a graph
value with a message saying to call it as mkcache.relu. The eager calls pay
nothing for this: only a call made while a trace runs goes through the
swapped name.
"""
from __future__ import annotations

import functools
import inspect
import threading

from .errors import InvalidArgumentError
from .graph import Graph, Program, Value

# Graph methods that are not operators.
_NOT_OPERATORS = {"input", "constant", "output", "compile", "close", "handle"}

_lock = threading.Lock()
_active = 0  # traces running, all threads: the names are swapped while > 0
_saved: dict = {}  # name -> the eager function
_local = threading.local()  # .graph: the calling thread's graph being traced


def _operator_names(module) -> list:
    return sorted(n for n in dir(Graph) if not n.startswith("_") and n not in _NOT_OPERATORS
                  and callable(getattr(Graph, n)) and callable(getattr(module, n, None)))


def _has_value(args, kwargs) -> bool:
    for a in args:
        if type(a) is Value or (type(a) in (list, tuple) and any(type(v) is Value for v in a)):
            return True
    return any(type(v) is Value for v in kwargs.values())


def _recording(name: str, eager):
    @functools.wraps(eager)
    def op(*args, **kwargs):
        graph = getattr(_local, "graph", None)
        if graph is None or not _has_value(args, kwargs):
            return eager(*args, **kwargs)
        if kwargs.pop("out", None) is not None:
            raise InvalidArgumentError(f"mkcache.{name}: out= cannot be traced (a program "
                                       "places its values itself)")
        if kwargs.pop("training", False):
            raise InvalidArgumentError(f"mkcache.{name}: training=True cannot be traced "
                                       "(programs are inference)")
        return getattr(graph, name)(*args, **kwargs)
    return op


def _swap_in(module) -> None:
    for name in _operator_names(module):
        eager = getattr(module, name)
        _saved[name] = eager
        setattr(module, name, _recording(name, eager))


def _swap_out(module) -> None:
    for name, eager in _saved.items():
        setattr(module, name, eager)
    _saved.clear()


def _input_names(fn, count: int) -> list:
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    if len(params) >= count:
        return [p.name for p in params[:count]]
    return [f"x{i}" for i in range(count)]


def _outputs(result) -> dict:
    if type(result) is Value:
        return {"output": result}
    if isinstance(result, dict):
        items = list(result.items())
    elif isinstance(result, (list, tuple)):
        items = [(f"output{i}", v) for i, v in enumerate(result)]
    else:
        items = []
    if not items or any(type(v) is not Value or not isinstance(k, str) for k, v in items):
        raise InvalidArgumentError(
            "trace: the function must return what it computed from its inputs: a value, a "
            f"list or tuple of values, or a dict of them by name; got {type(result).__name__}")
    return dict(items)


def trace(fn, *examples, dynamic=None, layouts=None, **compile_options) -> Program:
    """Runs ``fn(*examples)`` on symbolic values and compiles what it
    computed: a Program whose inputs are named after fn's parameters (x0,
    x1, ... when it has none to match) and whose outputs are "output", or
    "output0", "output1", ... for a list or tuple, or the keys of a dict
    that fn returns. The examples give the inputs' shapes: numpy arrays or
    Tensors (their values are not used). dynamic: {input name: axis or
    axes} bound at run time (e.g. {"x": 0} for any batch). layouts: {input
    name: "NHWC"} for channels-last inputs. compile_options: Graph.compile's
    (fuse=, inplace=, reuse=, capacity=, impl=, choose=, choices=)."""
    module = _module()
    names = _input_names(fn, len(examples))
    dynamic = dict(dynamic or {})
    layouts = dict(layouts or {})
    for key in list(dynamic) + list(layouts):
        if key not in names:
            raise InvalidArgumentError(f"trace: no input named {key!r} (inputs: {names})")
    if getattr(_local, "graph", None) is not None:
        raise InvalidArgumentError("trace: this thread is already tracing a function")
    graph = Graph()
    try:
        values = []
        for name, example in zip(names, examples):
            shape = list(getattr(example, "shape", None) or ())
            if not shape:
                raise InvalidArgumentError(
                    f"trace: example {name!r} must be an array or Tensor with a shape")
            axes = dynamic.get(name, ())
            for axis in ([axes] if isinstance(axes, int) else axes):
                shape[axis] = None
            values.append(graph.input(name, tuple(shape), layouts.get(name, "NCHW")))
        global _active
        with _lock:
            if _active == 0:
                _swap_in(module)
            _active += 1
        _local.graph = graph
        try:
            result = fn(*values)
        finally:
            _local.graph = None
            with _lock:
                _active -= 1
                if _active == 0:
                    _swap_out(module)
        for name, value in _outputs(result).items():
            if value.graph is not graph:
                raise InvalidArgumentError(f"trace: output {name!r} is not a value of this trace")
            graph.output(value, name)
        return graph.compile(**compile_options)
    finally:
        graph.close()


def _module():
    import mkcache
    return mkcache
