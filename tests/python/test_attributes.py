"""Every attribute of every operator tells calls apart.

An operator's cache entry is found again by its key (name, suffix, shape)
plus a signature of everything its primitive was built for, and the thread's
argument cache finds it by the call's raw words. An attribute missing from
the signature or the words would hand a call an entry built for another
value of it: a silent wrong answer. So for each attribute of each operator
(every field of its C params struct, or every scalar argument of its C
function), this changes that attribute alone, under the same explicit name,
right after the base call was remembered, and checks that the call misses
(it did not take the base call's entry) and that its result is the result a
fresh entry for the changed call gives (or the same error). Unnamed, the
changed call must get a key of its own (the default name tells it apart).

The tables below list the attributes; each struct family's list is checked
against its ctypes mirror, which test_abi.py checks against the header, so a
field added to a struct without an entry here fails."""
import ctypes
import itertools

import numpy as np
import pytest

import mkcache
from mkcache import _capi

lib = _capi.lib
_SESSIONS = itertools.count(77000)
F = np.float32


def _tensor(array):
    return mkcache.Tensor(np.ascontiguousarray(array, dtype=F))


def _run(fn, into=None):
    """fn() -> status, dst handle: the result as an array, or the error.
    `into`: the Tensor passed as dst (accumulated into), which holds it."""
    try:
        status, dst = fn()  # the bindings raise for a failed status
        assert status == 0
        return into.numpy() if into is not None else mkcache.Tensor._adopt(dst).numpy()
    except mkcache.Error as exc:
        return exc


def _params(mirror, init, base, change, name):
    p = mirror()
    assert init(ctypes.byref(p)) == 0
    for field, value in {**base, **change}.items():
        if isinstance(value, (list, tuple)):
            getattr(p, field)[:len(value)] = value
        else:
            setattr(p, field, value)
    p.name = name
    return p


def _struct_call(function, mirror, init, inputs, dst_init=None):
    """A call of a params-struct operator: function(&p, *inputs, &dst)."""
    def call(base, change, name):
        p = _params(mirror, init, base, change, name)
        handles = [None if t is None else t.handle for t in inputs(change)]

        into = dst_init(change) if dst_init else None

        def go():
            dst = ctypes.c_void_p(ctypes.cast(into.handle, ctypes.c_void_p).value if into else None)
            return function(ctypes.byref(p), *handles, ctypes.byref(dst)), dst
        return _run(go, into)
    return call


def _stats(session):
    return mkcache.cache.stats(session)


def _op_keys(session):
    """The keys of operator entries (no layout conversions, no transfers)."""
    return {k for _, k in mkcache.cache.keys(session)
            if not k.startswith("reorder:") and "|train" not in k}


def _check_attribute(call, base, change):
    # The changed call, fresh: what a call with these attributes gives.
    with mkcache.cache.session(next(_SESSIONS)):
        want = call(base, change, b"fresh")
    # The base call twice (the second is remembered by the thread's argument
    # cache), then the changed one under the same name.
    session = next(_SESSIONS)
    with mkcache.cache.session(session):
        first = call(base, {}, b"same")
        assert not isinstance(first, Exception), first
        call(base, {}, b"same")
        before = _stats(session)["misses"]
        got = call(base, change, b"same")
        after = _stats(session)["misses"]
    if isinstance(want, Exception):
        # Refused before any lookup (e.g. groups that do not fit the
        # weights): the changed call must be refused too, not served.
        assert type(got) is type(want) and str(got) == str(want), (change, got, want)
        return
    assert after > before, f"{change}: the changed call found the base call's entry"
    assert not isinstance(got, Exception), (change, got)
    np.testing.assert_array_equal(got, want, err_msg=str(change))
    # Unnamed: the default name tells the changed call apart.
    session = next(_SESSIONS)
    with mkcache.cache.session(session):
        call(base, {}, None)
        keys = _op_keys(session)
        call(base, change, None)
        assert _op_keys(session) - keys, f"{change}: no key of its own when unnamed"


rng = np.random.default_rng(17)
X = _tensor(rng.standard_normal((2, 4, 7, 9)))
W_GROUPED = _tensor(rng.standard_normal((6, 2, 3, 3)))
W_TRANSPOSED = _tensor(rng.standard_normal((4, 3, 3, 3)))
RESIDUAL = rng.standard_normal((2, 6, 7, 9)).astype(F)

CONV_BASE = dict(stride=[1, 1], pad_begin=[1, 1], pad_end=[1, 1], dilation=[1, 1], groups=2,
                 data_format=1, activation=2, activation_alpha=1.0, activation_beta=0.0, sum=0,
                 training=0)
CONV_CHANGES = {
    "stride": [2, 1], "pad_begin": [0, 1], "pad_end": [2, 0], "dilation": [2, 1],
    "output_padding": [1, 0], "groups": 1, "data_format": 2, "activation": 0,
    "activation_alpha": 0.5, "activation_beta": 0.25, "sum": 1, "training": 1,
}
TRANSPOSE_BASE = dict(CONV_BASE, stride=[2, 2], groups=1)

POOL_BASE = dict(kind=1, kernel=[3, 3], stride=[2, 2], pad_begin=[1, 1], pad_end=[1, 1],
                 ceil_mode=0, global_=0, data_format=1, training=0, dilation=[1, 1])
POOL_CHANGES = {"kind": 2, "kernel": [2, 3], "stride": [1, 2], "pad_begin": [0, 1],
                "pad_end": [0, 1], "ceil_mode": 1, "global_": 1, "data_format": 2, "training": 1,
                "dilation": [2, 1]}

X2 = _tensor(rng.standard_normal((3, 5)))
W_LINEAR = _tensor(rng.standard_normal((4, 5)))
LINEAR_BASE = dict(activation=2, activation_alpha=1.0, activation_beta=0.0, training=0, sum=0)
LINEAR_CHANGES = {"activation": 0, "activation_alpha": 0.5, "activation_beta": 0.25,
                  "training": 1, "sum": 1}
LINEAR_RESIDUAL = rng.standard_normal((3, 4)).astype(F)

A_SQUARE = _tensor(rng.standard_normal((2, 4, 4)))
B_SQUARE = _tensor(rng.standard_normal((2, 4, 4)))
MATMUL_BASE = dict(transpose_a=0, transpose_b=0, activation=2, activation_alpha=1.0,
                   activation_beta=0.0)
MATMUL_CHANGES = {"transpose_a": 1, "transpose_b": 1, "activation": 0, "activation_alpha": 0.5,
                  "activation_beta": 0.25, "scale": 0.5}

X3 = _tensor(rng.standard_normal((3, 4, 5)))
LAYER_NORM_BASE = dict(begin_norm_axis=-1, epsilon=1e-5, training=0)
LAYER_NORM_CHANGES = {"begin_norm_axis": -2, "epsilon": 0.5, "training": 1}

STATS = rng.standard_normal(4).astype(F), (rng.random(4) + 0.5).astype(F)
BATCH_NORM_BASE = dict(epsilon=1e-5, momentum=0.9, training=0, data_format=1)
BATCH_NORM_CHANGES = {"epsilon": 0.5, "momentum": 0.5, "training": 1, "data_format": 2}

LRN_BASE = dict(size=3, alpha=1e-2, beta=0.75, k=1.0, data_format=1, training=0)
LRN_CHANGES = {"size": 5, "alpha": 0.5, "beta": 0.5, "k": 2.0, "data_format": 2, "training": 1}


def _conv(function, weights):
    def dst(change):
        return _tensor(RESIDUAL.copy()) if change.get("sum") else None  # fresh each call
    return _struct_call(function, _capi.ConvParams, lib.mkc_conv_params_init,
                        lambda change: (X, weights, None), dst)


def _batch_norm(base, change, name):
    # Fresh running statistics each call: a training call updates them.
    p = _params(_capi.BatchNormParams, lib.mkc_batch_norm_params_init, base, change, name)
    mean, variance = _tensor(STATS[0]), _tensor(STATS[1])

    def go():
        dst = ctypes.c_void_p()
        return lib.mkc_batch_norm(ctypes.byref(p), X.handle, mean.handle, variance.handle, None,
                                  None, None, None, ctypes.byref(dst)), dst
    return _run(go)


STRUCT_FAMILIES = {
    # family: (mirror, call, base, changes)
    "conv2d": (_capi.ConvParams, _conv(lib.mkc_conv2d, W_GROUPED), CONV_BASE, CONV_CHANGES),
    "conv2d_transpose": (_capi.ConvParams, _conv(lib.mkc_conv2d_transpose, W_TRANSPOSED),
                         TRANSPOSE_BASE, dict(CONV_CHANGES, groups=2)),
    "pool": (_capi.PoolParams, _struct_call(lib.mkc_pool, _capi.PoolParams,
                                            lib.mkc_pool_params_init, lambda c: (X,)),
             POOL_BASE, POOL_CHANGES),
    "linear": (_capi.LinearParams, _struct_call(
        lib.mkc_linear, _capi.LinearParams, lib.mkc_linear_params_init,
        lambda c: (X2, W_LINEAR, None),
        lambda c: _tensor(LINEAR_RESIDUAL.copy()) if c.get("sum") else None),  # fresh each call
               LINEAR_BASE, LINEAR_CHANGES),
    "matmul": (_capi.MatmulParams, _struct_call(lib.mkc_matmul, _capi.MatmulParams,
                                                lib.mkc_matmul_params_init,
                                                lambda c: (A_SQUARE, B_SQUARE, None)),
               MATMUL_BASE, MATMUL_CHANGES),
    "layer_norm": (_capi.LayerNormParams, _struct_call(lib.mkc_layer_norm, _capi.LayerNormParams,
                                                       lib.mkc_layer_norm_params_init,
                                                       lambda c: (X3, None, None)),
                   LAYER_NORM_BASE, LAYER_NORM_CHANGES),
    "batch_norm": (_capi.BatchNormParams, _batch_norm, BATCH_NORM_BASE, BATCH_NORM_CHANGES),
    "lrn": (_capi.LrnParams, _struct_call(lib.mkc_lrn, _capi.LrnParams, lib.mkc_lrn_params_init,
                                          lambda c: (X,)),
            LRN_BASE, LRN_CHANGES),
}


@pytest.mark.parametrize("family", sorted(STRUCT_FAMILIES))
def test_every_params_field_has_a_change(family):
    mirror, _, base, changes = STRUCT_FAMILIES[family]
    fields = {name for name, _ in mirror._fields_} - {"struct_size", "name"}
    assert set(changes) == fields
    assert set(base) <= fields


@pytest.mark.parametrize("family,field", [(f, a) for f in sorted(STRUCT_FAMILIES)
                                          for a in sorted(STRUCT_FAMILIES[f][3])])
def test_changing_one_params_field_is_another_call(family, field):
    _, call, base, changes = STRUCT_FAMILIES[family]
    _check_attribute(call, base, {field: changes[field]})


# Operators whose attributes are scalar arguments of their C function.
def _activation(base, change, name):
    a = {**base, **change}
    return _run(lambda: (lambda dst: (lib.mkc_activation(a["kind"], a["alpha"], a["beta"], name,
                                                          X.handle, ctypes.byref(dst)), dst))(
        ctypes.c_void_p()))


def _softmax(base, change, name):
    a = {**base, **change}
    return _run(lambda: (lambda dst: (lib.mkc_softmax(a["axis"], a["log"], name, X.handle,
                                                       ctypes.byref(dst)), dst))(
        ctypes.c_void_p()))


Y = _tensor(rng.standard_normal((2, 4, 7, 9)) + 3.0)


def _binary(base, change, name):
    a = {**base, **change}
    return _run(lambda: (lambda dst: (lib.mkc_binary(a["kind"], name, X.handle, Y.handle,
                                                      ctypes.byref(dst)), dst))(
        ctypes.c_void_p()))


CONCAT_INPUTS = (_tensor(rng.standard_normal((3, 3))), _tensor(rng.standard_normal((3, 3))))


def _concat(base, change, name):
    a = {**base, **change}
    handles = (ctypes.c_void_p * 2)(*[t.handle for t in CONCAT_INPUTS])
    return _run(lambda: (lambda dst: (lib.mkc_concat(a["axis"], 2, handles, name,
                                                      ctypes.byref(dst)), dst))(
        ctypes.c_void_p()))


ARGUMENT_FAMILIES = {
    "activation": (_activation, dict(kind=2, alpha=1.0, beta=0.0),
                   {"kind": 5, "alpha": 0.5, "beta": 0.25}),
    "softmax": (_softmax, dict(axis=1, log=0), {"axis": 3, "log": 1}),
    "binary": (_binary, dict(kind=1), {"kind": 3}),
    "concat": (_concat, dict(axis=0), {"axis": 1}),
}


@pytest.mark.parametrize("family,field", [(f, a) for f in sorted(ARGUMENT_FAMILIES)
                                          for a in sorted(ARGUMENT_FAMILIES[f][2])])
def test_changing_one_argument_is_another_call(family, field):
    call, base, changes = ARGUMENT_FAMILIES[family]
    _check_attribute(call, base, {field: changes[field]})
