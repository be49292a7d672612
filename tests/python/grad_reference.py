"""Independent float64 numpy gradients (analytic), channels-first.

Each returns the exact gradients and, where the gradient is a reduction,
a magnitude (the same computation over absolute values) for the
benchdnn-style bound of reference.assert_close. The tests cross-check these
formulas against central finite differences of reference.py's forwards.
"""
from __future__ import annotations

import numpy as np

import reference as ref


def _f64(*arrays):
    return [None if a is None else np.asarray(a, dtype=np.float64) for a in arrays]


def _windows(k, kernel, stride, dilation, outs):
    """For every kernel offset: the slices of a padded input it touches."""
    for offs in np.ndindex(*kernel):
        yield offs, tuple(slice(offs[i] * dilation[i],
                                offs[i] * dilation[i] + stride[i] * (outs[i] - 1) + 1, stride[i])
                          for i in range(k))


def conv_backward(x, w, dy, stride, pad_begin, pad_end, dilation, groups):
    """Gradients of reference.conv_nd: (dx, dw, db), each with a magnitude."""
    def run(xv, wv, dyv):
        k = xv.ndim - 2
        o, cg = wv.shape[:2]
        og = o // groups
        outs = dyv.shape[2:]
        xp = np.pad(xv, [(0, 0), (0, 0)] + list(zip(pad_begin, pad_end)))
        dxp = np.zeros_like(xp)
        dw = np.zeros_like(wv)
        for g in range(groups):
            cs, os_ = slice(g * cg, (g + 1) * cg), slice(g * og, (g + 1) * og)
            dyg = dyv[:, os_]
            for offs, sl in _windows(k, wv.shape[2:], stride, dilation, outs):
                idx = (slice(None), cs) + sl
                patch = xp[idx]
                widx = (os_, slice(None)) + offs
                # dw[o, c] = sum_{n, out} dy[n, o, out] x[n, c, out*s + k*d]
                dw[widx] += np.tensordot(dyg, patch, axes=([0] + list(range(2, 2 + k)),
                                                           [0] + list(range(2, 2 + k))))
                # dx[n, c, out*s + k*d] += sum_o dy[n, o, out] w[o, c, k]
                dxp[idx] += np.moveaxis(np.tensordot(dyg, wv[widx], axes=([1], [0])), -1, 1)
        crop = (slice(None), slice(None)) + tuple(
            slice(pad_begin[i], pad_begin[i] + xv.shape[2 + i]) for i in range(k))
        return dxp[crop], dw, dyv.sum(axis=(0,) + tuple(range(2, 2 + k)))

    x, w, dy = _f64(x, w, dy)
    exact = run(x, w, dy)
    magnitude = run(np.abs(x), np.abs(w), np.abs(dy))
    return exact, magnitude


def conv_transpose_backward(x, w, dy, stride, pad_begin, dilation, groups):
    """Gradients of the transposed convolution y[n, g*Og+o, i*s - pb + k*d]
    += x[n, g*Ig+c, i] * w[g*Ig+c, o, k] (w [C_in, C_out/g, k...])."""
    def run(xv, wv, dyv):
        k = xv.ndim - 2
        cin, og = wv.shape[:2]
        ig = cin // groups
        ins = xv.shape[2:]
        # dy padded so that every i*s - pb + k*d lands inside.
        extra = [max(0, (ins[i] - 1) * stride[i] + (wv.shape[2 + i] - 1) * dilation[i] + 1
                     - pad_begin[i] - dyv.shape[2 + i]) for i in range(k)]
        dyp = np.pad(dyv, [(0, 0), (0, 0)] + [(pad_begin[i], extra[i]) for i in range(k)])
        dx = np.zeros_like(xv)
        dw = np.zeros_like(wv)
        for g in range(groups):
            cs, os_ = slice(g * ig, (g + 1) * ig), slice(g * og, (g + 1) * og)
            xg = xv[:, cs]
            for offs, sl in _windows(k, wv.shape[2:], stride, dilation, ins):
                patch = dyp[(slice(None), os_) + sl]  # dy at i*s + k*d (padded coords)
                widx = (cs, slice(None)) + offs
                dw[widx] += np.tensordot(xg, patch, axes=([0] + list(range(2, 2 + k)),
                                                          [0] + list(range(2, 2 + k))))
                dx[:, cs] += np.moveaxis(np.tensordot(patch, wv[widx], axes=([1], [1])), -1, 1)
        return dx, dw, dyv.sum(axis=(0,) + tuple(range(2, 2 + k)))

    x, w, dy = _f64(x, w, dy)
    return run(x, w, dy), run(np.abs(x), np.abs(w), np.abs(dy))


def pool_backward(x, dy, kind, kernel, stride, pad_begin, pad_end, ceil_mode=False):
    """Gradient of reference.pool (max: to the first maximum of a window)."""
    x, dy = _f64(x, dy)
    k = len(kernel)
    spatial = x.shape[2:]
    outs = dy.shape[2:]
    ends = [max(pad_end[i], (outs[i] - 1) * stride[i] + kernel[i] - spatial[i] - pad_begin[i])
            for i in range(k)]
    fill = -np.inf if kind == "max" else 0.0
    pads = [(0, 0), (0, 0)] + [(pad_begin[i], ends[i]) for i in range(k)]
    xp = np.pad(x, pads, constant_values=fill)
    dxp = np.zeros_like(xp)
    real = np.pad(np.ones(spatial), [(pad_begin[i], ends[i]) for i in range(k)])
    explicit = np.pad(np.ones(tuple(spatial[i] + pad_begin[i] + pad_end[i] for i in range(k))),
                      [(0, ends[i] - pad_end[i]) for i in range(k)])
    for idx in np.ndindex(*outs):
        sl = tuple(slice(idx[i] * stride[i], idx[i] * stride[i] + kernel[i]) for i in range(k))
        full = (slice(None), slice(None)) + sl
        g = dy[(slice(None), slice(None)) + idx]
        if kind == "max":
            window = xp[full].reshape(x.shape[:2] + (-1,))
            first = window.argmax(axis=-1)
            onehot = np.zeros_like(window)
            np.put_along_axis(onehot, first[..., None], 1.0, axis=-1)
            dxp[full] += (onehot * g[..., None]).reshape(xp[full].shape)
        else:
            count = (explicit if kind == "avg_include" else real)[sl].sum()
            dxp[full] += (g / count).reshape(g.shape + (1,) * k)
    crop = (slice(None), slice(None)) + tuple(
        slice(pad_begin[i], pad_begin[i] + spatial[i]) for i in range(k))
    return dxp[crop]


def _erf(x):
    return ref._erf(x)


def activation_backward(kind, x, dy, alpha=0.0, beta=0.0):
    """d activation(x) / dx * dy, from the definitions."""
    x, dy = _f64(x, dy)
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    if kind == "relu":
        d = np.where(x > 0, 1.0, alpha)
    elif kind == "elu":
        d = np.where(x > 0, 1.0, alpha * np.exp(x))
    elif kind == "gelu":
        d = 0.5 * (1 + _erf(x / np.sqrt(2))) + x * np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)
    elif kind == "gelu_tanh":
        c = np.sqrt(2 / np.pi)
        u = c * (x + 0.044715 * x ** 3)
        t = np.tanh(u)
        d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)
    elif kind == "tanh":
        d = 1 - np.tanh(x) ** 2
    elif kind == "sigmoid":
        d = sig(x) * (1 - sig(x))
    elif kind == "swish":
        s = sig(alpha * x)
        d = s + alpha * x * s * (1 - s)
    elif kind == "hardswish":
        u = alpha * x + beta
        d = np.where(u <= 0, 0.0, np.where(u >= 1, 1.0, u + alpha * x))
    elif kind == "softplus":
        d = sig(alpha * x)
    elif kind == "mish":
        sp = np.log1p(np.exp(x))
        t = np.tanh(sp)
        d = t + x * (1 - t * t) * sig(x)
    elif kind == "clip":
        d = np.where((x > alpha) & (x < beta), 1.0, 0.0)
    elif kind == "sqrt":
        d = 0.5 / np.sqrt(x)
    elif kind == "abs":
        d = np.sign(x)
    elif kind == "exp":
        d = np.exp(x)
    elif kind == "log":
        d = 1 / x
    elif kind == "square":
        d = 2 * x
    else:
        raise ValueError(kind)
    return d * dy


def softmax_backward(y, dy, axis, log=False):
    y, dy = _f64(y, dy)
    if log:
        return dy - np.exp(y) * dy.sum(axis=axis, keepdims=True)
    return y * (dy - (dy * y).sum(axis=axis, keepdims=True))


def layer_norm_backward(x, dy, begin_axis, scale=None, eps=1e-5):
    """-> (dx, dscale, dshift) over the trailing normalized dims."""
    x, dy, scale = _f64(x, dy, scale)
    axes = tuple(range(begin_axis % x.ndim, x.ndim))
    lead = tuple(range(0, begin_axis % x.ndim))
    m = np.prod([x.shape[a] for a in axes])
    mean = x.mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    xhat = (x - mean) * inv
    g = dy * (scale if scale is not None else 1.0)
    dx = inv / m * (m * g - g.sum(axis=axes, keepdims=True)
                    - xhat * (g * xhat).sum(axis=axes, keepdims=True))
    return dx, (dy * xhat).sum(axis=lead), dy.sum(axis=lead)


def batch_norm_backward(x, dy, scale=None, eps=1e-5):
    """Training batch norm over dim 1 with the batch's (biased) statistics."""
    x, dy, scale = _f64(x, dy, scale)
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    m = x.size // x.shape[1]
    mean = x.mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    xhat = (x - mean) * inv
    g = dy * (scale.reshape(shape) if scale is not None else 1.0)
    dx = inv / m * (m * g - g.sum(axis=axes, keepdims=True)
                    - xhat * (g * xhat).sum(axis=axes, keepdims=True))
    return dx, (dy * xhat).sum(axis=axes), dy.sum(axis=axes)


def lrn_backward(x, dy, size, alpha, beta, k):
    """Gradient of reference.lrn_nchw (ONNX's window: floor((size-1)/2)
    channels below c, ceil((size-1)/2) above)."""
    x, dy = _f64(x, dy)
    c = x.shape[1]
    down, up = (size - 1) // 2, -(-(size - 1) // 2)
    sq = x * x
    s = np.empty_like(x)
    for i in range(c):
        s[:, i] = k + alpha / size * sq[:, max(0, i - down):min(c - 1, i + up) + 1].sum(axis=1)
    dx = dy * s ** -beta
    t = dy * x * s ** (-beta - 1)  # per output channel j
    for i in range(c):
        # Outputs j whose window holds channel i: j - down <= i <= j + up.
        lo, hi = max(0, i - up), min(c - 1, i + down)
        dx[:, i] -= 2 * alpha * beta / size * x[:, i] * t[:, lo:hi + 1].sum(axis=1)
    return dx


def reduce_to(g, shape):
    """Sums a broadcast result back to an operand's shape (numpy rules)."""
    g = np.asarray(g, dtype=np.float64)
    lead = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True).reshape(shape)


def binary_backward(kind, a, b, dy):
    a, b, dy = _f64(a, b, dy)
    a_full, b_full = np.broadcast_arrays(a, b)
    if kind == "add":
        ga, gb = dy, dy
    elif kind == "sub":
        ga, gb = dy, -dy
    elif kind == "mul":
        ga, gb = dy * b_full, dy * a_full
    elif kind == "div":
        ga, gb = dy / b_full, -dy * a_full / b_full ** 2
    else:
        wins = np.where(a_full > b_full, 1.0, np.where(a_full == b_full, 0.5, 0.0))
        if kind == "minimum":
            wins = np.where(a_full < b_full, 1.0, np.where(a_full == b_full, 0.5, 0.0))
        ga, gb = dy * wins, dy * (1 - wins)
    return reduce_to(ga, a.shape), reduce_to(gb, b.shape)


def matmul_backward(a, b, dy, transpose_a=False, transpose_b=False):
    a, b, dy = _f64(a, b, dy)
    A = np.swapaxes(a, -1, -2) if transpose_a else a
    B = np.swapaxes(b, -1, -2) if transpose_b else b
    dA = dy @ np.swapaxes(B, -1, -2)
    dB = np.swapaxes(A, -1, -2) @ dy
    if transpose_a:
        dA = np.swapaxes(dA, -1, -2)
    if transpose_b:
        dB = np.swapaxes(dB, -1, -2)
    return reduce_to(dA, a.shape), reduce_to(dB, b.shape), dy.reshape(-1, dy.shape[-1]).sum(0)


def numeric_gradient(f, x, dy, h=1e-6):
    """Central differences of sum(f(x) * dy) with respect to x (float64)."""
    x = np.array(x, dtype=np.float64)
    grad = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        keep = x[idx]
        x[idx] = keep + h
        plus = np.sum(f(x) * dy)
        x[idx] = keep - h
        minus = np.sum(f(x) * dy)
        x[idx] = keep
        grad[idx] = (plus - minus) / (2 * h)
    return grad
