"""Calibration methods (Program.calibrate(method=, percentile=)): each
method's range against a numpy implementation of the same definition (and
percentile against numpy.percentile), histograms merged over batches equal
to one batch of all their values, a range growing between batches, int8
programs of each method against float32, the errors, and the saved text
read back (and the older text without the method's line)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import mkcache
from mkcache.errors import InvalidArgumentError

HALF = 2048  # bins per side of the library's histogram (range_histogram.hpp)
KEY = "node0|linear|lin|0"


# ------------------------------------------------------------ numpy twin
def histogram(x):
    """The library's histogram of the values x: counts over [-R, R) in
    2 * HALF bins, R the least power of two above max |x|; (counts,
    bin width, min, max, exact zeros)."""
    x = np.asarray(x, np.float64).ravel()
    lo, hi = x.min(), x.max()
    counts = np.zeros(2 * HALF, np.int64)
    magnitude = max(-lo, hi)
    if magnitude == 0:
        counts[HALF] = x.size
        return counts, None, lo, hi, x.size
    exponent = np.frexp(magnitude)[1]  # 2^exponent > magnitude
    scale = 2.0 ** (11 - exponent)
    counts += np.bincount((np.floor(x * scale) + HALF).astype(np.int64), minlength=2 * HALF)
    return counts, 2.0 ** exponent / HALF, lo, hi, int((x == 0).sum())


def percentile_range(x, percent):
    counts, w, lo, hi, _ = histogram(x)
    if percent >= 100 or w is None:
        return lo, hi
    cut = (100 - percent) / 200 * counts.sum()
    below = np.concatenate([[0], np.cumsum(counts)])
    b = int(np.argmax((counts > 0) & (below[1:] >= cut)))
    low = (b - HALF + (cut - below[b]) / counts[b]) * w
    above = np.concatenate([[0], np.cumsum(counts[::-1])])
    r = int(np.argmax((counts[::-1] > 0) & (above[1:] >= cut)))
    b = 2 * HALF - 1 - r
    high = (b - HALF + 1 - (cut - above[r]) / counts[b]) * w
    return float(np.clip(low, lo, hi)), float(np.clip(high, lo, hi))


def mse_error(counts, zeros, w, a, b):
    """The squared error of quantizing the histogram to 256 levels over
    [a, b], each bin at its centre, exact zeros exactly."""
    h = counts.astype(np.float64)
    h[HALF] -= zeros
    c = (np.arange(2 * HALF) - HALF + 0.5) * w
    step = (b - a) / 255
    err = np.where(c > b, (c - b) ** 2, np.where(c < a, (c - a) ** 2, step * step / 12))
    return float((h * err).sum())


def mse_range(x):
    counts, w, lo, hi, zeros = histogram(x)
    if w is None:
        return lo, hi

    def ends(extreme):
        e = [0.0]
        if extreme != 0:
            j = 1
            while j * w < abs(extreme):
                e.append(np.sign(extreme) * j * w)
                j += 1
            e.append(extreme)
        return e
    lows, highs = ends(min(lo, 0.0)), ends(max(hi, 0.0))
    best = [np.inf, 0, 0]

    def search(i0, i1, j0, j1, stride):
        for i in list(range(i0, i1, stride)) + [i1]:
            for j in list(range(j0, j1, stride)) + [j1]:
                if highs[j] <= lows[i]:
                    continue
                e = mse_error(counts, zeros, w, lows[i], highs[j])
                if e < best[0]:
                    best[:] = [e, i, j]
    search(0, len(lows) - 1, 0, len(highs) - 1, 16)
    ci, cj = best[1], best[2]
    search(max(ci - 16, 0), min(ci + 16, len(lows) - 1), max(cj - 16, 0),
           min(cj + 16, len(highs) - 1), 1)
    return lows[best[1]], highs[best[2]], best[0], (counts, zeros, w)


def smooth(p):
    """onnxruntime's smoothing: zeros become 1e-4, taken evenly from the
    others; then normalised."""
    zeros = p == 0
    take = 1e-4 * zeros.sum() / max((~zeros).sum(), 1)
    p = np.where(zeros, 1e-4, p - take)
    return p / p.sum()


def kl_range(x):
    counts, w, lo, hi, zeros = histogram(x)
    if w is None:
        return lo, hi, None
    h = counts[HALF:] + counts[:HALF][::-1]  # |x|'s bins
    h[0] -= zeros  # exact zeros left out
    n = min(HALF, int(max(-lo, hi) / w) + 1)
    levels = 255 if lo >= 0 or hi <= 0 else 128

    def divergence(i):
        p = h[:i].astype(np.float64)
        p[-1] += h[i:].sum()
        q = np.zeros(i)
        if i >= levels:  # levels groups of i // levels bins, the last taking the rest
            m = i // levels
            bounds = [(j * m, (j + 1) * m) for j in range(levels - 1)] + [((levels - 1) * m, i)]
        else:  # fewer bins than levels: each its own
            bounds = [(k, k + 1) for k in range(i)]
        for a, b in bounds:
            part = h[a:b]
            held = (part != 0).sum()
            if held:
                q[a:b] = np.where(part != 0, part.sum() / held, 0)
        p, q = smooth(p), smooth(q)
        return float((p * np.log(p / q)).sum())
    best, best_i = np.inf, n

    def search(i0, i1, stride):
        nonlocal best, best_i
        for i in list(range(i0, i1, stride)) + [i1]:
            kl = divergence(i)
            if kl < best:
                best, best_i = kl, i
    first = min(levels, n)
    search(first, n, 16)
    coarse = best_i
    search(max(first, coarse - 16), min(n, coarse + 16), 1)
    t = best_i * w
    return float(np.clip(-t, lo, hi)), float(np.clip(t, lo, hi)), best


# ------------------------------------------------------------ helpers
def linear_graph(features=16):
    """y = linear(x): the recorded range is the range of x's values."""
    rng = np.random.default_rng(5)
    g = mkcache.Graph()
    x = g.input("x", (None, features))
    g.output(g.linear(x, rng.standard_normal((4, features)).astype(np.float32),
                      np.zeros(4, np.float32), name="lin"), "y")
    return g


def recorded(text, key=KEY):
    for line in text.splitlines():
        if line.startswith(key + "\t"):
            f = line.split("\t")
            return float(f[1]), float(f[2])
    raise AssertionError(f"no line {key} in {text!r}")


def calibrated(batches, method, percentile=None, features=16):
    with linear_graph(features).compile() as p:
        return p.calibrate([{"x": b} for b in batches], method=method, percentile=percentile)


def skewed(rng, n, features=16, outliers=3, scale=1.0):
    """Log-normal values, a few large outliers of both signs."""
    x = (rng.lognormal(0, 0.7, (n, features)) - 1.0) * scale
    flat = x.reshape(-1)
    idx = rng.choice(flat.size, outliers, replace=False)
    flat[idx] = rng.choice([-1, 1], outliers) * rng.uniform(40, 80, outliers) * scale
    return x.astype(np.float32)


def batches_growing(rng):
    """Three batches, each reaching further (the histogram's range grows)."""
    return [skewed(rng, 40, scale=s) for s in (0.01, 1.0, 37.0)]


# ------------------------------------------------------------ ranges
def test_the_text_names_the_method_first():
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    assert calibrated([x], "minmax").startswith("# calibration method: minmax\n")
    assert calibrated([x], "percentile", 99.9).startswith(
        "# calibration method: percentile 99.9\n")
    assert calibrated([x], "percentile").startswith("# calibration method: percentile 99.999\n")
    assert calibrated([x], "mse").startswith("# calibration method: mse\n")
    assert calibrated([x], "kl").startswith("# calibration method: kl\n")


def test_minmax_is_the_extremes_over_all_batches():
    rng = np.random.default_rng(1)
    batches = batches_growing(rng)
    lo, hi = recorded(calibrated(batches, "minmax"))
    allx = np.concatenate(batches)
    assert lo == pytest.approx(allx.min(), rel=1e-8) and hi == pytest.approx(allx.max(), rel=1e-8)


@pytest.mark.parametrize("percent", [99.99, 99.9, 99.0, 90.0, 50.0, 100.0])
def test_percentile_matches_numpy(percent):
    rng = np.random.default_rng(2)
    batches = batches_growing(rng)
    allx = np.concatenate(batches).astype(np.float64)
    lo, hi = recorded(calibrated(batches, "percentile", percent))
    want = percentile_range(allx, percent)
    assert (lo, hi) == pytest.approx(want, rel=1e-7, abs=1e-12)
    # And numpy.percentile's of the values: within one bin of the histogram
    # of the values either side of the cut (the two interpolate differently
    # between them: numpy linearly between neighbours, the histogram within
    # a bin).
    w = histogram(allx)[1]
    cut = (100 - percent) / 2
    for got, q in ((lo, cut), (hi, 100 - cut)):
        below = np.percentile(allx, q, method="lower")
        above = np.percentile(allx, q, method="higher")
        assert below - w <= got <= above + w
    if percent <= 99:  # the outliers (3 in 1920 values) cut
        assert hi < 40 * 37 and lo > -40 * 37


def test_percentile_of_one_signed_data():
    """After a relu: nothing below 0, most values exactly 0."""
    rng = np.random.default_rng(3)
    x = np.maximum(rng.standard_normal((64, 16)), 0).astype(np.float32)
    x[0, 0] = 500
    lo, hi = recorded(calibrated([x], "percentile", 99))
    assert (lo, hi) == pytest.approx(percentile_range(x, 99), rel=1e-7)
    assert 0 <= lo <= histogram(x)[1] and hi < 5  # the zeros' bin, interpolated


def test_mse_matches_its_numpy_implementation():
    rng = np.random.default_rng(4)
    batches = batches_growing(rng)
    allx = np.concatenate(batches)
    lo, hi = recorded(calibrated(batches, "mse"))
    a, b, err, (counts, zeros, w) = mse_range(allx)
    assert (lo, hi) == pytest.approx((a, b), rel=1e-7, abs=1e-12)
    # The range chosen is no worse than the extremes, nor than ranges a bin
    # wider or narrower.
    for other in [(allx.min(), allx.max()), (a - w, b), (a, b + w), (a + w, b - w)]:
        if other[0] <= 0 <= other[1] and other[0] < other[1]:
            assert err <= mse_error(counts, zeros, w, *other) * (1 + 1e-12)


def test_mse_of_a_long_one_signed_tail():
    """Log-normal values (sigma 1.5): nothing below 0 (the range starts at
    0), the far tail given up."""
    rng = np.random.default_rng(6)
    x = rng.lognormal(0, 1.5, (4096, 16)).astype(np.float32)
    lo, hi = recorded(calibrated([x], "mse"))
    assert lo == 0 and hi < x.max()
    assert (lo, hi) == pytest.approx(mse_range(x)[:2], rel=1e-7)


@pytest.mark.parametrize("data", ["two-signed", "one-signed"])
def test_kl_matches_its_numpy_implementation(data):
    rng = np.random.default_rng(14)
    batches = batches_growing(rng)
    if data == "one-signed":  # after a relu: 255 levels over [0, T]
        batches = [np.maximum(b, 0) for b in batches]
    allx = np.concatenate(batches)
    lo, hi = recorded(calibrated(batches, "kl"))
    want = kl_range(allx)
    assert (lo, hi) == pytest.approx(want[:2], rel=1e-7, abs=1e-12)
    assert lo >= allx.min() and hi <= allx.max() and (data == "two-signed" or lo == 0)


@pytest.mark.parametrize("method,percent", [("percentile", 99.9), ("percentile", 99.99),
                                            ("mse", None), ("kl", None), ("minmax", None)])
def test_batches_merged_equal_one_batch_of_all(method, percent):
    """The histogram's range doubles exactly: several batches (the range
    growing 3700-fold, one batch all zeros) give the text one batch of all
    their values gives."""
    rng = np.random.default_rng(7)
    batches = [np.zeros((8, 16), np.float32)] + batches_growing(rng)
    merged = calibrated(batches, method, percent)
    whole = calibrated([np.concatenate(batches)], method, percent)
    assert merged.replace("\t4\n", "\t1\n") == whole
    # Shrinking order too: the smaller batches binned into the wider range.
    assert calibrated(batches[::-1], method, percent) == merged


def test_calibrate_from_threads_merges_every_batch():
    rng = np.random.default_rng(8)
    batches = [skewed(rng, 32, scale=s) for s in (0.5, 1, 2, 4, 8, 16)]
    with linear_graph().compile() as p:
        errors = []

        def work(b):
            try:
                p.calibrate([{"x": b}], method="percentile", percentile=99.5)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
        threads = [threading.Thread(target=work, args=(b,)) for b in batches]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert p.calibration() == calibrated(batches, "percentile", 99.5)


# ------------------------------------------------------------ int8 programs
def conv_net():
    rng = np.random.default_rng(9)
    g = mkcache.Graph()
    x = g.input("x", (None, 3, 12, 12))
    h = g.conv2d(x, (rng.standard_normal((8, 3, 3, 3)) * 0.4).astype(np.float32),
                 np.zeros(8, np.float32), padding=1, activation="relu")
    h = g.conv2d(h, (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32),
                 np.zeros(8, np.float32), padding=1, activation="relu")
    h = g.flatten(h, 1)
    g.output(g.linear(h, (rng.standard_normal((10, 8 * 144)) * 0.05).astype(np.float32),
                      np.zeros(10, np.float32)), "y")
    return g


@pytest.mark.parametrize("method", ["minmax", "percentile", "mse", "kl"])
def test_int8_program_of_each_method_is_near_float32(method, tmp_path):
    rng = np.random.default_rng(10)
    calib = [{"x": rng.standard_normal((4, 3, 12, 12)).astype(np.float32)} for _ in range(3)]
    x = rng.standard_normal((5, 3, 12, 12)).astype(np.float32)
    g = conv_net()
    with g.compile() as p:
        want = p.run(x=x)["y"].astype(np.float64)
    with g.compile(precision="int8", calibration=calib, calibration_method=method) as p8:
        got = p8.run(x=x)["y"]
        assert "3 node(s) quantized to 8 bits" in p8.plan()
    cos = (got.ravel() @ want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want))
    assert cos > 0.999
    assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()
    # Saved, the text compiles the same program without calibrating again;
    # without its method line (the older text) too.
    with g.compile() as warm:
        text = warm.calibrate(calib, method=method)
        warm.save_calibration(tmp_path / "c.txt")
    assert (tmp_path / "c.txt").read_text() == text
    older = "".join(line + "\n" for line in text.splitlines() if not line.startswith("#"))
    for saved in (tmp_path / "c.txt", older):
        with g.compile(precision="int8", calibration=saved) as p8:
            np.testing.assert_array_equal(p8.run(x=x)["y"], got)


def test_onnx_load_passes_the_method_on():
    onnx = pytest.importorskip("onnx", reason="onnx is not installed")
    from onnx import TensorProto, helper, numpy_helper

    import mkcache.onnx
    rng = np.random.default_rng(11)
    w = rng.standard_normal((4, 16)).astype(np.float32)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 4])],
        [numpy_helper.from_array(w, "w")]), opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    calib = [{"x": rng.standard_normal((8, 16)).astype(np.float32)} for _ in range(2)]
    got = {}
    for method, percent in (("minmax", None), ("percentile", 50.0)):
        with mkcache.onnx.load(model, precision="int8", calibration=calib,
                               calibration_method=method,
                               calibration_percentile=percent) as p:
            got[method] = p.run(x=x)["y"]
    want = x.astype(np.float64) @ w.T
    assert np.abs(got["minmax"] - want).max() <= 0.05 * np.abs(want).max()
    # Half the values clipped: far from float32, so the method was used.
    assert np.abs(got["percentile"] - want).max() > 0.2 * np.abs(want).max()


# ------------------------------------------------------------ errors
@pytest.mark.parametrize("kwargs,message", [
    (dict(method="entropy"), "unknown method 'entropy'"),
    (dict(method="MinMax"), "unknown method 'MinMax'"),
    (dict(method="percentile", percentile=0), r"percentile 0 is not in \(0, 100\]"),
    (dict(method="percentile", percentile=100.5), r"is not in \(0, 100\]"),
    (dict(method="percentile", percentile=-3), r"is not in \(0, 100\]"),
    (dict(method="percentile", percentile=float("nan")), r"is not in \(0, 100\]"),
    (dict(method="minmax", percentile=99), "is for method 'percentile', not 'minmax'"),
    (dict(method=3), "method must be a str"),
    (dict(method="percentile", percentile="99"), "percentile must be a number"),
])
def test_bad_options_are_refused_and_nothing_recorded(kwargs, message):
    x = np.ones((2, 16), np.float32)
    with linear_graph().compile() as p:
        with pytest.raises(InvalidArgumentError, match=message):
            p.calibrate([{"x": x}], **kwargs)
        assert p.calibration() == ""


def test_another_method_on_a_calibrated_program_is_refused():
    rng = np.random.default_rng(12)
    x = skewed(rng, 16)
    with linear_graph().compile() as p:
        text = p.calibrate([{"x": x}], method="percentile", percentile=99.9)
        for kwargs in (dict(method="mse"), dict(method="minmax"), dict(),
                       dict(method="percentile", percentile=99.0),
                       dict(method="percentile")):
            with pytest.raises(InvalidArgumentError,
                               match="calibrated with 'percentile 99.9'"):
                p.calibrate([{"x": x * 100}], **kwargs)
            assert p.calibration() == text
        # The same method again merges.
        assert "\t2\n" in p.calibrate([{"x": x}], method="percentile", percentile=99.9)


def test_nan_in_a_batch_leaves_the_histograms_as_they_were():
    rng = np.random.default_rng(13)
    x = skewed(rng, 16)
    bad = x.copy()
    bad[3, 3] = np.nan
    with linear_graph().compile() as p:
        text = p.calibrate([{"x": x}], method="mse")
        with pytest.raises(InvalidArgumentError, match="finite"):
            p.calibrate([{"x": bad * 1000}], method="mse")
        assert p.calibration() == text


def test_compile_refuses_a_method_with_a_calibration_text():
    g = linear_graph()
    with g.compile() as p:
        text = p.calibrate([{"x": np.ones((2, 16), np.float32)}], method="mse")
    with pytest.raises(InvalidArgumentError, match="calibration_method and calibration_percentile"):
        g.compile(precision="int8", calibration=text, calibration_method="mse")
    with pytest.raises(InvalidArgumentError, match=r"for calibration batches \(none given\)"):
        g.compile(calibration_method="mse")
    with pytest.raises(InvalidArgumentError, match="unknown method 'entropy'"):
        g.compile(precision="int8", calibration=[{"x": np.ones((2, 16), np.float32)}],
                  calibration_method="entropy")
