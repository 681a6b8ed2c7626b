"""Re-measure a CUDA-L1 release file (../shared/cuda-l1/<gpu>.jsonl) under the full protocol.

Runs on the GPU machine with torch and this package only (no polars, no Prefect), from the repository root:

    PYTHONPATH=. python3 benchmarks/release_eval.py --release carry/h100.jsonl --devices cuda:0 \\
        --out $OUT/cold [--limit N | --rows L1-1,L2-5] [--baselines cuda_graph] [--agree-with RUN/results.jsonl]

Every row's released program is evaluated against the row's own reference (eager). Baselines are the
template teacher's rewrites of the reference (``cuda_graph``, ``compile-default``,
``compile-reduce-overhead``) evaluated against the same eager reference. Writes results.jsonl (after every
evaluation: a second invocation on the same --out resumes it) and summary.json under --out, and prints the
summary. ``--agree-with`` adds the two-run agreement with an earlier run (cudal1.reports.run_agreement).
benchmarks/release_run.sh runs it as a cold-then-warm pair that outlives a device call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.evaluator.config import EvalConfig  # noqa: E402
from cudal1.evaluator.process import prestart_fork_server  # noqa: E402

if __name__ == "__main__":
    # the workers' fork server imports torch beside this script's own imports, as `cudal1 evaluate` does
    prestart_fork_server(EvalConfig.cpu_threads)

from cudal1.candidates import Candidate, Evaluation, load_evaluations  # noqa: E402
from cudal1.evaluator import evaluate_many  # noqa: E402
from cudal1.generation.templates import template_source  # noqa: E402
from cudal1.problems import load_cudal1_release  # noqa: E402
from cudal1.reports import percentile, run_agreement  # noqa: E402

BASELINES = {"cuda_graph": ("cuda_graph", None), "compile-default": ("compile", "default"),
             "compile-reduce-overhead": ("compile", "reduce-overhead")}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", required=True, type=Path)
    ap.add_argument("--devices", default="cuda:0", help="comma-separated, e.g. cuda:0,cuda:1")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--limit", type=int, default=0, help="first N rows with a program (0: all)")
    ap.add_argument("--rows", default="", help="comma-separated problem ids, e.g. L1-1,L2-5")
    ap.add_argument("--baselines", default="", help=f"comma-separated from {sorted(BASELINES)}")
    ap.add_argument("--tolerance", type=float, default=1e-2, help="EvalConfig.tolerance (CUDA-L1's 1e-2)")
    ap.add_argument("--trials", type=int, default=5, help="EvalConfig.timing_trials: timing trials at least")
    ap.add_argument("--agree-with", type=Path, default=None, help="an earlier run's results.jsonl")
    ap.add_argument("--costs-from", type=Path, default=None,
                    help="an earlier run's results.jsonl: problems go to the devices largest first by what they "
                         "cost there, and its re-checked programs are expected again (default: what --out holds)")
    return ap.parse_args(argv)


def inputs(args: argparse.Namespace) -> tuple[list, list[Candidate]]:
    """The chosen rows' problems, and their released programs followed by the asked baselines."""
    rows = [r for r in load_cudal1_release(args.release) if r.candidate_source]
    if args.rows:
        wanted = set(args.rows.split(","))
        rows = [r for r in rows if r.problem.problem_id in wanted]
    if args.limit:
        rows = rows[: args.limit]
    problems = [r.problem for r in rows]
    candidates = [Candidate(r.problem.problem_id, r.candidate_source or "", origin=f"cudal1-{r.gpu}") for r in rows]
    for name in filter(None, args.baselines.split(",")):
        variant, mode = BASELINES[name]
        candidates += [Candidate(p.problem_id, template_source(p, variant, mode), origin=f"template:{name}")
                       for p in problems]
    return problems, candidates


def spread(values: list[float]) -> dict[str, float]:
    """Median, 90th percentile and max of per-evaluation figures.

    >>> spread([2.0, 20.0])
    {'median': 11.0, 'p90': 18.2, 'max': 20.0}
    """
    if not values:
        return {}
    return {"median": round(statistics.median(values), 2), "p90": round(percentile(values, 90), 2),
            "max": round(max(values), 2)}


def time_split(evaluations: list[Evaluation]) -> dict[str, float]:
    """Summed seconds per phase over the evaluations (phases overlap across devices and builds): the
    builds, the evaluations, and the phases of an evaluation its record carries."""
    split: dict[str, float] = {}
    for e in evaluations:
        for key in ("build_s", "eval_s"):
            split[key] = split.get(key, 0.0) + (getattr(e, key) or 0.0)
        for key in ("load_s", "correctness_s", "timing_s", "wait_s", "row_s"):
            split[key] = split.get(key, 0.0) + float(e.extra.get(key) or 0.0)
    return {k: round(v, 1) for k, v in split.items()}


def summarize(mine: list[Evaluation], rows: int, evaluated_here: int, wall: float, config: EvalConfig,
              devices: str) -> dict[str, Any]:
    """What summary.json holds. ``wall_s`` is this invocation's: where it resumed a run (evaluated_here <
    evaluations) the run's wall is not here (release_run.sh keeps each call's in calls.jsonl)."""
    speedups = [e.speedup for e in mine if e.speedup is not None]
    return {
        "rows": rows, "evaluations": len(mine), "evaluated_here": evaluated_here, "wall_s": round(wall, 1),
        "per_evaluation_s": round(wall / max(evaluated_here, 1), 2),
        "statuses": dict(Counter(e.status.value for e in mine)),
        "median_speedup": statistics.median(speedups) if speedups else None,
        "time_split_s": time_split(mine), "eval_s": spread([e.eval_s or 0.0 for e in mine]),
        "config": config.to_dict(), "cpu_count": os.cpu_count(), "devices": devices,
        # the defences that read the host: a candidate kept working while idle, a device kept busy
        "rejected_for_idle_work": sorted(e.problem_id for e in mine if "kept running on the CPU" in e.reason),
        "rejected_for_busy_device": sorted(e.problem_id for e in mine if "device was still busy" in e.reason),
        # builds found in the cache and done again at the load (the builder's reason)
        "cache_rebuilt": {e.problem_id: e.extra["cache_rebuilt"] for e in mine if e.extra.get("cache_rebuilt")},
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    problems, candidates = inputs(args)
    devices = args.devices.split(",")
    config = EvalConfig(device=devices[0], tolerance=args.tolerance, timing_trials=args.trials)
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.jsonl"
    before = len(load_evaluations(results_path)) if results_path.exists() else 0  # a resumed run's earlier rows
    done = [0]
    started = time.perf_counter()

    def progress(e: Evaluation) -> None:
        done[0] += 1
        speed = "-" if e.speedup is None else f"{e.speedup:.2f}x"
        print(f"[{done[0]}/{len(candidates)} {time.perf_counter() - started:6.1f}s] {e.problem_id:7s} "
              f"{e.status.value:13s} {speed:>8s} {e.reason[:90]}", flush=True)

    history = {"history": load_evaluations(args.costs_from)} if args.costs_from is not None else {}
    evaluate_many(problems, candidates, config, devices=devices, results_path=results_path, progress=progress,
                  **history)
    wall = time.perf_counter() - started
    results = load_evaluations(results_path)
    mine = [e for e in results if e.config_hash == config.hash]
    summary = summarize(mine, len(problems), len(results) - before, wall, config, args.devices)
    if args.agree_with is not None:
        def keyed(evaluations: list[Evaluation]) -> dict[str, Evaluation]:
            return {f"{e.problem_id}:{e.candidate_sha256}": e for e in evaluations}

        agree = run_agreement(keyed(load_evaluations(args.agree_with)), keyed(mine))
        summary["agreement"] = {k: round(v, 4) if isinstance(v, float) else v for k, v in agree.items()}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}, default=str))
    return summary


if __name__ == "__main__":
    main()
