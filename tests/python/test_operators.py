"""The operators' one description (mkcache._operators): every kind it names
is a value of the loaded library and back, the eager functions and the
Graph methods made from it agree with each other, and the C lookup of
enum values by name refuses what it does not know."""
import ctypes
import inspect

import numpy as np
import pytest

import mkcache
from mkcache import _capi, _operators, grad, ops
from mkcache.graph import Graph

lib = _capi.lib


def test_every_kind_of_the_description_is_a_library_value_and_back():
    tables = [("mkc_activation_kind", {n: r.kind for n, r in
                                       _operators.ACTIVATION_TABLE.items()}),
              ("mkc_binary_kind", {n: r.kind for n, r in _operators.BINARY_TABLE.items()}),
              ("mkc_pool_kind", {k: k for k in _operators.POOL_KINDS}),
              ("mkc_op", {k: k for k in _capi.OPS})]
    for enum, kinds in tables:
        for name, kind in kinds.items():
            value = _capi.enum_value(enum, kind)
            assert _capi.enum_name(enum, value) == kind, (enum, name)
    for name, (value, alpha, beta) in _operators.ACTIVATIONS.items():
        row = _operators.ACTIVATION_TABLE[name]
        assert _capi.enum_name("mkc_activation_kind", value) == row.kind
        assert (alpha, beta) == (row.alpha, row.beta)
    for name, value in _operators.BINARY.items():
        assert _capi.enum_name("mkc_binary_kind", value) == _operators.BINARY_TABLE[name].kind
    for kind, value in _operators.POOL_KINDS.items():
        assert _capi.enum_name("mkc_pool_kind", value) == kind
    for row in _operators.POOL_TABLE.values():
        assert row.kind in ("max", "avg")
    assert mkcache.ACTIVATIONS is _operators.ACTIVATIONS


def _own_parameters(fn, drop):
    """fn's parameters but those the eager and Graph forms differ by."""
    return [p for p in inspect.signature(fn).parameters.values() if p.name not in drop]


def test_graph_and_eager_have_the_same_operators_with_the_same_signatures():
    names = _operators.functions()
    assert len(names) == len(set(names)) == 18 + 6 + 6 + 2 + len(_operators.TABLE_OP_TABLE)
    for name in names:
        eager, method = getattr(ops, name), getattr(Graph, name)
        assert getattr(mkcache, name) is eager and name in mkcache.__all__
        assert _own_parameters(eager, ("out", "training")) == \
            _own_parameters(method, ("self",)), name
        # A table operator without a params struct (erf) has no cache name.
        row = _operators.TABLE_OP_TABLE.get(name)
        if row is not None and not row.build:
            assert list(inspect.signature(eager).parameters)[-1:] == ["out"], name
            assert "name" not in inspect.signature(method).parameters, name
        else:
            assert list(inspect.signature(eager).parameters)[-2:] == ["name", "out"], name
            assert inspect.signature(method).parameters["name"].kind is \
                inspect.Parameter.KEYWORD_ONLY
        assert eager.__doc__ and method.__doc__, name
        assert eager.__doc__.startswith(method.__doc__), name
        assert method.__qualname__ == f"Graph.{name}" and method.__module__ == "mkcache.graph"
        assert eager.__module__ == "mkcache.ops"
    # relu is written by hand (its fast path) to the same description.
    assert "_RELU_CALLS" in inspect.getsource(ops.relu)
    # Training forwards: every windowed pool of the eager form, none of the Graph's.
    for name, row in _operators.POOL_TABLE.items():
        takes = "training" in inspect.signature(getattr(ops, name)).parameters
        assert takes == (row.rank > 0), name
    # The gradients of the binaries are the description's too.
    assert all(callable(getattr(grad, name)) for name in _operators.BINARY_TABLE)


def test_the_made_functions_show_their_source():
    text = inspect.getsource(ops.leaky_relu)
    assert text.startswith("def leaky_relu(x, negative_slope=0.01, *, name=None, out=None) "
                           "-> Tensor:")
    assert "self.activation(x, 'gelu'" in inspect.getsource(Graph.gelu)


def test_the_made_functions_run_what_they_describe(rng):
    x = rng.standard_normal((2, 3, 4, 5), dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(mkcache.leaky_relu(x, 0.5)),
                                  np.asarray(mkcache.activation(x, "leaky_relu", 0.5)))
    np.testing.assert_array_equal(np.asarray(mkcache.gelu(x, approximate="tanh")),
                                  np.asarray(mkcache.activation(x, "gelu_tanh")))
    np.testing.assert_array_equal(np.asarray(mkcache.clip(x, -0.5, 0.25)),
                                  np.clip(x, -0.5, 0.25))
    np.testing.assert_array_equal(np.asarray(mkcache.maximum(x, 0.0)), np.maximum(x, 0))
    np.testing.assert_allclose(np.asarray(mkcache.avg_pool2d(x, 2, count_include_pad=False)),
                               x[:, :, :4, :4].reshape(2, 3, 2, 2, 2, 2).mean((3, 5)), rtol=1e-6)
    g = Graph()
    v = g.input("x", (None, 3, 4, 5))
    g.output(g.clip(v, -0.5, 0.25), "c")
    g.output(g.maximum(v, 0.0), "m")
    g.output(g.avg_pool2d(v, 2, count_include_pad=False), "p")
    g.output(g.gelu(v, approximate="tanh"), "g")
    with g.compile(fuse=False) as prog:
        out = prog.run(x=x)
    np.testing.assert_array_equal(out["c"], np.clip(x, -0.5, 0.25))
    np.testing.assert_array_equal(out["m"], np.maximum(x, 0))
    np.testing.assert_allclose(out["p"], x[:, :, :4, :4].reshape(2, 3, 2, 2, 2, 2).mean((3, 5)),
                               rtol=1e-6)
    np.testing.assert_allclose(out["g"], np.asarray(mkcache.gelu(x, approximate="tanh")),
                               rtol=1e-6, atol=1e-7)
    g.close()


def test_the_checks_are_the_same_in_both_forms():
    x = np.ones((1, 4), np.float32)
    g = Graph()
    v = g.input("x", (1, 4))
    for fn, first in ((mkcache.clip, x), (g.clip, v)):
        with pytest.raises(mkcache.InvalidArgumentError,
                           match=r"clip: min \(2\) must be <= max \(1\)"):
            fn(first, 2, 1)
    for fn, first in ((mkcache.gelu, x), (g.gelu, v)):
        with pytest.raises(mkcache.InvalidArgumentError,
                           match="approximate must be 'none' or 'tanh', got 'fast'"):
            fn(first, "fast")
    g.close()


# ------------------------------------------------------ the C lookup itself

def _value(enum, name):
    value = ctypes.c_int32(-7)
    lib.mkc_enum_value(enum, name, ctypes.byref(value))
    return value.value


def test_the_lookup_refuses_unknown_enums_names_and_values():
    value = ctypes.c_int32(-7)
    name = ctypes.c_char_p(b"kept")
    for enum, value_name, words in [
            (b"mkc_nothing", b"relu",
             "enum_value: unknown enum 'mkc_nothing' (known: mkc_status, mkc_struct_id, "),
            (b"MKC_OP", b"conv2d", "unknown enum 'MKC_OP'"),
            (b"mkc_activation_kind", b"gelu",
             "enum_value: mkc_activation_kind has no value named 'gelu'"),
            (b"mkc_op", b"CONV2D", "enum_value: mkc_op has no value named 'CONV2D'"),
            (b"mkc_pool_kind", b"kind_max_enum", "mkc_pool_kind has no value named"),
            (b"mkc_layout", b"", "mkc_layout has no value named ''")]:
        with pytest.raises(mkcache.InvalidArgumentError) as info:
            lib.mkc_enum_value(enum, value_name, ctypes.byref(value))
        assert words in str(info.value)
    for enum, number, words in [
            (b"mkc_nothing", 1, "enum_name: unknown enum 'mkc_nothing'"),
            (b"mkc_op", 0, "enum_name: mkc_op has no value 0"),
            (b"mkc_op", 0x7fffffff, "mkc_op has no value 2147483647"),
            (b"mkc_binary_kind", 1001, "mkc_binary_kind has no value 1001"),
            (b"mkc_status", -1, "mkc_status has no value -1")]:
        with pytest.raises(mkcache.InvalidArgumentError) as info:
            lib.mkc_enum_name(enum, number, ctypes.byref(name))
        assert words in str(info.value)
    assert value.value == -7 and name.value == b"kept"


def test_the_lookup_refuses_null_pointers():
    value = ctypes.c_int32(-7)
    name = ctypes.c_char_p(b"kept")
    for args, words in [((None, b"relu", ctypes.byref(value)), "enum_value: enum_name is NULL"),
                        ((b"mkc_activation_kind", None, ctypes.byref(value)),
                         "enum_value: value_name is NULL"),
                        ((b"mkc_activation_kind", b"relu", None),
                         r"enum_value: value \(out-parameter\) is NULL")]:
        with pytest.raises(mkcache.InvalidArgumentError, match=words):
            lib.mkc_enum_value(*args)
    for args, words in [((None, 1, ctypes.byref(name)), "enum_name: enum_name is NULL"),
                        ((b"mkc_op", 1, None), r"enum_name: name \(out-parameter\) is NULL")]:
        with pytest.raises(mkcache.InvalidArgumentError, match=words):
            lib.mkc_enum_name(*args)
    assert value.value == -7 and name.value == b"kept"


def test_layout_aliases_are_found_and_named_by_their_first_name():
    assert _value(b"mkc_layout", b"nchw") == _value(b"mkc_layout", b"ncdhw") == \
        _capi.LAYOUT_CHANNELS_FIRST
    assert _value(b"mkc_layout", b"nhwc") == _capi.LAYOUT_CHANNELS_LAST
    assert _capi.enum_name("mkc_layout", _capi.LAYOUT_CHANNELS_LAST) == "channels_last"
