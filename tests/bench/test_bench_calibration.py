"""The float32 warm-up's time per calibration method, against a plain run
of the same program, interleaved round-robin in one process: ResNet-50
(224x224) and the BERT layer (seq 128) of mkcache.models, batch 1, one
calibrate() call of one batch per repetition (each method on a program of
its own, calibrated once beforehand so that compiling is not timed).

    python -m pytest tests/bench/test_bench_calibration.py --benchmark-enable \
        --benchmark-only -s
"""
from __future__ import annotations

import numpy as np
import pytest

import mkcache
from mkcache import models
from mkcache.models import interleaved

ISA = mkcache.build_info()["isa"]
METHODS = ("minmax", "percentile", "mse", "kl")
CASES = {"resnet50": 15, "bert": 41}  # repetitions


def _graph_and_batch(case):
    rng = np.random.default_rng(0)
    if case == "resnet50":
        net = models.ResNet50(seed=0)
        return net.graph(1, 224), {"x": rng.standard_normal(net.input_shape(1)).astype(np.float32)}
    layer = models.BertLayer(seed=0)
    return layer.graph(1, 128), {"x": rng.standard_normal((1, 128, layer.hidden))
                                 .astype(np.float32)}


@pytest.mark.parametrize("case", list(CASES))
def test_calibrate_time_per_method(benchmark, case):
    graph, batch = _graph_and_batch(case)
    programs = {m: graph.compile() for m in METHODS}
    plain = graph.compile()
    try:
        fns = {"run": lambda: plain.run(**batch)}
        for m, p in programs.items():
            p.calibrate([batch], method=m)  # compiles the calibration program
            fns[m] = (lambda p=p, m=m: p.calibrate([batch], method=m))
        plain.run(**batch)
        reps = 1 if benchmark.disabled else CASES[case]
        result = {}
        benchmark.pedantic(lambda: result.update(interleaved(fns, reps)), rounds=1, iterations=1)
        for m in METHODS:  # each method's ranges were made and read
            assert programs[m].calibration().startswith(f"# calibration method: {m}")
        if not benchmark.disabled:
            benchmark.extra_info.update(result)
            print(f"\n{case} batch 1 ({ISA}): " + ", ".join(
                f"{k} {v * 1e3:.1f} ms ({v / result['run']:.2f}x run)" for k, v in result.items()))
    finally:
        plain.close()
        for p in programs.values():
            p.close()
