"""benchmarks/core_pace.py: whether the host's fast and slow spells are one core's or the whole host's,
read from synthetic readings whose answer is known, and one real read on this machine."""

from __future__ import annotations

from benchmarks.core_pace import read_group, summarize


def _trace(pattern: list[bool], bin_ms: float = 5.0) -> list[tuple[float, float]]:
    """Ten readings a bin: 0.010 ms in a fast bin, 0.016 ms in a slow one."""
    return [((i * bin_ms + k * bin_ms / 10) / 1e3, 0.010 if fast else 0.016)
            for i, fast in enumerate(pattern) for k in range(10)]


def test_cores_that_switch_together_and_cores_that_do_not() -> None:
    host = [True] * 20 + [False] * 30 + [True] * 10 + [False] * 40  # 100 bins of 5 ms: 0.5 s
    together = summarize({0: _trace(host), 1: _trace(host)}, 0.5, 5.0)
    assert together["same_level"] == 1.0 and together["mean_r"] == 1.0
    assert together["cores"]["0"]["fast_share"] == 0.3 and together["any_fast_share"] == 0.3
    assert together["cores"]["0"]["fast_ms"] == 75.0 and together["cores"]["0"]["slow_ms"] == 175.0
    # the second core fast exactly where the first is slow: a worker that moved would always be fast
    apart = summarize({0: _trace(host), 1: _trace([not f for f in host])}, 0.5, 5.0)
    assert apart["same_level"] == 0.0 and apart["mean_r"] == -1.0 and apart["any_fast_share"] == 1.0
    assert apart["independent"] == round(0.3 * 0.7 + 0.7 * 0.3, 3)


def test_a_real_read_on_two_cores_of_this_machine() -> None:
    got = read_group([0, 0], 0.3) if len(__import__("os").sched_getaffinity(0)) < 2 else read_group([0, 1], 0.3)
    assert got and all(len(r) > 100 for r in got.values())
    report = summarize(got, 0.3, 5.0)
    # under a loaded test run a reader can miss whole bins, and only bins both cores read are compared
    assert report["floor_ms"] > 0 and 0 <= report["bins"] <= 60
    assert all(0 <= c["fast_share"] <= 1 and c["readings"] > 100 for c in report["cores"].values())


def test_cores_with_no_bin_in_common_give_no_comparison() -> None:
    # one reader ran only in the first 10 ms, the other only after: no bin holds both
    report = summarize({0: [(0.001, 0.01), (0.002, 0.011)], 1: [(0.05, 0.01), (0.06, 0.012)]}, 0.1, 5.0)
    assert report["bins"] == 0 and report["same_level"] is None and report["any_fast_share"] == 0
