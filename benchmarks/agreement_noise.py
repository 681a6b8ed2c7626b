"""The noise in runs of the same rows, as benchmarks/agreement_split.py prints it: the rows ok in both runs of
each pair (``ok_pairs``), the noise budget (within an evaluation, against its interval, along a run's row
order, against the host's pace) and what more than one sitting per row would buy. Runs anywhere, no GPU."""

from __future__ import annotations

import itertools
import math
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.graph_levels import correlation  # noqa: E402
from cudal1.candidates import Evaluation, Status  # noqa: E402


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def ok_pairs(runs: list[dict[str, Evaluation]]) -> Iterator[tuple[Evaluation, Evaluation, float]]:
    """Every row ok in both runs of every pair of runs: the first run's row, the second's, and
    |delta speedup| / speedup."""
    for a, b in itertools.combinations(runs, 2):
        for pid, row in a.items():
            other = b.get(pid)
            if row.status is Status.OK and other is not None and other.status is Status.OK:
                yield row, other, abs(other.speedup - row.speedup) / row.speedup  # type: ignore[operator]


def gap_summary(groups: dict[str, list[float]]) -> dict[str, Any]:
    """Rows, median and 95th percentile of each non-empty group of gaps."""
    return {k: {"rows": len(g), "median": round(statistics.median(g), 4), "p95": round(p95(g), 4)}
            for k, g in groups.items() if g}


def row_extra(row: Evaluation, key: str) -> Any:
    return row.extra.get(key) if isinstance(row.extra, dict) else None


def robust_sd(xs: list[float]) -> float:
    """1.4826 x the median absolute deviation (a normal's sd), of logs where the values are times."""
    mid = statistics.median(xs)
    return 1.4826 * statistics.median(abs(x - mid) for x in xs)


def noise_budget(runs: list[dict[str, Evaluation]]) -> dict[str, Any]:
    """Where the disagreement sits, from the rows ok in both runs of each pair: within an evaluation (each
    trial's ratio, reference and candidate spread, robust sd of logs, and how the two programs' trial
    medians move together), against what the evaluations' own intervals foretell (|log ratio| over the two
    intervals' combined standard error: 0.67 at the median and 1.96 at the 95th percentile if the
    intervals told the whole story), along each run's row order (lag-1 r of the rows' log ratios: rows
    timed one after another that move together share a spell of the host), and against the host's pace.

    >>> from cudal1.candidates import Evaluation
    >>> def run(s, ref): return {f"r{i}": Evaluation(f"r{i}", "c", Status.OK, speedup=s * (1 + i / 100), reference_ms=1.0,
    ...     candidate_ms=0.5, speedup_low=s * 0.98, speedup_high=s * 1.02,
    ...     extra={"trial_ms": [[x, 0.5] for x in ref]}) for i in range(4)}
    >>> b = noise_budget([run(2.0, [1.0, 1.1, 0.9, 1.0]), run(2.2, [1.0, 1.0, 1.0, 1.05])])
    >>> b["beyond_intervals"]["median_z"], b["within"]["candidate_sd"]
    (6.6, 0.0)
    """

    ratio_sd, ref_sd, cand_sd, together, zs = [], [], [], [], []
    for row, other, _ in ok_pairs(runs):
        for r in (row, other):
            trials = row_extra(r, "trial_ms")
            if trials and len(trials) >= 3:
                a, b = [math.log(t[0]) for t in trials], [math.log(t[1]) for t in trials]
                ratio_sd.append(robust_sd([x - y for x, y in zip(a, b)]))
                ref_sd.append(robust_sd(a))
                cand_sd.append(robust_sd(b))
                r_ab = correlation(a, b, digits=3)
                if r_ab is not None:
                    together.append(r_ab)
        if all(r.speedup_low and r.speedup_high for r in (row, other)):
            se = math.hypot(*((math.log(r.speedup_high) - math.log(r.speedup_low)) / 3.92 for r in (row, other)))  # type: ignore[arg-type]
            if se > 0:
                zs.append(abs(math.log(other.speedup / row.speedup)) / se)  # type: ignore[operator]
    out: dict[str, Any] = {}
    if ratio_sd:
        out["within"] = {"evaluations": len(ratio_sd), "trial_ratio_sd": round(statistics.median(ratio_sd), 4),
                         "reference_sd": round(statistics.median(ref_sd), 4), "candidate_sd": round(statistics.median(cand_sd), 4),
                         "reference_candidate_r": round(statistics.median(together), 2) if together else None}
    if zs:
        out["beyond_intervals"] = {"rows": len(zs), "median_z": round(statistics.median(zs), 2), "p95_z": round(p95(zs), 2)}
    order_r, pace_r = [], {}
    for first, second in itertools.combinations(runs, 2):
        shared = [p for p in first if first[p].status is Status.OK and p in second and second[p].status is Status.OK]
        logs = {p: math.log(second[p].speedup / first[p].speedup) for p in shared}  # type: ignore[operator]
        for run in (first, second):
            seq = [logs[p] for p in run if p in logs]
            if len(seq) > 2:
                order_r.append(correlation(seq[:-1], seq[1:], digits=2))
        paced = [p for p in shared if row_extra(first[p], "host_pace_ms") and row_extra(second[p], "host_pace_ms")]
        if len(paced) > 2:
            dpace = [math.log(row_extra(second[p], "host_pace_ms") / row_extra(first[p], "host_pace_ms")) for p in paced]
            for key, attr in (("reference", "reference_ms"), ("candidate", "candidate_ms"), ("speedup", "speedup")):
                moved_by = [math.log(getattr(second[p], attr) / getattr(first[p], attr)) for p in paced]
                pace_r.setdefault(key, []).append(correlation(dpace, moved_by, digits=2))
    out["order_lag1_r"] = order_r
    out["pace_r"] = pace_r
    return out


def sittings(runs: list[dict[str, Evaluation]], most: int = 3) -> list[dict[str, Any]]:
    """What measuring each row at more than one sitting would buy: the runs split into two disjoint sets of
    ``k`` sittings each (every such split, for k = 1 up to ``most`` and half the runs), each side's speedup
    the geometric mean of its sittings', and the two sides' agreement over the rows ok in every run of the
    split (median and 95th percentile of |delta| / speedup, each the median over the splits). Noise that is
    each sitting's own falls as 1/sqrt(k).

    >>> def run(*speedups):
    ...     return {f"r{i}": Evaluation(f"r{i}", "c", Status.OK, speedup=s) for i, s in enumerate(speedups)}
    >>> [(s["sittings"], s["splits"], s["rows"]) for s in sittings([run(1.0, 2.0), run(1.1, 2.0), run(0.9, 2.0), run(1.0, 2.2)])]
    [(1, 6, 2), (2, 3, 2)]
    """
    out = []
    for k in range(1, min(most, len(runs) // 2) + 1):
        medians, tails, rows = [], [], 0
        for left in itertools.combinations(range(len(runs)), k):
            rest = [i for i in range(len(runs)) if i not in left]
            for right in itertools.combinations(rest, k):
                if min(right) < min(left):
                    continue  # a split once, not both ways round
                gaps = []
                for pid in runs[left[0]]:
                    rows_here = [runs[i].get(pid) for i in left + right]
                    if not all(r is not None and r.status is Status.OK and r.speedup for r in rows_here):
                        continue
                    x = math.exp(statistics.fmean(math.log(r.speedup) for r in rows_here[:k]))  # type: ignore[union-attr, arg-type]
                    y = math.exp(statistics.fmean(math.log(r.speedup) for r in rows_here[k:]))  # type: ignore[union-attr, arg-type]
                    gaps.append(abs(y - x) / x)
                if gaps:
                    medians.append(statistics.median(gaps))
                    tails.append(p95(gaps))
                    rows = max(rows, len(gaps))
        if medians:
            out.append({"sittings": k, "splits": len(medians), "rows": rows,
                        "median": round(statistics.median(medians), 4), "p95": round(statistics.median(tails), 4)})
    return out
