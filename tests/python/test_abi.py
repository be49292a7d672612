"""The ABI's room to grow: every struct passed by pointer starts with
`size_t struct_size` (mkcache.h, "Struct sizes"). The package's ctypes
mirrors agree with the library's sizes and the header's fields; a call
takes the library's own size as it is, an older (smaller) layout that ends
at a field's end over the defaults, and refuses anything else, naming the
struct and both sizes."""
import ctypes
import re
from pathlib import Path

import numpy as np
import pytest

import mkcache
from mkcache import _capi, _operators, ops

lib = _capi.lib
HEADER = Path(__file__).resolve().parents[2] / "libmkcache/include/mkcache/mkcache.h"


def library_size(struct_id):
    size = ctypes.c_size_t(0)
    lib.mkc_get_struct_size(struct_id, ctypes.byref(size))
    return size.value


def header_structs():
    """{struct name: [field names]} of every struct the header defines, and
    {struct name: its mkc_struct_id value}."""
    text = HEADER.read_text()
    fields = {}
    for name, body in re.findall(r"typedef struct (mkc_\w+) \{(.*?)\} \1;", text, re.S):
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        names = []
        for decl in filter(None, (d.strip() for d in body.split(";"))):
            decl = re.sub(r"\[.*?\]", "", decl)
            first, *rest = decl.split(",")
            names += [re.findall(r"\w+", first)[-1]] + [r.strip() for r in rest]
        fields[name] = names
    ids = {f"mkc_{n.lower()}": int(v)
           for n, v in re.findall(r"MKC_STRUCT_(\w+) = (\d+),", text)}
    return fields, ids


def test_every_struct_has_struct_size_an_id_and_a_matching_mirror():
    fields, ids = header_structs()
    assert set(fields) == set(ids) == {f"mkc_{n}" for n in (
        "conv_params", "pool_params", "linear_params", "matmul_params",
        "layer_norm_params", "batch_norm_params", "lrn_params", "cache_stats",
        "activation_call", "activation_params", "softmax_params", "binary_params",
        "concat_params", "transpose_params", "reshape_params", "program_options",
        "program_memory", "reduce_params", "gather_params", "cast_params", "slice_params",
        "expand_params", "compare_params", "pad_params", "resize_params", "logical_params",
        "range_params", "gather_nd_params", "quantize_params", "quantized_conv_params",
        "quantized_linear_params", "quantized_matmul_params", "calibrate_options")}
    assert set(_capi.STRUCTS) == set(ids.values())
    for name, struct_id in ids.items():
        mirror = _capi.STRUCTS[struct_id]
        mirrored = ["struct_size"] + [f.rstrip("_") for f, _ in mirror._fields_]  # global_
        assert fields[name] == mirrored, name
        assert fields[name][0] == "struct_size"
        assert ctypes.sizeof(mirror) == library_size(struct_id), name
        assert mirror().struct_size == ctypes.sizeof(mirror), name


def test_size_query_refuses_unknown_ids():
    size = ctypes.c_size_t(7)
    for bad in (0, max(_capi.STRUCTS) + 1, -1, 0x7fffffff):
        with pytest.raises(mkcache.InvalidArgumentError, match="unknown struct id"):
            lib.mkc_get_struct_size(bad, ctypes.byref(size))
        assert size.value == 7
    with pytest.raises(mkcache.InvalidArgumentError, match="size"):
        lib.mkc_get_struct_size(1, None)


def test_structs_the_package_builds_carry_their_size():
    x = np.ones((1, 2, 4, 4), np.float32)
    mkcache.conv2d(x, np.ones((3, 2, 3, 3), np.float32), padding=1)
    mkcache.max_pool2d(x, 2)
    mkcache.lrn(x)
    mkcache.batch_norm(x, np.zeros(2, np.float32), np.ones(2, np.float32))
    mkcache.layer_norm(np.ones((2, 4), np.float32))
    mkcache.linear(np.ones((2, 4), np.float32), np.ones((3, 4), np.float32))
    mkcache.matmul(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))
    mkcache.relu(np.ones((2, 3), np.float32))
    built = [p for p in ops._PARAMS.values() if isinstance(p, _capi._Sized)]
    assert {type(p) for p in built} >= {_capi.ConvParams, _capi.PoolParams, _capi.LrnParams,
                                        _capi.BatchNormParams, _capi.LayerNormParams,
                                        _capi.LinearParams, _capi.MatmulParams}
    for p in built:
        assert p.struct_size == ctypes.sizeof(p)
    for entry in ops._CALLS.values():
        assert entry[2].struct_size == ctypes.sizeof(_capi.ActivationCall)


# Each params struct: its C name, a call of its forward with small valid
# tensors (returning the new tensor's handle), and its mirror.
X4 = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4) - 16
X2 = np.arange(8, dtype=np.float32).reshape(2, 4) - 4


def _run(fn, params, *tensors):
    dst = _capi.tensor_p()
    args = [t.handle if t is not None else None for t in tensors]
    fn(params, *args, ctypes.byref(dst))
    return mkcache.Tensor._adopt(dst)


def _tensors():
    t = mkcache.Tensor
    return {
        "conv": (t(X4), t(np.ones((3, 2, 3, 3), np.float32)), None),
        "pool": (t(X4),),
        "linear": (t(X2), t(np.ones((3, 4), np.float32)), None),
        "matmul": (t(X2), t(np.ones((4, 3), np.float32)), None),
        "layer_norm": (t(X2), None, None),
        "batch_norm": (t(X4), t(np.zeros(2, np.float32)), t(np.ones(2, np.float32)), None, None,
                       None, None),
        "lrn": (t(X4),),
    }


CASES = [  # key, op name in messages, C function, mirror
    ("conv", "conv2d", lib.mkc_conv2d, _capi.ConvParams),
    ("pool", "pool", lib.mkc_pool, _capi.PoolParams),
    ("linear", "linear", lib.mkc_linear, _capi.LinearParams),
    ("matmul", "matmul", lib.mkc_matmul, _capi.MatmulParams),
    ("layer_norm", "layer_norm", lib.mkc_layer_norm, _capi.LayerNormParams),
    ("batch_norm", "batch_norm", lib.mkc_batch_norm, _capi.BatchNormParams),
    ("lrn", "lrn", lib.mkc_lrn, _capi.LrnParams),
]


def _initialised(key, mirror):
    p = mirror()
    getattr(lib, f"mkc_{key}_params_init")(ctypes.byref(p))
    return p


@pytest.mark.parametrize("key, op, fn, mirror", CASES, ids=[c[0] for c in CASES])
def test_params_with_a_wrong_size_are_refused(key, op, fn, mirror):
    tensors = _tensors()[key]
    size = ctypes.sizeof(mirror)
    type_name = f"mkc_{key}_params"
    first = getattr(mirror, mirror._fields_[0][0])  # the field after struct_size
    p = _initialised(key, mirror)
    assert p.struct_size == size  # set by _init
    for given, words in [
            (0, f"{op}: {type_name}.struct_size is 0 (expected {size}; "
                f"initialise params with {type_name}_init)"),
            (size + 8, f"{op}: {type_name}.struct_size is {size + 8} (expected {size}; "
                       "a larger size is a struct of a newer mkcache.h"),
            (1 << 40, f"{op}: {type_name}.struct_size is {1 << 40} (expected {size}"),
            (first.offset + first.size + 1,
             f"{op}: {type_name}.struct_size is {first.offset + first.size + 1}, which is "
             f"not the end of a field (expected {size}, or an older layout's size"),
            (ctypes.sizeof(ctypes.c_size_t),
             f"{op}: {type_name}.struct_size is 8 (expected {size}; initialise")]:
        p.struct_size = given
        dst = _capi.tensor_p()
        args = [t.handle if t is not None else None for t in tensors]
        with pytest.raises(mkcache.InvalidArgumentError) as info:
            fn(ctypes.byref(p), *args, ctypes.byref(dst))
        assert words in str(info.value), (given, str(info.value))
        assert f"expected {size}" in str(info.value)
        assert not dst


@pytest.mark.parametrize("key, op, fn, mirror", CASES, ids=[c[0] for c in CASES])
def test_an_older_layout_is_read_over_the_defaults(key, op, fn, mirror):
    """A struct that ends before `name` (as an older header's would, had
    name been appended later) runs as the defaults with no name: the bytes
    past its size are never read (here the struct is a buffer of exactly
    that size). A size inside the padding before `name` is no field's end:
    refused."""
    tensors = _tensors()[key]
    full = _initialised(key, mirror)
    want = _run(fn, ctypes.byref(full), *tensors).numpy()
    names = [f[0] for f in mirror._fields_]
    last = getattr(mirror, names[names.index("name") - 1])  # the field before name
    cut = last.offset + last.size
    older = _initialised(key, mirror)
    older.struct_size = cut
    older.name = b"abi_name_past_the_size"
    buf = (ctypes.c_char * cut).from_buffer_copy(bytes(older)[:cut])
    got = _run(fn, ctypes.cast(buf, ctypes.POINTER(mirror)), *tensors).numpy()
    np.testing.assert_array_equal(got, want)
    assert not any("abi_name" in k for _, k in mkcache.cache.keys())
    assert older.struct_size == cut  # the caller's struct is only read
    if mirror.name.offset != cut:
        older.struct_size = mirror.name.offset
        with pytest.raises(mkcache.InvalidArgumentError, match="not the end of a field"):
            _run(fn, ctypes.byref(older), *tensors)


def test_an_older_conv_layout_gets_the_default_activation():
    """A field past struct_size takes its _init value whatever the caller's
    memory holds there: no relu fused although the bytes say RELU."""
    x = mkcache.Tensor(X4)
    w = mkcache.Tensor(-np.ones((3, 2, 1, 1), np.float32))
    p = _initialised("conv", _capi.ConvParams)
    plain = _run(lib.mkc_conv2d, ctypes.byref(p), x, w, None).numpy()
    assert (plain < 0).any()
    p.activation = _capi.ACTIVATION_RELU
    fused = _run(lib.mkc_conv2d, ctypes.byref(p), x, w, None).numpy()
    np.testing.assert_array_equal(fused, np.maximum(plain, 0))
    p.struct_size = _capi.ConvParams.activation.offset  # ends after data_format
    np.testing.assert_array_equal(_run(lib.mkc_conv2d, ctypes.byref(p), x, w, None).numpy(),
                                  plain)


def test_backward_ops_check_the_size_too():
    x = mkcache.Tensor(X4)
    w = mkcache.Tensor(np.ones((3, 2, 3, 3), np.float32))
    dy = mkcache.Tensor(np.ones((1, 3, 2, 2), np.float32))
    p = _initialised("conv", _capi.ConvParams)
    p.struct_size = 0
    dx = _capi.tensor_p()
    with pytest.raises(mkcache.InvalidArgumentError,
                       match=r"conv2d_backward: mkc_conv_params.struct_size is 0 \(expected "):
        lib.mkc_conv2d_backward(ctypes.byref(p), x.handle, w.handle, dy.handle,
                                ctypes.byref(dx), None, None)
    assert not dx
    p.struct_size = _capi.ConvParams.name.offset  # older: accepted
    lib.mkc_conv2d_backward(ctypes.byref(p), x.handle, w.handle, dy.handle, ctypes.byref(dx),
                            None, None)
    assert dx
    lib.mkc_tensor_destroy(dx)


STATS = [(lib.mkc_cache_get_stats, (), "cache_get_stats"),
         (lib.mkc_cache_get_session_stats, (0,), "cache_get_session_stats")]


@pytest.mark.parametrize("fn, head, op", STATS, ids=[s[2] for s in STATS])
def test_cache_stats_are_written_as_far_as_they_fit(fn, head, op):
    mkcache.relu(mkcache.Tensor(np.ones((2, 3), np.float32)), name="abi_stats")
    size = library_size(8)
    s = _capi.CacheStats()
    lib.mkc_cache_stats_init(ctypes.byref(s))
    assert s.struct_size == size and s.misses == 0
    fn(*head, ctypes.byref(s))
    assert s.misses >= 1 and s.entries >= 1 and s.struct_size == size
    full = {f: getattr(s, f) for f, _ in _capi.CacheStats._fields_}

    # An older layout, ending after evicted_entries: the rest is untouched.
    sentinel = 0xABCDEF
    older = _capi.CacheStats()
    for f, _ in older._fields_:
        setattr(older, f, sentinel)
    older.struct_size = _capi.CacheStats.entries.offset
    fn(*head, ctypes.byref(older))
    assert older.struct_size == _capi.CacheStats.entries.offset
    for f in ("hits", "misses", "insertions", "evictions", "evicted_entries"):
        assert getattr(older, f) == full[f], f
    for f in ("entries", "groups", "sessions", "bytes", "transfers"):
        assert getattr(older, f) == sentinel, f

    # Refused sizes write nothing.
    for given, words in [
            (0, f"{op}: mkc_cache_stats.struct_size is 0 (expected {size}; "
                "initialise stats with mkc_cache_stats_init)"),
            (size + 8, f"{op}: mkc_cache_stats.struct_size is {size + 8} (expected {size};"),
            (20, f"{op}: mkc_cache_stats.struct_size is 20, which is not the end of a "
                 f"field (expected {size}")]:
        bad = _capi.CacheStats()
        for f, _ in bad._fields_:
            setattr(bad, f, sentinel)
        bad.struct_size = given
        with pytest.raises(mkcache.InvalidArgumentError) as info:
            fn(*head, ctypes.byref(bad))
        assert words in str(info.value), str(info.value)
        assert all(getattr(bad, f) == sentinel for f, _ in bad._fields_)
    with pytest.raises(mkcache.InvalidArgumentError, match="stats"):
        lib.mkc_cache_stats_init(None)


def test_activation_call_takes_its_exact_size_only():
    """A binding helper: no older layout is read, any other size refused."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    y = np.zeros_like(x)
    size = library_size(9)
    call = _capi.ActivationCall(1, 0.0, 0.0, None, 2)
    call.dims[:2] = (2, 3)
    assert call.struct_size == size == ctypes.sizeof(call)
    lib.mkc_activation_plain(ctypes.byref(call), x.ctypes.data, y.ctypes.data)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    src, dst = ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(y.ctypes.data)
    for given in (0, size - 8, size + 8):
        call.struct_size = given
        for fn, args in [(lib.mkc_activation_plain, (x.ctypes.data, y.ctypes.data)),
                         (lib.mkc_activation_plain_ref,
                          (ctypes.addressof(src), ctypes.addressof(dst)))]:
            op = fn.__name__[len("mkc_"):]
            with pytest.raises(mkcache.InvalidArgumentError,
                               match=rf"{op}: mkc_activation_call.struct_size is {given} "
                                     rf"\(expected {size}"):
                fn(ctypes.byref(call), *args)


# Each enum of the header, by the prefix its enumerators share.
ENUM_PREFIXES = {"mkc_status": "MKC_STATUS_", "mkc_struct_id": "MKC_STRUCT_",
                 "mkc_dtype": "MKC_DTYPE_", "mkc_layout": "MKC_LAYOUT_",
                 "mkc_activation_kind": "MKC_ACTIVATION_", "mkc_binary_kind": "MKC_BINARY_",
                 "mkc_pool_kind": "MKC_POOL_", "mkc_reduce_kind": "MKC_REDUCE_",
                 "mkc_compare_kind": "MKC_COMPARE_", "mkc_logical_kind": "MKC_LOGICAL_",
                 "mkc_pad_mode": "MKC_PAD_",
                 "mkc_resize_mode": "MKC_RESIZE_", "mkc_resize_coordinates": "MKC_COORDINATES_",
                 "mkc_resize_nearest": "MKC_NEAREST_",
                 "mkc_op": "MKC_OP_"}


def header_enums():
    """{enum name: [(enumerator, value)]} of every enum the header defines,
    the *_MAX_ENUM sentinels left out, aliases given their target's value."""
    text = HEADER.read_text()
    enums = {}
    for name, body in re.findall(r"typedef enum (mkc_\w+) \{(.*?)\} \1;", text, re.S):
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        values = {}
        for enumerator, value in re.findall(r"(MKC_\w+) = (\w+)", body):
            values[enumerator] = values[value] if value in values else int(value, 0)
        enums[name] = [(e, v) for e, v in values.items() if not e.endswith("_MAX_ENUM")]
    return enums


def test_every_enumerator_of_the_header_is_found_by_its_name_and_back():
    """mkc_enum_value knows each enumerator by its name after the prefix, in
    lowercase; mkc_enum_name gives a value its first enumerator's name."""
    enums = header_enums()
    assert set(enums) == set(ENUM_PREFIXES)
    for enum, enumerators in enums.items():
        prefix = ENUM_PREFIXES[enum]
        first = {}
        for enumerator, value in enumerators:
            assert enumerator.startswith(prefix), enumerator
            name = enumerator[len(prefix):].lower()
            assert _capi.enum_value(enum, name) == value, enumerator
            first.setdefault(value, name)
        for value, name in first.items():
            assert _capi.enum_name(enum, value) == name, (enum, value)


def test_the_python_mirrors_of_the_enums_match_the_header():
    enums = {enum: {e[len(ENUM_PREFIXES[enum]):].lower(): v for e, v in enumerators}
             for enum, enumerators in header_enums().items()}
    assert _capi.OPS == enums["mkc_op"]
    assert set(_capi.STRUCTS) == set(enums["mkc_struct_id"].values())
    for name, mirror in _capi._MIRRORS.items():
        assert _capi.STRUCTS[enums["mkc_struct_id"][name]] is mirror
    assert _capi.DTYPE_F32 == enums["mkc_dtype"]["f32"]
    assert (_capi.LAYOUT_TARGET, _capi.LAYOUT_CHANNELS_FIRST, _capi.LAYOUT_CHANNELS_LAST) == \
        tuple(enums["mkc_layout"][n] for n in ("target", "channels_first", "channels_last"))
    assert (_capi.ACTIVATION_NONE, _capi.ACTIVATION_RELU) == \
        (enums["mkc_activation_kind"]["none"], enums["mkc_activation_kind"]["relu"])
    statuses = {v: n for n, v in enums["mkc_status"].items()}
    assert set(_capi.BY_STATUS) == set(statuses) - {enums["mkc_status"]["ok"]}
    for value, error in _capi.BY_STATUS.items():
        assert error.status == f"MKC_STATUS_{statuses[value].upper()}"
    for name, (kind, _, _) in mkcache.ACTIVATIONS.items():
        assert kind == enums["mkc_activation_kind"][_operators.ACTIVATION_TABLE[name].kind]
    for name, kind in _operators.BINARY.items():
        assert kind == enums["mkc_binary_kind"][_operators.BINARY_TABLE[name].kind]
    assert _operators.POOL_KINDS == enums["mkc_pool_kind"]
