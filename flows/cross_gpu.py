"""Cross-GPU evaluation: one candidate set measured on every GPU kind, the table of CUDA-L1's cross-GPU
results (mean, max, 75/50/25th percentile, successes per GPU).

Each pool in ``cross_gpu.pools`` is a Prefect work pool with the evaluate flow deployed on it
(``evaluate/<pool>`` in prefect.yaml) and a worker on a host with that GPU. This flow writes the inputs
to ``cross_gpu.storage`` (a path every host reads and writes), starts every pool's deployment, waits,
gathers each pool's results from the storage and writes ``reports/cross_gpu/cross_gpu.{md,csv,json}``
plus one MLflow run per GPU (tag ``gpu``) under a parent run. A pool no worker serves is cancelled
after ``wait_timeout_s`` and reported as timed out; the other pools' results still land.

With no Prefect server configured (no ``PREFECT_API_URL``) it evaluates locally on the devices present.
Hosts that cannot run a Prefect worker take part through the storage: ``--stage`` writes the inputs,
each host runs ``python -m cudal1.cross_gpu_pool <storage>/<key>/<pool>`` (torch and this package
only) or ``--local --pool <pool>``, and ``--gather`` makes the table from what the pools wrote.
With ``release`` (a CUDA-L1 release file) and ``baselines`` set, the report adds CUDA-L1's columns:
speedup vs eager, ``torch.compile`` and CUDA graphs per GPU, under 1e-2 and the strict tolerance, beside
the release's reported aggregates, and the rows that moved between GPUs with a reason.
Not a DVC stage (it needs GPU hosts): ``python -m flows.cross_gpu [--params P] [--local [--pool P] |
--stage | --gather [--key KEY]]``. ``--gather`` refuses to replace a report with an empty table; ``--key``
gathers measurements kept under an earlier protocol's key, as they were measured. The CUDA-L1 reproduction's
published report comes from its own DVC pipeline instead (reproduction/dvc.yaml, cudal1/reproduce.py),
whose measuring stages run the same pool runner.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from prefect import flow, get_run_logger

from cudal1.candidates import Candidate
from cudal1.config import CrossGpuParams, ParamsError, PoolParams, params_dict
from cudal1.cross_gpu import PoolResult, measured_hashes, reproduction, storage_key, table_rows, write_tables
from cudal1.cross_gpu_pool import restore_kept
from cudal1.problems import Problem, ReleasedKernel, load_cudal1_release
from cudal1.reproduction import baseline_candidates, release_inputs, reported_aggregates
from flows._common import USER_ERRORS, repo_root, run_name, stage_params
from tasks.cross_gpu import (
    gather_task,
    log_gpu_run_task,
    run_pool_task,
    stage_inputs_task,
    submit_pool_task,
    wait_for_runs_task,
)
from tasks.evaluation import evaluate_candidates
from tasks.io import read_candidates_task, read_problems_task
from tasks.tracking import stage_run

Mode = Literal["auto", "pools", "local", "stage", "gather"]


def _describe(p: CrossGpuParams) -> str:
    return f"{Path(p.release or p.candidates).name} on {', '.join(pool.gpu_kind for pool in p.pools)}"


def server_configured() -> bool:
    """True when PREFECT_API_URL points at a server (a temporary local server does not count)."""
    from prefect.settings import get_current_settings

    return bool(get_current_settings().api.url)


def local_devices() -> list[str]:
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return [f"cuda:{i}" for i in range(count)] or ["cpu"]


def evaluate_locally(problems, candidates, params: CrossGpuParams, folder: Path) -> list[PoolResult]:
    """The no-server fallback: every device present, one row labelled with the hardware's name."""
    from cudal1.evaluator.workers import device_name

    devices = local_devices()
    evaluations = evaluate_candidates(problems, candidates, params.protocol, devices,
                                      str(folder / "local" / "measurements.parquet"), label="cross_gpu (local)")
    kind = device_name(devices[0])
    return [PoolResult("local", kind, "completed", f"evaluated locally on {', '.join(devices)} (no Prefect server)",
                       tuple(evaluations))]


def read_inputs(params: CrossGpuParams) -> tuple[list[Problem], list[Candidate], list[ReleasedKernel]]:
    """The problems and candidates to send (a release's rows and programs, or the two tables), plus the
    baseline rewrites asked for; the release rows too, for its reported aggregates."""
    if params.release:
        release = load_cudal1_release(params.release)
        problems, candidates = release_inputs(release, params.baselines)
        return problems, candidates, release
    problems = read_problems_task(params.problems)
    candidates = read_candidates_task(params.candidates)
    solved = {c.problem_id for c in candidates}
    return problems, candidates + baseline_candidates([p for p in problems if p.problem_id in solved],
                                                      params.baselines), []


def _pool(params: CrossGpuParams, name: str) -> PoolParams:
    for pool in params.pools:
        if pool.name == name:
            return pool
    raise ParamsError(f"cross_gpu.pools: no pool named {name!r}; pools: {', '.join(p.name for p in params.pools)}. "
                      "Add it to params.yaml or pass one of these to --pool")


@flow(name="cross_gpu", flow_run_name=run_name("cross_gpu", _describe))
def cross_gpu_flow(params_path: str = "params.yaml", mode: Mode = "auto", pool: str = "",
                   key: str = "") -> list[dict[str, Any]]:
    """``key``: with ``mode="gather"``, gather that storage key's measurements (kept ones made under an
    earlier protocol) instead of the one the current inputs and protocol make."""
    params: CrossGpuParams = stage_params(params_path, "cross_gpu")
    logger = get_run_logger()
    local = mode == "local" or (mode == "auto" and not server_configured())
    root = repo_root(params_path)
    with stage_run("cross_gpu", params_dict(params), root, run_name="cross_gpu") as run:
        problems, candidates, release = read_inputs(params)
        current = storage_key(problems, candidates, params.protocol)
        key = key or current
        folder = Path(params.storage) / key
        logger.info(f"{len(candidates)} candidates for {len(problems)} problems; storage {folder}")
        pools = list(params.pools)
        measured_under = None
        if key != current:  # kept measurements of another protocol: restored as they are, nothing staged
            restore_kept(folder, [p.name for p in pools], Path(params.kept) if params.kept else None)
            measured_under = _one_protocol(params, folder, pools, key)
            logger.info(f"gathering key {key}, measured under config hash {measured_under} "
                        f"(the current protocol's key is {current})")
        paths = (stage_inputs_task(problems, candidates, params.protocol, pools, str(folder), params.kept)
                 if key == current and (mode in ("stage", "gather") or pool or not local) else {})
        if mode == "stage":
            for p in pools:
                logger.info(f"pool {p.name} ({p.gpu_kind}): on its host run "
                            f"`PYTHONPATH=. python -m cudal1.cross_gpu_pool {os.path.relpath(folder / p.name)}`")
            return []
        if mode == "gather":
            results = gather_task(str(folder), pools, None, params.protocol, candidates, measured_under)
            if not any(r.evaluations for r in results):  # an empty table must not replace a report
                raise ParamsError(_nothing_measured(params, key))
        elif local and pool:
            chosen = _pool(params, pool)
            run_pool_task(str(folder / chosen.name), list(chosen.devices))
            results = gather_task(str(folder), [chosen], None, params.protocol, candidates)
        elif local:
            logger.info("no Prefect server configured (PREFECT_API_URL): evaluating locally")
            results = evaluate_locally(problems, candidates, params, folder)
        else:
            submitted = [submit_pool_task(p, paths[p.name], key, run.run_id) for p in pools]
            outcome = wait_for_runs_task(submitted, params.wait_timeout_s, params.run_timeout_s, params.poll_s)
            results = gather_task(str(folder), pools, outcome, params.protocol, candidates)
        rows = table_rows(results, problems, params.threshold, candidates)
        rep = None
        if release or params.baselines:
            rep = reproduction(results, problems, candidates, params.threshold)
            if release:
                rep = replace(rep, stats=[*rep.stats, ("reported (release)", reported_aggregates(release, params.threshold))])
        name = Path(params.release or params.candidates).name
        title = f"Cross-GPU: {name}, {len(problems)} problems"
        command = f"python -m flows.cross_gpu --params {os.path.relpath(params_path)} --gather" + (
            f" --key {key}" if measured_under else "")
        if measured_under:  # the table says which protocol made it
            title += f" (measured under an earlier protocol, config hash {measured_under})"
        written = write_tables(rows, params.out_dir, title, params.threshold, rep, params.report_name, command)
        run.log_artifacts([str(p) for p in written.values()])
        run.log_metrics({"pools": len(rows), "completed": sum(r["status"] == "completed" for r in rows)})
        for row in rows:
            log_gpu_run_task(run.run_id, row, [str(written["json"])], run.repo_root)
        for row in rows:
            logger.info(f"{row['gpu']}: {row['status']}, success {row['success']}/{row['total']}, mean {row['mean']}")
    return rows


def _one_protocol(params: CrossGpuParams, folder: Path, pools: list[PoolParams], key: str) -> str:
    """The config hash a kept key's pools measured under: one, or the key cannot be gathered as one table."""
    hashes = measured_hashes(folder, [p.name for p in pools])
    if not hashes:
        raise _no_measurements(params, folder, key)
    if len(hashes) != 1:
        raise ParamsError(f"--key {key}: its pools under {folder} hold measurements of {len(hashes)} protocols "
                          f"(config hashes: {', '.join(sorted(hashes))}); a table takes one")
    return hashes.pop()


def _kept_keys(params: CrossGpuParams) -> list[str]:
    kept = Path(params.kept) if params.kept else None
    return sorted(p.name for p in kept.iterdir() if p.is_dir()) if kept is not None and kept.is_dir() else []


def _kept_keys_line(params: CrossGpuParams) -> str:
    keys = _kept_keys(params)
    return f"keys kept under {params.kept}: {', '.join(keys)}" if keys else "no keys are kept"


def _nothing_measured(params: CrossGpuParams, key: str) -> str:
    """Why --gather found nothing, and what to do: the evaluator's settings changed since the kept pools
    were measured (the storage key covers the protocol), or no pool has run yet."""
    keys = _kept_keys(params)
    run_pools = (f"run the pools first (`--stage`, then `python -m cudal1.cross_gpu_pool {os.path.relpath(Path(params.storage) / key)}/<pool>` "
                 "on each pool's host)")
    if not keys:
        return f"--gather: no pool measured these inputs under this protocol (storage key {key}); {run_pools}"
    which = f"`--gather --key {keys[0]}`" if len(keys) == 1 else "`--gather --key KEY` with one of them"
    return (f"--gather: no pool measured these inputs under this protocol (storage key {key}); {params.kept} keeps "
            f"measurements under {', '.join(keys)}, made under another protocol (the evaluator's settings have "
            f"changed since). Pass {which} to make the table from them as they were measured, "
            f"or {run_pools}. The report was left as it was")


def _check_arguments(params: CrossGpuParams, pool: str, key: str) -> None:
    """A --pool the params do not name, or a --key neither the storage nor cross_gpu.kept holds, stops here,
    before a flow run and an MLflow run are started for nothing."""
    if pool:
        _pool(params, pool)
    if key and not (Path(params.storage) / key).is_dir() and key not in _kept_keys(params):
        raise _no_measurements(params, Path(params.storage) / key, key)


def _no_measurements(params: CrossGpuParams, folder: Path, key: str) -> ParamsError:
    return ParamsError(f"--key {key}: no measurements under {os.path.relpath(folder)} nor kept under "
                       f"{params.kept or '(cross_gpu.kept is not set)'}; {_kept_keys_line(params)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", default="params.yaml", help="params file (default: ./params.yaml)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--local", action="store_const", const="local", dest="mode",
                       help="evaluate here on the devices present, even with a server configured")
    group.add_argument("--pools", action="store_const", const="pools", dest="mode",
                       help="use the pools; fail if no server is configured")
    group.add_argument("--stage", action="store_const", const="stage", dest="mode",
                       help="only write the inputs and every pool's files to the storage (for hosts without a worker)")
    group.add_argument("--gather", action="store_const", const="gather", dest="mode",
                       help="make the table from what the pools wrote to the storage; evaluate nothing")
    parser.add_argument("--pool", default="", help="with --local: evaluate as this pool (its folder in the storage)")
    parser.add_argument("--key", default="", help="with --gather: the storage key to gather (kept measurements "
                        "made under an earlier protocol); default: the current inputs' and protocol's")
    args = parser.parse_args()
    mode = args.mode or "auto"
    if args.pool and mode != "local":
        print("\nerror: --pool goes with --local (evaluate here as that pool)", file=sys.stderr)
        sys.exit(2)
    if args.key and mode != "gather":
        print("\nerror: --key goes with --gather (make the table from that key's measurements)", file=sys.stderr)
        sys.exit(2)
    if mode == "pools" and not server_configured():
        print("\nerror: --pools needs a Prefect server: export PREFECT_API_URL=http://HOST:4200/api", file=sys.stderr)
        sys.exit(2)
    try:
        _check_arguments(stage_params(args.params, "cross_gpu"), args.pool, args.key)
        cross_gpu_flow(params_path=args.params, mode=mode, pool=args.pool, key=args.key)
    except USER_ERRORS as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
