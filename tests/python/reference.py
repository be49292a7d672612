"""Independent numpy references and benchdnn-style comparisons.

The references compute in float64 straight from the definitions, sharing no
code with the library. Tolerances follow oneDNN's benchdnn: an f32 result
of a K-term reduction may differ from the exact value by a few K * eps of
the magnitude of the terms (sum |x_i * w_i|), not of the result itself.
"""
from __future__ import annotations

import numpy as np

EPS_F32 = float(np.finfo(np.float32).eps)


def conv2d_nchw(x, w, b=None, stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """Direct convolution. pads = (top, bottom, left, right). Returns
    (result, magnitude) where magnitude = the same conv over |x|, |w|, |b|."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    assert c == cg * groups and o % groups == 0
    og = o // groups
    t, bt, l, r = pads
    sh, sw = stride
    dh, dw = dilation
    oh = (h + t + bt - ((kh - 1) * dh + 1)) // sh + 1
    ow = (wd + l + r - ((kw - 1) * dw + 1)) // sw + 1

    def run(xv, wv, bv):
        xp = np.pad(xv.astype(np.float64), ((0, 0), (0, 0), (t, bt), (l, r)))
        out = np.zeros((n, o, oh, ow))
        for g in range(groups):
            xs = xp[:, g * cg:(g + 1) * cg]
            ws = wv[g * og:(g + 1) * og].astype(np.float64)
            for i in range(kh):
                for j in range(kw):
                    patch = xs[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh,
                               j * dw: j * dw + sw * (ow - 1) + 1: sw]
                    out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
        if bv is not None:
            out += bv.astype(np.float64)[None, :, None, None]
        return out

    exact = run(x, w, b)
    magnitude = run(np.abs(x), np.abs(w), None if b is None else np.abs(b))
    return exact, magnitude


def assert_close(out, exact, magnitude, reduction: int, what: str = "result"):
    """|out - exact| <= 4 * (K + 1) * eps * magnitude (+ a denormal floor)."""
    out = np.asarray(out, dtype=np.float64)
    assert out.shape == exact.shape, f"{what}: shape {out.shape} != {exact.shape}"
    assert np.all(np.isfinite(out)), f"{what}: non-finite values"
    bound = 4.0 * (reduction + 1) * EPS_F32 * magnitude + 1e-30
    err = np.abs(out - exact)
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (
        f"{what}: max excess at {worst}: got {out[worst]}, want {exact[worst]}, "
        f"error {err[worst]:.3g} > bound {bound[worst]:.3g}")


def relu(x):
    return np.maximum(x, 0)


def to_nhwc(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def to_nchw(a):
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2))


def _erf(x):
    try:
        from scipy.special import erf
        return erf(x)
    except ImportError:  # scipy is optional: math.erf, element by element
        import math
        return np.vectorize(math.erf, otypes=[np.float64])(x)


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # overflow-free form


def activation(kind, x, alpha=0.0, beta=0.0):
    """float64 reference of every activation kind (same parameters as the
    library: see mkcache.ACTIVATIONS)."""
    x = np.asarray(x, dtype=np.float64)
    if kind in ("relu", "leaky_relu"):
        return np.where(x > 0, x, alpha * x)
    if kind == "elu":
        return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))
    if kind == "gelu":
        return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))
    if kind == "gelu_tanh":
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
    if kind == "tanh":
        return np.tanh(x)
    if kind == "sigmoid":
        return _sigmoid(x)
    if kind in ("swish", "silu"):
        return x * _sigmoid(alpha * x)
    if kind == "hardswish":
        return x * np.clip(alpha * x + beta, 0.0, 1.0)
    if kind == "mish":
        return x * np.tanh(np.logaddexp(0.0, x))
    if kind in ("clip", "relu6"):
        return np.clip(x, alpha, beta)
    if kind == "sqrt":
        return np.sqrt(x)
    if kind == "abs":
        return np.abs(x)
    if kind == "exp":
        return np.exp(x)
    if kind == "log":
        return np.log(x)
    if kind == "square":
        return x * x
    if kind == "softplus":
        return np.logaddexp(0.0, alpha * x) / alpha
    raise ValueError(kind)


def assert_close_elementwise(out, exact, what="result", ulps=64):
    """Element-wise f32 results: within `ulps` f32 epsilons relative to the
    value, with an absolute floor of the same size near zero (oneDNN's
    vectorised exp/log/erf approximations are a few ulps off)."""
    out = np.asarray(out, dtype=np.float64)
    exact = np.asarray(exact, dtype=np.float64)
    assert out.shape == exact.shape, f"{what}: shape {out.shape} != {exact.shape}"
    bound = ulps * EPS_F32 * np.maximum(np.abs(exact), 1.0)
    err = np.abs(out - exact)
    bad = ~(err <= bound)
    assert not bad.any(), (
        f"{what}: {bad.sum()} elements off, worst {err.max():.3g} at "
        f"{np.unravel_index(np.argmax(err), err.shape)}")


def softmax(x, axis, log=False):
    x = np.asarray(x, dtype=np.float64)
    shifted = x - x.max(axis=axis, keepdims=True)
    lse = np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    return shifted - lse if log else np.exp(shifted - lse)


def pool(x, kind, kernel, stride, pad_begin, pad_end, ceil_mode=False, dilation=None):
    """Channels-first pooling over the trailing spatial dims. kind: "max",
    "avg_include" (PyTorch count_include_pad=True: explicit padding counts,
    ceil-mode overhang does not), "avg_exclude"; the kernel's taps every
    dilation-th cell. Returns float64."""
    x = np.asarray(x, dtype=np.float64)
    k = len(kernel)
    dilation = tuple(dilation or (1,) * k)
    extent = [(kernel[i] - 1) * dilation[i] + 1 for i in range(k)]
    spatial = x.shape[2:]
    outs, ends = [], []
    for i in range(k):
        span = spatial[i] + pad_begin[i] + pad_end[i] - extent[i]
        o = span // stride[i] + 1
        if ceil_mode and span % stride[i]:
            o += 1
            if (o - 1) * stride[i] >= spatial[i] + pad_begin[i]:
                o -= 1
        outs.append(o)
        ends.append(max(pad_end[i], (o - 1) * stride[i] + extent[i] - spatial[i] - pad_begin[i]))
    fill = -np.inf if kind == "max" else 0.0
    pads = [(0, 0), (0, 0)] + [(pad_begin[i], ends[i]) for i in range(k)]
    xp = np.pad(x, pads, constant_values=fill)
    real = np.pad(np.ones(spatial), [(pad_begin[i], ends[i]) for i in range(k)])
    # Cells counted by count_include_pad: input and explicit padding (1),
    # not the ceil-mode overhang (0).
    explicit = np.ones(tuple(spatial[i] + pad_begin[i] + pad_end[i] for i in range(k)))
    explicit = np.pad(explicit, [(0, ends[i] - pad_end[i]) for i in range(k)])
    out = np.empty(x.shape[:2] + tuple(outs))
    for idx in np.ndindex(*outs):
        sl = tuple(slice(idx[i] * stride[i], idx[i] * stride[i] + extent[i], dilation[i])
                   for i in range(k))
        window = xp[(slice(None), slice(None)) + sl]
        axes = tuple(range(2, 2 + k))
        if kind == "max":
            out[(slice(None), slice(None)) + idx] = window.max(axis=axes)
        else:
            count = (explicit if kind == "avg_include" else real)[sl].sum()
            out[(slice(None), slice(None)) + idx] = window.sum(axis=axes) / count
    return out


def layer_norm(x, begin_axis, scale=None, shift=None, eps=1e-5):
    x = np.asarray(x, dtype=np.float64)
    axes = tuple(range(begin_axis % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if scale is not None:
        y = y * scale
    if shift is not None:
        y = y + shift
    return y


def batch_norm_nchw(x, mean, var, scale=None, shift=None, eps=1e-5):
    x = np.asarray(x, dtype=np.float64)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - np.reshape(mean, shape)) / np.sqrt(np.reshape(var, shape) + eps)
    if scale is not None:
        y = y * np.reshape(scale, shape)
    if shift is not None:
        y = y + np.reshape(shift, shape)
    return y


def lrn_nchw(x, size, alpha, beta, k):
    """ONNX's LRN across channels: square_sum[c] = the sum of x^2 over
    channels max(0, c - floor((size-1)/2)) .. min(C-1, c + ceil((size-1)/2)),
    y = x / (k + alpha / size * square_sum)^beta."""
    x = np.asarray(x, dtype=np.float64)
    c = x.shape[1]
    sq = x * x
    out = np.empty_like(x)
    down, up = (size - 1) // 2, -(-(size - 1) // 2)
    for i in range(c):
        s = sq[:, max(0, i - down):min(c - 1, i + up) + 1].sum(axis=1)
        out[:, i] = x[:, i] / (k + alpha / size * s) ** beta
    return out


def conv_nd(x, w, b=None, stride=None, pad_begin=None, pad_end=None, dilation=None, groups=1):
    """Direct channels-first convolution over any number of spatial dims.
    Returns (result, magnitude) like conv2d_nchw."""
    k = x.ndim - 2
    stride = stride or (1,) * k
    dilation = dilation or (1,) * k
    pad_begin = pad_begin or (0,) * k
    pad_end = pad_end or (0,) * k
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    og = o // groups
    kernel = w.shape[2:]
    outs = [(x.shape[2 + i] + pad_begin[i] + pad_end[i] - ((kernel[i] - 1) * dilation[i] + 1))
            // stride[i] + 1 for i in range(k)]

    def run(xv, wv, bv):
        xp = np.pad(xv.astype(np.float64), [(0, 0), (0, 0)] + list(zip(pad_begin, pad_end)))
        out = np.zeros((n, o) + tuple(outs))
        for g in range(groups):
            xs = xp[:, g * cg:(g + 1) * cg]
            ws = wv[g * og:(g + 1) * og].astype(np.float64)
            for offs in np.ndindex(*kernel):
                sl = tuple(slice(offs[i] * dilation[i],
                                 offs[i] * dilation[i] + stride[i] * (outs[i] - 1) + 1, stride[i])
                           for i in range(k))
                patch = xs[(slice(None), slice(None)) + sl]
                out[:, g * og:(g + 1) * og] += np.tensordot(
                    ws[(slice(None), slice(None)) + offs], patch, axes=([1], [1])).swapaxes(0, 1)
        if bv is not None:
            out += bv.astype(np.float64).reshape((1, -1) + (1,) * k)
        return out

    return run(x, w, b), run(np.abs(x), np.abs(w), None if b is None else np.abs(b))


def conv_transpose2d(x, w, b=None, stride=(1, 1), pad_begin=(0, 0), pad_end=(0, 0),
                     output_padding=(0, 0), dilation=(1, 1), groups=1):
    """Scatter form of PyTorch's conv_transpose2d; w [C_in, C_out/g, KH, KW].
    Returns (result, magnitude)."""
    n, c, h, wd = x.shape
    ci, og, kh, kw = w.shape
    cg = c // groups
    oh = (h - 1) * stride[0] - pad_begin[0] - pad_end[0] + dilation[0] * (kh - 1) + 1 + output_padding[0]
    ow = (wd - 1) * stride[1] - pad_begin[1] - pad_end[1] + dilation[1] * (kw - 1) + 1 + output_padding[1]

    def run(xv, wv, bv):
        full_h = (h - 1) * stride[0] + dilation[0] * (kh - 1) + 1 + output_padding[0] + pad_end[0]
        full_w = (wd - 1) * stride[1] + dilation[1] * (kw - 1) + 1 + output_padding[1] + pad_end[1]
        full = np.zeros((n, og * groups, max(full_h, pad_begin[0] + oh), max(full_w, pad_begin[1] + ow)))
        xv = xv.astype(np.float64)
        wv = wv.astype(np.float64)
        for g in range(groups):
            xs = xv[:, g * cg:(g + 1) * cg]
            ws = wv[g * cg:(g + 1) * cg]  # [cg, og, kh, kw]
            for i in range(kh):
                for j in range(kw):
                    contrib = np.einsum("nchw,co->nohw", xs, ws[:, :, i, j])
                    full[:, g * og:(g + 1) * og,
                         i * dilation[0]: i * dilation[0] + stride[0] * (h - 1) + 1: stride[0],
                         j * dilation[1]: j * dilation[1] + stride[1] * (wd - 1) + 1: stride[1]] += contrib
        out = full[:, :, pad_begin[0]:pad_begin[0] + oh, pad_begin[1]:pad_begin[1] + ow]
        if bv is not None:
            out = out + bv.astype(np.float64)[None, :, None, None]
        return out

    return run(x, w, b), run(np.abs(x), np.abs(w), None if b is None else np.abs(b))
