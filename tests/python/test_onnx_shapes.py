"""Shapes computed from dims bound at run time (mkcache.onnx's _symbolic.py):
the Shape -> Gather/Slice -> Unsqueeze -> Concat -> Reshape/Expand chains
exporters write, ConstantOfShape of a run-time shape, the arithmetic and
comparisons on such shapes; each model run at two sizes through one program
and checked against ONNX Runtime. What needs a shape as data at run time is
refused, naming the node."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import mkcache  # noqa: E402
import mkcache.onnx  # noqa: E402

RNG = np.random.default_rng(43)
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def ints(name, *values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def model(nodes, inputs, outputs, initializers=(), opset=17):
    """inputs/outputs: (name, dims) or (name, dims, element type)."""
    def info(spec):
        return helper.make_tensor_value_info(spec[0], spec[2] if len(spec) > 2 else F, spec[1])
    g = helper.make_graph(nodes, "shapes", [info(i) for i in inputs], [info(o) for o in outputs],
                          list(initializers))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, 10)  # what onnxruntime reads
    onnx.checker.check_model(onnx.shape_inference.infer_shapes(m))
    return m


def check_sizes(m, feeds_of, sizes, rtol=1e-5):
    """One program run at each size (feeds_of(size) -> feeds), every output
    against ONNX Runtime's."""
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in m.graph.output]
    with mkcache.onnx.load(m) as prog:
        for size in sizes:
            feeds = feeds_of(size)
            got = prog.run(**feeds)
            for name, want in zip(names, sess.run(None, feeds)):
                g = got[name]
                assert g.shape == want.shape, (size, name, g.shape, want.shape)
                assert g.dtype == want.dtype, (size, name, g.dtype, want.dtype)
                scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
                np.testing.assert_allclose(g, want, rtol=0, atol=rtol * scale,
                                           err_msg=f"{name} at {size}")


def test_reshape_to_a_shape_gathered_from_run_time_dims():
    # x.view(x.size(0), x.size(1), 3, 4), as the legacy exporter writes it.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Gather", ["s", "one"], ["t"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
        helper.make_node("Unsqueeze", ["t", "axes0"], ["t1"]),
        helper.make_node("Concat", ["n1", "t1", "tail"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    m = model(nodes, [("x", ["N", "T", 12])], [("y", None)],
              [numpy_helper.from_array(np.array(0, np.int64), "zero"),
               numpy_helper.from_array(np.array(1, np.int64), "one"),
               ints("axes0", 0), ints("tail", 3, 4)])
    check_sizes(m, lambda s: {"x": rand(*s, 12)}, [(2, 5), (3, 1)])


def test_reshape_with_shape_arithmetic_and_the_minus_one_trick():
    # x.reshape(N * T, -1), then a reshape to where(shape == -1, 1, shape)
    # (how torch writes expand(-1, ...)) halved and doubled back.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "b0", "b2"], ["nt"]),
        helper.make_node("Gather", ["nt", "zero"], ["n"], axis=0),
        helper.make_node("Gather", ["nt", "one"], ["t"], axis=0),
        helper.make_node("Mul", ["n", "t"], ["nt_scalar"]),
        helper.make_node("Unsqueeze", ["nt_scalar", "axes0"], ["prod"]),
        helper.make_node("Concat", ["prod", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["flat"]),
        helper.make_node("Shape", ["flat"], ["fs"]),
        helper.make_node("Equal", ["fs", "minus1s"], ["eq"]),
        helper.make_node("Where", ["eq", "ones", "fs"], ["keep"]),
        helper.make_node("Div", ["keep", "two_one"], ["half"]),
        helper.make_node("Mul", ["half", "two_one"], ["back"]),
        helper.make_node("Reshape", ["flat", "back"], ["y"]),
    ]
    m = model(nodes, [("x", ["N", "T", 6])], [("y", None)],
              [ints("b0", 0), ints("b2", 2), ints("minus1", -1), ints("minus1s", -1, -1),
               ints("ones", 1, 1), ints("two_one", 1, 2), ints("axes0", 0),
               numpy_helper.from_array(np.array(0, np.int64), "zero"),
               numpy_helper.from_array(np.array(1, np.int64), "one")])
    check_sizes(m, lambda s: {"x": rand(*s, 6)}, [(2, 3), (4, 5)])


def test_expand_to_a_shape_sliced_from_another_input():
    # x [N, 1, 5] expanded to y's [N, T] and a static 5: T is y's dim alone.
    nodes = [
        helper.make_node("Shape", ["y"], ["s"]),
        helper.make_node("Slice", ["s", "b0", "b2"], ["nt"]),
        helper.make_node("Concat", ["nt", "five"], ["shape"], axis=0),
        helper.make_node("Expand", ["x", "shape"], ["e"]),
        helper.make_node("Add", ["e", "y3"], ["z"]),
        helper.make_node("Unsqueeze", ["y", "axes2"], ["y3"]),
    ]
    nodes = nodes[:4] + [nodes[5], nodes[4]]
    m = model(nodes, [("x", ["N", 1, 5]), ("y", ["N", "T"])], [("e", None), ("z", None)],
              [ints("b0", 0), ints("b2", 2), ints("five", 5), ints("axes2", 2)])
    check_sizes(m, lambda s: {"x": rand(s[0], 1, 5), "y": rand(*s)}, [(2, 3), (3, 7)])


@pytest.mark.parametrize("fill", [np.array([2.5], np.float32), np.array([7], np.int64),
                                  np.array([1], np.bool_)])
def test_constant_of_shape_from_run_time_dims(fill):
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["c"],
                              value=numpy_helper.from_array(fill, "v"))]
    elem = {np.float32: F, np.int64: I64, np.bool_: TensorProto.BOOL}[fill.dtype.type]
    m = model(nodes, [("x", ["N", 3, "T"])], [("c", None, elem)])
    check_sizes(m, lambda s: {"x": rand(s[0], 3, s[1])}, [(2, 4), (1, 6)])


def test_zeros_like_int64_ids_feed_an_embedding():
    # torch.zeros_like(input_ids) -> token type embeddings, BERT's default.
    table = rand(4, 8)
    nodes = [helper.make_node("Shape", ["ids"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["zeros"],
                              value=numpy_helper.from_array(np.array([0], np.int64), "v")),
             helper.make_node("Gather", ["table", "zeros"], ["types"]),
             helper.make_node("Gather", ["table", "ids"], ["words"]),
             helper.make_node("Add", ["words", "types"], ["y"])]
    m = model(nodes, [("ids", ["B", "S"], I64)], [("y", None)],
              [numpy_helper.from_array(table, "table")])
    check_sizes(m, lambda s: {"ids": RNG.integers(0, 4, s).astype(np.int64)}, [(2, 3), (1, 5)])


def test_slice_ends_from_the_sliced_dim():
    # x[:, : x.size(1) - 1] and x[:, 1 : x.size(1)]
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["t"], axis=0),
             helper.make_node("Unsqueeze", ["t", "axes0"], ["t1"]),
             helper.make_node("Sub", ["t1", "one1"], ["t_less"]),
             helper.make_node("Slice", ["x", "zero1", "t_less", "one1"], ["head"]),
             helper.make_node("Slice", ["x", "one1", "t1", "one1"], ["tail"]),
             helper.make_node("Sub", ["tail", "head"], ["y"])]
    m = model(nodes, [("x", ["N", "T", 2])], [("y", None)],
              [numpy_helper.from_array(np.array(1, np.int64), "one"), ints("axes0", 0),
               ints("one1", 1), ints("zero1", 0)])
    check_sizes(m, lambda s: {"x": rand(*s, 2)}, [(2, 5), (3, 2)])


@pytest.mark.parametrize("case", ["unsqueeze_front", "squeeze_front", "flatten"])
def test_run_time_dims_keep_their_places(case):
    # Two run-time dims: no reshape copies one into the other's place.
    if case == "unsqueeze_front":
        nodes = [helper.make_node("Unsqueeze", ["x", "axes0"], ["y"])]
        inputs, init = [("x", ["S", "T"])], [ints("axes0", 0)]
        make = lambda s: {"x": rand(*s)}  # noqa: E731
    elif case == "squeeze_front":
        nodes = [helper.make_node("Squeeze", ["x", "axes0"], ["y"])]
        inputs, init = [("x", [1, "S", "T"])], [ints("axes0", 0)]
        make = lambda s: {"x": rand(1, *s)}  # noqa: E731
    else:
        nodes = [helper.make_node("Flatten", ["x"], ["y"], axis=1)]
        inputs, init = [("x", ["S", "T", 3])], []
        make = lambda s: {"x": rand(*s, 3)}  # noqa: E731
    m = model(nodes, inputs, [("y", None)], init)
    check_sizes(m, make, [(2, 5), (4, 3)])


def test_gather_by_a_scalar_index_drops_the_axis():
    # BERT's pooler: hidden[:, 0].
    nodes = [helper.make_node("Gather", ["x", "zero"], ["y"], axis=1)]
    m = model(nodes, [("x", ["B", "S", 4])], [("y", None)],
              [numpy_helper.from_array(np.array(0, np.int64), "zero")])
    check_sizes(m, lambda s: {"x": rand(*s, 4)}, [(2, 3), (3, 5)])


def _range_and_sliced_table():
    # arange(T) and a constant sliced to T (a position ids' buffer).
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["t"], axis=0),
             helper.make_node("Range", ["zero", "t", "one"], ["r"]),
             helper.make_node("Cast", ["r"], ["rf"], to=F),
             helper.make_node("Unsqueeze", ["t", "axes0"], ["t1"]),
             helper.make_node("Slice", ["table", "zero1", "t1"], ["part"]),
             helper.make_node("Add", ["x", "rf"], ["y"]),
             helper.make_node("Add", ["y", "part"], ["z"])]
    return model(nodes, [("x", ["N", "T"])], [("z", None)],
                 [numpy_helper.from_array(np.array(0, np.int64), "zero"),
                  numpy_helper.from_array(np.array(1, np.int64), "one"),
                  ints("axes0", 0), ints("zero1", 0),
                  numpy_helper.from_array(rand(16), "table")])


def test_a_range_and_a_constant_sliced_to_a_run_time_length():
    check_sizes(_range_and_sliced_table(), lambda n: {"x": rand(n % 3 + 1, n)}, [5, 1, 16, 7])


def test_a_constant_sliced_past_its_end_fails_the_run():
    # ONNX clamps the end to the table's 16; the gather of rows 0..T-1
    # names the first row past it instead of reading past the table.
    with mkcache.onnx.load(_range_and_sliced_table()) as prog:
        with pytest.raises(mkcache.Error, match="index 16 is out of range"):
            prog.run(x=rand(2, 17))


@pytest.mark.parametrize("start,offset,delta", [(0, 0, 1), (2, 0, 1), (1, 3, 2), (0, -1, 1),
                                                (5, -9, -1)])
def test_range_to_a_run_time_dim_plus_a_constant(start, offset, delta):
    """Range(start, T + offset, delta) of int64 and of float32, against ONNX
    Runtime at several T."""
    for dtype, np_dtype in ((I64, np.int64), (F, np.float32)):
        nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=2),
                 helper.make_node("Squeeze", ["s"], ["t"]),
                 helper.make_node("Add", ["t", "offset"], ["limit"]),
                 helper.make_node("Cast", ["limit"], ["limit_c"], to=dtype),
                 helper.make_node("Range", ["start", "limit_c", "delta"], ["y"])]
        m = model(nodes, [("x", [2, "T"])], [("y", None, dtype)],
                  [numpy_helper.from_array(np.array(start, np_dtype), "start"),
                   numpy_helper.from_array(np.array(offset, np.int64), "offset"),
                   numpy_helper.from_array(np.array(delta, np_dtype), "delta")])
        sizes = [6, 11] if delta > 0 else [2, 3]
        check_sizes(m, lambda n: {"x": rand(2, n)}, sizes)


def test_an_empty_run_time_range_fails_the_run():
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=2),
             helper.make_node("Squeeze", ["s"], ["t"]),
             helper.make_node("Range", ["three", "t", "one"], ["y"])]
    m = model(nodes, [("x", [2, "T"])], [("y", None, I64)],
              [numpy_helper.from_array(np.array(3, np.int64), "three"),
               numpy_helper.from_array(np.array(1, np.int64), "one")])
    with mkcache.onnx.load(m) as prog:
        np.testing.assert_array_equal(prog.run(x=rand(2, 5))["y"], [3, 4])
        with pytest.raises(mkcache.Error, match="range: .* is empty"):
            prog.run(x=rand(2, 3))


def test_a_shape_read_as_data_holds_the_run_time_dims():
    """The batch and sequence read from a shape used as values: integer
    arithmetic on them and a comparison, in the program."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Mul", ["s", "two"], ["s2"]),
             helper.make_node("Cast", ["s2"], ["sf"], to=F),
             helper.make_node("Mul", ["x", "zero"], ["x0"]),
             helper.make_node("Gather", ["sf", "one"], ["t"], axis=0),
             helper.make_node("Add", ["x0", "t"], ["y"]),
             helper.make_node("Max", ["s", "floor"], ["m"])]
    m = model(nodes, [("x", ["N", "T"])], [("y", None), ("sf", None), ("m", None, I64)],
              [ints("two", 2, 3), ints("floor", 4, 4),
               numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
               numpy_helper.from_array(np.array(1, np.int64), "one")])
    check_sizes(m, lambda n: {"x": rand(n % 4 + 1, n)}, [3, 6, 9])


def test_a_mask_built_from_run_time_ranges():
    """transformers' mask builder as the exporters write it: ranges over
    the batch and sequence, a GatherND of the padding mask by them (dynamo),
    a Gather of it flattened by their integer arithmetic (TorchScript)."""
    B = TensorProto.BOOL
    nodes = [helper.make_node("Shape", ["mask"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
             helper.make_node("Gather", ["s", "one"], ["t"], axis=0),
             helper.make_node("Range", ["zero", "b", "one"], ["rb"]),
             helper.make_node("Range", ["zero", "t", "one"], ["rt"]),
             helper.make_node("Unsqueeze", ["rb", "axes1"], ["rb2"]),      # [B, 1]
             helper.make_node("Unsqueeze", ["rt", "axes0"], ["rt2"]),      # [1, T]
             helper.make_node("Max", ["rb2", "rt2"], ["both"]),             # [B, T]
             helper.make_node("Shape", ["both"], ["bs"]),
             helper.make_node("Expand", ["rb2", "bs"], ["eb"]),
             helper.make_node("Expand", ["rt2", "bs"], ["et"]),
             helper.make_node("Unsqueeze", ["eb", "axes2"], ["eb3"]),
             helper.make_node("Unsqueeze", ["et", "axes2"], ["et3"]),
             helper.make_node("Concat", ["eb3", "et3"], ["index"], axis=-1),  # [B, T, 2]
             helper.make_node("Cast", ["mask"], ["mb"], to=B),
             helper.make_node("GatherND", ["mb", "index"], ["nd"]),
             helper.make_node("Flatten", ["mb"], ["flat"], axis=2),         # [B*T, 1]
             helper.make_node("Mul", ["rb2", "t"], ["row"]),
             helper.make_node("Add", ["row", "rt2"], ["at"]),               # [B, T]
             helper.make_node("Gather", ["flat", "at"], ["g"], axis=0),     # [B, T, 1]
             helper.make_node("Squeeze", ["g", "axes2"], ["g2"]),
             helper.make_node("And", ["nd", "g2"], ["both_ok"]),
             helper.make_node("Where", ["both_ok", "zerof", "low"], ["y"])]
    m = model(nodes, [("mask", ["N", "T"], I64)], [("y", None)],
              [numpy_helper.from_array(np.array(0, np.int64), "zero"),
               numpy_helper.from_array(np.array(1, np.int64), "one"),
               ints("axes0", 0), ints("axes1", 1), ints("axes2", 2),
               numpy_helper.from_array(np.array(0.0, np.float32), "zerof"),
               numpy_helper.from_array(np.array(-1e30, np.float32), "low")])

    def feeds(n):
        mask = np.ones((n % 3 + 1, n), np.int64)
        mask[-1, n // 2:] = 0
        return {"mask": mask}
    check_sizes(m, feeds, [4, 7, 1])


def test_gather_elements_and_gather_nd_against_onnxruntime():
    nodes = [helper.make_node("GatherElements", ["x", "i"], ["e"], axis=1),
             helper.make_node("GatherND", ["x", "j"], ["nd"], batch_dims=1)]
    m = model(nodes, [("x", [3, 5, 4]), ("i", [3, 2, 4], I64), ("j", [3, 2, 1], I64)],
              [("e", None), ("nd", None)])
    rng = np.random.default_rng(5)
    check_sizes(m, lambda n: {"x": rand(3, 5, 4), "i": rng.integers(-5, 5, (3, 2, 4)),
                              "j": rng.integers(-5, 5, (3, 2, 1))}, [0, 1])
    with mkcache.onnx.load(m) as prog:
        with pytest.raises(mkcache.Error, match="gather_elements: index 5 is out of range"):
            prog.run(x=rand(3, 5, 4), i=np.full((3, 2, 4), 5), j=np.zeros((3, 2, 1), np.int64))
        with pytest.raises(mkcache.Error, match="gather_nd: index -6 is out of range"):
            prog.run(x=rand(3, 5, 4), i=np.zeros((3, 2, 4), np.int64),
                     j=np.full((3, 2, 1), -6))


def test_input_shapes_pin_the_dims_a_shape_reads():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Reshape", ["x", "s2"], ["y"]),
             helper.make_node("Concat", ["s"], ["s2"], axis=0)]
    nodes = [nodes[0], nodes[2], nodes[1]]
    m = model(nodes, [("x", ["N", 4])], [("y", None)])
    with mkcache.onnx.load(m, input_shapes={"x": (3, 4)}) as prog:
        x = rand(3, 4)
        np.testing.assert_array_equal(prog.run(x=x)["y"], x)


@pytest.mark.parametrize("dtype", [F, I64])
def test_tile_by_a_run_time_dim(dtype):
    """x.repeat(batch, 2) as exported: Tile by a shape read from another
    input, its batch bound at run time; float32 and int64."""
    nodes = [helper.make_node("Shape", ["y"], ["s"], start=0, end=1),
             helper.make_node("Concat", ["s", "two"], ["repeats"], axis=0),
             helper.make_node("Cast", ["x"], ["xc"], to=dtype),
             helper.make_node("Tile", ["xc", "repeats"], ["t"])]
    m = model(nodes, [("x", [3, 4]), ("y", ["N", 5])], [("t", None, dtype)], [ints("two", 2)])
    check_sizes(m, lambda n: {"x": rand(3, 4) * 100, "y": rand(n, 5)}, [1, 4, 2])
