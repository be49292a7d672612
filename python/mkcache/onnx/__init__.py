"""ONNX models as mkcache programs.

    prog = mkcache.onnx.load("model.onnx")            # or an onnx.ModelProto
    out = prog.run(**{"input": x})                     # {output name: array}

``load`` reads the model with the ``onnx`` package (``pip install
mkcache[onnx]``; the core package never imports it), turns each node into
nodes of a ``mkcache.Graph`` through a table of converters - one per
(operator, opset range), see ``supported()`` - and compiles the graph. The
inputs and outputs keep their ONNX names; a symbolic dim (a batch, a
sequence) is a dim bound at run time unless ``input_shapes`` pins it.
Nodes whose inputs are all known when the model is loaded (initializers,
``Constant`` nodes and what is computed from them) are computed then.

Everything is checked before anything runs: an operator, attribute or
dtype this version does not take fails with one ``mkcache.UnsupportedError``
listing every such node; a file that is not a valid ONNX model fails with
``mkcache.InvalidArgumentError``.

Shape data given as inputs - an input used only as axes, a shape, scales,
sizes, pads, bounds or counts (Reshape's shape, Resize's scales, Slice's
starts, a reduction's axes, ...: ``_shape_data`` states the rule) - is
bound by value at each run: ``load`` then gives a ``ShapeDataProgram``,
whose runs take every input the model declares and compile one program per
distinct set of shape data values (those values folded in as constants),
keeping the last ``max_specializations`` (16 by default). Its nodes that do
not wait for those values are checked at load as any model's.
"""
from __future__ import annotations

from ._importer import load, supported
from ._shape_data import ShapeDataProgram

__all__ = ["ShapeDataProgram", "load", "supported"]
