"""Would another estimator of a row's speedup, from the same recorded trials, make runs agree better?

Every evaluation records its trials' median per-call times (``extra.trial_ms``: reference, candidate, in
the order timed). This recomputes each row's speedup from them with several estimators and compares every
pair of runs given, over the rows ok in both and measured once (a re-checked row's kept figure comes from
more than its recorded trials): the median and 95th percentile of |a - b| / a, the agreement targets'
measure (the 95th percentile here interpolated between order statistics, where release_bench.py takes
the nearest one).

    python benchmarks/estimators.py RUN/a RUN/b [RUN/c ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.reports import percentile  # noqa: E402  linear between order statistics (numpy's default)

Trials = list[list[float]]


ESTIMATORS: dict[str, Callable[[Trials], float]] = {
    "median of the trials' ratios (in use)": lambda t: statistics.median(r / c for r, c in t),
    "ratio of the medians": lambda t: statistics.median(r for r, _ in t) / statistics.median(c for _, c in t),
    "ratio of the fastest trials": lambda t: min(r for r, _ in t) / min(c for _, c in t),
    "ratio of the lower quartiles": lambda t: percentile([r for r, _ in t], 25) / percentile([c for _, c in t], 25),
    "lower quartile of the ratios": lambda t: percentile([r / c for r, c in t], 25),
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
    """Each estimator's agreement over every pair of ``runs`` (rows by problem id, their trials).

    >>> a = {"r": [[2.0, 1.0], [2.2, 1.0], [2.0, 1.1]]}
    >>> b = {"r": [[2.0, 1.0], [2.1, 1.0], [2.2, 1.0]]}
    >>> table = compare([a, b])
    >>> table["median of the trials' ratios (in use)"]["agreement_median"], table["ratio of the fastest trials"]["agreement_median"]
    (0.05, 0.0)
    """
    table = {}
    for name, estimate in ESTIMATORS.items():
        deltas = []
        for a, b in itertools.combinations(runs, 2):
            for pid in sorted(set(a) & set(b)):
                x, y = estimate(a[pid]), estimate(b[pid])
                deltas.append(abs(x - y) / x)
        table[name] = {"pairs": len(deltas), "agreement_median": round(statistics.median(deltas), 4),
                       "agreement_p95": round(percentile(deltas, 95), 4)}
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
