"""The host CPU's own pace, read by the reference's timed worker around each timed batch.

On cloud GPU hosts the host CPU's speed changes in spells: a fixed piece of pure Python work on the timed
core took 1.0-1.2 ms in some spells and 1.6-2.1 ms in others, with no steal time counted by the kernel,
and the eager calls of launch-bound references followed it (round medians up to r = 0.98) while their
CUDA-graph replays did not (docs/gpu-runs.md#2026-11-27-graph-levels, #2026-11-27-host-pace).

Each evaluation records the pace its reference was timed at (``host_pace_ms``) and each used trial's
reading (``trial_pace_ms``), so anyone can see whether two evaluations of a row, or two trials of one,
were taken at different host speeds. Over the whole H100 release the pace did not explain the two runs'
disagreement: rows read at the same pace in both runs (within 15%) agreed no better than the others
(#2026-11-27-host-pace), and setting aside trials read at a slow pace brought two runs of 32 rows no
closer (#2026-11-27-pace-sample), so no figure is flagged or set aside by it.

Those spells last tens of milliseconds (two levels 1.6x apart, a median 21-31 ms each on an idle H200
host; docs/gpu-runs.md#2026-11-29-pace-spells), so a batch of about 40 ms mixes both and the readings at
its two ends cannot see the mix. Read right before each call instead (``EvalConfig.call_pace``, record
only), the calls at the fast level give a launch-bound row a figure that repeats: evaluations 1 s apart
agreed to 3.9% where every call's figures disagreed by 25.7% (:func:`fast_figure`).

Only the reference's worker is read around a batch: it runs trusted problem code, and the candidate's process is
stopped while the reference is timed (trials._time_reference), so no thread of its can slow it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

# EvalConfig.call_pace: the probe before each timed call (about 12 µs at a fast pace on an H200 host), a
# call read at the fast level where its probe is within FAST_SLACK of the reference's 10th percentile (the
# two levels are about 1.6x apart), and a trial's fast figure only where each side has MIN_FAST such calls
CALL_PROBE_STEPS = 300
FAST_SLACK = 1.25
MIN_FAST = 3


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


def call_probes(reply: dict[str, Any], calls: int) -> tuple[float, ...]:
    """A timing reply's probe before each call (``call_pace_ms``), or () where it sent none, or not one
    number for each of its ``calls`` calls.

    >>> call_probes({"call_pace_ms": [0.01, 0.02]}, 2), call_probes({"call_pace_ms": [0.01, "x"]}, 2)
    ((0.01, 0.02), ())
    """
    read = reply.get("call_pace_ms")
    if not isinstance(read, list) or len(read) != calls or not all(isinstance(p, (int, float)) for p in read):
        return ()
    return tuple(float(p) for p in read)


def fast_figure(trials: Sequence[tuple[Sequence[float], Sequence[float], Sequence[float], Sequence[float]]]
                ) -> dict[str, Any] | None:
    """The speedup over the calls read at the host's fast level (EvalConfig.call_pace), from each trial's
    (reference ms, its probes, candidate ms, its probes), call by call. Recorded beside the figure over every
    call; it decides nothing. The level is taken from the reference's probes only (its worker runs trusted
    problem code): a candidate that slowed its own probes could only have fewer of its calls read fast.
    None where no probe was read.

    The host's pace switches between two levels about 1.6x apart in spells of tens of milliseconds, inside
    one timed batch; a launch-bound program's median over every call follows the share of the batch spent
    in each (docs/gpu-runs.md#2026-11-29-pace-spells).

    >>> fast = [0.010] * 4 + [0.016] * 4
    >>> figure = fast_figure([([2.0, 2.1, 2.0, 2.2, 3.3, 3.2, 3.4, 3.3], fast, [1.0] * 8, fast)])
    >>> figure["fast_speedup"], figure["fast_trials"], figure["fast_share"]
    (2.05, 1, [0.5, 0.5])
    """
    reference = sorted(p for _, probes, _, _ in trials for p in probes)
    if not reference:
        return None
    fast = FAST_SLACK * reference[len(reference) // 10]
    ratios: list[float] = []
    shares: list[tuple[float, float]] = []
    for ref_ms, ref_probes, cand_ms, cand_probes in trials:
        shares.append((len(_fast(ref_ms, ref_probes, fast)) / max(len(ref_ms), 1),
                       len(_fast(cand_ms, cand_probes, fast)) / max(len(cand_ms), 1)))
        ratio = fast_ratio(ref_ms, ref_probes, cand_ms, cand_probes, fast)
        if ratio is not None:
            ratios.append(ratio)
    return {"fast_probe_ms": round(fast, 5), "fast_trials": len(ratios),
            "fast_speedup": round(statistics.median(ratios), 5) if ratios else None,
            "fast_share": [round(statistics.median(s[i] for s in shares), 3) for i in (0, 1)]}


def _fast(ms: Sequence[float], probes: Sequence[float], fast: float) -> list[float]:
    """The times of the calls whose probe read at or below ``fast``."""
    return [t for t, p in zip(ms, probes) if p <= fast]


def fast_ratio(ref_ms: Sequence[float], ref_probes: Sequence[float], cand_ms: Sequence[float],
               cand_probes: Sequence[float], fast: float) -> float | None:
    """One trial's ratio of the reference's median to the candidate's over the calls whose probe read at or
    below ``fast``; None where either side has fewer than MIN_FAST of them.

    >>> fast_ratio([2.0, 2.2, 2.1, 3.5, 3.6], [10.0, 10.0, 10.0, 16.0, 16.0], [1.0, 1.0, 1.1, 1.0],
    ...            [10.0, 10.0, 16.0, 10.0], 12.0)
    2.1
    >>> fast_ratio([2.1, 3.5, 3.6], [10.0, 16.0, 16.0], [1.0] * 4, [10.0] * 4, 12.0) is None
    True
    """
    ref_fast, cand_fast = _fast(ref_ms, ref_probes, fast), _fast(cand_ms, cand_probes, fast)
    if min(len(ref_fast), len(cand_fast)) < MIN_FAST:
        return None
    return statistics.median(ref_fast) / max(statistics.median(cand_fast), 1e-9)
