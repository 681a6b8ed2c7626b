"""Does stopping the candidate while the reference is timed (EvalConfig.quiet_candidate) bias a speedup?
Each problem's own reference is evaluated as its candidate, with the candidate stopped (``quiet``) and
not (``awake``), the two arms alternating problem by problem and round by round, on the evaluator's own
path (``evaluate_candidate``, the GPU suite's settings: three trials, no re-check). An unbiased evaluator
reads 1x in both arms; a bias shows as one arm's median away from 1, and in the trials where the
reference went first (the candidate timed right after it was resumed) against those where it went second.

    PYTHONPATH=. python3 benchmarks/quiet_ab.py --device cuda:0 --problems 8 --rounds 3 --json $OUT/quiet-ab.json

Problem code only (trusted references as candidates).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.candidates import Candidate  # noqa: E402
from cudal1.evaluator.config import EvalConfig  # noqa: E402
from cudal1.evaluator.core import evaluate_candidate  # noqa: E402
from cudal1.problems import Problem, load_starter_suite  # noqa: E402

ARMS = {"quiet": True, "awake": False}


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 4) if xs else None


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm: the evaluations' median speedup, and the trials' median ratio by which program went first.

    >>> rows = [{"arm": "quiet", "speedup": 0.9, "trials": [{"ratio": 0.8, "ref_first": True}]},
    ...         {"arm": "awake", "speedup": 1.0, "trials": [{"ratio": 1.0, "ref_first": False}]}]
    >>> summarise(rows)["quiet"]
    {'evaluations': 1, 'speedup_median': 0.9, 'ref_first_ratio': 0.8, 'cand_first_ratio': None}
    """
    out: dict[str, Any] = {}
    for arm in ARMS:
        mine = [r for r in rows if r["arm"] == arm and r.get("speedup")]
        trials = [t for r in mine for t in r["trials"]]
        out[arm] = {"evaluations": len(mine), "speedup_median": _median([r["speedup"] for r in mine]),
                    "ref_first_ratio": _median([t["ratio"] for t in trials if t["ref_first"]]),
                    "cand_first_ratio": _median([t["ratio"] for t in trials if not t["ref_first"]])}
    return out


def measure(problems: list[Problem], rounds: int, device: str) -> list[dict[str, Any]]:
    """Each problem's reference against itself in both arms, the arms' order alternating by problem and
    round: one row per evaluation, with its trials' ratios and which program went first."""
    rows: list[dict[str, Any]] = []
    with mock.patch.dict(os.environ, {"CUDAL1_TIMING_TRACE": "1"}):  # each trial's figures in the extra
        for rnd, (i, problem) in itertools.product(range(rounds), enumerate(problems)):
            for arm in list(ARMS) if (rnd + i) % 2 == 0 else list(reversed(ARMS)):
                config = EvalConfig(device=device, timing_trials=3, remeasure=0, run_timeout_s=60,
                                    build_timeout_s=300, quiet_candidate=ARMS[arm])
                candidate = Candidate(problem.problem_id,
                                      problem.source.replace("class Model(", "class ModelNew("), "quiet-ab")
                e = evaluate_candidate(problem, candidate, config)
                trials = [{k: t[k] for k in ("ratio", "ref_first", "ref_ms", "cand_ms")}
                          for t in e.extra.get("trace") or []]
                row = {"problem": problem.problem_id, "round": rnd, "arm": arm, "status": e.status.value,
                       "speedup": e.speedup, "trials": trials, "idle_cpu_ms": e.extra.get("candidate_idle_cpu_ms")}
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "trials"}), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--problems", type=int, default=8, help="the starter suite's first N problems")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rows = measure(load_starter_suite()[: args.problems], args.rounds, args.device)
    summary = summarise(rows)
    print("summary", json.dumps(summary), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
