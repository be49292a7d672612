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
"""
from __future__ import annotations

from ._importer import load, supported

__all__ = ["load", "supported"]
