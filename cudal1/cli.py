"""The ``cudal1`` command line: typer commands over the core, rich progress on long steps."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cudal1.candidates import Candidate, Evaluation, candidates_from_parquet
from cudal1.evaluator.config import EvalConfig
from cudal1.exiting import skip_final_collection
from cudal1.problems import Problem, ProblemLoadError, load_problems

app = typer.Typer(help="Train and evaluate models that make PyTorch/CUDA programs faster.", no_args_is_help=True)
err = Console(stderr=True, log_path=False)


def _config(device: str, timeout_s: float | None, tolerance: float | None, trials: int | None,
            correctness_trials: int | None) -> EvalConfig:
    kwargs: dict[str, object] = {"device": device, "tolerance": tolerance}
    if timeout_s is not None:
        kwargs.update(run_timeout_s=timeout_s, build_timeout_s=max(timeout_s, 60.0), load_timeout_s=timeout_s)
    if trials is not None:
        kwargs["timing_trials"] = trials
    if correctness_trials is not None:
        kwargs["correctness_trials"] = correctness_trials
    try:
        return EvalConfig(**kwargs)  # type: ignore[arg-type]
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


def _check_devices(devices: list[str], option: str) -> None:
    """A CUDA device this torch cannot reach ends the command here, naming the device and the fix (not in a
    worker's traceback, nor as a reference that "failed")."""
    from cudal1.devices import DeviceUnavailable, check_devices

    try:
        check_devices(devices, option)
    except DeviceUnavailable as exc:
        raise typer.BadParameter(str(exc).removeprefix(f"{option}: "), param_hint=option) from None


def _prestart(config: EvalConfig) -> None:
    """The workers' fork server starts now, so its ``import torch`` runs beside this process's (the
    evaluator's import, next) instead of after it."""
    from cudal1.evaluator.process import prestart_fork_server

    prestart_fork_server(config.cpu_threads)


def _read(path: Path, what: str) -> str:
    if not path.is_file():
        raise typer.BadParameter(f"{what} {path}: no such file")
    return path.read_text(encoding="utf-8")


def _summary(e: Evaluation) -> dict[str, object]:
    return {"status": e.status.value, "reason": e.reason, "speedup": e.speedup, "reference_ms": e.reference_ms,
            "candidate_ms": e.candidate_ms, "spread": e.spread, "trials": e.trials,
            "correctness_trials": e.correctness_trials, "max_abs_error": e.max_abs_error,
            "max_rel_l2_error": e.max_rel_l2_error, "flags": list(e.flags), "device": e.device,
            "device_name": e.device_name, "config_hash": e.config_hash, "eval_s": e.eval_s}


DeviceOpt = Annotated[str, typer.Option(help="cpu or cuda:N")]
TimeoutOpt = Annotated[float | None, typer.Option("--timeout-s", help="bound on each load/run step, seconds")]
TolOpt = Annotated[float | None, typer.Option(help="atol = rtol for every dtype (CUDA-L1 published 1e-2)")]
TrialsOpt = Annotated[int | None, typer.Option("--trials", help="paired timing trials (default 7)")]
CTrialsOpt = Annotated[int | None, typer.Option("--correctness-trials", help="correctness trials (default 5)")]


@app.command("evaluate-one")
def evaluate_one(
    reference: Annotated[Path, typer.Option(help="reference program (class Model, get_inputs, get_init_inputs)")],
    candidate: Annotated[Path, typer.Option(help="candidate program (class ModelNew)")],
    device: DeviceOpt = "cpu",
    timeout_s: TimeoutOpt = None,
    tolerance: TolOpt = None,
    trials: TrialsOpt = None,
    correctness_trials: CTrialsOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object as the last line")] = False,
) -> None:
    """Evaluate one candidate against one reference. Exit code 0 whatever the verdict."""
    _check_devices([device], "--device")
    config = _config(device, timeout_s, tolerance, trials, correctness_trials)
    ref_src, cand_src = _read(reference, "--reference"), _read(candidate, "--candidate")
    _prestart(config)
    from cudal1.evaluator import evaluate_many

    problem = Problem(reference.stem, 0, reference.stem, ref_src)
    # Through the batch path so a large speedup gets the same fresh-process re-check as in a batch.
    [result] = evaluate_many([problem], [Candidate(problem.problem_id, cand_src, origin=str(candidate))], config)
    if result.harness_failed:
        err.print(f"[red]error:[/red] {result.reason}")
        raise typer.Exit(2)
    if as_json:
        print(json.dumps(_summary(result)))
    else:
        _print_table([result])


@app.command("evaluate")
def evaluate(
    problems: Annotated[str, typer.Option(help="starter | KernelBench JSONL | folder of modules | CUDA-L1 release JSONL")],
    candidates: Annotated[Path, typer.Option(help="parquet with problem_id, source[, origin] — or a CUDA-L1 release JSONL")],
    out: Annotated[Path, typer.Option(help="results parquet (appended; re-runs skip measured candidates)")],
    devices: Annotated[str, typer.Option(help="comma-separated, e.g. cuda:0,cuda:1")] = "cpu",
    timeout_s: TimeoutOpt = None,
    tolerance: TolOpt = None,
    trials: TrialsOpt = None,
    correctness_trials: CTrialsOpt = None,
) -> None:
    """Evaluate a batch: parallel builds, one timing process per device, resumable."""
    device_list = [d.strip() for d in devices.split(",") if d.strip()]
    _check_devices(device_list, "--devices")
    config = _config(device_list[0], timeout_s, tolerance, trials, correctness_trials)
    try:
        problem_list = load_problems(problems)
    except ProblemLoadError as exc:
        raise typer.BadParameter(str(exc), param_hint="--problems") from exc
    cand_list = _load_candidates(candidates)
    _prestart(config)
    from cudal1.evaluator import evaluate_many

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err) as bar:
        job = bar.add_task("evaluating", total=len(cand_list))

        def advance(e: Evaluation) -> None:
            bar.advance(job)
            bar.console.log(f"{e.problem_id} {e.candidate_id} {e.status.value} "
                            f"{'' if e.speedup is None else f'{e.speedup:.2f}x'} {e.reason[:80]}")

        try:
            results = evaluate_many(problem_list, cand_list, config, devices=device_list, results_path=out,
                                    progress=advance)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from exc
        bar.update(job, completed=len(cand_list))
    err.print(f"{len(results)} new evaluations written to {out} (skipped {len(cand_list) - len(results)} already measured)")


def _load_candidates(path: Path) -> list[Candidate]:
    if not path.exists():
        raise typer.BadParameter(f"{path}: no such file", param_hint="--candidates")
    if path.suffix == ".jsonl":
        from cudal1.problems import load_cudal1_release

        return [Candidate(r.problem.problem_id, r.candidate_source, origin=f"cudal1-{r.gpu}")
                for r in load_cudal1_release(path) if r.candidate_source]
    try:
        return candidates_from_parquet(path)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--candidates") from exc


def _print_table(results: list[Evaluation]) -> None:
    table = Table("problem", "status", "speedup", "reference ms", "candidate ms", "reason")
    for e in results:
        table.add_row(e.problem_id, e.status.value, "-" if e.speedup is None else f"{e.speedup:.2f}x",
                      "-" if e.reference_ms is None else f"{e.reference_ms:.3f}",
                      "-" if e.candidate_ms is None else f"{e.candidate_ms:.3f}", e.reason[:90])
    Console().print(table)


@app.command("optimize")
def optimize_command(
    module: Annotated[Path, typer.Argument(help="your Python file: class Model, get_inputs(), get_init_inputs() as in "
                                           "KernelBench, or name yours with --model-class and --inputs")],
    endpoint: Annotated[list[str] | None, typer.Option(help="an OpenAI-compatible endpoint, e.g. "
                                                        "http://127.0.0.1:8000/v1; repeat, one per --model")] = None,
    model: Annotated[list[str] | None, typer.Option(help="the model to ask at that --endpoint; repeatable")] = None,
    policy: Annotated[str | None, typer.Option(help="a policy folder or hub id, sampled locally with transformers "
                                               "(default with no --endpoint: models/contrastive_rl if trained)")] = None,
    device: DeviceOpt = "cpu",
    rounds: Annotated[int, typer.Option(help="rounds at most")] = 3,
    samples: Annotated[int, typer.Option(help="answers per model per round")] = 4,
    patience: Annotated[int, typer.Option(help="rounds in a row with nothing faster before the run stops")] = 1,
    budget_s: Annotated[float | None, typer.Option("--budget-s", help="wall-clock budget for the run, seconds")] = None,
    tolerance: TolOpt = None,
    out: Annotated[Path | None, typer.Option(help="output folder (default: <module>-optimized); rerunning the "
                                             "same command there continues the run")] = None,
    model_class: Annotated[str | None, typer.Option("--model-class", help="your nn.Module class, if not Model")] = None,
    inputs: Annotated[str | None, typer.Option(help="your function returning forward's arguments, if not "
                                               "get_inputs")] = None,
    api: Annotated[str, typer.Option(help="chat or completions: the endpoints' API")] = "chat",
    api_key_env: Annotated[str | None, typer.Option(help="environment variable holding the endpoints' key")] = None,
    max_tokens: Annotated[int, typer.Option(help="longest answer, in tokens")] = 4096,
    request_timeout_s: Annotated[float, typer.Option("--request-timeout-s", help="seconds per model request")] = 300.0,
    trials: TrialsOpt = None,
    correctness_trials: CTrialsOpt = None,
) -> None:
    """Make MODULE's model faster: rounds of rewrites and model answers, each verified and timed by the
    evaluator; writes best.py, candidates.parquet and report.md. Exit 0 done, 1 a model failed (what was
    measured is kept), 2 unusable input, 130 interrupted (rerun to continue)."""
    import shlex

    from cudal1.optimize import (
        ModelFailure,
        ModuleProblem,
        OptimizeInterrupted,
        OptimizeSettings,
        make_writers,
        optimize,
        read_module,
    )
    from cudal1.optimize.loop import completion_cache
    from cudal1.optimize.outputs import messages, ranked_rows

    _check_devices([device], "--device")
    config = _config(device, None, tolerance, trials, correctness_trials)
    out_dir = out or Path(f"{module.stem}-optimized")
    try:
        settings = OptimizeSettings(rounds=rounds, samples=samples, budget_s=budget_s, patience=patience)
        user_module = read_module(module, model_class, inputs)
        writers = make_writers(endpoint or [], model or [], api=api, api_key_env=api_key_env, policy=policy,
                               device=device, max_tokens=max_tokens, request_timeout_s=request_timeout_s,
                               cache=completion_cache(out_dir))
        state = optimize(user_module, config, writers, settings, out_dir, command="cudal1 " + shlex.join(sys.argv[1:]),
                         log=err.log, progress=_log_evaluation)
    except (ModuleProblem, ModelFailure, ValueError) as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except OptimizeInterrupted as stopped:
        state = stopped.state
    rows = ranked_rows(state)
    _print_top(rows)
    for note in messages(state):
        err.print(f"[yellow]note:[/yellow] {note}", highlight=False, soft_wrap=True)
    best = next((r for r in rows if r["status"] == "ok"), None)
    err.print(f"{state.stop}. {len(rows)} candidates, {state.measured_now} measured now, {len(state.reused)} by "
              f"earlier runs; {'best.py, ' if best else ''}candidates.parquet and report.md in {out_dir}", highlight=False,
              soft_wrap=True)
    if state.interrupted:
        err.print(f"interrupted: every finished evaluation is kept in {out_dir}; run the same command to continue")
        raise typer.Exit(130)
    if state.failure:
        raise typer.Exit(1)


def _log_evaluation(e: Evaluation) -> None:
    speed = "" if e.speedup is None else f" {e.speedup:.2f}x [{e.speedup_low or 0:.2f}, {e.speedup_high or 0:.2f}]"
    err.log(f"{e.candidate_id} {e.status.value}{speed} {e.reason[:100]}", highlight=False)


def _print_top(rows: list[dict]) -> None:
    table = Table("rank", "round", "origin", "status", "speedup", "95% interval", "reason",
                  title="fastest verified variants (ranked by the low end of the interval)")
    for r in rows[:5]:
        low, high = r["speedup_low"], r["speedup_high"]
        table.add_row(str(r["rank"]), str(r["round"]), r["origin"], r["status"],
                      "-" if r["speedup"] is None else f"{r['speedup']:.2f}x",
                      "-" if low is None or high is None else f"{low:.2f}-{high:.2f}x", r["reason"][:60])
    Console(width=140).print(table)


def _registry(repo: Path) -> ModuleType:
    """The MLflow side of the registry lives beside the flows (``tasks/registry.py``; the core never imports
    MLflow): loaded from the checkout this package was installed from (``make setup`` installs it editable),
    else from ``repo``."""
    import importlib

    for root in (Path(__file__).resolve().parents[1], repo.resolve()):
        if (root / "tasks" / "registry.py").is_file():
            sys.path.insert(0, str(root))
            return importlib.import_module("tasks.registry")
    raise typer.BadParameter(f"--repo {repo}: not a cudal1 checkout (no tasks/registry.py there)")


def _figure(value: object) -> str:
    try:
        return f"{float(str(value)):.3g}"
    except ValueError:
        return "-"


@app.command("models")
def models_command(
    repo: Annotated[Path, typer.Option(help="the checkout whose MLflow store to read (MLFLOW_TRACKING_URI wins)")]
    = Path("."),
    name: Annotated[str | None, typer.Option(help="one registered model (default: all)")] = None,
    set_champion: Annotated[int | None, typer.Option("--set-champion", help="move the `champion` alias to this "
                                                     "version of --name by hand (a rollback)")] = None,
) -> None:
    """Registered policy versions: aliases (`champion` is the one in use), the gate's decision and figures
    (success rate and mean speedup on its problems) and the last RL epoch's figures."""
    registry = _registry(repo)
    if set_champion is not None:
        if not name:
            raise typer.BadParameter("--set-champion needs --name (the registered model)")
        registry.set_alias_task.fn(str(repo.resolve()), name, str(set_champion))
        err.print(f"{name}: `champion` -> version {set_champion}")
    rows = registry.list_versions(repo, name)
    if not rows:
        err.print("no registered model yet: the contrastive_rl stage registers one (`make run`)")
        return
    table = Table("model", "version", "aliases", "gate", "success", "mean speedup", "vs", "RL success",
                  "RL median speedup", "created (UTC)", title="registered policies")
    for r in rows:
        tags, metrics = r["tags"], r["metrics"]
        table.add_row(r["name"], str(r["version"]), ", ".join(r["aliases"]) or "-", tags.get("gate.decision", "-"),
                      _figure(tags.get("gate.new.success_rate")), _figure(tags.get("gate.new.mean_speedup")),
                      tags.get("gate.compared_with", "-"), _figure(metrics.get("rl.success_rate")),
                      _figure(metrics.get("rl.median_speedup")), r["created"])
    Console(width=160).print(table)


data_app = typer.Typer(help="The outside data files (KernelBench, CUDA-L1's release): fetch and check them "
                       "(docs/data.md).", no_args_is_help=True)
app.add_typer(data_app, name="data")


def _say(line: str) -> None:
    """A line as it is: unwrapped (a path or URL stays whole), brackets not read as markup."""
    err.print(line, soft_wrap=True, markup=False, highlight=False)


@data_app.command("fetch")
def data_fetch(
    names: Annotated[list[str] | None, typer.Argument(help="declared names, e.g. cuda-l1/h100.jsonl (default: all)")]
    = None,
    source: Annotated[str | None, typer.Option("--from", help="a folder laid out like ../shared, or its URL "
                                                "(default: the public repositories at the declared commits)")] = None,
    to: Annotated[Path, typer.Option(help="the data folder to fill")] = Path("../shared"),
) -> None:
    """Get the declared files into the data folder, each kept only when its sha256 is the declared one."""
    from cudal1.data_sources import DataFileError, fetch

    try:
        for line in fetch(to, source, names or ()):
            _say(line)
    except DataFileError as exc:
        _say(f"error: {exc}")
        raise typer.Exit(2) from exc


@data_app.command("check")
def data_check(folder: Annotated[Path, typer.Option("--in", help="the data folder")] = Path("../shared")) -> None:
    """Check every declared file in the data folder against its sha256; lists each with its source."""
    from cudal1.data_sources import DataFileError, declared, verify

    failed = 0
    for name, entry in declared().items():
        try:
            verify(folder / name, name)
            _say(f"ok       {name}  ({entry.origin})")
        except DataFileError as exc:
            failed += 1
            _say(f"refused  {exc}")
    if failed:
        raise typer.Exit(1)


def main() -> None:
    """The ``cudal1`` console script: the typer app, then an exit without the last collections (about a
    second of a command such as ``cudal1 models`` on the 2-core machine)."""
    try:
        app()
    finally:
        skip_final_collection()


if __name__ == "__main__":
    main()
