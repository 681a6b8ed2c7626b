"""Cross-GPU evaluation as Prefect tasks: stage the inputs in shared storage, start the evaluate
deployment of every pool, wait for the runs (cancelling those no worker picks up), gather each pool's
results from the storage, and log one MLflow run per GPU kind under a parent run."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from cudal1.candidates import Candidate, candidates_to_parquet
from cudal1.config import PoolParams
from cudal1.cross_gpu import PoolResult, gather_pool, pool_evaluate_section
from cudal1.cross_gpu_pool import stage
from cudal1.evaluator.config import EvalConfig
from cudal1.problems import Problem
from tasks.io import _atomic, problems_to_parquet
from tasks.retry import io_only

_RETRY = {"retries": 2, "retry_delay_seconds": [1, 5], "retry_condition_fn": io_only, "cache_policy": NO_CACHE}


@task(cache_policy=NO_CACHE)
def stage_inputs_task(problems: list[Problem], candidates: list[Candidate], config: EvalConfig,
                      pools: list[PoolParams], folder: str, kept: str | None = None) -> dict[str, str]:
    """Write the inputs once and one params file per pool; returns pool name -> its params file. A pool
    folder without measurements starts from those kept under ``kept`` (CrossGpuParams.kept)."""
    import yaml

    root = Path(folder)
    inputs = root / "inputs"
    if not (inputs / "candidates.parquet").is_file():  # same key, same content: never rewritten
        problems_to_parquet(problems, inputs / "problems.parquet")
        _atomic(inputs / "candidates.parquet", lambda tmp: candidates_to_parquet(candidates, tmp))
    # The same inputs for hosts without Prefect or polars (python -m cudal1.cross_gpu_pool <pool folder>).
    stage(root, problems, candidates, config, [(p.name, p.gpu_kind, p.devices) for p in pools],
          Path(kept) if kept else None)
    paths = {}
    for pool in pools:
        path = root / pool.name / "params.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        document = {"evaluate": pool_evaluate_section(pool.devices, config)}
        path.write_text(f"# written by flows/cross_gpu.py for pool {pool.name} ({pool.gpu_kind})\n"
                        + yaml.safe_dump(document, sort_keys=False))
        paths[pool.name] = str(path)
    return paths


@dataclass(frozen=True)
class Submitted:
    pool: PoolParams
    flow_run_id: str  # "" when the deployment could not be started
    message: str = ""


@task(**_RETRY)
def submit_pool_task(pool: PoolParams, params_path: str, key: str, parent_run_id: str) -> Submitted:
    """Start the pool's evaluate deployment and return at once (``timeout=0``): the waiting is done for
    all pools together by :func:`wait_for_runs_task`. With an MLflow server configured here, the
    worker's evaluate run logs to it, nested under this flow's run; otherwise it logs beside its params
    file in the storage."""
    import os

    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound

    from tasks.tracking import PARENT_RUN_ENV

    env = {"CUDAL1_GPU_KIND": pool.gpu_kind}
    if os.environ.get("MLFLOW_TRACKING_URI"):
        env |= {"MLFLOW_TRACKING_URI": os.environ["MLFLOW_TRACKING_URI"], PARENT_RUN_ENV: parent_run_id}
    job_variables = {"env": env | dict(pool.env)}
    try:
        run = run_deployment(pool.deployment, parameters={"params_path": params_path}, timeout=0,
                             job_variables=job_variables, flow_run_name=f"evaluate on {pool.gpu_kind} ({key})",
                             tags=["cudal1", "cross_gpu", f"gpu:{pool.gpu_kind}"])
    except ObjectNotFound:
        return Submitted(pool, "", f"no deployment {pool.deployment}; deploy it from the repository root with "
                                   f"`prefect --no-prompt deploy --name {pool.deployment.split('/')[-1]}`")
    return Submitted(pool, str(run.id))


def _no_worker_message(pool: str) -> str:
    return (f"no worker has picked up the run on pool {pool}; start one with "
            f"`prefect worker start --pool {pool}` on a host with that GPU")


@task(cache_policy=NO_CACHE)
def wait_for_runs_task(submitted: list[Submitted], wait_timeout_s: float, run_timeout_s: float | None,
                       poll_s: float) -> dict[str, tuple[str, str]]:
    """Poll every run until it ends. A run still scheduled after ``wait_timeout_s`` (no worker took
    it) or running past ``run_timeout_s`` is cancelled and its pool reported as ``timed_out``; the other
    pools are unaffected. Returns pool name -> (status, message)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.states import Cancelled, Cancelling

    logger = get_run_logger()
    outcome: dict[str, tuple[str, str]] = {s.pool.name: ("no_deployment", s.message)
                                           for s in submitted if not s.flow_run_id}
    pending = {s.pool.name: s for s in submitted if s.flow_run_id}
    started = time.monotonic()
    picked_at: dict[str, float] = {}
    warned: set[str] = set()
    with get_client(sync_client=True) as client:
        while pending:
            for name, s in list(pending.items()):
                state = client.read_flow_run(s.flow_run_id).state
                waited = time.monotonic() - started
                if state is None or state.type == StateType.SCHEDULED:
                    if waited > min(4 * poll_s, wait_timeout_s / 2) and name not in warned:
                        warned.add(name)
                        logger.warning(_no_worker_message(name) + f" (waiting up to {wait_timeout_s:.0f} s)")
                    if waited > wait_timeout_s:
                        client.set_flow_run_state(s.flow_run_id, Cancelled(message="no worker"), force=True)
                        message = _no_worker_message(name) + f"; cancelled after {wait_timeout_s:.0f} s"
                        logger.error(message)
                        outcome[name] = ("timed_out", message)
                        del pending[name]
                    continue
                picked_at.setdefault(name, time.monotonic())
                if state.is_final():
                    status = "completed" if state.type == StateType.COMPLETED else "failed"
                    outcome[name] = (status, "" if status == "completed" else
                                     f"flow run {state.name}: {state.message or ''}".strip())
                    logger.info(f"pool {name}: flow run {s.flow_run_id} {state.name}")
                    del pending[name]
                elif run_timeout_s is not None and time.monotonic() - picked_at[name] > run_timeout_s:
                    client.set_flow_run_state(s.flow_run_id, Cancelling(message="run_timeout_s"), force=True)
                    outcome[name] = ("timed_out", f"still {state.name} after run_timeout_s={run_timeout_s:.0f} s; "
                                                  "cancelled (finished evaluations kept; re-run to resume)")
                    del pending[name]
            if pending:
                time.sleep(poll_s)
    return outcome


@task(cache_policy=NO_CACHE)
def gather_task(folder: str, pools: list[PoolParams], outcome: dict[str, tuple[str, str]] | None,
                config: EvalConfig, candidates: list[Candidate], config_hash: str | None = None) -> list[PoolResult]:
    """Each pool's evaluations from the storage: its completed table, else whatever its incremental
    measurements file holds (a killed or cancelled run keeps what it finished). With no ``outcome`` (no
    flow runs: ``--gather``) the status follows from what the storage holds. ``config_hash``: the protocol
    a kept key was measured under, where it is not ``config``'s (``--gather --key``)."""
    logger = get_run_logger()
    results = []
    for pool in pools:
        status, message = (outcome or {}).get(pool.name, ("", ""))
        result = gather_pool(Path(folder) / pool.name, pool.name, pool.gpu_kind, config, candidates, status, message,
                             config_hash)
        logger.info(f"pool {pool.name} ({pool.gpu_kind}): {result.status}, {len(result.evaluations)} evaluations")
        results.append(result)
    return results


@task(**_RETRY)
def log_gpu_run_task(parent_run_id: str, row: dict[str, Any], artifacts: Sequence[str], repo_root: str) -> str:
    """One MLflow run per GPU kind, tagged ``gpu=<kind>``, a child of the cross_gpu run."""
    from tasks.tracking import _client, _experiment_id, log_artifacts_task, log_metrics_task

    client = _client(repo_root)
    tags = {"stage": "cross_gpu", "gpu": row["gpu"], "pool": row["pool"], "pool_status": row["status"],
            "mlflow.parentRunId": parent_run_id}
    run = client.create_run(_experiment_id(client, repo_root), run_name=f"cross_gpu: {row['gpu']}", tags=tags)
    metrics = {k: v for k, v in row.items() if k not in ("gpu", "pool", "status", "message", "device_names")}
    log_metrics_task.fn(run.info.run_id, metrics, repo_root)
    log_artifacts_task.fn(run.info.run_id, list(artifacts), repo_root)
    client.set_terminated(run.info.run_id, "FINISHED" if row["status"] == "completed" else "FAILED")
    return run.info.run_id


@task(cache_policy=NO_CACHE)
def _run_pool(pool_dir: str, devices: list[str], count: int) -> int:
    from cudal1.cross_gpu_pool import run_pool
    from tasks.progress import EvaluationProgress

    logger = get_run_logger()
    with EvaluationProgress(logger, count, f"pool {Path(pool_dir).name}") as progress:
        return len(run_pool(pool_dir, devices, progress))


def run_pool_task(pool_dir: str, devices: list[str]) -> int:
    """Evaluate as one pool, here (``--local --pool``): the pool runner's code, under the devices' limits."""
    from cudal1.cross_gpu_pool import read_candidates
    from tasks.evaluation import device_tags, ensure_device_limits_task

    tags = device_tags(devices)
    ensure_device_limits_task(tags)
    count = len(read_candidates(Path(pool_dir).parent / "inputs" / "candidates.jsonl"))
    return _run_pool.with_options(tags=tags)(pool_dir, devices, count)
