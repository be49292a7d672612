"""Pooling (max, avg with/without padding, global, ceil mode, 2-D and 3-D)
against the numpy reference, both layouts."""
import numpy as np
import pytest

import mkcache
from reference import assert_close_elementwise, pool as ref_pool

CASES_2D = [  # (N, C, H, W, kernel, stride, pad_begin, pad_end, ceil)
    (1, 3, 7, 9, (3, 3), (2, 2), (1, 1), (1, 1), False),
    (2, 17, 11, 8, (2, 3), (2, 1), (0, 1), (1, 0), False),
    (2, 5, 10, 10, (3, 3), (2, 2), (0, 0), (0, 0), True),
    (1, 19, 9, 13, (3, 2), (3, 2), (1, 0), (1, 1), True),
    (3, 8, 5, 5, (5, 5), (1, 1), (2, 2), (2, 2), False),
    (1, 64, 112, 112, (3, 3), (2, 2), (1, 1), (1, 1), False),
]


def _run2d(kind, x, c, fmt):
    n, ch, h, w, k, s, pb, pe, ceil = c
    pad = (pb[0], pe[0], pb[1], pe[1])
    xin = x if fmt == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    if kind == "max":
        y = mkcache.max_pool2d(xin, k, s, pad, ceil_mode=ceil, data_format=fmt)
    else:
        y = mkcache.avg_pool2d(xin, k, s, pad, ceil_mode=ceil, data_format=fmt,
                               count_include_pad=(kind == "avg_include"))
    assert y.layout == fmt
    return y.numpy("NCHW")


@pytest.mark.parametrize("case", CASES_2D, ids=[str(c[:4]) + str(c[4:]) for c in CASES_2D])
@pytest.mark.parametrize("kind", ["max", "avg_include", "avg_exclude"])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_pool2d(case, kind, fmt, rng):
    n, ch, h, w, k, s, pb, pe, ceil = case
    x = rng.standard_normal((n, ch, h, w), dtype=np.float32)
    want = ref_pool(x, kind, k, s, pb, pe, ceil)
    assert_close_elementwise(_run2d(kind, x, case, fmt), want, kind, ulps=4 * k[0] * k[1])


@pytest.mark.parametrize("kind", ["max", "avg_exclude"])
@pytest.mark.parametrize("fmt", ["NCDHW", "NDHWC"])
def test_pool3d(kind, fmt, rng):
    x = rng.standard_normal((2, 5, 6, 7, 9), dtype=np.float32)
    k, s, pb, pe = (2, 3, 3), (2, 2, 2), (1, 1, 0), (0, 1, 2)
    want = ref_pool(x, kind, k, s, pb, pe)
    xin = x if fmt == "NCDHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 4, 1))
    pad = (pb[0], pe[0], pb[1], pe[1], pb[2], pe[2])
    if kind == "max":
        y = mkcache.max_pool3d(xin, k, s, pad, data_format=fmt)
    else:
        y = mkcache.avg_pool3d(xin, k, s, pad, data_format=fmt, count_include_pad=False)
    assert_close_elementwise(y.numpy("NCDHW"), want, ulps=64)


@pytest.mark.parametrize("rank", [4, 5])
def test_global_pooling(rank, rng):
    shape = (2, 7, 5, 6) if rank == 4 else (2, 3, 4, 5, 6)
    x = rng.standard_normal(shape, dtype=np.float32)
    fmt = "NCHW" if rank == 4 else "NCDHW"
    axes = tuple(range(2, rank))
    assert_close_elementwise(np.asarray(mkcache.global_avg_pool(x, data_format=fmt)),
                             x.astype(np.float64).mean(axis=axes, keepdims=True), ulps=64)
    np.testing.assert_array_equal(np.asarray(mkcache.global_max_pool(x, data_format=fmt)),
                                  x.max(axis=axes, keepdims=True))


def test_pool_on_blocked_conv_output_no_reorder(rng):
    x = rng.standard_normal((1, 16, 12, 12), dtype=np.float32)
    w = rng.standard_normal((32, 16, 3, 3), dtype=np.float32) * 0.2
    y = mkcache.conv2d(x, w, padding=1)
    plain = y.numpy("NCHW")
    before = mkcache.cache.reorder_count()
    z = mkcache.max_pool2d(y, 3, 2, 1)
    assert mkcache.cache.reorder_count() == before
    assert z.format == y.format
    np.testing.assert_array_equal(z.numpy("NCHW"), ref_pool(plain, "max", (3, 3), (2, 2), (1, 1), (1, 1)))


def test_pool_bad_input():
    x = np.ones((1, 2, 5, 5), np.float32)
    with pytest.raises(mkcache.InvalidArgumentError, match="kernel"):
        mkcache.max_pool2d(x, 0)
    with pytest.raises(mkcache.InvalidArgumentError, match="stride"):
        mkcache.max_pool2d(x, 2, 0)
    with pytest.raises(mkcache.InvalidArgumentError, match="padding"):
        mkcache.max_pool2d(x, 2, 1, 2)
    with pytest.raises(mkcache.InvalidArgumentError, match="larger"):
        mkcache.max_pool2d(x, 7)
    with pytest.raises(mkcache.InvalidArgumentError, match="rank"):
        mkcache.max_pool2d(np.ones((2, 5, 5), np.float32), 2)
    with pytest.raises(mkcache.InvalidArgumentError, match="kernel_size"):
        mkcache.max_pool2d(x, (2, 2, 2))


def test_pool_calls_remembered_follow_every_argument(rng):
    """Inference pooling is remembered per thread by its raw arguments: calls
    alternating kernel, stride, padding, ceil mode, kind, global and src
    layout on one shape must each compute what a fresh call would."""
    x = rng.standard_normal((2, 6, 9, 8), dtype=np.float32)
    x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    calls = [("max", (3, 3), (2, 2), (1, 1), (1, 1), False),
             ("max", (2, 2), (2, 2), (1, 1), (1, 1), False),  # only the kernel differs
             ("max", (3, 3), (2, 2), (1, 1), (1, 1), True),  # only ceil_mode
             ("max", (3, 3), (1, 1), (1, 1), (1, 1), False),
             ("max", (2, 3), (2, 2), (0, 1), (1, 0), True),
             ("avg_exclude", (3, 3), (2, 2), (1, 1), (1, 1), False),
             ("avg_include", (3, 3), (2, 2), (1, 1), (1, 1), False)]
    for step in range(6):  # layouts in turn, and each for a while
        fmt, xin = (("NCHW", x), ("NHWC", x_nhwc))[step // 2 % 2]
        for kind, k, s, pb, pe, ceil in calls:
            want = ref_pool(x, kind, k, s, pb, pe, ceil)
            pad = (pb[0], pe[0], pb[1], pe[1])
            if kind == "max":
                y = mkcache.max_pool2d(xin, k, s, pad, ceil_mode=ceil, data_format=fmt)
            else:
                y = mkcache.avg_pool2d(xin, k, s, pad, ceil_mode=ceil, data_format=fmt,
                                       count_include_pad=kind == "avg_include")
            assert_close_elementwise(y.numpy("NCHW"), want, kind, ulps=4 * k[0] * k[1])
        assert_close_elementwise(np.asarray(mkcache.global_avg_pool(x)),
                                 x.astype(np.float64).mean(axis=(2, 3), keepdims=True), ulps=64)
        np.testing.assert_array_equal(np.asarray(mkcache.global_max_pool(x)),
                                      x.max(axis=(2, 3), keepdims=True))
    s0 = mkcache.cache.stats()
    mkcache.max_pool2d(x, 3, 2, 1)
    mkcache.max_pool2d(x, 3, 2, 1)
    s1 = mkcache.cache.stats()
    assert s1["hits"] == s0["hits"] + 2 and s1["misses"] == s0["misses"]


def _window(idx, sizes, kernel, stride, pad_begin, pad_end):
    """Output position idx's window as PyTorch bounds it: the input slices
    it reads, its cells within input + padding (the include-pad divisor)
    and its cells within the input (the exclude-pad divisor)."""
    box, pool_size, inside = [], 1, 1
    for i in range(len(kernel)):
        start = idx[i] * stride[i] - pad_begin[i]
        end = min(start + kernel[i], sizes[i] + pad_end[i])
        pool_size *= end - start
        start, end = max(start, 0), min(end, sizes[i])
        inside *= end - start
        box.append(slice(start, end))
    return box, pool_size, inside


def torch_avg_pool(x, kernel, stride, pad_begin, pad_end, ceil_mode, count_include_pad):
    """float64 average pooling, channels first, written from PyTorch's CPU
    kernel (at::native avg_pool2d/3d, with its symmetric padding split into
    begin and end): per dim, start = o * stride - pad_begin,
    end = min(start + kernel, size + pad_end), pool_size = the product of
    (end - start), then start and end clipped to the input; the divisor is
    pool_size with count_include_pad, else the clipped window's size. The
    output size as PyTorch's pooling_output_shape."""
    x = np.asarray(x, dtype=np.float64)
    k = len(kernel)
    sizes = x.shape[2:]
    outs = []
    for i in range(k):
        span = sizes[i] + pad_begin[i] + pad_end[i] - kernel[i]
        o = (span + (stride[i] - 1 if ceil_mode else 0)) // stride[i] + 1
        if ceil_mode and (o - 1) * stride[i] >= sizes[i] + pad_begin[i]:
            o -= 1
        outs.append(o)
    y = np.empty(x.shape[:2] + tuple(outs))
    for idx in np.ndindex(*outs):
        box, pool_size, inside = _window(idx, sizes, kernel, stride, pad_begin, pad_end)
        total = x[(slice(None), slice(None)) + tuple(box)].sum(axis=tuple(range(2, 2 + k)))
        y[(slice(None), slice(None)) + idx] = total / (pool_size if count_include_pad else inside)
    return y


def torch_avg_pool_backward(x_shape, dy, kernel, stride, pad_begin, pad_end, count_include_pad):
    """The gradient of torch_avg_pool: each output's dy / divisor to every
    input cell of its (clipped) window."""
    dy = np.asarray(dy, dtype=np.float64)
    k = len(kernel)
    sizes = x_shape[2:]
    dx = np.zeros(x_shape)
    for idx in np.ndindex(*dy.shape[2:]):
        box, pool_size, inside = _window(idx, sizes, kernel, stride, pad_begin, pad_end)
        g = dy[(slice(None), slice(None)) + idx] / (pool_size if count_include_pad else inside)
        dx[(slice(None), slice(None)) + tuple(box)] += g.reshape(g.shape + (1,) * k)
    return dx


# ceil_mode windows reaching past the end padding, along one dim or several
# (a corner), with count_include_pad: the divisor counts input and padding
# cells only (PyTorch, ONNX).
CEIL_INCLUDE = [  # N, C, spatial, kernel, stride, pad_begin, pad_end
    (2, 17, (10, 10), (3, 3), (2, 2), (0, 0), (0, 0)),
    (3, 19, (9, 13), (3, 2), (3, 2), (1, 0), (1, 1)),
    (2, 5, (8, 6), (4, 3), (3, 2), (2, 1), (1, 0)),
    (1, 33, (5, 8), (5, 4), (4, 3), (0, 3), (2, 0)),
    (2, 7, (5, 6, 7), (2, 3, 3), (2, 2, 2), (1, 1, 0), (0, 1, 2)),
    (2, 17, (4, 9, 6), (3, 2, 4), (2, 3, 3), (0, 1, 2), (1, 0, 1)),
]


@pytest.mark.parametrize("case", CEIL_INCLUDE, ids=[str(c) for c in CEIL_INCLUDE])
@pytest.mark.parametrize("channels_last", [False, True])
def test_avg_pool_ceil_mode_counting_padding_as_pytorch(case, channels_last, rng):
    n, c, spatial, k, s, pb, pe = case
    rank = len(spatial)
    fmt = ("NHWC" if rank == 2 else "NDHWC") if channels_last else ("NCHW" if rank == 2
                                                                     else "NCDHW")
    x = rng.standard_normal((n, c) + spatial, dtype=np.float32)
    want = torch_avg_pool(x, k, s, pb, pe, True, True)
    floor = torch_avg_pool(x, k, s, pb, pe, False, True)
    assert want.shape != floor.shape  # a ceil-mode window is there
    to = (lambda a: np.ascontiguousarray(np.moveaxis(a, 1, -1))) if channels_last else \
        (lambda a: a)
    pad = tuple(v for pair in zip(pb, pe) for v in pair)
    fwd = mkcache.avg_pool2d if rank == 2 else mkcache.avg_pool3d
    bwd = mkcache.grad.avg_pool2d if rank == 2 else mkcache.grad.avg_pool3d
    kw = dict(ceil_mode=True, count_include_pad=True, data_format=fmt)
    plain = "NCHW" if rank == 2 else "NCDHW"
    for training in (False, True):
        y = fwd(to(x), k, s, pad, training=training, **kw)
        assert_close_elementwise(y.numpy(plain), want, ulps=4 * int(np.prod(k)))
    dy = rng.standard_normal(want.shape, dtype=np.float32)
    dx = bwd(to(dy), to(x), k, s, pad, **kw)
    exact = torch_avg_pool_backward(x.shape, dy, k, s, pb, pe, True)
    assert_close_elementwise(dx.numpy(plain), exact, ulps=8 * int(np.prod(k)))
    # The independent reference here and the suite's agree.
    np.testing.assert_allclose(ref_pool(x, "avg_include", k, s, pb, pe, True), want, rtol=1e-12)


def test_avg_pool_ceil_mode_counting_padding_on_a_blocked_input(rng):
    """A conv's blocked output pooled where it is: the rescaled slices are
    addressed through the blocked layout."""
    x = rng.standard_normal((2, 16, 11, 9), dtype=np.float32)
    w = rng.standard_normal((24, 16, 3, 3), dtype=np.float32) * 0.2
    y = mkcache.conv2d(x, w, padding=1)
    z = mkcache.avg_pool2d(y, (3, 2), (2, 2), (1, 0, 0, 1), ceil_mode=True)
    want = torch_avg_pool(y.numpy("NCHW"), (3, 2), (2, 2), (1, 0), (0, 1), True, True)
    assert_close_elementwise(z.numpy("NCHW"), want, ulps=32)


DILATED = [  # (shape, kernel, stride, dilation, pad_begin, pad_end, ceil)
    ((2, 5, 11, 9), (3, 2), (1, 2), (2, 3), (1, 0), (2, 1), False),
    ((1, 17, 10, 13), (2, 3), (2, 2), (3, 2), (0, 2), (0, 1), True),
    ((3, 3, 7, 8), (2, 2), (3, 1), (2, 2), (1, 1), (1, 1), True),
    ((2, 4, 6, 7, 9), (2, 2, 3), (1, 2, 2), (2, 1, 3), (1, 0, 2), (0, 1, 1), False),
    ((1, 3, 5, 9, 6), (2, 3, 2), (2, 2, 1), (3, 2, 2), (0, 1, 1), (1, 0, 1), True),
]


def _dilated_call(kind, x, case, fmt, out=None):
    shape, k, s, d, pb, pe, ceil = case
    pad = tuple(v for i in range(len(k)) for v in (pb[i], pe[i]))
    fn = getattr(out or mkcache, f"{'max' if kind == 'max' else 'avg'}_pool{len(k)}d")
    kwargs = {} if kind == "max" else {"count_include_pad": kind == "avg_include"}
    return fn(x, k, s, pad, d, ceil_mode=ceil, data_format=fmt, **kwargs)


@pytest.mark.parametrize("case", DILATED, ids=[str(c[0]) + str(c[1:]) for c in DILATED])
@pytest.mark.parametrize("kind", ["max", "avg_include", "avg_exclude"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_dilated_pooling(case, kind, channels_last, rng):
    """Taps every dilation-th cell, eagerly and in a program through both
    implementations, each layout; ceil mode's last window counts what it
    covers up to the end padding."""
    shape, k, s, d, pb, pe, ceil = case
    x = rng.standard_normal(shape, dtype=np.float32)
    want = ref_pool(x, kind, k, s, pb, pe, ceil, dilation=d)
    first = "NCHW" if len(k) == 2 else "NCDHW"
    fmt = (first[0] + first[2:] + "C") if channels_last else first
    xin = np.ascontiguousarray(np.moveaxis(x, 1, -1)) if channels_last else x
    ulps = 4 * int(np.prod(k))
    assert_close_elementwise(_dilated_call(kind, xin, case, fmt).numpy(first), want, kind,
                             ulps=ulps)
    for impl in ("onednn", "reference"):
        g = mkcache.Graph()
        xi = g.input("x", xin.shape, layout=fmt)
        g.output(_dilated_call(kind, xi, case, fmt, out=g), "y")
        with g.compile(impl={"pool": impl}) as prog:
            impls = [st["impl"] for st in prog.steps() if st["kind"] == "node"]
            assert len(impls) == 1 and impls[0].split(":")[0] == impl
            got = prog.run(x=xin)["y"]
        got = np.moveaxis(np.asarray(got), -1, 1) if channels_last else np.asarray(got)
        assert_close_elementwise(got, want, f"{kind} {impl}", ulps=ulps)


@pytest.mark.parametrize("kind", ["max", "avg_include", "avg_exclude"])
def test_dilated_pooling_gradient(kind, rng):
    import grad_reference as gref
    x = rng.standard_normal((2, 3, 7, 6), dtype=np.float32)
    k, s, d, pb, pe = (2, 3), (2, 1), (3, 2), (1, 0), (1, 2)
    fwd = dict(kernel=k, stride=s, pad_begin=pb, pad_end=pe, dilation=d)
    y = ref_pool(x, kind, **fwd)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    fn = mkcache.grad.max_pool2d if kind == "max" else mkcache.grad.avg_pool2d
    kwargs = {} if kind == "max" else {"count_include_pad": kind == "avg_include"}
    got = np.asarray(fn(dy, x, k, s, (pb[0], pe[0], pb[1], pe[1]), d, **kwargs))
    want = gref.numeric_gradient(lambda v: ref_pool(v, kind, **fwd), x, dy)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_dilated_pooling_bad_input():
    x = np.ones((1, 2, 5, 5), np.float32)
    with pytest.raises(mkcache.InvalidArgumentError, match="dilation must be >= 1"):
        mkcache.max_pool2d(x, 2, 1, 0, 0)
    with pytest.raises(mkcache.InvalidArgumentError, match="larger than the padded input"):
        mkcache.max_pool2d(x, 3, 1, 0, 3)  # extent 7 > 5
    # Padding 2 and dilation 4 over 3 cells: the window over cells -1 and 3
    # misses the input.
    with pytest.raises(mkcache.InvalidArgumentError, match="no tap inside the input"):
        mkcache.max_pool2d(np.ones((1, 2, 3, 3), np.float32), 2, 1, (2, 2, 0, 0), (4, 1))
    with pytest.raises(mkcache.InvalidArgumentError, match="dilation"):
        mkcache.max_pool2d(x, 2, 1, 0, (1, 1, 1))
