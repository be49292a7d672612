"""A BERT encoder layer behind HTTP on Ray Serve, with dynamic batching.

    pip install 'mkcache[ray]'
    python examples/ray_serve.py                 # serve, send 64 requests, check, stop
    python examples/ray_serve.py --keep          # then keep serving until Ctrl-C
    curl -X POST http://127.0.0.1:8000/encode -d '{"x": [[0.1, ...768 numbers], ...]}'

The model is mkcache.models' BERT-base encoder layer (random seeded
weights, nothing downloaded) as ONNX bytes with symbolic batch and
sequence. A request posts one sequence of hidden states {"x": [seq][768]}
and gets the layer's output {"y": [seq][768]}. The replica's @serve.batch
method gathers the requests that arrive within --wait-ms (at most --batch)
and runs them through a mkcache.ray.Predictor: one program run per
sequence length among them (the layer has no attention mask, so sequences
of different lengths cannot share a padded run). The script then sends
--requests requests from --clients threads, checks every answer against the
same model run in this process, and prints the latencies and the batch
sizes the replica formed.

On a cluster: start Ray there (`ray start --head`, then `ray start
--address=HEAD:6379` on the others) and run the script on the head node
with --host 0.0.0.0 --keep; --replicas N places N replicas, each of
--threads CPUs, over the nodes, and Serve spreads the requests over them.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import urllib.error
import urllib.request
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import ray
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

import mkcache.onnx
import mkcache.ray
from mkcache.models import BertLayer, max_relative_error

HIDDEN = 768
MAX_SEQ = 512


@serve.deployment
class Encoder:
    def __init__(self, model: bytes, threads: int, batch: int = 8, wait_s: float = 0.01):
        self.predict = mkcache.ray.Predictor(model, threads=threads)
        self.encode.set_max_batch_size(batch)
        self.encode.set_batch_wait_timeout_s(wait_s)
        self.batch_sizes = []

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.01)
    async def encode(self, sequences: list) -> list:
        self.batch_sizes.append(len(sequences))
        # In a thread: the event loop goes on reading requests meanwhile.
        return await asyncio.to_thread(self._run, sequences)

    def _run(self, sequences: list) -> list:
        out = [None] * len(sequences)
        by_length = defaultdict(list)
        for i, x in enumerate(sequences):
            by_length[len(x)].append(i)
        for rows in by_length.values():
            y = self.predict({"x": np.stack([sequences[i] for i in rows])})["y"]
            for i, yi in zip(rows, y):
                out[i] = yi
        return out

    async def __call__(self, request: Request):
        # Checked per request: a bad one in a batch would fail the others.
        try:
            x = np.asarray((await request.json())["x"], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as e:
            return JSONResponse({"error": f"the body must be {{\"x\": [seq][{HIDDEN}] numbers}}: "
                                          f"{e}"}, status_code=400)
        if x.ndim != 2 or x.shape[1] != HIDDEN or not 0 < len(x) <= MAX_SEQ:
            return JSONResponse({"error": f"x must be [seq][{HIDDEN}] with 0 < seq <= {MAX_SEQ}, "
                                          f"got shape {list(x.shape)}"}, status_code=400)
        return {"y": (await self.encode(x)).tolist()}

    def stats(self) -> list:
        return list(self.batch_sizes)


def post(url: str, body: dict):
    """(status, parsed JSON answer, seconds)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            status, text = answer.status, answer.read()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read()
    return status, json.loads(text), time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--clients", type=int, default=8, help="threads sending requests")
    ap.add_argument("--seqs", default="16,32", help="sequence lengths of the requests")
    ap.add_argument("--batch", type=int, default=8, help="most requests in one batch")
    ap.add_argument("--wait-ms", type=float, default=10, help="longest wait for a batch to fill")
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2, help="OpenMP threads of each replica")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--keep", action="store_true", help="keep serving until Ctrl-C")
    ap.add_argument("--address", help="the Ray cluster (default: RAY_ADDRESS, a cluster "
                                      "started on this machine, else a new local Ray)")
    args = ap.parse_args(argv)

    model = BertLayer(seed=0).onnx_model().SerializeToString()
    if not ray.is_initialized():
        ray.init(address=args.address)
    serve.start(http_options={"host": args.host, "port": args.port})
    app = Encoder.options(num_replicas=args.replicas,
                          ray_actor_options={"num_cpus": args.threads}).bind(
        model, args.threads, args.batch, args.wait_ms / 1e3)
    handle = serve.run(app, name="encoder", route_prefix="/encode")
    url = f"http://{args.host}:{args.port}/encode"
    try:
        status, answer, _ = post(url, {"x": [[1.0, 2.0]]})
        assert status == 400, answer
        print(f"a bad request: {status} {answer['error']}")

        seqs = [int(s) for s in args.seqs.split(",")]
        rng = np.random.default_rng(0)
        xs = [rng.standard_normal((seqs[i % len(seqs)], HIDDEN), dtype=np.float32)
              for i in range(args.requests)]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            answers = list(pool.map(lambda x: post(url, {"x": x.tolist()}), xs))
        seconds = time.perf_counter() - t0

        local = mkcache.onnx.load(model)
        worst = 0.0
        for x, (status, answer, _) in zip(xs, answers):
            assert status == 200, answer
            want = local.run(x=x[None])["y"][0]
            worst = max(worst, max_relative_error(np.asarray(answer["y"], np.float32), want))
        latencies = sorted(t for _, _, t in answers)
        sizes = handle.stats.remote().result()
        print(f"{args.requests} requests (seq {args.seqs}) from {args.clients} clients: "
              f"{args.requests / seconds:.1f} requests/s, latency median "
              f"{statistics.median(latencies) * 1e3:.0f} ms, p90 "
              f"{latencies[int(0.9 * (len(latencies) - 1))] * 1e3:.0f} ms")
        print(f"batches formed by the replica: {len(sizes)}, sizes {sorted(sizes)}")
        print(f"every answer against the model in this process: max |diff| / max |value| "
              f"= {worst:.1e}")
        assert worst < 1e-4
        if args.keep:
            print(f"serving on {url} (Ctrl-C stops)")
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        serve.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
