"""Would another estimator of a row's speedup, from the same recorded trials, make runs agree better?

Every evaluation records its trials' median per-call times (``extra.trial_ms``: reference, candidate, in
the order timed). This recomputes each row's speedup from them with several estimators and compares every
pair of runs given, over the rows ok in both and measured once (a re-checked row's kept figure comes from
more than its recorded trials): the median and 95th percentile of |a - b| / a, as release_bench.py
defines the agreement targets.

    python benchmarks/estimators.py RUN/a RUN/b [RUN/c ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

Trials = list[list[float]]


def quantile(values: list[float], f: float) -> float:
    """Linear interpolation between order statistics (numpy's default).

    >>> quantile([1.0, 2.0, 3.0, 4.0], 0.25)
    1.75
    """
    xs = sorted(values)
    i = f * (len(xs) - 1)
    lo = int(i)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)


ESTIMATORS: dict[str, Callable[[Trials], float]] = {
    "median of the trials' ratios (in use)": lambda t: statistics.median(r / c for r, c in t),
    "ratio of the medians": lambda t: statistics.median(r for r, _ in t) / statistics.median(c for _, c in t),
    "ratio of the fastest trials": lambda t: min(r for r, _ in t) / min(c for _, c in t),
    "ratio of the lower quartiles": lambda t: quantile([r for r, _ in t], 0.25) / quantile([c for _, c in t], 0.25),
    "lower quartile of the ratios": lambda t: quantile([r / c for r, c in t], 0.25),
}


def load_run(run: Path) -> dict[str, Trials]:
    """The trials of each row ok and measured once, by problem id."""
    rows: dict[str, Trials] = {}
    for line in (run / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        extra = json.loads(r.get("extra") or "{}")
        if r["status"] == "ok" and extra.get("trial_ms") and "recheck_speedups" not in extra:
            rows[r["problem_id"]] = extra["trial_ms"]
    return rows


def compare(runs: list[dict[str, Trials]]) -> dict[str, dict[str, Any]]:
    table = {}
    for name, estimate in ESTIMATORS.items():
        deltas = []
        for a, b in itertools.combinations(runs, 2):
            for pid in sorted(set(a) & set(b)):
                x, y = estimate(a[pid]), estimate(b[pid])
                deltas.append(abs(x - y) / x)
        table[name] = {"pairs": len(deltas), "agreement_median": round(statistics.median(deltas), 4),
                       "agreement_p95": round(quantile(deltas, 0.95), 4)}
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="release_eval.py folders of the same rows")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if len(args.runs) < 2:
        ap.error("give two runs or more")
    table = compare([load_run(r) for r in args.runs])
    for name, row in table.items():
        print(f"{name:40s} {row['pairs']:5d} row pairs  median {row['agreement_median']:.2%}  "
              f"p95 {row['agreement_p95']:.2%}")
    if args.json:
        args.json.write_text(json.dumps({"runs": [str(r) for r in args.runs], "estimators": table}, indent=1) + "\n")


if __name__ == "__main__":
    main()
