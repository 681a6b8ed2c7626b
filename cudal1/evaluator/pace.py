"""The host CPU's own pace, read by the reference's timed worker around each timed batch.

On cloud GPU hosts the host CPU's speed changes in spells of seconds: a fixed piece of pure Python work
on the timed core took 1.0-1.1 ms in some spells and 1.6-2.0 ms in others, with no steal time counted
by the kernel, and the eager calls of launch-bound references followed it (round medians r = 0.72-0.98)
while their CUDA-graph replays did not (docs/gpu-runs.md#2026-11-27-graph-levels,
#2026-11-28-pace-steal). A program that is launch-bound is timed at the host's pace of the moment, so
two evaluations of one row taken in different spells disagree for a reason neither program controls.

Each evaluation records the pace its reference was timed at, and one taken at a pace well below the
device's recent fast pace is flagged ``host_slow``: a figure that may stray says so, as a contended one
does. Only the reference's worker is read: it runs trusted problem code, and a candidate that slows it
from its own core (a thread left spinning) is caught as contention (contention.py), not read as pace.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque

# An evaluation whose reference was timed at a pace this much slower than the device's fast pace is
# flagged. The spells measured differ by 1.5-1.9x; ordinary jitter of the probe stays within ~15%.
SLOW_PACE = 1.3
# The fast pace: a low percentile of the device's recent batches, so one lucky reading does not set it.
_RECENT = 256
_ENOUGH = 24
_FAST_QUANTILE = 0.1


def probe_ms(n: int = 3000) -> float:
    """Milliseconds a fixed piece of pure Python work takes on this core now (~0.15 ms at a fast pace):
    the host CPU's own speed, no device work in it."""
    t0 = time.perf_counter()
    total = 0
    for i in range(n):
        total += i * i
    return (time.perf_counter() - t0) * 1e3


class PaceFloor:
    """The recent paces of one device's timed batches and the fast pace among them.

    >>> floor = PaceFloor()
    >>> floor.fast() is None
    True
    >>> for pace in [0.10] * 20 + [0.18] * 20:
    ...     floor.observe(pace)
    >>> floor.fast(), floor.slow(0.12), floor.slow(0.18)
    (0.1, False, True)
    """

    def __init__(self) -> None:
        self._paces: deque[float] = deque(maxlen=_RECENT)
        self._lock = threading.Lock()

    def observe(self, pace_ms: float) -> None:
        if pace_ms > 0:
            with self._lock:
                self._paces.append(pace_ms)

    def fast(self) -> float | None:
        """The device's fast pace (ms of the probe), None until enough batches were read."""
        with self._lock:
            paces = sorted(self._paces)
        if len(paces) < _ENOUGH:
            return None
        return paces[int(_FAST_QUANTILE * (len(paces) - 1))]

    def slow(self, pace_ms: float) -> bool:
        fast = self.fast()
        return fast is not None and pace_ms > SLOW_PACE * fast


_floors: dict[str, PaceFloor] = {}
_floors_lock = threading.Lock()


def floor_for(device: str) -> PaceFloor:
    """The pace floor of one device (its timed core), shared by the evaluations timed on it."""
    with _floors_lock:
        return _floors.setdefault(device, PaceFloor())


def evaluation_pace(paces: list[float]) -> float | None:
    """The pace an evaluation's reference was timed at: the median of its batches' readings (each the
    slower of the readings before and after the batch), None where none was read.

    >>> evaluation_pace([0.1, 0.3, 0.12]), evaluation_pace([0.0]) is None
    (0.12, True)
    """
    read = [p for p in paces if p > 0]
    return statistics.median(read) if read else None
