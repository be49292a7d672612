"""Plain numpy implementations the benchmarks compare against."""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def conv2d_nchw(x, w, b, pad):
    """im2col + one matmul: about as fast as numpy gets for a convolution."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = w.shape[2]
    cols = sliding_window_view(xp, (k, k), axis=(2, 3))  # N,C,OH,OW,K,K
    out = np.tensordot(cols, w, axes=([1, 4, 5], [1, 2, 3]))  # N,OH,OW,O
    out += b
    return out.transpose(0, 3, 1, 2)


def max_pool(x, k, s, p):
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf)
    win = sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::s, ::s]
    return win.max(axis=(4, 5))


def lrn(x, size, alpha=1e-4, beta=0.75, k=1.0):
    sq = np.pad(x * x, ((0, 0), (size // 2, size // 2), (0, 0), (0, 0)))
    acc = sliding_window_view(sq, size, axis=1).sum(axis=-1)
    return x / (k + alpha / size * acc) ** beta


def batch_norm(x, mean, var, scale, shift, eps=1e-5):
    inv = scale / np.sqrt(var + eps)
    return x * inv[None, :, None, None] + (shift - mean * inv)[None, :, None, None]


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def linear(x, w, b):
    return x @ w.T + b


def gelu_tanh(x):
    # numpy has no erf; the tanh form is the cheapest honest stand-in.
    return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


def layer_norm(x, scale, shift, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + shift


def conv2d_backward_nchw(x, w, dy, pad):
    """Gradients of conv2d_nchw (stride 1) as two im2col matmuls plus a
    scatter of the column gradient: (dx, dw, db)."""
    k = w.shape[2]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = sliding_window_view(xp, (k, k), axis=(2, 3))  # N,C,OH,OW,K,K
    dw = np.tensordot(dy, cols, axes=([0, 2, 3], [0, 2, 3]))  # O,C,K,K
    # dx = full correlation of dy with the flipped kernel.
    dyp = np.pad(dy, ((0, 0), (0, 0), (k - 1 - pad, k - 1 - pad), (k - 1 - pad, k - 1 - pad)))
    dcols = sliding_window_view(dyp, (k, k), axis=(2, 3))  # N,O,H,W,K,K
    dx = np.tensordot(dcols, w[:, :, ::-1, ::-1], axes=([1, 4, 5], [0, 2, 3]))  # N,H,W,C
    return dx.transpose(0, 3, 1, 2), dw, dy.sum(axis=(0, 2, 3))


def max_pool_backward(x, dy, k, s, p):
    """Routes each output gradient to the first maximum of its window."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf)
    win = sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::s, ::s]
    oh, ow = win.shape[2:4]
    first = win.reshape(n, c, oh, ow, k * k).argmax(axis=-1)
    rows = np.arange(oh)[:, None] * s + first // k
    cols = np.arange(ow)[None, :] * s + first % k
    dxp = np.zeros_like(xp)
    ni, ci = np.arange(n)[:, None, None, None], np.arange(c)[None, :, None, None]
    np.add.at(dxp, (ni, ci, rows, cols), dy)
    return dxp[:, :, p:p + h, p:p + w]
