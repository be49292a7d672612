"""The blob cache itself: lookups per second through the C ABI
(mkc_cache_get_blob, + mkc_blob_release on a hit) for 1 and 2 threads, hit
and miss, with 10, 1k and 100k entries in the session."""
import pytest

from conftest import CACHE_RESULTS


@pytest.mark.parametrize("kind", ["hit", "miss"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("entries", [10, 1000, 100000])
def test_cache_lookups(benchmark, helper, entries, threads, kind):
    benchmark.group = "cache lookups"
    result = {}

    def measure():
        result["rate"] = helper.cache_lookups(entries, threads, kind == "hit", 0.2)

    benchmark.pedantic(measure, rounds=1, iterations=1)
    assert result["rate"] > 0
    if getattr(benchmark, "stats", None) is not None:
        CACHE_RESULTS[(entries, threads, kind)] = result["rate"]
        benchmark.extra_info["lookups_per_second"] = result["rate"]
