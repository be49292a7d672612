"""Shape data given at run time (mkcache.onnx.load): inputs that feed only
ports taking axes, shapes, scales, sizes, pads, bounds or counts are bound
by value at each run, one program compiled per distinct set of values and
kept (least recently used dropped); checked against ONNX Runtime and onnx's
reference evaluator, with the rule, the cache, bad values, the checks made
at load and runs from several threads."""
from __future__ import annotations

import threading

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import mkcache  # noqa: E402
import mkcache.onnx  # noqa: E402
from mkcache.onnx import ShapeDataProgram  # noqa: E402
from mkcache.onnx._shape_data import inputs_of  # noqa: E402

RNG = np.random.default_rng(53)
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def model(nodes, inputs, outputs, opset=18):
    """inputs: (name, elem type, dims); outputs: (name, rank), float32 of
    dims named, as shape data decides them."""
    g = helper.make_graph(
        nodes, "shape_data", [helper.make_tensor_value_info(n, t, d) for n, t, d in inputs],
        [helper.make_tensor_value_info(n, F, [f"{n}{i}" for i in range(rank)])
         for n, rank in outputs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, 10)  # what onnxruntime reads
    onnx.checker.check_model(m)
    return m


def references(m, feeds):
    """The reference evaluator's outputs, and ONNX Runtime's where installed."""
    out = [ReferenceEvaluator(m).run(None, feeds)]
    try:
        import onnxruntime as ort  # noqa: PLC0415
    except ImportError:
        return out
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return out + [sess.run(None, feeds)]


def check(prog, m, feeds):
    got = prog.run(**feeds)
    for ref in references(m, feeds):
        for name, want in zip([o.name for o in m.graph.output], ref):
            assert got[name].shape == want.shape, name
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5, err_msg=name)
    return got


def _pipeline():
    """x -> Reshape(shape) -> Resize(cubic, scales) -> ReduceSum(axes) ->
    Slice(starts, ends, axes) -> Pad(pads) -> Tile(repeats) -> y: every port
    shape data, fed as inputs."""
    c = helper.make_node
    nodes = [c("Reshape", ["x", "shape"], ["r"]),
             c("Resize", ["r", "", "scales"], ["z"], mode="cubic"),
             c("ReduceSum", ["z", "axes"], ["s"], keepdims=1),
             c("Slice", ["s", "starts", "ends", "slice_axes"], ["l"]),
             c("Pad", ["l", "pads"], ["p"], mode="edge"),
             c("Tile", ["p", "repeats"], ["y"])]
    return model(nodes, [("x", F, [2, 3, 20]), ("shape", I64, [4]), ("scales", F, [4]),
                         ("axes", I64, [1]), ("starts", I64, [1]), ("ends", I64, [1]),
                         ("slice_axes", I64, [1]), ("pads", I64, [8]), ("repeats", I64, [4])],
                 [("y", 4)])


def _feeds(shape=(2, 3, 4, 5), scales=(1, 1, 1.5, 0.6), axes=(1,), starts=(1,), ends=(-1,),
           pads=(0, 0, 1, 0, 0, 0, 0, 2), repeats=(1, 2, 1, 1)):
    return {"x": rand(2, 3, 20), "shape": np.array(shape, np.int64),
            "scales": np.array(scales, np.float32), "axes": np.array(axes, np.int64),
            "starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64),
            "slice_axes": np.array([2], np.int64), "pads": np.array(pads, np.int64),
            "repeats": np.array(repeats, np.int64)}


def test_a_pipeline_of_shape_data_matches_the_references():
    m = _pipeline()
    with mkcache.onnx.load(m) as prog:
        assert isinstance(prog, ShapeDataProgram)
        assert prog.input_names == ["x", "shape", "scales", "axes", "starts", "ends",
                                    "slice_axes", "pads", "repeats"]  # the model's order
        assert prog.shape_inputs == prog.input_names[1:]
        assert prog.output_names == ["y"]
        first = _feeds()
        check(prog, m, first)
        check(prog, m, dict(first, x=rand(2, 3, 20)))  # the same shape data: kept
        assert prog.specializations == {"kept": 1, "capacity": 16, "compiled": 1, "hits": 1,
                                        "evictions": 0}
        other = _feeds(shape=(2, 5, 4, 3), scales=(1, 1, 0.5, 2.2), axes=(3,), starts=(0,),
                       ends=(2,), pads=(1, 0, 0, 0, 0, 0, 0, 1), repeats=(2, 1, 1, 3))
        check(prog, m, other)
        check(prog, m, first)
        assert prog.specializations["compiled"] == 2
        assert prog.specializations["hits"] == 2
        assert "reference" in prog.plan()  # the last run's program: cubic resize


def test_least_recently_used_programs_are_dropped():
    c = helper.make_node
    m = model([c("Reshape", ["x", "shape"], ["y"])], [("x", F, [2, 6]), ("shape", I64, [2])],
              [("y", 2)])
    shapes = [(3, 4), (4, 3), (12, 1), (6, 2)]
    with mkcache.onnx.load(m, max_specializations=2) as prog:
        x = rand(2, 6)
        for s in shapes[:3]:  # (3, 4) dropped for (12, 1)
            assert prog.run(x=x, shape=np.array(s, np.int64))["y"].shape == s
        assert prog.specializations == {"kept": 2, "capacity": 2, "compiled": 3, "hits": 0,
                                        "evictions": 1}
        kept = prog.specialize(shape=np.array((12, 1), np.int64))
        assert prog.specialize(shape=[12, 1]) is kept  # a list of ints is taken too
        assert prog.specializations["hits"] == 2
        np.testing.assert_array_equal(prog.run(x=x, shape=np.array((3, 4), np.int64))["y"],
                                      x.reshape(3, 4))  # compiled again
        assert prog.specializations["compiled"] == 4
        assert prog.specializations["evictions"] == 2
        assert kept.run(x=x)["y"].shape == (12, 1)  # a dropped program still runs
    with pytest.raises(mkcache.InvalidArgumentError, match="max_specializations"):
        mkcache.onnx.load(m, max_specializations=0)


def test_the_rule():
    c = helper.make_node
    nodes = [c("Cast", ["n"], ["n64"], to=I64),                # shape arithmetic, then a shape
             c("Concat", ["n64", "tail"], ["shape"], axis=0),
             c("Reshape", ["x", "shape"], ["r"]),
             c("Shape", ["axes"], ["axes_shape"]),              # its shape only
             c("ReduceMean", ["r", "axes"], ["m"]),
             c("Add", ["m", "bias"], ["b"]),                    # data
             c("Reshape", ["b", "bias_shape"], ["y"]),
             c("Add", ["bias_shape", "bias_shape"], ["doubled"]),  # ... and a graph output
             c("Pow", ["x", "e"], ["p"]),                       # an exponent is data
             c("Reshape", ["x", "out_shape"], ["q"]),           # a shape, and an output
             c("Identity", ["out_shape"], ["shown"])]
    inputs = [("x", F, [2, 6]), ("n", F, [1]), ("tail", I64, [1]), ("axes", I64, [1]),
              ("bias", F, [1]), ("bias_shape", I64, [1]), ("e", F, [1]),
              ("out_shape", I64, [2])]
    m = model(nodes, inputs, [("y", 1), ("doubled", 1), ("p", 2), ("axes_shape", 1),
                              ("q", 2), ("shown", 1)])
    assert inputs_of(m.graph, {}) == ["n", "tail", "axes"]
    # An initializer is a constant, whatever reads it.
    assert inputs_of(m.graph, {"n": np.ones(1, np.float32)}) == ["tail", "axes"]


def _reshape_model():
    return model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                 [("x", F, [2, 6]), ("shape", I64, [2])], [("y", 2)])


def test_bad_shape_data_is_refused_clearly():
    with mkcache.onnx.load(_reshape_model()) as prog:
        x = rand(2, 6)
        with pytest.raises(mkcache.InvalidArgumentError,
                           match="input 'shape' \\(shape data\\) is int32; the model declares "
                                 "int64"):
            prog.run(x=x, shape=np.array([3, 4], np.int32))
        with pytest.raises(mkcache.InvalidArgumentError,
                           match=r"input 'shape' \(shape data\) has shape \(3,\); the model "
                                 r"declares \(2,\)"):
            prog.run(x=x, shape=np.array([3, 2, 2], np.int64))
        with pytest.raises(mkcache.InvalidArgumentError, match="must be int64 values"):
            prog.run(x=x, shape=[3.5, 4])
        with pytest.raises(mkcache.InvalidArgumentError, match="missing \\['shape'\\]"):
            prog.run(x=x)
        with pytest.raises(mkcache.InvalidArgumentError, match="unknown \\['y'\\]"):
            prog.run(x=x, shape=[3, 4], y=x)
        # Values the model cannot take: told with the values.
        with pytest.raises(mkcache.Error, match=r"onnx \(shape data shape=\[5, 5\]\)"):
            prog.run(x=x, shape=[5, 5])
        with pytest.raises(mkcache.InvalidArgumentError, match="no program is compiled yet"):
            prog.plan()
        assert prog.specializations["compiled"] == 0
        np.testing.assert_array_equal(prog.run(x=x, shape=[4, 3])["y"], x.reshape(4, 3))
        assert "reshape" in prog.plan()
    with pytest.raises(mkcache.InvalidArgumentError, match="the program is closed"):
        prog.run(x=x, shape=[4, 3])
    with pytest.raises(mkcache.InvalidArgumentError, match="which are shape data"):
        mkcache.onnx.load(_reshape_model(), input_shapes={"shape": [2]})


def test_values_that_do_not_fit_the_model_say_so():
    """An axis past the rank: what ONNX's shape inference says of the
    values is told beside the error compiling them."""
    with mkcache.onnx.load(_pipeline()) as prog:
        with pytest.raises(mkcache.InvalidArgumentError) as e:
            prog.run(**_feeds(axes=(7,)))
        text = str(e.value)
        assert "onnx (shape data shape=[2, 3, 4, 5], " in text and "axes=[7]" in text
        assert "(op_type:ReduceSum): [ShapeInferenceError] axis must be in [-rank, rank-1]" in text
        check(prog, _pipeline(), _feeds())  # and the program goes on


def test_what_does_not_wait_for_the_shape_data_is_checked_at_load():
    c = helper.make_node
    m = model([c("Resize", ["x", "", "", "sizes"], ["r"], mode="linear",
                 coordinate_transformation_mode="tf_crop_and_resize", name="crop"),
               c("Erf", ["r"], ["e"]), c("Celu", ["x"], ["y"], name="celu")],
              [("x", F, [1, 1, 4, 4]), ("sizes", I64, [4])], [("e", 4), ("y", 4)])
    with pytest.raises(mkcache.UnsupportedError) as e:
        mkcache.onnx.load(m)
    text = str(e.value)
    assert "3 nodes cannot be converted" in text
    assert "(Resize 'crop'): coordinate_transformation_mode 'tf_crop_and_resize'" in text
    assert "(Erf): reads the output of a node refused above" in text
    assert "(Celu 'celu'): operator not supported" in text


def test_scalar_shape_data():
    """Range's bounds (rank 0): given as arrays of no dims, or as (1,) as a
    program takes a scalar."""
    c = helper.make_node
    m = model([c("Range", ["start", "limit", "delta"], ["r"]),
               c("Cast", ["r"], ["rf"], to=F), c("Add", ["x", "rf"], ["y"])],
              [("x", F, [2, 4]), ("start", I64, []), ("limit", I64, []), ("delta", I64, [])],
              [("y", 2)], opset=13)
    with mkcache.onnx.load(m) as prog:
        x = rand(2, 4)
        feeds = {"x": x, "start": np.array(1), "limit": np.array(9), "delta": np.array(2)}
        check(prog, m, feeds)
        got = prog.run(x=x, start=np.array([1]), limit=np.array([9]), delta=np.array([2]))
        np.testing.assert_array_equal(got["y"], x + np.arange(1, 9, 2, dtype=np.float32))
        assert prog.specializations["compiled"] == 1
        with pytest.raises(mkcache.InvalidArgumentError, match="has shape \\(2,\\)"):
            prog.run(x=x, start=np.array([1, 2]), limit=np.array(9), delta=np.array(2))


def test_the_onnx_backend_takes_shape_data_in_order():
    import mkcache.onnx.backend as backend  # noqa: PLC0415
    m = _reshape_model()
    x = rand(2, 6)
    rep = backend.prepare(m)
    (y,) = rep.run([x, np.array([3, 4], np.int64)])
    np.testing.assert_array_equal(y, x.reshape(3, 4))


def test_runs_from_many_threads():
    m = _pipeline()
    values = [_feeds(), _feeds(shape=(2, 5, 4, 3), scales=(1, 1, 0.5, 2.2), axes=(3,),
                               starts=(0,), ends=(2,))]
    for v in values:
        v["x"] = rand(2, 3, 20)
    want = [ReferenceEvaluator(m).run(None, v)[0] for v in values]
    errors = []
    with mkcache.onnx.load(m) as prog:
        def work(k):
            try:
                for i in range(6):
                    j = (i + k) % 2
                    np.testing.assert_allclose(prog.run(**values[j])["y"], want[j], rtol=1e-5,
                                               atol=1e-5)
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        stats = prog.specializations
        assert stats["compiled"] == 2 and stats["kept"] == 2
        # Each thread misses a set of values at most once (two threads may
        # compile the same one at once: one program is kept).
        assert 4 * 6 - 2 * 4 <= stats["hits"] <= 4 * 6 - 2


def test_profile_and_outputs_pass_through():
    with mkcache.onnx.load(_reshape_model()) as prog:
        x = rand(2, 6)
        out = np.empty((3, 4), np.float32)
        got = prog.run({"y": out}, x=x, shape=[3, 4])
        assert got["y"] is out
        np.testing.assert_array_equal(out, x.reshape(3, 4))
        steps = prog.profile(x=x, shape=[6, 2])
        assert isinstance(steps, list)
        assert prog.specializations["compiled"] == 2
