"""Clearing mode bounds memory: RSS stays flat while many new input shapes
pass through capacity 4 (PaddlePaddle grows ~190 KiB per shape here)."""
import os

import numpy as np
import pytest

import mkcache


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


# Every (H, W) in 8..40, shuffled: warm-up and measurement draw disjoint
# shapes from the same size range, so the working set (largest buffers) is
# the same and any growth is memory the cache failed to release.
SHAPES = [(h, w) for h in range(8, 41) for w in range(8, 41)]
np.random.default_rng(0).shuffle(SHAPES)


def _run_shapes(start, count, w):
    for h, wd in SHAPES[start:start + count]:
        x = np.ones((1, 8, h, wd), dtype=np.float32)
        with mkcache.cache.input_shape(x.shape):
            y = mkcache.conv2d(x, w, padding=1, name="conv")
            mkcache.relu(y, name="relu", out=y)


@pytest.mark.skipif("asan" in os.environ.get("LD_PRELOAD", ""),
                    reason="AddressSanitizer's quarantine holds freed memory on purpose")
def test_rss_flat_over_500_new_shapes_at_capacity_4():
    w = mkcache.Tensor(np.ones((8, 8, 3, 3), dtype=np.float32), constant=True)
    with mkcache.cache.session(42), mkcache.cache.clearing_mode(4):
        _run_shapes(0, 300, w)  # warm-up: JIT code paths, allocator pools
        before = rss_bytes()
        _run_shapes(300, 500, w)  # 500 shapes never seen before
        after = rss_bytes()
        stats = mkcache.cache.stats(session=42)
    assert stats["groups"] == 4
    assert stats["evictions"] == 796
    growth = after - before
    print(f"RSS growth over 500 new shapes: {growth / 1024:.0f} KiB")
    assert growth <= 1024 * 1024, f"RSS grew {growth / 1024:.0f} KiB"
