"""Do runs of a row disagree more when their calls per trial differ? Runs anywhere, no GPU, on release_eval.py's
folders: every folder under ROOT that holds a results.jsonl is a run, and the runs side by side in one
folder are runs of the same rows (a cold run beside its warm one, an A/B's arms):

    python benchmarks/calls_mismatch.py docs/benchmarks --json calls-mismatch.json

For every pair of runs in a folder, over the rows ok in both: |delta speedup| / speedup (as
agreement_split.py), split by whether the two evaluations' calls per trial (``iters_per_trial``) were
within ``--apart`` times of each other. The calibration reads each program's cost from a two-call batch,
one iteration a side, so one stalled iteration sets a 0.1 ms kernel to a few calls a trial
(trials._pairs re-reads it from the first trial). ``same_rows_alike`` holds the pairs with calls alike of
the rows that had a pair apart: the same rows, so a row's own noise is in both groups.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.agreement_noise import gap_summary, ok_pairs, row_extra  # noqa: E402
from benchmarks.agreement_split import load  # noqa: E402
from cudal1.candidates import Evaluation  # noqa: E402


def calls(row: Evaluation) -> int | None:
    value = row_extra(row, "iters_per_trial")
    return value if isinstance(value, int) and value > 0 else None


def by_calls(groups: list[list[dict[str, Evaluation]]], apart: float = 4.0) -> dict[str, Any]:
    """Gaps of the pairs whose calls per trial were ``apart`` times or more apart, and of those within it
    (all of them, and those of the rows that were also apart once)."""
    gaps: dict[str, list[tuple[tuple[int, str], float]]] = {"apart": [], "alike": []}  # (group, row), gap
    for index, runs in enumerate(groups):
        for row, other, gap in ok_pairs(runs):
            a, b = calls(row), calls(other)
            if a is None or b is None:
                continue
            key = "apart" if max(a, b) >= apart * min(a, b) else "alike"
            gaps[key].append(((index, row.problem_id), gap))
    rows_apart = {row for row, _ in gaps["apart"]}
    return gap_summary({"apart": [g for _, g in gaps["apart"]], "alike": [g for _, g in gaps["alike"]],
                     "same_rows_alike": [g for row, g in gaps["alike"] if row in rows_apart]})


def run_groups(root: Path) -> list[list[dict[str, Evaluation]]]:
    """The runs under ``root``, grouped by the folder that holds them side by side."""
    folders: dict[Path, list[Path]] = defaultdict(list)
    for results in sorted(root.rglob("results.jsonl")):
        folders[results.parent.parent].append(results.parent)
    return [[load(run) for run in runs] for runs in folders.values() if len(runs) > 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path, help="a folder holding release_eval.py run folders, at any depth")
    ap.add_argument("--apart", type=float, default=4.0, help="calls per trial this many times apart or more")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    report = by_calls(run_groups(args.root), args.apart)
    labels = {"apart": f"calls per trial {args.apart:g}x apart or more", "alike": "calls per trial alike",
              "same_rows_alike": "the same rows, calls per trial alike"}
    for key, g in report.items():
        print(f"{labels[key]}: {g['rows']} pairs, median {g['median']:.2%}, p95 {g['p95']:.2%}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
