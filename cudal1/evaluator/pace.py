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
agreed to 3.9% where every call's figures disagreed by 25.7% (:func:`fast_figure`). Each core switches
on its own (benchmarks/core_pace.py), so an evaluation timed wholly in its core's slow spell has no fast
calls to select; ``EvalConfig.fast_core`` moves the timed call to a fast core instead (cores.CoreHop).

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
    levels: tuple[list[float], list[float]] = ([], [])
    for ref_ms, ref_probes, cand_ms, cand_probes in trials:
        shares.append((len(_fast(ref_ms, ref_probes, fast)) / max(len(ref_ms), 1),
                       len(_fast(cand_ms, cand_probes, fast)) / max(len(cand_ms), 1)))
        ratio = fast_ratio(ref_ms, ref_probes, cand_ms, cand_probes, fast)
        if ratio is not None:
            ratios.append(ratio)
        for side, (ms, probes) in enumerate(((ref_ms, ref_probes), (cand_ms, cand_probes))):
            level = level_ratio(ms, probes, fast)
            if level is not None:
                levels[side].append(level)
    return {"fast_probe_ms": round(fast, 5), "fast_trials": len(ratios),
            "fast_speedup": round(statistics.median(ratios), 5) if ratios else None,
            "fast_share": [round(statistics.median(s[i] for s in shares), 3) for i in (0, 1)],
            "level_ratio": [round(statistics.median(side), 4) if side else None for side in levels]}


def level_ratio(ms: Sequence[float], probes: Sequence[float], fast: float) -> float | None:
    """How much slower one side's calls read at the slow level than at the fast one within a trial (median
    over median), None where either level has fewer than MIN_FAST calls: about the levels' 1.6x for a
    launch-bound program, about 1 for one whose time is the device's.

    >>> level_ratio([2.0, 2.0, 2.1, 3.2, 3.3, 3.2], [10.0] * 3 + [16.0] * 3, 12.0)
    1.6
    """
    quick = _fast(ms, probes, fast)
    slow = [t for t, p in zip(ms, probes) if p > fast]
    if min(len(quick), len(slow)) < MIN_FAST:
        return None
    return round(statistics.median(slow) / max(statistics.median(quick), 1e-9), 6)


# decided_speedup: the fast calls' figure stands for a row only over this many trials with one, only where
# the candidate's calls read fast at least SHARE_FLOOR times as often as the reference's, and only where its
# slow calls are no more than LEVEL_SLACK times slower against its fast ones than the reference's (or 1)
MIN_FAST_TRIALS = 3
SHARE_FLOOR = 0.5
LEVEL_SLACK = 1.15


def decided_speedup(record: dict[str, Any] | None, speedup: float) -> tuple[float, str]:
    """The figure a rule that decides by the host's fast pace would report, and why: the fast calls' figure
    (``"fast"``), or the figure over every call where that one is not to be trusted. Replayed offline on
    recorded evaluations (benchmarks/agreement_split.py); no evaluation reports it yet.

    Which of the candidate's calls read fast is its own process's to say, so the rule holds the candidate's
    calls to the reference's: a candidate that hid its costly calls behind slow probes would read fast less
    often than the reference (``candidate_share``), and its slow calls would be slower against its fast ones
    than the host's two levels make any program (``candidate_levels``).

    >>> record = {"fast_speedup": 2.0, "fast_trials": 5, "fast_share": [0.4, 0.35], "level_ratio": [1.6, 1.02]}
    >>> decided_speedup(record, 2.6)
    (2.0, 'fast')
    >>> decided_speedup(record | {"fast_share": [0.4, 0.1]}, 2.6)
    (2.6, 'candidate_share')
    >>> decided_speedup(record | {"level_ratio": [1.6, 2.4]}, 2.6), decided_speedup(record | {"fast_trials": 2}, 2.6)
    ((2.6, 'candidate_levels'), (2.6, 'few_fast_trials'))
    """
    if not record or not isinstance(record.get("fast_speedup"), (int, float)):
        return speedup, "no_fast_figure"
    if record.get("fast_trials", 0) < MIN_FAST_TRIALS:
        return speedup, "few_fast_trials"
    ref_share, cand_share = record.get("fast_share") or (0.0, 0.0)
    if cand_share < SHARE_FLOOR * ref_share:
        return speedup, "candidate_share"
    ref_level, cand_level = record.get("level_ratio") or (None, None)
    if cand_level is not None and cand_level > LEVEL_SLACK * max(ref_level or 1.0, 1.0):
        return speedup, "candidate_levels"
    return float(record["fast_speedup"]), "fast"


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
