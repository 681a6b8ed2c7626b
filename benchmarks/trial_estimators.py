"""Would another figure from an evaluation's own trials agree better between runs? Runs anywhere, no GPU,
on release_eval.py's folders: each argument is one group of runs of the same rows, comma-separated; every
pair within a group is compared over the rows ok in both, and the pairs are pooled.

    python benchmarks/trial_estimators.py docs/benchmarks/confirm-edge-h200/half/cold,docs/benchmarks/confirm-edge-h200/half/warm

The figures, each from ``extra.trial_ms`` (each trial's reference and candidate time a call): the median of
the trials' ratios (what the evaluator reports), the ratio of each side's median, of each side's fastest
trial, and of each side's lower quartile and tenth percentile (a slow spell of the host lifts a side's
trials; its fastest ones might see fewer of them).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.agreement_noise import ok_pairs, p95, row_extra  # noqa: E402
from benchmarks.agreement_split import load  # noqa: E402
from cudal1.candidates import Evaluation  # noqa: E402

Trials = list[tuple[float, float]]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _sides(q: float) -> Callable[[Trials], float]:
    return lambda t: quantile([r for r, _ in t], q) / quantile([c for _, c in t], q)


ESTIMATORS: dict[str, Callable[[Trials], float]] = {
    "median of the trials' ratios": lambda t: statistics.median(r / c for r, c in t),
    "each side's median": _sides(0.5),
    "each side's fastest trial": _sides(0.0),
    "each side's lower quartile": _sides(0.25),
    "each side's tenth percentile": _sides(0.10),
}


def gaps(groups: list[list[Path]]) -> dict[str, list[float]]:
    """|delta| / first over every pair of runs within each group, over the rows ok in both that carry their
    trials, by estimator."""
    out: dict[str, list[float]] = {name: [] for name in ESTIMATORS}
    for group in groups:
        for a, b, _ in ok_pairs([load(run) for run in group]):
            ta, tb = _trials(a), _trials(b)
            if not ta or not tb:
                continue
            for name, figure in ESTIMATORS.items():
                first = figure(ta)
                out[name].append(abs(figure(tb) - first) / first)
    return out


def _trials(e: Evaluation) -> Trials:
    """An evaluation's (reference ms, candidate ms) trials; empty where it kept none."""
    return [(float(r), float(c)) for r, c in row_extra(e, "trial_ms") or []]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("groups", nargs="+", help="comma-separated run folders of the same rows")
    args = ap.parse_args()
    pooled = gaps([[Path(p) for p in g.split(",")] for g in args.groups])
    for name, values in pooled.items():
        print(f"{name:30s} {len(values):5d} pairs  median {statistics.median(values):.2%}  p95 {p95(values):.2%}")


if __name__ == "__main__":
    main()
