"""Flow `optimize`: `cudal1 optimize` over a folder of modules, one after another on one device, so a team
can run it as a deployment (a nightly run over the modules they care about). Each module gets its own
output folder (``<out_dir>/<module name>/``: best.py, candidates.parquet, report.md) and, when MLflow
tracking is configured (``MLFLOW_TRACKING_URI``, or ``tracking_root`` for the embedded store of that
folder), its own MLflow run with the best speedup and the outputs as artifacts.

A module that cannot be optimised (it does not import, its forward fails...) is reported and skipped; the
others still run, and the flow fails at the end naming it. Re-running continues every module where it
stopped, as the command does.

    python -m flows.optimize my_modules/ --out optimized --endpoint http://127.0.0.1:8000/v1 --model qwen
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from cudal1.evaluator.config import EvalConfig
from cudal1.optimize import ModelFailure, ModuleProblem, OptimizeSettings, make_writers, optimize, read_module
from cudal1.optimize.loop import completion_cache
from cudal1.optimize.outputs import best_row, messages, ranked_rows
from tasks.evaluation import device_tags, ensure_device_limits_task
from tasks.tracking import stage_run

ARTIFACTS = ("best.py", "report.md", "speedup_by_round.png", "candidates.parquet", "prompts.jsonl")


def module_files(modules: str) -> list[Path]:
    """The ``.py`` files of a folder (``_private.py`` ones aside), or one file."""
    path = Path(modules)
    files = [path] if path.is_file() else sorted(p for p in path.glob("*.py") if not p.name.startswith("_"))
    if not files:
        raise ModuleProblem(f"{modules}: no Python modules there; pass a folder of modules or one module file")
    return files


@task(cache_policy=NO_CACHE, task_run_name="optimize {path}")
def optimize_module_task(path: str, out_dir: str, config: EvalConfig, settings: OptimizeSettings,
                         models: dict[str, Any], command: str) -> dict[str, Any]:
    """One module, through the same function as the command; returns its summary."""
    logger = get_run_logger()
    module = read_module(path, models.get("model_class"), models.get("inputs"))
    writers = make_writers(models.get("endpoints", []), models.get("models", []), api=models.get("api", "chat"),
                           policy=models.get("policy"), device=config.device, cache=completion_cache(out_dir))
    state = optimize(module, config, writers, settings, out_dir, command=command, log=logger.info)
    rows = ranked_rows(state)
    best = best_row(rows)
    for note in messages(state):
        logger.warning(note)
    return {"module": Path(path).name, "out_dir": out_dir, "stop": state.stop, "failure": state.failure,
            "candidates": len(rows), "passed": sum(r["status"] == "ok" for r in rows), "rounds": state.rounds_done,
            "measured_now": state.measured_now, "best_origin": best["origin"] if best else None,
            "best_speedup": best["speedup"] if best else None, "best_low": best["speedup_low"] if best else None,
            "best_high": best["speedup_high"] if best else None}


def _metrics(summary: dict[str, Any]) -> dict[str, Any]:
    keys = ("candidates", "passed", "rounds", "measured_now", "best_speedup", "best_low", "best_high")
    return {k: summary[k] for k in keys if summary[k] is not None}


@flow(name="optimize", flow_run_name="optimize: {modules}")
def optimize_flow(modules: str, out_dir: str = "optimized", device: str = "cpu", rounds: int = 3, samples: int = 4,
                  budget_s: float | None = None, tolerance: float | None = None, endpoints: list[str] | None = None,
                  models: list[str] | None = None, api: str = "chat", policy: str | None = None,
                  protocol: dict[str, Any] | None = None, tracking_root: str | None = None) -> list[dict[str, Any]]:
    """``protocol``: EvalConfig fields to change (e.g. fewer timing trials); ``budget_s`` is per module."""
    logger = get_run_logger()
    config = EvalConfig(**(protocol or {}) | {"device": device, "tolerance": tolerance})
    settings = OptimizeSettings(rounds=rounds, samples=samples, budget_s=budget_s)
    writers = {"endpoints": endpoints or [], "models": models or [], "api": api, "policy": policy}
    track = bool(os.environ.get("MLFLOW_TRACKING_URI")) or tracking_root is not None
    tags = device_tags([device])
    ensure_device_limits_task(tags)  # one timing run per device, whatever else is scheduled on it
    summaries, failed = [], []
    for path in module_files(modules):
        out = str(Path(out_dir) / path.stem)
        params = {"module": str(path), "device": device, "rounds": rounds, "samples": samples, "budget_s": budget_s,
                  "tolerance": tolerance, "models": writers["models"], "policy": policy, "protocol": config.hash}
        tracking = stage_run("optimize", params, tracking_root or ".", run_name=f"optimize: {path.name}") \
            if track else nullcontext()
        try:
            with tracking as run:
                summary = optimize_module_task.with_options(tags=tags)(str(path), out, config, settings, writers,
                                                                       f"python -m flows.optimize {modules}")
                if run is not None:
                    run.log_metrics(_metrics(summary))
                    # Which rewrite won, and why the run stopped, beside the figures in the MLflow UI.
                    run.set_tags({"best_origin": summary["best_origin"] or "none", "stop": summary["stop"][:250]})
                    run.log_artifacts([Path(out) / name for name in ARTIFACTS])
        except (ModuleProblem, ModelFailure) as exc:
            logger.error(f"{path.name}: {exc}")
            failed.append(f"{path.name}: {exc}")
            continue
        logger.info(f"{path.name}: {summary['passed']}/{summary['candidates']} passed, best "
                    f"{summary['best_speedup'] or 0:.2f}x by {summary['best_origin']}; {summary['stop']}")
        summaries.append(summary)
    if failed:
        raise ModuleProblem(f"{len(failed)} of {len(failed) + len(summaries)} modules could not be optimised "
                            "(the others were): " + " | ".join(failed))
    return summaries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", help="a folder of modules (or one module)")
    parser.add_argument("--out", default="optimized", help="one sub-folder per module is written here")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--budget-s", type=float, default=None, help="per module")
    parser.add_argument("--tolerance", type=float, default=None)
    parser.add_argument("--endpoint", action="append", default=[])
    parser.add_argument("--model", action="append", default=[])
    parser.add_argument("--api", default="chat", choices=["chat", "completions"])
    parser.add_argument("--policy", default=None)
    parser.add_argument("--trials", type=int, default=None, help="timing trials at least (protocol default: 5)")
    parser.add_argument("--correctness-trials", type=int, default=None)
    parser.add_argument("--tracking-root", default=None, help="an MLflow run per module in this folder's "
                        "embedded store (MLFLOW_TRACKING_URI, when set, is used without this)")
    args = parser.parse_args()
    protocol = {k: v for k, v in {"timing_trials": args.trials, "correctness_trials": args.correctness_trials}.items()
                if v is not None}
    try:
        optimize_flow(args.modules, args.out, args.device, args.rounds, args.samples, args.budget_s, args.tolerance,
                      args.endpoint, args.model, args.api, args.policy, protocol, args.tracking_root)
    except (ModuleProblem, ModelFailure, ValueError) as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
