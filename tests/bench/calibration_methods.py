"""Int8 accuracy against float32 for each calibration method (minmax,
percentile 99.99 and 99.999, mse, kl), on the trained digits CNN (examples/train_digits.py),
ResNet-50 and the BERT layer of mkcache.models (random seeded weights,
real-valued inputs; ResNet-50 also with a few hot pixels in one
calibration image, the BERT layer also with two outlier hidden dims in its
inputs), and, for reference, onnxruntime's static quantization
of the same ResNet-50 (MinMax, Percentile, Entropy; QDQ, uint8
activations, int8 per-channel weights).

    python tests/bench/calibration_methods.py                  # everything
    python tests/bench/calibration_methods.py --models digits,bert --methods minmax,percentile:99.9
    ONEDNN_MAX_CPU_ISA=AVX2 python tests/bench/calibration_methods.py --no-ort

Figures: 1 - the cosine similarity of the int8 outputs to float32's (over
each sample's output vector, averaged), the largest difference relative to
float32's largest magnitude, top-1 agreement with float32 (classifiers),
and the digits' test accuracy. The calibration batches and the evaluation
inputs are different samples. Needs scikit-learn for the digits (the
`examples` extra) and onnxruntime for the reference.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

import mkcache
from mkcache import models

METHODS = ("minmax", "percentile:99.99", "percentile", "mse", "kl")  # percentile: 99.999


def compare(ref: np.ndarray, got: np.ndarray) -> dict:
    r = ref.reshape(len(ref), -1).astype(np.float64)
    g = got.reshape(len(got), -1).astype(np.float64)
    cos = (r * g).sum(1) / (np.linalg.norm(r, axis=1) * np.linalg.norm(g, axis=1))
    out = {"1 - cosine": float(1 - cos.mean()),
           "max_rel": float(np.abs(r - g).max() / np.abs(r).max())}
    if ref.ndim == 2:
        out["top1"] = float((r.argmax(1) == g.argmax(1)).mean())
    return out


def int8_rows(graph_of, calibration, evaluate, output, methods, extra=None) -> list:
    """Per method, the int8 program's figures against float32's."""
    with graph_of().compile() as p:
        ref = np.concatenate([p.run(**x)[output] for x in evaluate])
    rows = []
    for method in methods:
        name, _, percent = method.partition(":")  # "percentile:99.999"
        start = time.perf_counter()
        with graph_of().compile(precision="int8", calibration=calibration,
                                calibration_method=name,
                                calibration_percentile=float(percent) if percent else None) as p:
            seconds = time.perf_counter() - start
            got = np.concatenate([p.run(**x)[output] for x in evaluate])
        row = {"method": method, **compare(ref, got), "calibrate+compile s": seconds}
        if extra:
            row.update(extra(ref, got))
        rows.append(row)
    return rows


def digits(args) -> list:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
    import train_digits  # the example's net and training loop
    data = train_digits.load_digits(0)
    x_train, x_test, _, y_test = data
    opts = argparse.Namespace(epochs=12, batch=32, lr=0.05, momentum=0.9, weight_decay=1e-4,
                              seed=0, precision="f32")
    trainer = train_digits.Trainer(data, opts, "f32")
    for epoch in range(1, opts.epochs + 1):
        trainer.epoch(epoch, show=False)
    net = trainer.net
    # As the example calibrates: four batches of 64 training images.
    calibration = [{"x": x_train[i:i + 64]} for i in range(0, 256, 64)]

    def accuracy(ref, got):
        return {"accuracy f32": float((ref.argmax(1) == y_test).mean()),
                "accuracy int8": float((got.argmax(1) == y_test).mean())}
    return int8_rows(net.graph, calibration, [{"x": x_test}], "logp", args.methods, accuracy)


def resnet50(args, hot_pixels=False) -> list:
    net = models.ResNet50(seed=0)
    rng = np.random.default_rng(1)
    shape = net.input_shape(args.batch, args.image)
    calibration = [{"x": rng.standard_normal(shape).astype(np.float32)}
                   for _ in range(args.calibration_batches)]
    if hot_pixels:  # a few bad pixels in one calibration image: rare, far outliers
        x = calibration[0]["x"].reshape(-1)
        x[rng.choice(x.size // args.batch, 20, replace=False)] = 60.0
    evaluate = [{"x": rng.standard_normal(shape).astype(np.float32)}
                for _ in range(args.eval_batches)]
    return int8_rows(lambda: net.graph(args.batch, args.image), calibration, evaluate, "logits",
                     args.methods)


def bert(args, outlier_dims=()) -> list:
    layer = models.BertLayer(seed=0)
    rng = np.random.default_rng(1)
    shape = (args.batch, 128, layer.hidden)

    def sample():
        x = rng.standard_normal(shape).astype(np.float32)
        x[..., list(outlier_dims)] *= 12  # as trained BERTs' hidden states have
        return {"x": x}
    calibration = [sample() for _ in range(args.calibration_batches)]
    evaluate = [sample() for _ in range(args.eval_batches)]
    return int8_rows(lambda: layer.graph(args.batch, 128), calibration, evaluate, "y",
                     args.methods)


def ort_resnet50(args) -> list:
    """onnxruntime's static quantization of the same ResNet-50, against
    onnxruntime's float32 run of it."""
    import logging

    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                          QuantType, quantize_static)
    net = models.ResNet50(seed=0)
    rng = np.random.default_rng(1)
    shape = net.input_shape(args.batch, args.image)
    calibration = [rng.standard_normal(shape).astype(np.float32)
                   for _ in range(args.calibration_batches)]
    evaluate = [rng.standard_normal(shape).astype(np.float32) for _ in range(args.eval_batches)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calibration)

        def get_next(self):
            x = next(self.it, None)
            return None if x is None else {"x": x}

    def run(path):
        s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        return np.concatenate([s.run(None, {"x": x})[0] for x in evaluate])

    logging.getLogger().setLevel(logging.ERROR)  # its advice on pre-processing, per tensor
    rows = []
    with tempfile.TemporaryDirectory() as d:
        f32 = os.path.join(d, "f32.onnx")
        onnx.save(net.onnx_model(batch=args.batch, image=args.image), f32)
        ref = run(f32)
        for name, method in (("MinMax", CalibrationMethod.MinMax),
                             ("Percentile", CalibrationMethod.Percentile),
                             ("Entropy", CalibrationMethod.Entropy)):
            q = os.path.join(d, name + ".onnx")
            start = time.perf_counter()
            quantize_static(f32, q, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                            calibrate_method=method)
            seconds = time.perf_counter() - start
            rows.append({"method": "ort " + name, **compare(ref, run(q)),
                         "calibrate+compile s": seconds})
    return rows


def show(title: str, rows: list) -> None:
    print(f"\n{title}")
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(f"{r[k]:.2e}" if k == "1 - cosine" else
                               f"{r[k]:.4f}" if isinstance(r[k], float) else str(r[k])
                               for k in keys) + " |")
    sys.stdout.flush()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models",
                    default="digits,resnet50,resnet50-hot-pixels,bert,bert-outliers")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--calibration-batches", type=int, default=2)
    ap.add_argument("--eval-batches", type=int, default=2)
    ap.add_argument("--no-ort", action="store_true", help="skip onnxruntime's reference")
    args = ap.parse_args(argv)
    args.methods = args.methods.split(",")
    info = mkcache.build_info()
    print(f"mkcache {mkcache.__version__}, ISA {info['isa']}, "
          f"ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', '(unset)')}, "
          f"batch {args.batch}, {args.calibration_batches} calibration and "
          f"{args.eval_batches} evaluation batches")
    runs = {"digits": ("digits CNN (examples/train_digits.py, 12 epochs, seed 0), "
                       "its 360 test images", digits),
            "resnet50": (f"ResNet-50 (mkcache.models, seed 0), {args.image}x{args.image}, "
                         "N(0, 1) images", resnet50),
            "resnet50-hot-pixels": ("the same ResNet-50, 20 of one calibration image's "
                                    "values 60 (hot pixels; the evaluation images without)",
                                    lambda a: resnet50(a, hot_pixels=True)),
            "bert": ("BERT layer (mkcache.models, seed 0), seq 128, N(0, 1) inputs", bert),
            "bert-outliers": ("the BERT layer, its inputs' hidden dims 57 and 308 12 times "
                              "larger (outlier dims)", lambda a: bert(a, (57, 308)))}
    for name in args.models.split(","):
        title, fn = runs[name]
        show(title, fn(args))
    if not args.no_ort and "resnet50" in args.models.split(","):
        show("onnxruntime static quantization of the same ResNet-50 (reference)",
             ort_resnet50(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
