"""Program.calibrate: the ranges an 8-bit plan needs, recorded over float32
runs, checked against the same values computed op by op in numpy's sense
(the eager operators); merged over batches; bad batches refused with
nothing lost; the calibration program's cache entries go with the program."""
import threading

import numpy as np
import pytest

import mkcache


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


W1, B1 = rand(6, 3, 3, 3, seed=1), rand(6, seed=2)
W2 = rand(5, 6, 3, 3, seed=3)
W3, B3 = rand(4, 5 * 4 * 5, seed=4), rand(4, seed=5)


def build():
    g = mkcache.Graph()
    x = g.input("x", (None, 3, 8, 10))
    y = g.conv2d(x, W1, B1, padding=1, activation="relu", name="c1")
    y = g.max_pool2d(y, 2)
    y = g.conv2d(y, W2, padding=1, name="c2")
    y = g.linear(g.flatten(y), W3, B3, name="fc")
    g.output(g.softmax(y), "probs")
    return g


def observed(x):
    """The values the plan quantizes, computed eagerly: c1's src, c2's src
    (after the relu and the pool) and fc's src."""
    y1 = mkcache.conv2d(x, W1, B1, padding=1, activation="relu")
    p = mkcache.max_pool2d(y1, 2)
    y2 = mkcache.conv2d(p, W2, padding=1)
    return [x, np.asarray(p), np.asarray(mkcache.flatten(y2))]


def parse(text):
    rows = [line.split("\t") for line in text.strip().splitlines() if not line.startswith("#")]
    return [(key, float(lo), float(hi), int(runs)) for key, lo, hi, runs in rows]


def test_ranges_match_the_values_the_nodes_read():
    batches = [{"x": rand(2, 3, 8, 10, seed=s)} for s in (10, 11, 12)]
    with build() as g, g.compile() as prog:
        text = prog.calibrate(batches, method="minmax")  # the extremes
        assert text == prog.calibration()
        rows = parse(text)
        assert [r[0].split("|")[1:] for r in rows] == [
            ["conv2d", "c1", "0"], ["conv2d", "c2", "0"], ["linear", "fc", "0"]]
        assert all(r[0].startswith("node") for r in rows)
        want = [observed(b["x"]) for b in batches]
        for k, (key, lo, hi, runs) in enumerate(rows):
            values = np.concatenate([np.ravel(w[k]) for w in want])
            assert runs == 3
            assert lo == pytest.approx(values.min(), rel=1e-5, abs=1e-6), key
            assert hi == pytest.approx(values.max(), rel=1e-5, abs=1e-6), key
        # More batches merge into the same ranges; a batch of another batch
        # size is another plan of the calibration program.
        prog.calibrate([{"x": 10 * rand(1, 3, 8, 10, seed=13)}], method="minmax")
        wider = parse(prog.calibration())
        assert wider[0][1] < rows[0][1] and wider[0][2] > rows[0][2] and wider[0][3] == 4


def test_bad_batches_are_refused_and_lose_nothing(tmp_path):
    with build() as g, g.compile() as prog:
        assert prog.calibration() == ""
        with pytest.raises(mkcache.InvalidArgumentError, match="no batches"):
            prog.calibrate([])
        good = {"x": rand(2, 3, 8, 10)}
        prog.calibrate([good])
        before = prog.calibration()
        with pytest.raises(mkcache.InvalidArgumentError, match="batch 1: .*missing"):
            prog.calibrate([good, {"y": good["x"]}])
        with pytest.raises(mkcache.Error, match="batch 0: "):
            prog.calibrate([{"x": rand(2, 4, 8, 10)}])  # 4 channels: conv c1 takes 3
        with pytest.raises(mkcache.DTypeError):
            prog.calibrate([{"x": good["x"].astype(np.float64)}])
        nan = good["x"].copy()
        nan[0, 0, 0, 0] = np.nan
        with pytest.raises(mkcache.InvalidArgumentError,
                           match=r"batch 0: .*node0\|conv2d\|c1\|0 read nan"):
            prog.calibrate([{"x": nan}])
        with pytest.raises(mkcache.InvalidArgumentError, match="batch 0 is a"):
            prog.calibrate([good["x"]])
        # The batch before each bad one counted; the bad ones did not.
        assert [r[3] for r in parse(prog.calibration())] == [2, 2, 2]
        assert parse(prog.calibration())[0][1:3] == parse(before)[0][1:3]
        prog.save_calibration(tmp_path / "cal.txt")
        assert (tmp_path / "cal.txt").read_text() == prog.calibration()


def test_a_program_without_quantizable_nodes_says_so():
    with mkcache.Graph() as g:
        g.output(g.relu(g.input("x", (2, 3))), "y")
        with g.compile() as prog:
            with pytest.raises(mkcache.InvalidArgumentError, match="no node to calibrate"):
                prog.calibrate([{"x": rand(2, 3)}])


def test_calibrating_from_threads_and_the_entries_going_with_the_program():
    mkcache.cache.clear()
    batches = [{"x": rand(2, 3, 8, 10, seed=s)} for s in range(8)]
    with build() as g:
        prog = g.compile()
        prog.run(x=batches[0]["x"])
        entries_run = mkcache.cache.stats()["entries"]
        errors = []

        def work(part):
            try:
                prog.calibrate(part)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(batches[i::2],)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        rows = parse(prog.calibration())
        assert [r[3] for r in rows] == [8, 8, 8]
        everything = np.concatenate([b["x"].ravel() for b in batches])
        assert rows[0][1] == pytest.approx(everything.min()) and \
            rows[0][2] == pytest.approx(everything.max())
        assert mkcache.cache.stats()["entries"] > entries_run  # the calibration program's
        prog.close()
        assert mkcache.cache.stats()["entries"] == 0  # its float32 entries went with it
