"""Re-checks with the re-measurement's worker loaded ahead (recheck.Twins) or started afresh, alternating on
one machine. Every program of the starter suite is its own reference as ``ModelNew`` (the template
teacher's ``baseline``) and every ok speedup is re-checked (``recheck_above`` 0), so each row has a
re-measurement or two. A first batch with no history makes the history the later "ahead" batches are
given; then each round runs both ways, in alternating order.

    .venv/bin/python benchmarks/recheck_ahead.py --device cpu --rounds 3

Prints one JSON object: per batch its mode, wall clock, the rows' summed ``row_s`` (the device loop's
whole time on each row, re-measurements included), how many re-checks used a worker loaded ahead, and
the summed ``load_s`` of the kept measurements (a fresh worker's start and load shows there when the
re-measurement is the one kept).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.candidates import Candidate, Evaluation, load_evaluations  # noqa: E402
from cudal1.evaluator import EvalConfig  # noqa: E402
from cudal1.evaluator.batch import evaluate_many  # noqa: E402
from cudal1.generation.templates import template_source  # noqa: E402
from cudal1.problems import load_starter_suite  # noqa: E402


def summary(mode: str, rows: list[Evaluation], wall: float) -> dict:
    return {"mode": mode, "rows": len(rows), "wall_s": round(wall, 2),
            "row_s": round(sum(e.extra.get("row_s", 0.0) for e in rows), 2),
            "measurements": sum(len(e.extra.get("recheck_speedups", [])) for e in rows),
            "rechecks_ahead": sum(bool(e.extra.get("recheck_ahead")) for e in rows),
            "kept_load_s": round(sum(e.extra.get("load_s", 0.0) for e in rows), 2),
            "statuses": sorted({e.status.value for e in rows})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    problems = load_starter_suite()
    candidates = [Candidate(p.problem_id, template_source(p, "baseline"), origin="control") for p in problems]
    config = EvalConfig(device=args.device, recheck_above=0.0)
    root = Path(tempfile.mkdtemp(prefix="recheck-ahead-"))
    runs: list[dict] = []

    def batch(name: str, history: list[Evaluation]) -> None:
        """One batch; an empty history foretells no re-check, so every re-measurement starts afresh."""
        started = time.perf_counter()
        rows = evaluate_many(problems, candidates, config, results_path=root / f"{name}.jsonl", history=history)
        runs.append(summary("ahead" if history else "fresh", rows, time.perf_counter() - started) | {"batch": name})
        print(json.dumps(runs[-1]), file=sys.stderr, flush=True)

    batch("history", [])
    history = load_evaluations(root / "history.jsonl")
    for r in range(args.rounds):
        for mode in (("fresh", "ahead") if r % 2 else ("ahead", "fresh")):
            batch(f"{mode}-{r}", history if mode == "ahead" else [])
    totals = {mode: [run["row_s"] for run in runs[1:] if run["mode"] == mode] for mode in ("fresh", "ahead")}
    print(json.dumps({"device": args.device, "runs": runs, "row_s": totals}, indent=1))


if __name__ == "__main__":
    main()
