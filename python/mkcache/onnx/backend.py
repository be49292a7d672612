"""mkcache as an ONNX backend (onnx.backend.base.Backend): what ONNX's own
backend tests, and tools written for any backend, call.

    import mkcache.onnx.backend as backend
    rep = backend.prepare(model)           # compiles the model once
    outputs = rep.run([x])                 # a tuple, in the model's output order
    backend.run_model(model, [x])          # both at once
"""
from __future__ import annotations

import numpy as np
from onnx import helper
from onnx.backend.base import Backend, BackendRep, namedtupledict

from ..tensor import Tensor, bfloat16
from ._base import NUMPY_BFLOAT16
from ._importer import load

_BFLOAT16 = 16  # ONNX's TensorProto.BFLOAT16


class MkcacheRep(BackendRep):
    """A compiled model: run() takes the inputs in the model's order (a list)
    or by name (a dict) and gives the outputs in the model's order."""

    def __init__(self, model):
        initializers = {i.name for i in model.graph.initializer}
        self._inputs = [i.name for i in model.graph.input if i.name not in initializers]
        self._outputs = [o.name for o in model.graph.output]
        # A result of no dims comes out of a program as [1]: given back as
        # the model declares it.
        self._scalar = {o.name for o in model.graph.output
                        if o.type.tensor_type.HasField("shape")
                        and len(o.type.tensor_type.shape.dim) == 0}
        # A scalar input is run as [1] (what load() declares for it).
        self._scalar_inputs = {i.name for i in model.graph.input
                               if i.type.tensor_type.HasField("shape")
                               and len(i.type.tensor_type.shape.dim) == 0}
        # bfloat16 results come out of a program as float32 (exactly):
        # given back in the dtype onnx reads bfloat16 data as.
        self._bfloat16 = {o.name for o in model.graph.output
                          if o.type.tensor_type.elem_type == _BFLOAT16}
        self._program = load(model)

    def run(self, inputs, **kwargs):  # noqa: ARG002 (the base's signature)
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feeds = dict(zip(self._inputs, inputs))
        for name in self._scalar_inputs & set(feeds):
            if np.ndim(feeds[name]) == 0:
                feeds[name] = np.reshape(feeds[name], (1,))
        # Shape data (bound by value, see mkcache.onnx.load) stays as onnx
        # reads it; program inputs of bfloat16 are given as mkcache's.
        shape_data = set(getattr(self._program, "shape_inputs", ()))
        for name, value in feeds.items():
            if name in shape_data:
                continue
            if NUMPY_BFLOAT16 is not None and getattr(value, "dtype", None) == NUMPY_BFLOAT16:
                feeds[name] = Tensor(np.ascontiguousarray(value).view(np.uint16),
                                     dtype=bfloat16)
        out = self._program.run(**feeds)
        for name in self._bfloat16 & set(out):
            out[name] = out[name].astype(NUMPY_BFLOAT16)
        values = [out[n].reshape(()) if n in self._scalar else out[n] for n in self._outputs]
        return namedtupledict("Outputs", self._outputs)(*values)


class MkcacheBackend(Backend):
    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs):
        super().prepare(model, device, **kwargs)  # onnx's checker
        return MkcacheRep(model)

    @classmethod
    def run_node(cls, node, inputs, device: str = "CPU", outputs_info=None, **kwargs):
        """One node as a model of its own (its inputs float32 arrays)."""
        super().run_node(node, inputs, device=device, outputs_info=outputs_info)
        graph = helper.make_graph(
            [node], "node",
            [helper.make_tensor_value_info(n, 1, np.shape(x)) for n, x in zip(node.input, inputs)],
            [helper.make_tensor_value_info(n, 1, None) for n in node.output])
        opset = kwargs.get("opset_version")
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", opset)] if opset else None)
        return cls.run_model(model, list(inputs), device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"


prepare = MkcacheBackend.prepare
run_model = MkcacheBackend.run_model
run_node = MkcacheBackend.run_node
supports_device = MkcacheBackend.supports_device
is_compatible = MkcacheBackend.is_compatible
