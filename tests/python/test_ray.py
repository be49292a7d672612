"""mkcache.ray.Predictor: batches through a program in this process (always),
and on a local Ray (2 CPUs, one session for the module) where ray is
installed: the distributed output equals this process's row for row, a
worker killed mid-run is retried with nothing lost or duplicated, a bad
batch fails the job with its index instead of hanging it."""
from __future__ import annotations

import contextlib
import os
import pickle
import re
import signal
from pathlib import Path

import numpy as np
import pytest

import mkcache
from mkcache.ray import BatchError, Predictor

ROWS = 64
FEATURES = (3, 8, 8)


@pytest.fixture(autouse=True)
def _threads_kept():
    """A Predictor sets the calling thread's OpenMP count: restored after."""
    previous = mkcache.get_num_threads()
    yield
    mkcache.set_num_threads(previous)


def _graph():
    """conv 3x3 + relu, global average pool, linear to 5 logits; a module-level
    function, so the callable pickles by reference."""
    rng = np.random.default_rng(7)
    g = mkcache.Graph()
    x = g.input("x", (None,) + FEATURES)
    y = g.relu(g.conv2d(x, g.constant(rng.standard_normal((4, 3, 3, 3), dtype=np.float32)),
                        padding=1))
    y = g.flatten(g.global_avg_pool(y))
    g.output(g.linear(y, g.constant(rng.standard_normal((5, 4), dtype=np.float32))), "logits")
    return g


def _onnx_file(tmp_path: Path) -> str:
    """The same network as an ONNX file, with a second output of another
    dtype: bool "positive" = logits > 0."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3), dtype=np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((5, 4), dtype=np.float32), "fc"),
             numpy_helper.from_array(np.zeros((), np.float32), "zero")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["logits"], transB=1),
             helper.make_node("Greater", ["logits", "zero"], ["positive"])]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                       ["batch", *FEATURES])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 5]),
         helper.make_tensor_value_info("positive", TensorProto.BOOL, ["batch", 5])], inits)
    path = tmp_path / "small.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def _reference(x):
    """float64 numpy of the same network."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32).astype(np.float64)
    fc = rng.standard_normal((5, 4), dtype=np.float32).astype(np.float64)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    h, wd = FEATURES[1:]
    conv = np.zeros((len(x), 4, h, wd))
    for i in range(3):
        for j in range(3):
            conv += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    return np.maximum(conv, 0).mean(axis=(2, 3)) @ fc.T


def _data(rows=ROWS):
    rng = np.random.default_rng(3)
    return {"id": np.arange(rows, dtype=np.int64),
            "x": rng.standard_normal((rows,) + FEATURES, dtype=np.float32)}


# ------------------------------------------------------------ in this process

def test_batches_through_a_graph_and_an_onnx_file(tmp_path):
    data = _data()
    want = _reference(data["x"])
    for model in (_graph, _onnx_file(tmp_path)):
        predict = Predictor(model)
        out = {}
        for lo in range(0, ROWS, 24):  # batches of 24, 24, 16
            batch = predict({k: v[lo:lo + 24] for k, v in data.items()})
            for k, v in batch.items():
                out.setdefault(k, []).append(v)
        out = {k: np.concatenate(v) for k, v in out.items()}
        assert predict.batches == 3
        assert "x" not in out  # the inputs are not carried over
        assert out["id"].dtype == np.int64 and np.array_equal(out["id"], data["id"])
        assert out["logits"].dtype == np.float32
        np.testing.assert_allclose(out["logits"], want, rtol=1e-4, atol=1e-4)
        if "positive" in out:
            assert out["positive"].dtype == np.bool_
            assert np.array_equal(out["positive"], out["logits"] > 0)


def test_threads_set_for_the_compile_and_every_batch():
    predict = Predictor(_graph, threads=2)
    assert mkcache.get_num_threads() == 2
    mkcache.set_num_threads(1)  # as another thread of the worker would have it
    predict(_data(4))
    assert mkcache.get_num_threads() == 2
    for bad in (0, -1, 1.5, True):
        with pytest.raises(mkcache.InvalidArgumentError, match="threads"):
            Predictor(_graph, threads=bad)


def test_an_empty_batch_gives_empty_columns():
    out = Predictor(_graph)({k: v[:0] for k, v in _data().items()})
    assert out["logits"].shape == (0, 5) and out["logits"].dtype == np.float32
    assert out["id"].shape == (0,)


def test_a_read_only_column_is_read():
    data = _data(8)
    data["x"].flags.writeable = False  # as Ray hands out columns of shared memory
    np.testing.assert_allclose(Predictor(_graph)(data)["logits"], _reference(data["x"]),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("change,cause", [
    (lambda b: {**b, "x": b["x"].astype(np.float64)}, mkcache.DTypeError),
    (lambda b: {**b, "x": b["x"][:, :2]}, mkcache.InvalidArgumentError),  # 2 channels, not 3
    (lambda b: {"id": b["id"]}, mkcache.InvalidArgumentError),  # no input column
    (lambda b: {**b, "logits": b["id"]}, mkcache.InvalidArgumentError),  # would be replaced
    (lambda b: [b["x"]], mkcache.InvalidArgumentError),  # not a dict
])
def test_a_bad_batch_raises_naming_its_index(change, cause):
    predict = Predictor(_graph)
    data = _data(8)
    predict(data)
    with pytest.raises(BatchError, match=r"batch 1 \(of this worker, pid \d+") as info:
        predict(change(data))
    assert isinstance(info.value.__cause__, cause) and info.value.batch == 1
    assert predict(data)["logits"].shape == (8, 5)  # the next batch runs
    copy = pickle.loads(pickle.dumps(info.value))  # as Ray sends it back
    assert copy.batch == 1 and str(copy) == str(info.value)


def test_bad_models():
    with pytest.raises(mkcache.InvalidArgumentError, match="model must be"):
        Predictor(42)
    with pytest.raises(mkcache.InvalidArgumentError, match="must return a mkcache.Graph"):
        Predictor(lambda: "graph")
    with pytest.raises(mkcache.InvalidArgumentError, match="already compiled"):
        Predictor(lambda: _graph().compile(), fuse=False)
    assert Predictor(lambda: _graph().compile())(_data(2))["logits"].shape == (2, 5)


# ------------------------------------------------------------------ on Ray

def _sanitizer_preloaded() -> str | None:
    preload = os.environ.get("LD_PRELOAD", "")
    for runtime in ("libasan", "libtsan", "libubsan", "libmsan"):
        if runtime in preload:
            return runtime
    return None


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray of 2 CPUs for the module's Ray tests. Its workers
    inherit this process's environment and directory; they are also given
    the package, the library under test and this directory (for DiesOnce)
    by absolute paths, which is what a cluster's workers would need."""
    runtime = _sanitizer_preloaded()
    if runtime:
        # Ray does run so (its raylet, GCS and workers inherit the
        # preload), but the workers would make only the calls the in-process
        # tests above already make under the sanitizer, at a minute's cost.
        pytest.skip(f"LD_PRELOAD holds {runtime}: the sanitizer run checks the Predictor in "
                    "this process; on Ray it would check Ray's processes, not the library")
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'mkcache[ray]')")
    pytest.importorskip("ray.data", reason="ray[data] is not installed")
    paths = [str(Path(mkcache.__file__).resolve().parents[1]), str(Path(__file__).parent)]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    env = {"PYTHONPATH": os.pathsep.join(paths)}
    if os.environ.get("MKCACHE_LIBRARY"):
        env["MKCACHE_LIBRARY"] = str(Path(os.environ["MKCACHE_LIBRARY"]).resolve())
    # A test run reports no usage statistics to Ray's servers (on by default).
    quiet = "RAY_USAGE_STATS_ENABLED" not in os.environ
    if quiet:
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    # address="local": a cluster of its own, never one another program started
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": env})
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    try:
        yield ray
    finally:
        ray.shutdown()
        if quiet:
            del os.environ["RAY_USAGE_STATS_ENABLED"]


@contextlib.contextmanager
def _within(seconds: int):
    """Fails the test if the block takes longer (a hung pipeline)."""
    def expired(*_):
        raise TimeoutError(f"the pipeline did not finish within {seconds} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _pool(ray, workers: int):
    """A fixed pool of `workers` actors, one Predictor each (what
    concurrency=workers asked for before Ray 2.51)."""
    return ray.data.ActorPoolStrategy(size=workers)


def _collect(ds) -> dict:
    """The dataset's columns, rows ordered by id."""
    batches = list(ds.iter_batches(batch_format="numpy", batch_size=None))
    out = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    order = np.argsort(out["id"], kind="stable")
    return {k: v[order] for k, v in out.items()}


def _dataset(ray, rows=ROWS, blocks=8):
    data = _data(rows)
    return ray.data.from_items([{"id": i, "x": x} for i, x in zip(data["id"], data["x"])],
                               override_num_blocks=blocks)


def test_workers_load_the_library_under_test(ray_session):
    ray = ray_session

    @ray.remote(num_cpus=1)
    def info():
        import mkcache as worker_mkcache
        return (str(Path(worker_mkcache.build_info()["library_path"]).resolve()),
                worker_mkcache.build_info()["isa"], worker_mkcache.__file__)

    path, isa, package = ray.get(info.remote(), timeout=120)
    assert path == str(Path(mkcache.build_info()["library_path"]).resolve())
    assert isa == mkcache.build_info()["isa"]  # ONEDNN_MAX_CPU_ISA reached the worker
    assert Path(package).resolve() == Path(mkcache.__file__).resolve()


def test_distributed_equals_one_process(ray_session, tmp_path):
    path = _onnx_file(tmp_path)
    data = _data()
    with _within(120):
        got = _collect(_dataset(ray_session).map_batches(
            Predictor, fn_constructor_args=(path,), compute=_pool(ray_session, 2), batch_size=8,
            batch_format="numpy"))
    want = Predictor(path)(data)
    assert sorted(got) == sorted(want)
    assert np.array_equal(got["id"], data["id"])  # every row once
    for k in want:
        assert got[k].dtype == want[k].dtype, k
    np.testing.assert_allclose(got["logits"], want["logits"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["logits"], _reference(data["x"]), rtol=1e-4, atol=1e-4)


class DiesOnce(Predictor):
    """Kills its worker process (SIGKILL, as the OOM killer or a lost node
    would) at the batch holding row `row`, the first time any worker gets
    there: `marker` is created then, atomically."""

    def __init__(self, model, marker, row, **options):
        super().__init__(model, **options)
        self.marker, self.row = marker, row

    def __call__(self, batch):
        if self.row in batch["id"]:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().__call__(batch)


def test_a_killed_worker_is_retried_and_nothing_is_lost(ray_session, tmp_path):
    marker = tmp_path / "killed"
    data = _data()
    with _within(150):
        got = _collect(_dataset(ray_session).map_batches(
            DiesOnce, fn_constructor_args=(_graph, str(marker), ROWS // 2),
            compute=_pool(ray_session, 2), batch_size=8, batch_format="numpy"))
    assert marker.exists()  # a worker did die
    assert np.array_equal(got["id"], data["id"])  # nothing lost, nothing twice
    want = Predictor(_graph)(data)["logits"]
    np.testing.assert_allclose(got["logits"], want, rtol=1e-5, atol=1e-6)


def test_a_bad_batch_fails_the_job_naming_it(ray_session):
    ray = ray_session
    ds = ray.data.from_items([{"id": i, "x": np.zeros(FEATURES, np.float64)} for i in range(16)],
                             override_num_blocks=2)
    with _within(120), pytest.raises(Exception) as info:
        ds.map_batches(Predictor, fn_constructor_args=(_graph,), compute=_pool(ray, 1),
                       batch_size=8, batch_format="numpy").materialize()
    text = str(info.value)
    assert re.search(r"mkcache.ray.Predictor: batch \d+ \(of this worker", text), text
    assert "DTypeError: x must be float32, got float64" in text, text



def test_a_model_the_workers_cannot_load_fails_the_job(ray_session, tmp_path):
    """A path no worker can read (the usual slip on a cluster): the job
    fails with the library's message, after Ray's few restarts of the
    worker, rather than waiting for a worker that never starts."""
    missing = str(tmp_path / "absent.onnx")
    with _within(120), pytest.raises(Exception) as info:
        _dataset(ray_session, rows=8, blocks=1).map_batches(
            Predictor, fn_constructor_args=(missing,), compute=_pool(ray_session, 1),
            batch_format="numpy").materialize()
    assert f"onnx: cannot read {missing!r}" in str(info.value), str(info.value)

def test_the_batch_example(ray_session, tmp_path):
    """examples/ray_batch_inference.py on 8 generated images (in this
    module's Ray): every image once in the Parquet files, with the top-5
    probabilities ResNet-50 gives them in this process."""
    import importlib.util
    pq = pytest.importorskip("pyarrow.parquet")
    path = Path(__file__).resolve().parents[2] / "examples" / "ray_batch_inference.py"
    spec = importlib.util.spec_from_file_location("ray_batch_inference", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out = tmp_path / "predictions"
    with _within(150):
        assert example.main(["--rows", "8", "--image", "32", "--batch", "4",
                             "--out", str(out)]) == 0
    table = pq.read_table(out).to_pydict()
    order = np.argsort(table["id"])
    assert np.array_equal(np.asarray(table["id"])[order], np.arange(8))
    got = np.asarray(table["probabilities"], np.float32)[order]
    images = np.stack([np.random.default_rng(i).integers(0, 256, (32, 32, 3), np.uint8)
                       for i in range(8)])
    from mkcache.models import ResNet50
    predict = Predictor(ResNet50(0).onnx_model(image=32).SerializeToString())
    want = example.top5(predict(example.preprocess({"id": np.arange(8), "image": images})))
    np.testing.assert_allclose(got, want["probabilities"], rtol=1e-4)
