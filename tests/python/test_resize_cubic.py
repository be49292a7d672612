"""resize's cubic interpolation, exclude_outside and antialias (ONNX's
Resize, opsets 11 to 19+): eager, in programs and from ONNX models, against
a float64 numpy implementation written here from the operator's definition
(a filter evaluated at each element's distance), ONNX's reference
implementation and onnxruntime where installed; odd sizes, up- and
down-sampling, batch > 1, both layouts."""
from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

import mkcache
from mkcache import _capi

RNG = np.random.default_rng(31)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def keys(t: float, a: float) -> float:
    """Keys' cubic convolution kernel with parameter a."""
    t = abs(t)
    if t <= 1:
        return (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1
    if t < 2:
        return a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a
    return 0.0


def coordinate(y: int, n: int, m: int, length: float, coordinates: str) -> float:
    """src's coordinate of result index y (n src's extent, m the result's,
    length n times the scale)."""
    scale = length / n
    if coordinates == "align_corners":
        return 0.0 if length == 1 else y * (n - 1) / (length - 1)
    if coordinates == "asymmetric":
        return y / scale
    if coordinates == "pytorch_half_pixel" and length == 1:
        return 0.0  # ONNX's definition (its reference implementation takes -0.5)
    x = (y + 0.5) / scale - 0.5
    if coordinates == "half_pixel_symmetric":
        x += n / 2 * (1 - m / length)
    return x


def axis_matrix(n, m, length, mode, coordinates, a, exclude_outside, antialias):
    """The m x n matrix of one axis: row y weighs src's elements. The filter
    (a triangle for linear, Keys' kernel for cubic) is evaluated at each
    element's distance to the coordinate, stretched by 1 / scale along a
    shrinking axis when antialiasing; elements past the border read the
    border one, or are left out (and the rest rescaled) with
    exclude_outside; an antialiased filter is divided by its sum."""
    support = 1.0 if mode == "linear" else 2.0
    stretch = min(length / n, 1.0) if antialias else 1.0
    out = np.zeros((m, n))
    for y in range(m):
        x = coordinate(y, n, m, length, coordinates)
        reach = support / stretch
        taps = []
        for j in range(int(np.ceil(x - reach)), int(np.floor(x + reach)) + 1):
            d = (x - j) * stretch
            w = max(0.0, 1 - abs(d)) if mode == "linear" else keys(d, a)
            if w == 0.0 or (exclude_outside and not 0 <= j < n):
                continue
            taps.append((min(max(j, 0), n - 1), w))
        total = sum(w for _, w in taps)
        if (antialias or exclude_outside) and total != 0:
            taps = [(j, w / total) for j, w in taps]
        for j, w in taps:
            out[y, j] += w
    return out


def resize64(x, mode="cubic", coordinates="half_pixel", sizes=None, scales=None, a=-0.75,
             exclude_outside=False, antialias=False):
    """ONNX's Resize of x in float64, one axis at a time."""
    r = x.astype(np.float64)
    for ax, n in enumerate(x.shape):
        if sizes is not None:
            m, length = sizes[ax], float(sizes[ax])
        else:
            length = float(np.float32(scales[ax])) * n
            m = int(np.floor(length))
        mat = axis_matrix(n, m, length, mode, coordinates, a, exclude_outside, antialias)
        r = np.moveaxis(np.tensordot(mat, np.moveaxis(r, ax, 0), axes=(1, 0)), 0, ax)
    return r


COORDINATES = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
               "half_pixel_symmetric"]
CUBIC_CASES = [  # shape, sizes, scales
    ((2, 3, 7), None, [1, 1, 2.5]),                 # 3-D, odd width, a fractional scale
    ((2, 5, 6, 4), [2, 5, 3, 9], None),             # 4-D by sizes: down and up
    ((3, 2, 9, 5), None, [1, 1, 0.6, 1.7]),         # batch 3, down and up by scales
    ((2, 3, 4, 3, 5), None, [1, 1, 2, 0.67, 1]),    # 5-D
    ((3, 2, 6, 1), [3, 2, 1, 4], None),             # a dim to 1, a dim from 1
    ((2, 4, 9), None, [1, 2, 0.34]),                # the channels resized too
]


@pytest.mark.parametrize("shape,sizes,scales", CUBIC_CASES)
@pytest.mark.parametrize("coordinates", COORDINATES)
@pytest.mark.parametrize("a,exclude_outside", [(-0.75, False), (-0.5, True), (-0.6, False)])
def test_cubic_matches_float64(shape, sizes, scales, coordinates, a, exclude_outside):
    x = rand(*shape)
    got = mkcache.resize(x, sizes=sizes, scales=scales, mode="cubic", coordinates=coordinates,
                         cubic_coeff_a=a, exclude_outside=exclude_outside).numpy()
    want = resize64(x, "cubic", coordinates, sizes, scales, a, exclude_outside)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


ANTIALIAS_CASES = [  # shape, sizes, scales: each shrinks some axis
    ((2, 3, 11, 9), None, [1, 1, 0.4, 0.6]),
    ((3, 2, 17, 5), [3, 2, 4, 7], None),          # down by 4.25, up
    ((2, 3, 13), None, [1, 1, 0.3]),
    ((1, 2, 7, 6, 5), [1, 2, 3, 6, 2], None),     # 5-D, an axis kept
]


@pytest.mark.parametrize("shape,sizes,scales", ANTIALIAS_CASES)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("coordinates", ["half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("exclude_outside", [False, True])
def test_antialias_matches_float64(shape, sizes, scales, mode, coordinates, exclude_outside):
    x = rand(*shape)
    got = mkcache.resize(x, sizes=sizes, scales=scales, mode=mode, coordinates=coordinates,
                         exclude_outside=exclude_outside, antialias=True).numpy()
    want = resize64(x, mode, coordinates, sizes, scales, exclude_outside=exclude_outside,
                    antialias=True)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_antialias_leaves_upsampling_as_it_is():
    x = rand(2, 3, 5, 4)
    for mode in ("linear", "cubic"):
        plain = mkcache.resize(x, scales=[1, 1, 2, 1.5], mode=mode).numpy()
        filtered = mkcache.resize(x, scales=[1, 1, 2, 1.5], mode=mode, antialias=True).numpy()
        np.testing.assert_allclose(filtered, plain, rtol=1e-6, atol=1e-6)


def test_whole_coordinates_give_src_elements_exactly():
    """Doubling with asymmetric coordinates: every even result is src's own
    element bit for bit, whatever its neighbours hold (infinities here),
    which weigh 0 there."""
    x = rand(2, 3, 5, 7)
    x[0, 0, 2, 3] = np.inf
    x[1, 2, 0, 0] = -np.inf
    y = mkcache.resize(x, scales=[1, 1, 2, 2], mode="cubic", coordinates="asymmetric").numpy()
    np.testing.assert_array_equal(y[:, :, ::2, ::2], x)
    assert np.isfinite(y[1, :2]).all() and not np.isfinite(y[0, 0, 3:6, 5:8]).any()


def _reference_model(x_shape, attrs, sizes=None, scales=None, opset=19):
    onnx = pytest.importorskip("onnx")
    from onnx import helper, numpy_helper  # noqa: PLC0415
    if sizes is not None:
        inputs, init = ["x", "", "", "sizes"], [numpy_helper.from_array(
            np.array(sizes, np.int64), "sizes")]
    else:
        inputs, init = ["x", "", "scales"], [numpy_helper.from_array(
            np.array(scales, np.float32), "scales")]
    node = helper.make_node("Resize", inputs, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", onnx.TensorProto.FLOAT, x_shape)], [helper.make_tensor_value_info(
            "y", onnx.TensorProto.FLOAT, None)], init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


REFERENCE_CASES = [  # attributes, sizes, scales
    (dict(mode="cubic"), None, [1, 1, 1.5, 0.6]),
    (dict(mode="cubic", coordinate_transformation_mode="align_corners"), [2, 3, 9, 4], None),
    (dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1), None, [1, 1, 0.8, 2.3]),
    (dict(mode="cubic", coordinate_transformation_mode="pytorch_half_pixel"), [2, 3, 2, 10],
     None),
    (dict(mode="cubic", coordinate_transformation_mode="asymmetric"), None, [1, 1, 2.2, 0.5]),
    (dict(mode="cubic", coordinate_transformation_mode="half_pixel_symmetric"), None,
     [1, 1, 1.7, 0.7]),
    (dict(mode="cubic", antialias=1), None, [1, 1, 0.4, 0.6]),
    (dict(mode="linear", antialias=1), [2, 3, 2, 3], None),
    (dict(mode="cubic", antialias=1, exclude_outside=1), None, [1, 1, 0.3, 1.6]),
]


@pytest.mark.parametrize("attrs,sizes,scales", REFERENCE_CASES)
def test_matches_onnx_reference_evaluator(attrs, sizes, scales):
    pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator  # noqa: PLC0415
    x = rand(2, 3, 5, 7)
    model = _reference_model(x.shape, attrs, sizes, scales)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = mkcache.resize(
        x, sizes=sizes, scales=scales, mode=attrs["mode"],
        coordinates=attrs.get("coordinate_transformation_mode", "half_pixel"),
        cubic_coeff_a=attrs.get("cubic_coeff_a", -0.75),
        exclude_outside=bool(attrs.get("exclude_outside")),
        antialias=bool(attrs.get("antialias"))).numpy()
    # ONNX's reference weighs in float32 where the attribute a reaches its
    # weights as a numpy float32 (numpy keeps that type): a few float ulps.
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attrs,sizes,scales", REFERENCE_CASES)
def test_imported_models_match_onnxruntime(attrs, sizes, scales):
    ort = pytest.importorskip("onnxruntime")
    import mkcache.onnx  # noqa: PLC0415
    x = rand(2, 3, 5, 7)
    model = _reference_model(x.shape, attrs, sizes, scales)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with mkcache.onnx.load(model) as prog:
        got = prog.run(x=x)["y"]
        assert "reference" in prog.plan()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, resize64(
        x, attrs["mode"], attrs.get("coordinate_transformation_mode", "half_pixel"), sizes,
        scales, attrs.get("cubic_coeff_a", -0.75), bool(attrs.get("exclude_outside")),
        bool(attrs.get("antialias"))), rtol=1e-6, atol=1e-6)


def test_pytorch_half_pixel_maps_a_dim_resized_to_1_to_0():
    """ONNX defines pytorch_half_pixel's coordinate as 0 where the result's
    length is 1, and onnxruntime computes that; ONNX's reference
    implementation takes -0.5 there. Nearest and linear read src's first
    element either way; cubic reads it alone at 0, and its neighbours too at
    -0.5."""
    x = rand(2, 3, 5, 7)
    got = mkcache.resize(x, sizes=[2, 3, 1, 7], mode="cubic",
                         coordinates="pytorch_half_pixel").numpy()
    np.testing.assert_array_equal(got, x[:, :, :1])
    for mode in ("nearest", "linear"):
        y = mkcache.resize(x, sizes=[2, 3, 1, 7], mode=mode, coordinates="pytorch_half_pixel")
        np.testing.assert_array_equal(y.numpy(), x[:, :, :1])
    ort = pytest.importorskip("onnxruntime")
    model = _reference_model(x.shape, dict(mode="cubic",
                                           coordinate_transformation_mode="pytorch_half_pixel"),
                             sizes=[2, 3, 1, 10])
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = mkcache.resize(x, sizes=[2, 3, 1, 10], mode="cubic",
                         coordinates="pytorch_half_pixel").numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_channels_last_keeps_the_layout():
    a = rand(2, 17, 5, 3)  # NCHW values
    x = mkcache.Tensor(np.ascontiguousarray(np.moveaxis(a, 1, -1)), layout="NHWC")
    y = mkcache.resize(x, scales=[1, 2.2, 1.5, 1], mode="cubic", coordinates="align_corners",
                       exclude_outside=True)
    assert y.layout == "NHWC" and y.shape == (2, 11, 4, 17)
    want = resize64(np.moveaxis(a, 1, -1), "cubic", "align_corners", scales=[1, 2.2, 1.5, 1],
                    exclude_outside=True)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6, atol=1e-6)


def _graph(shape, impl=None, layout="NCHW", **kw):
    with mkcache.Graph() as g:
        x = g.input("x", shape, layout=layout)
        g.output(g.resize(g.relu(x), name="r", **kw), "y")
        return g.compile(impl={"resize": impl}) if impl else g.compile()


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_programs_run_cubic_on_the_reference_kernel(layout):
    shape = (3, 5, 9, 4)  # caller order in either layout
    x = rand(*shape)
    kw = dict(sizes=[3, 5, 4, 7], mode="cubic", cubic_coeff_a=-0.5)
    with _graph(shape, layout=layout, **kw) as prog:
        got = prog.run(x=x)["y"]
        plan = prog.plan()
    assert "(resize 'r') reference" in plan
    assert "oneDNN's resampling has no cubic interpolation" in plan
    np.testing.assert_allclose(got, resize64(np.maximum(x, 0), "cubic", sizes=kw["sizes"],
                                             a=-0.5), rtol=1e-6, atol=1e-6)
    with pytest.raises(mkcache.InvalidArgumentError,
                       match="oneDNN's resampling has no cubic interpolation"):
        _graph(shape, "onednn", layout=layout, **kw)


def test_onednn_antialiases_only_where_nothing_shrinks():
    shape = (2, 3, 6, 4)
    x = rand(*shape)
    with pytest.raises(mkcache.InvalidArgumentError,
                       match=re.escape("oneDNN's resampling does not antialias (axis 2 shrinks "
                                       "from 6 to 3)")):
        _graph(shape, "onednn", scales=[1, 1, 0.5, 2], mode="linear", antialias=True)
    results = {}
    for impl in ("onednn", "reference"):
        with _graph(shape, impl, scales=[1, 1, 2, 2], mode="linear", antialias=True,
                    exclude_outside=True) as prog:
            results[impl] = prog.run(x=x)["y"]
            assert f"(resize 'r') {impl}" in prog.plan()
    np.testing.assert_allclose(results["onednn"], results["reference"], rtol=1e-6, atol=1e-6)


def test_bad_arguments():
    a = rand(1, 2, 4, 4)
    with pytest.raises(mkcache.InvalidArgumentError, match="resize: cubic_coeff_a is nan"):
        mkcache.resize(a, scales=[1, 1, 2, 2], mode="cubic", cubic_coeff_a=float("nan"))
    with pytest.raises(mkcache.InvalidArgumentError, match="cubic_coeff_a must be a real"):
        mkcache.resize(a, scales=[1, 1, 2, 2], mode="cubic", cubic_coeff_a="-0.5")
    with pytest.raises(mkcache.InvalidArgumentError,
                       match="exclude_outside must be True or False, got 2"):
        mkcache.resize(a, scales=[1, 1, 2, 2], mode="cubic", exclude_outside=2)
    for flag in ("exclude_outside", "antialias"):
        with pytest.raises(mkcache.InvalidArgumentError,
                           match="exclude_outside and antialias apply to LINEAR and CUBIC, "
                                 "not NEAREST"):
            mkcache.resize(a, scales=[1, 1, 0.5, 2], **{flag: True})
    # The C struct's own checks of the flags.
    p = mkcache._operators.resize_params(None, [1, 1, 2, 2], "cubic", "half_pixel",
                                         "round_prefer_floor", -0.75, False, False, None)
    t = mkcache.Tensor(a)
    for field, value in (("exclude_outside", 2), ("antialias", -1)):
        q = _capi.ResizeParams.from_buffer_copy(p)
        setattr(q, field, value)
        rc, dst = _op_run(_capi.OPS["resize"], ctypes.addressof(q), [t])
        assert rc != 0 and not dst.value
        assert f"resize: {field} must be 0 or 1, got {value}" in \
            _capi.lib.mkc_last_error().decode()


def _op_run(op, params, inputs):
    arr = (_capi.tensor_p * len(inputs))(*[t.handle for t in inputs])
    dst = _capi.tensor_p()
    fn = _capi.lib["mkc_op_run"]
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(_capi.tensor_p),
                   ctypes.POINTER(_capi.tensor_p)]
    fn.restype = ctypes.c_int
    return fn(op, params, len(inputs), arr, ctypes.byref(dst)), dst


def test_an_older_struct_reads_cubics_fields_as_their_defaults():
    """A struct of the header before cubic's fields ends at name: run from a
    buffer of exactly that size (nothing past it exists to read), it
    interpolates with a = -0.75 and neither flag. A size inside the new
    fields is no field's end: refused."""
    x = rand(2, 3, 5, 6)
    p = mkcache._operators.resize_params(None, [1, 1, 1.6, 0.7], "cubic", "half_pixel",
                                         "round_prefer_floor", -0.5, True, True, None)
    cut = _capi.ResizeParams.name.offset + _capi.ResizeParams.name.size
    p.struct_size = cut
    buf = (ctypes.c_char * cut).from_buffer_copy(bytes(p)[:cut])
    rc, dst = _op_run(_capi.OPS["resize"], ctypes.addressof(buf), [mkcache.Tensor(x)])
    assert rc == 0, _capi.lib.mkc_last_error().decode()
    got = mkcache.Tensor._adopt(dst).numpy()
    np.testing.assert_array_equal(
        got, mkcache.resize(x, scales=[1, 1, 1.6, 0.7], mode="cubic").numpy())
    p.struct_size = cut + 4
    rc, dst = _op_run(_capi.OPS["resize"], ctypes.addressof(p), [mkcache.Tensor(x)])
    assert rc != 0 and not dst.value
    assert f"mkc_resize_params.struct_size is {cut + 4}, which is not the end of a field" in \
        _capi.lib.mkc_last_error().decode()
