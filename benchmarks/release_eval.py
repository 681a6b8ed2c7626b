"""Re-measure a CUDA-L1 release file (../shared/cuda-l1/<gpu>.jsonl) under the full protocol.

Runs on the GPU machine with torch and this package only (no polars, no Prefect):

    PYTHONPATH=. python3 benchmarks/release_eval.py --release carry/h100.jsonl --devices cuda:0 \
        --out $OUT/h100 [--limit N] [--baselines cuda_graph] [--tolerance 1e-2]

Every row's released program is evaluated against the row's own reference (eager). Baselines are the
template teacher's rewrites of the reference (``cuda_graph``, ``compile-default``,
``compile-reduce-overhead``) evaluated against the same eager reference, so a speedup over a baseline
is speedup_vs_eager(program) / speedup_vs_eager(baseline). One lenient run (CUDA-L1's 1e-2) records
``max_scaled_error``, from which the verdict under the strict policy follows without a second run.
Prints a summary and the wall time; writes results.jsonl (resumable) and summary.json under --out.
``--agree-with OTHER/results.jsonl`` adds the two-run agreement (|Δspeedup|/speedup over rows measured
ok in both runs: median, 95th percentile).
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.evaluator.config import EvalConfig  # noqa: E402
from cudal1.evaluator.process import prestart_fork_server  # noqa: E402

if __name__ == "__main__":
    # the workers' fork server imports torch beside this script's own imports, not after them, as
    # `cudal1 evaluate` does (about 2 s of every run's start on the H100s, docs/gpu-runs.md#2026-11-27-batch-start)
    prestart_fork_server(EvalConfig.cpu_threads)

from benchmarks.parent_load import ParentLoad, timed_cores  # noqa: E402
from cudal1.candidates import Candidate, load_evaluations  # noqa: E402
from cudal1.evaluator.batch import AHEAD, evaluate_many  # noqa: E402
from cudal1.evaluator.schedule import expected_costs  # noqa: E402
from cudal1.generation.templates import template_source  # noqa: E402
from cudal1.problems import load_cudal1_release  # noqa: E402
from cudal1.reports import percentile  # noqa: E402

BASELINES = {"cuda_graph": ("cuda_graph", None), "compile-default": ("compile", "default"),
             "compile-reduce-overhead": ("compile", "reduce-overhead")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", required=True, type=Path)
    ap.add_argument("--devices", default="cuda:0")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--limit", type=int, default=0, help="first N rows with code (0: all)")
    ap.add_argument("--rows", default="", help="comma-separated problem ids, e.g. L1-1,L2-5")
    ap.add_argument("--baselines", default="", help=f"comma-separated from {sorted(BASELINES)}")
    ap.add_argument("--tolerance", type=float, default=1e-2)
    ap.add_argument("--stacks", action="store_true",
                    help="sample each device loop's stack every 5 ms (summary's parent.stacks: where its time goes)")
    ap.add_argument("--trials", type=int, default=5, help="timing trials at least (more while the interval is wide)")
    ap.add_argument("--recheck-measurements", type=int, default=3,
                    help="2: CUDA-L1's rule (reject on the first >10%% disagreement; the release runs up to 2026-11-23-agreement in docs/gpu-runs.md used it); "
                         "3: a third measurement settles a disagreement, the slowest is kept")
    ap.add_argument("--build-workers", type=int, default=0)
    ap.add_argument("--ahead", type=int, default=AHEAD, help="candidates a device loads ahead of the one it times")
    ap.add_argument("--agree-with", type=Path, default=None, help="an earlier run's results.jsonl")
    ap.add_argument("--costs-from", type=Path, default=None,
                    help="an earlier run's results.jsonl: problems go to the devices largest first by what they "
                         "cost there (schedule.expected_costs), and the programs re-checked there get a second "
                         "worker loaded ahead (recheck.Twins); by default what --out already holds")
    ap.add_argument("--recheck-ahead", action=argparse.BooleanOptionalAction, default=True,
                    help="with --costs-from: load a second worker ahead for each re-check it foretells")
    ap.add_argument("--graph-inputs", action=argparse.BooleanOptionalAction, default=EvalConfig.graph_inputs,
                    help="EvalConfig.graph_inputs: inputs and L2 flush as a CUDA graph")
    ap.add_argument("--clock", choices=("host", "events"), default=EvalConfig.clock, help="EvalConfig.clock")
    ap.add_argument("--trial-ms", type=float, default=EvalConfig.target_trial_ms, help="EvalConfig.target_trial_ms")
    ap.add_argument("--builds-beside-timing", action=argparse.BooleanOptionalAction,
                    default=EvalConfig.builds_beside_timing, help="EvalConfig.builds_beside_timing")
    ap.add_argument("--pause-loads", action=argparse.BooleanOptionalAction, default=EvalConfig.pause_loads,
                    help="EvalConfig.pause_loads: loads ahead stop while the device times")
    ap.add_argument("--tune-alone", action=argparse.BooleanOptionalAction, default=EvalConfig.tune_alone,
                    help="EvalConfig.tune_alone: a program that tunes itself makes its first call alone on its device")
    ap.add_argument("--fast-core", type=int, default=EvalConfig.fast_core, help="EvalConfig.fast_core: moves a call at most")
    ap.add_argument("--call-pace", action=argparse.BooleanOptionalAction, default=EvalConfig.call_pace,
                    help="EvalConfig.call_pace: record each evaluation's speedup over the calls read at the host's fast pace")
    ap.add_argument("--confirm-edge", type=int, default=EvalConfig.confirm_edge,
                    help="EvalConfig.confirm_edge: fresh sets of weights a pass near its tolerance must pass under too")
    ap.add_argument("--confirm-clock", type=int, default=EvalConfig.confirm_clock,
                    help="EvalConfig.confirm_clock: checks of a pass by a program that reads the clock, its "
                         "first-timed then its last-timed variant made to win (clock_skew.py); 0: none")
    ap.add_argument("--spare-prep", action=argparse.BooleanOptionalAction, default=EvalConfig.spare_prep,
                    help="EvalConfig.spare_prep: a load's preparation of the inputs runs away from the timed core")
    args = ap.parse_args()

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
    devices = args.devices.split(",")
    config = EvalConfig(device=devices[0], tolerance=args.tolerance, timing_trials=args.trials,
                        recheck_measurements=args.recheck_measurements, graph_inputs=args.graph_inputs,
                        clock=args.clock, target_trial_ms=args.trial_ms,
                        builds_beside_timing=args.builds_beside_timing, pause_loads=args.pause_loads,
                        tune_alone=args.tune_alone, spare_prep=args.spare_prep,
                        call_pace=args.call_pace, fast_core=args.fast_core, confirm_edge=args.confirm_edge,
                        confirm_clock=args.confirm_clock)
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.jsonl"
    before = len(load_evaluations(results_path)) if results_path.exists() else 0  # a resumed run's earlier rows
    done = [0]
    started = time.perf_counter()

    def progress(e) -> None:
        done[0] += 1
        speed = "-" if e.speedup is None else f"{e.speedup:.2f}x"
        print(f"[{done[0]}/{len(candidates)} {time.perf_counter() - started:6.1f}s] {e.problem_id:7s} "
              f"{e.status.value:13s} {speed:>8s} {e.reason[:90]}", flush=True)

    # An earlier run's results: evaluate_many takes the costs and the expected re-checks from them; with
    # --no-recheck-ahead the costs alone
    earlier: dict = {}
    if args.costs_from is not None:
        history = load_evaluations(args.costs_from)
        earlier = {"history": history} if args.recheck_ahead else {"costs": expected_costs(history), "history": []}
    cores = timed_cores(devices)
    with ParentLoad(watch=[c["core"] for c in cores.values()], stacks=args.stacks) as parent:
        evaluate_many(problems, candidates, config, devices=devices, results_path=results_path,
                      progress=progress, build_workers=args.build_workers or None, ahead=args.ahead, **earlier)
    wall = time.perf_counter() - started
    results = load_evaluations(results_path)
    mine = [e for e in results if e.config_hash == config.hash]
    statuses = Counter(e.status.value for e in mine)
    speedups = [e.speedup for e in mine if e.speedup is not None]
    summary = {
        # wall_s is this invocation's: where it resumed a run (evaluated_here < evaluations), the run's
        # wall is not in this file (benchmarks/release_resume.sh keeps each call's in calls.jsonl)
        "rows": len(rows), "evaluations": len(mine), "evaluated_here": len(results) - before, "wall_s": round(wall, 1),
        "per_evaluation_s": round(wall / max(len(results) - before, 1), 2), "statuses": dict(statuses),
        "median_speedup": statistics.median(speedups) if speedups else None,
        "time_split_s": time_split(mine), "eval_s": spread([e.eval_s or 0.0 for e in mine]), "config": config.to_dict(), "cpu_count": os.cpu_count(),
        "devices": args.devices, "ahead": args.ahead, "costs_from": None if args.costs_from is None else str(args.costs_from),
        "rechecks_ahead": sum(bool(e.extra.get("recheck_ahead")) for e in mine),
        # the most CPU a candidate's process used while idle (rejected over a quarter of the reference's
        # warm-up in two trials: docs/evaluator.md), and the rows rejected for it
        "candidate_idle_cpu_ms_max": max((e.extra.get("candidate_idle_cpu_ms") or 0.0 for e in mine), default=None),
        "rejected_for_idle_work": sorted(e.problem_id for e in mine if "kept running on the CPU" in e.reason),
        # the reference's waits for an idle device before its batches (idle_device.py; honest waits are the
        # evaluator's own other workers on the device), and the rows rejected for a device kept busy
        "device_wait_ms": spread([e.extra["device_wait_ms"] for e in mine if e.extra.get("device_wait_ms") is not None]),
        "rejected_for_busy_device": sorted(e.problem_id for e in mine if "device was still busy" in e.reason),
        # builds cached before the load and done again in it (ninja's reason), or loads of 5 s or more in the
        # extension builder (extensions.CachedBuild, extensions._wrap)
        "cache_rebuilt": {e.problem_id: e.extra["cache_rebuilt"] for e in mine if e.extra.get("cache_rebuilt")},
        # whether this process, which drives every device from its own threads, was saturated, and how busy
        # the host around it was (parent_load.py)
        "parent": parent.summary(), "timed_cores": cores,
    }
    if args.agree_with is not None:
        summary["agreement"] = agreement(load_evaluations(args.agree_with), mine)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}, default=str))


def spread(values: list[float]) -> dict[str, float]:
    """Median, 90th percentile (the reports' interpolated one) and max of per-evaluation figures (seconds,
    or the waits in ms).

    >>> spread([2.0, 20.0])
    {'median': 11.0, 'p90': 18.2, 'max': 20.0}
    """
    if not values:
        return {}
    return {"median": round(statistics.median(values), 2), "p90": round(percentile(values, 90), 2),
            "max": round(max(values), 2)}


def time_split(evaluations: list) -> dict[str, float]:
    """Summed seconds per phase over the evaluations (phases overlap across devices and builds)."""
    split: dict[str, float] = {}
    for e in evaluations:
        for key in ("build_s", "eval_s"):
            split[key] = split.get(key, 0.0) + (getattr(e, key) or 0.0)
        # tuned_first_call_s (inside load_s): the self-tuning programs' first calls made alone (EvalConfig.tune_alone);
        # row_s - eval_s: the device's time on a row beyond the evaluation kept (a re-check's other measurements);
        # import_s (inside build_s, the candidate worker's load before the program is constructed, whose other
        # parts are prep_s's phases): the programs' own imports;
        # load_cmd_s and first_call_s: the loads' commands and the first calls of the loads ahead, the device
        # work that wait_s waits for beyond what ran beside the correctness trials
        for key in ("load_s", "tuned_first_call_s", "correctness_s", "wait_s", "timing_s", "import_s", "load_cmd_s",
                    "first_call_s"):
            split[key] = split.get(key, 0.0) + float(e.extra.get(key, 0.0))
        for phase, seconds in (e.extra.get("prep_s") or {}).items():  # the worker's preparation, by phase
            split[f"prep_{phase}_s"] = split.get(f"prep_{phase}_s", 0.0) + float(seconds)
        if "row_s" in e.extra:
            split["row_beyond_kept_s"] = split.get("row_beyond_kept_s", 0.0) + \
                max(0.0, float(e.extra["row_s"]) - (e.eval_s or 0.0))
    return {k: round(v, 1) for k, v in split.items()}


def agreement(first: list, second: list) -> dict[str, float | int | None]:
    """How far two runs' speedups are apart, row by row, over the rows measured ok in both."""
    before = {(e.problem_id, e.candidate_sha256): e.speedup for e in first if e.speedup is not None}
    gaps = sorted(abs(e.speedup - before[k]) / before[k] for e in second
                  if e.speedup is not None and (k := (e.problem_id, e.candidate_sha256)) in before)
    if not gaps:
        return {"rows": 0, "median": None, "p95": None}
    return {"rows": len(gaps), "median": round(statistics.median(gaps), 4),
            "p95": round(gaps[min(len(gaps) - 1, int(0.95 * len(gaps)))], 4), "max": round(gaps[-1], 4)}


if __name__ == "__main__":
    main()
