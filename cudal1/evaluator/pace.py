"""The host CPU's own pace, read by the reference's timed worker around each timed batch.

On cloud GPU hosts the host CPU's speed changes in spells (a fixed piece of pure Python work on the timed
core took 1.0-1.2 ms in some and 1.6-2.1 ms in others, with no steal time counted by the kernel), and the
eager calls of launch-bound references follow it. Each evaluation records the pace its reference was timed
at (``host_pace_ms``) and each used trial's reading (``trial_pace_ms``), so anyone can see whether two
evaluations of a row, or two trials of one, were taken at different host speeds. Nothing is decided by
it: the pace did not explain two runs' disagreement, and setting slow trials aside brought runs no closer.

Only the reference's worker is read around a batch: it runs trusted problem code, and the candidate's
process is stopped while the reference is timed (trials._time_reference), so no thread of its can slow it.
"""

from __future__ import annotations

import statistics
import time


def probe_ms(n: int = 3000) -> float:
    """Milliseconds a fixed piece of pure Python work takes on this core now (~0.15 ms at a fast pace):
    the host CPU's own speed, no device work in it."""
    t0 = time.perf_counter()
    total = 0
    for i in range(n):
        total += i * i
    return (time.perf_counter() - t0) * 1e3


def evaluation_pace(paces: list[float]) -> float | None:
    """The pace an evaluation's reference was timed at: the median of its batches' readings (each the
    slower of the readings before and after the batch), None where none was read.

    >>> evaluation_pace([0.1, 0.3, 0.12]), evaluation_pace([0.0]) is None
    (0.12, True)
    """
    read = [p for p in paces if p > 0]
    return statistics.median(read) if read else None
