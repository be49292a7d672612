"""Batch inference on Ray Data: images through ResNet-50 imported from ONNX,
predictions written to Parquet.

    pip install 'mkcache[ray]'
    python examples/ray_batch_inference.py                  # 256 generated images
    python examples/ray_batch_inference.py --images DIR     # a directory of images (pillow)
    python examples/ray_batch_inference.py --workers 2 --threads 1 --out predictions/

The model is mkcache.models' ResNet-50 (random seeded weights, nothing
downloaded) written as ONNX bytes, the form a real model file has. Each of
--workers Ray workers makes one mkcache.ray.Predictor: it imports the bytes
once, compiles them for --threads OpenMP threads, and runs the batches it
is given. The Parquet files hold one row per image: its id (or path), the
top-5 classes and their probabilities.

On a cluster the same script runs unchanged: start Ray there (`ray start
--head` on one machine, `ray start --address=HEAD:6379` on the others) and
run it on the head node (ray.init() finds the cluster), or from anywhere
with RAY_ADDRESS=ray://HEAD:10001. The model travels as bytes through Ray's
object store, so the nodes need no shared file system for it; --images must
then be a directory every node reads (a shared mount), and --out storage
every node writes (a shared mount, or s3://... with pyarrow's S3 support).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import ray

import mkcache.ray
from mkcache.models import ResNet50

MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)


# The images are made or decoded where they are used, in the workers before
# the model (Ray fuses these steps into the workers' actors): only ids or
# paths leave this process. A separate reading stage would need CPUs of its
# own, and --workers x --threads may hold every CPU there is.

def generated_images(rows: int, image: int):
    """`rows` random images of image x image pixels (HWC uint8, as decoded
    files come), each made from its id: the same every run."""
    def make(batch):
        images = [np.random.default_rng(int(i)).integers(0, 256, (image, image, 3), np.uint8)
                  for i in batch["id"]]
        return {"id": batch["id"], "image": np.stack(images)}
    return ray.data.from_items([{"id": i} for i in range(rows)]).map_batches(
        make, batch_format="numpy")


def image_files(directory: str, image: int):
    """The images of a directory, decoded and resized to image x image RGB
    (needs pillow)."""
    paths = sorted(str(p) for p in Path(directory).iterdir()
                   if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".bmp", ".webp"))
    if not paths:
        raise SystemExit(f"no images (.jpg, .png, ...) in {directory}")

    def decode(batch):
        from PIL import Image  # noqa: PLC0415 (only for --images)
        images = [np.asarray(Image.open(p).convert("RGB").resize((image, image)))
                  for p in batch["path"]]
        return {"path": batch["path"], "image": np.stack(images)}
    return ray.data.from_items([{"path": p} for p in paths]).map_batches(
        decode, batch_format="numpy")


def preprocess(batch):
    """HWC uint8 images -> "x": NCHW float32, normalised as torchvision's
    ResNets were trained."""
    x = batch.pop("image").astype(np.float32).transpose(0, 3, 1, 2) / 255.0
    batch["x"] = np.ascontiguousarray((x - MEAN) / STD)
    return batch


def top5(batch):
    """logits -> the five likeliest classes and their probabilities."""
    logits = batch.pop("logits")
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    classes = np.argsort(-p, axis=1)[:, :5]
    batch["classes"] = classes
    batch["probabilities"] = np.take_along_axis(p, classes, axis=1)
    return batch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", help="a directory of images (default: generated ones)")
    ap.add_argument("--rows", type=int, default=256, help="generated images")
    ap.add_argument("--image", type=int, default=224, help="height and width")
    ap.add_argument("--batch", type=int, default=16, help="images per batch")
    ap.add_argument("--workers", type=int, default=2, help="Ray workers, one Predictor each")
    ap.add_argument("--threads", type=int, default=1, help="OpenMP threads of each worker")
    ap.add_argument("--out", help="Parquet directory (default: a temporary one)")
    ap.add_argument("--address", help="the Ray cluster (default: RAY_ADDRESS, a cluster "
                                      "started on this machine, else a new local Ray)")
    args = ap.parse_args(argv)

    if not ray.is_initialized():
        ray.init(address=args.address)
    out = args.out or tempfile.mkdtemp(prefix="resnet50-predictions-")
    model = ResNet50(seed=0).onnx_model(image=args.image).SerializeToString()

    if args.images:
        ds = image_files(args.images, args.image)
    else:
        ds = generated_images(args.rows, args.image)
    t0 = time.perf_counter()
    ds = ds.map_batches(preprocess, batch_format="numpy", batch_size=args.batch)
    ds = ds.map_batches(mkcache.ray.Predictor, fn_constructor_args=(model,),
                        fn_constructor_kwargs={"threads": args.threads},
                        compute=ray.data.ActorPoolStrategy(size=args.workers),
                        num_cpus=args.threads, batch_size=args.batch, batch_format="numpy")
    ds.map_batches(top5, batch_format="numpy").write_parquet(out)
    seconds = time.perf_counter() - t0

    written = ray.data.read_parquet(out)
    rows = written.count()
    print(f"{rows} images through ResNet-50 ({args.image}x{args.image}) on {args.workers} "
          f"worker(s) x {args.threads} thread(s): {seconds:.1f} s, {rows / seconds:.1f} images/s "
          f"(the models' loading included)")
    print(f"Parquet: {out}, columns {written.columns()}")
    for row in written.take(3):
        key = row.get("path", row.get("id"))
        print(f"  {key}: classes {np.asarray(row['classes']).tolist()}, probabilities "
              f"{[round(float(p), 5) for p in row['probabilities']]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
