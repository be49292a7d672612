"""Train a small CNN on scikit-learn's 8x8 digits with mkcache only.

    pip install '.[examples]'
    python examples/train_digits.py                     # ~97-99% test accuracy
    python examples/train_digits.py --precision bf16    # mixed precision

conv(1->16, 3x3) - relu - max pool 2 - conv(16->32, 3x3) - relu - max pool 2
- flatten - linear(128->10) - log_softmax, trained with plain SGD with
momentum in numpy. Every forward and backward step is an mkcache operator:
the forwards run with ``training=True`` and a layer name, so each grad op
finds its forward's primitive descriptor in the cache (docs/design.md,
"Forward -> backward").

--precision bf16 trains in bfloat16 with float32 master weights: each step
casts the weights and the batch to bfloat16, runs the forward and the
backward in bfloat16 (the data gradients bfloat16, the weight and bias
gradients float32, as mkcache's gradients return them) and updates the
float32 weights. The biases stay float32. It needs oneDNN's bfloat16
kernels (AVX-512 or AVX2-VNNI-2).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import mkcache
from mkcache import grad


def load_digits(seed: int):
    try:
        from sklearn.datasets import load_digits as sk_load
        from sklearn.model_selection import train_test_split
    except ImportError:
        sys.exit("this example needs scikit-learn: pip install '.[examples]'")
    data = sk_load()
    x = (data.images / 16.0).astype(np.float32)[:, None]  # [N, 1, 8, 8] in [0, 1]
    return train_test_split(x, data.target, test_size=0.2, random_state=seed,
                            stratify=data.target)


class Net:
    """Parameters, their momentum buffers, forward and backward."""

    def __init__(self, rng, prefix=""):
        self.prefix = prefix  # of the layer names (a second net keeps its own cache entries)

        def he(shape, fan_in):
            return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

        self.params = {
            "w1": he((16, 1, 3, 3), 9), "b1": np.zeros(16, np.float32),
            "w2": he((32, 16, 3, 3), 144), "b2": np.zeros(32, np.float32),
            "w3": he((10, 128), 128), "b3": np.zeros(10, np.float32),
        }
        self.velocity = {k: np.zeros_like(v) for k, v in self.params.items()}

    def weights(self, precision: str):
        """The parameters a step computes with: the float32 ones, or for
        bf16 the weights cast to bfloat16 (the biases stay float32)."""
        if precision == "f32":
            return self.params
        return {k: mkcache.cast(v, mkcache.bfloat16) if k.startswith("w") else v
                for k, v in self.params.items()}

    def forward(self, x, training: bool, precision: str = "f32"):
        p, t = self.weights(precision), training
        if precision == "bf16":
            x = mkcache.cast(x, mkcache.bfloat16)
        n = self.prefix
        c1 = mkcache.conv2d(x, p["w1"], p["b1"], padding=1, training=t, name=n + "conv1")
        r1 = mkcache.relu(c1)
        m1 = mkcache.max_pool2d(r1, 2, training=t, name=n + "pool1")
        c2 = mkcache.conv2d(m1, p["w2"], p["b2"], padding=1, training=t, name=n + "conv2")
        r2 = mkcache.relu(c2)
        m2 = mkcache.max_pool2d(r2, 2, training=t, name=n + "pool2")
        f = mkcache.flatten(m2)
        logits = mkcache.linear(f, p["w3"], p["b3"], training=t, name=n + "fc")
        logp = mkcache.log_softmax(logits, axis=1)
        return logp, (p, x, c1, r1, m1, c2, r2, m2, f, logp)

    def backward(self, dlogp, saved):
        """The gradients of the parameters (float32 in both precisions) from
        d loss / d logp (a float32 array)."""
        p, x, c1, r1, m1, c2, r2, m2, f, logp = saved
        if logp.dtype == mkcache.bfloat16:  # a gradient has its forward's dtype
            dlogp = mkcache.cast(dlogp, mkcache.bfloat16)
        dlogits = grad.log_softmax(dlogp, logp, axis=1)
        n = self.prefix
        g3 = grad.linear(dlogits, f, p["w3"], p["b3"], name=n + "fc")
        dm2 = grad.reshape(g3.x, m2)
        dr2 = grad.max_pool2d(dm2, r2, 2, name=n + "pool2")
        dc2 = grad.relu(dr2, c2)
        g2 = grad.conv2d(dc2, m1, p["w2"], p["b2"], padding=1, name=n + "conv2")
        dr1 = grad.max_pool2d(g2.x, r1, 2, name=n + "pool1")
        dc1 = grad.relu(dr1, c1)
        g1 = grad.conv2d(dc1, x, p["w1"], p["b1"], padding=1, name=n + "conv1",
                         wrt=("weight", "bias"))
        return {"w1": g1.weight, "b1": g1.bias, "w2": g2.weight, "b2": g2.bias,
                "w3": g3.weight, "b3": g3.bias}

    def step(self, grads, lr: float, momentum: float, weight_decay: float):
        for k, g in grads.items():
            v = self.velocity[k]
            v *= momentum
            v -= lr * (g.numpy() + weight_decay * self.params[k])
            self.params[k] += v

    def predict(self, x, precision="f32", batch=256):
        out = [self.forward(x[i:i + batch], False, precision)[0].numpy().argmax(1)
               for i in range(0, len(x), batch)]
        return np.concatenate(out)

    def graph(self, batch=None) -> mkcache.Graph:
        """The inference forward as a graph (the batch bound at run time by
        default), the current parameters its constants: x [N, 1, 8, 8] ->
        "logp" [N, 10]."""
        p, g = self.params, mkcache.Graph()
        x = g.input("x", (batch, 1, 8, 8))
        y = g.relu(g.conv2d(x, p["w1"], p["b1"], padding=1, name="conv1"))
        y = g.max_pool2d(y, 2, name="pool1")
        y = g.relu(g.conv2d(y, p["w2"], p["b2"], padding=1, name="conv2"))
        y = g.max_pool2d(y, 2, name="pool2")
        y = g.linear(g.flatten(y), p["w3"], p["b3"], name="fc")
        g.output(g.log_softmax(y, axis=1), "logp")
        return g


def progress(epoch, epochs, done, total, loss, width=24):
    filled = int(width * done / total)
    bar = "#" * filled + "." * (width - filled)
    sys.stdout.write(f"\repoch {epoch:2d}/{epochs} [{bar}] {done:4d}/{total} loss {loss:.4f}")
    sys.stdout.flush()


class Trainer:
    """A net trained by SGD over the training set in `precision`, one epoch
    at a time; its test accuracy after the last epoch, its training time."""

    def __init__(self, data, args, precision: str):
        self.data, self.args, self.precision = data, args, precision
        self.rng = np.random.default_rng(args.seed)
        self.net = Net(self.rng, prefix="" if precision == "f32" else precision + ".")
        self.accuracy, self.seconds = 0.0, 0.0

    def epoch(self, number: int, show: bool):
        x_train, x_test, y_train, y_test = self.data
        args, net = self.args, self.net
        start = time.perf_counter()
        steps = (len(x_train) + args.batch - 1) // args.batch
        order = self.rng.permutation(len(x_train))
        total = 0.0
        for i in range(steps):
            idx = order[i * args.batch:(i + 1) * args.batch]
            xb, yb = x_train[idx], y_train[idx]
            logp, saved = net.forward(xb, True, self.precision)
            lp = logp.numpy()  # float32 (bfloat16 widens exactly)
            n = len(yb)
            total += -lp[np.arange(n), yb].sum()
            dlogp = np.zeros_like(lp)  # d(mean NLL)/d logp
            dlogp[np.arange(n), yb] = -1.0 / n
            net.step(net.backward(dlogp, saved), args.lr, args.momentum, args.weight_decay)
            if show:
                progress(number, args.epochs, i + 1, steps,
                         total / min((i + 1) * args.batch, len(x_train)))
        self.accuracy = float((net.predict(x_test, self.precision) == y_test).mean())
        self.seconds += time.perf_counter() - start
        if show:
            sys.stdout.write(f"  test accuracy {self.accuracy:.4f}\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--precision", choices=("f32", "bf16"), default="f32",
                    help="train in float32, or in bfloat16 with float32 master weights")
    ap.add_argument("--require-accuracy", type=float, default=None,
                    help="exit with status 1 if the final test accuracy is lower")
    ap.add_argument("--require-int8-drop", type=float, default=None,
                    help="exit with status 1 if the int8 program's accuracy is lower than "
                         "float32's by more than this")
    ap.add_argument("--max-slowdown", type=float, default=None,
                    help="bf16: also train the float32 net (same seed), epoch by epoch in turn, "
                         "and exit with status 1 if bfloat16 training takes more than this "
                         "many times as long")
    args = ap.parse_args(argv)
    if args.max_slowdown is not None and args.precision != "bf16":
        ap.error("--max-slowdown compares bf16 training with float32's: use --precision bf16")
    info = mkcache.build_info()
    if args.precision == "bf16" and info["bf16"] == "none":
        sys.exit(f"--precision bf16 needs oneDNN's bfloat16 kernels (AVX-512 or AVX2-VNNI-2); "
                 f"oneDNN has none for this CPU's ISA, {info['isa']}")

    data = load_digits(args.seed)
    x_train, x_test, y_train, y_test = data
    print(f"digits: {len(x_train)} train / {len(x_test)} test images, "
          f"mkcache {mkcache.__version__}, {args.precision} training on {info['isa']}")
    trainer = Trainer(data, args, args.precision)
    # --max-slowdown: a float32 net trained alongside, epoch by epoch, each
    # going first in turn, so a slow spell of a shared machine falls on both.
    baseline = Trainer(data, args, "f32") if args.max_slowdown is not None else None
    for epoch in range(1, args.epochs + 1):
        turn = [trainer, baseline] if baseline is None or epoch % 2 else [baseline, trainer]
        for t in turn:
            if t is not None:
                t.epoch(epoch, show=t is trainer)
    net, accuracy, elapsed = trainer.net, trainer.accuracy, trainer.seconds
    if baseline is not None:
        print(f"float32 training alongside: test accuracy {baseline.accuracy:.4f} in "
              f"{baseline.seconds:.2f} s")
    print(f"final test accuracy {accuracy:.4f} ({int(round(accuracy * len(y_test)))}/"
          f"{len(y_test)}) after {args.epochs} epochs in {elapsed:.2f} s "
          f"({args.precision} training)")
    # Deployment: the trained net (its float32 weights) compiled once (relus
    # fused into the convs), then the whole test set in one run.
    with net.graph().compile() as program:
        eager = net.forward(x_test, training=False)[0].numpy()
        logp = program.run(x=x_test)["logp"]
        agree = int((logp.argmax(1) == eager.argmax(1)).sum())
        accuracy32 = float((logp.argmax(1) == y_test).mean())
        print(f"as a program: test accuracy {accuracy32:.4f}, "
              f"{agree}/{len(y_test)} predictions as the eager calls', largest log-probability "
              f"difference {np.abs(logp - eager).max():.1e}")
        if not np.allclose(logp, eager, rtol=1e-4, atol=1e-5):
            print("the program's log-probabilities differ from the eager calls'")
            return 1
    # 8 bits: the same graph calibrated on float32 runs of training images,
    # then the test set through the int8 plan.
    calibration = [{"x": x_train[i:i + 64]} for i in range(0, 256, 64)]
    with net.graph().compile(precision="int8", calibration=calibration) as program:
        logp8 = program.run(x=x_test)["logp"]
        accuracy8 = float((logp8.argmax(1) == y_test).mean())
        print(f"int8 program: test accuracy {accuracy8:.4f} "
              f"({(accuracy8 - accuracy32) * 100:+.2f} points against float32)")
    status = 0
    if args.require_accuracy is not None and accuracy < args.require_accuracy:
        print(f"below the required {args.require_accuracy:.4f}")
        status = 1
    if args.require_int8_drop is not None and accuracy32 - accuracy8 > args.require_int8_drop:
        print(f"int8 loses more than the allowed {args.require_int8_drop:.4f}")
        status = 1
    if baseline is not None:
        ratio = elapsed / baseline.seconds
        print(f"bfloat16 training took {ratio:.2f} times float32's time")
        if ratio > args.max_slowdown:
            print(f"slower than the allowed {args.max_slowdown:.2f} times")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
