"""Cross-GPU evaluation on a real Prefect server: two process work pools on this CPU machine, a real
worker on each, the evaluate deployments from prefect.yaml, and `python -m flows.cross_gpu` gathering
both pools' results into the cross-GPU table. Then a third pool that no worker serves (it times out
cleanly while the others' results land, resumed from the shared storage), and the no-server mode.

The pools stand in for GPU kinds ("A100", "H100"); their devices are `cpu`. The tests share one
repository copy and run in file order."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pipeline_helpers import VENV_BIN, copy_repo, deploy, edit_params, run, stop

POOLS = [{"name": "gpu-a100", "gpu_kind": "A100", "devices": "cpu"},
         {"name": "gpu-h100", "gpu_kind": "H100", "devices": "cpu"}]
pytestmark = pytest.mark.slow  # workers, deployments and three evaluations per pool: about 2 minutes

NO_WORKER = {"name": "gpu-l40", "gpu_kind": "L40", "devices": "cpu"}
PROTOCOL = {"correctness_trials": 2, "timing_trials": 2, "target_trial_ms": 10.0}


def _write_inputs(repo: Path) -> None:
    """Three starter problems and their baseline template candidates (correct by construction)."""
    sys.path.insert(0, str(repo))
    from cudal1.candidates import candidates_to_parquet
    from cudal1.generation.templates import template_candidates
    from cudal1.problems import load_starter_suite
    from tasks.io import problems_to_parquet

    problems = load_starter_suite()[:3]
    problems_to_parquet(problems, repo / "data/problems/problems.parquet")
    candidates = [c for p in problems for c in template_candidates(p, ["baseline"])]
    candidates_to_parquet(candidates, repo / "data/cross_gpu_inputs/candidates.parquet")


@pytest.fixture(scope="module")
def xg_repo(tmp_path_factory: pytest.TempPathFactory, run_env: dict[str, str]) -> Iterator[Path]:
    """A repository copy with the pools created, the evaluate deployments deployed, and a worker on
    each of the two POOLS (not on the NO_WORKER pool)."""
    repo = copy_repo(tmp_path_factory.mktemp("cross-gpu-repo"))
    _write_inputs(repo)
    edit_params(repo, {"cross_gpu": {"pools": POOLS, "candidates": "data/cross_gpu_inputs/candidates.parquet",
                                     "protocol": PROTOCOL, "wait_timeout_s": 120, "poll_s": 1}})
    prefect = str(VENV_BIN / "prefect")
    for pool in [*POOLS, NO_WORKER]:
        created = run([prefect, "work-pool", "create", "--type", "process", pool["name"], "--overwrite"], repo, run_env)
        assert created.returncode == 0, created.stdout + created.stderr
    deployed = deploy(repo, run_env, *(pool["name"] for pool in [*POOLS, NO_WORKER]))
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    logs = tmp_path_factory.mktemp("workers")
    workers = []
    for pool in POOLS:
        log = (logs / f"{pool['name']}.log").open("w")
        workers.append((subprocess.Popen([prefect, "worker", "start", "--pool", pool["name"]], cwd=logs,
                                         env=run_env | {"PREFECT_WORKER_QUERY_SECONDS": "2"},
                                         stdout=log, stderr=subprocess.STDOUT), log))
    try:
        yield repo
    finally:
        for proc, log in workers:
            stop(proc, (signal.SIGINT, signal.SIGINT))  # a worker ignores its first SIGINT
            log.close()


def _cross_gpu(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "flows.cross_gpu", *args], repo, env, timeout=400)


def _table(repo: Path) -> dict[str, dict]:
    data = json.loads((repo / "reports/cross_gpu/cross_gpu.json").read_text())
    return {row["gpu"]: row for row in data["gpus"]}


def _mlflow_runs(repo: Path) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{repo / 'mlruns.db'}")
    experiment = client.get_experiment_by_name("cudal1")
    return client.search_runs([experiment.experiment_id], "tags.stage = 'cross_gpu'")


def test_two_pools_with_workers_fill_the_cross_gpu_table(xg_repo, run_env):
    started = time.monotonic()
    result = _cross_gpu(xg_repo, run_env)
    output = result.stdout[-4000:] + result.stderr[-4000:]
    assert result.returncode == 0, output
    table = _table(xg_repo)
    assert set(table) == {"A100", "H100"}
    for row in table.values():
        assert row["status"] == "completed", row
        assert row["evaluations"] == 3 and row["total"] == 3
        # Correct by construction; on a busy 2-core machine a noisy timing may still be rejected.
        assert row["success"] >= 1 and row["mean"] > 0 and row["max"] >= row["p75"] >= row["p50"] >= row["p25"]
    markdown = (xg_repo / "reports/cross_gpu/cross_gpu.md").read_text()
    assert "| A100 |" in markdown and "| H100 |" in markdown
    assert (xg_repo / "reports/cross_gpu/cross_gpu.csv").read_text().startswith("gpu,pool,status")
    # Each pool's evaluate flow ran on its worker and wrote its results into the shared storage.
    storage = xg_repo / "data/cross_gpu"
    for pool in POOLS:
        assert len(list(storage.glob(f"*/{pool['name']}/evaluations.parquet"))) == 1
    runs = _mlflow_runs(xg_repo)
    by_gpu = {r.data.tags.get("gpu"): r for r in runs if r.data.tags.get("gpu")}
    parents = [r for r in runs if "gpu" not in r.data.tags]
    assert set(by_gpu) == {"A100", "H100"} and len(parents) == 1
    assert all(r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for r in by_gpu.values())
    assert by_gpu["A100"].data.metrics["success"] == table["A100"]["success"]
    print(f"two pools: {time.monotonic() - started:.0f} s")


def test_a_pool_without_worker_times_out_while_the_others_land(xg_repo, run_env):
    storage = xg_repo / "data/cross_gpu"
    measured = {pool["name"]: next(storage.glob(f"*/{pool['name']}/measurements-*.parquet")).stat().st_mtime_ns
                for pool in POOLS}
    edit_params(xg_repo, {"cross_gpu": {"pools": [*POOLS, NO_WORKER], "wait_timeout_s": 6}})
    started = time.monotonic()
    result = _cross_gpu(xg_repo, run_env)
    seconds = time.monotonic() - started
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "no worker has picked up the run on pool gpu-l40" in output
    assert "prefect worker start --pool gpu-l40" in output
    table = _table(xg_repo)
    assert table["L40"]["status"] == "timed_out" and table["L40"]["evaluations"] == 0
    assert table["L40"]["success"] == 0 and table["L40"]["mean"] is None
    assert table["A100"]["status"] == table["H100"]["status"] == "completed"
    assert table["A100"]["evaluations"] == table["H100"]["evaluations"] == 3
    # Same inputs, same storage: the finished pools resumed and measured nothing again.
    for pool in POOLS:
        path = next(storage.glob(f"*/{pool['name']}/measurements-*.parquet"))
        assert path.stat().st_mtime_ns == measured[pool["name"]]
    # The abandoned flow run was cancelled, not left waiting for a worker.
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: run_env["PREFECT_API_URL"]}), get_client(sync_client=True) as client:
        runs = client.read_flow_runs(deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=["gpu-l40"])))
    assert runs and all(r.state.type.value == "CANCELLED" for r in runs)
    print(f"pool without worker: {seconds:.0f} s")


def test_without_a_server_it_evaluates_locally(xg_repo, run_env, tmp_path):
    env = {k: v for k, v in run_env.items() if k != "PREFECT_API_URL"} | {"PREFECT_HOME": str(tmp_path / "home")}
    result = _cross_gpu(xg_repo, env)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    table = _table(xg_repo)
    assert list(table) == ["cpu"]
    row = table["cpu"]
    assert row["pool"] == "local" and row["status"] == "completed" and row["evaluations"] == 3
    assert row["success"] >= 1 and "no Prefect server" in row["message"]


def test_a_run_killed_mid_way_keeps_its_finished_evaluations(xg_repo, tmp_path):
    """A worker that dies leaves no evaluations.parquet, only the measurements file the evaluator
    appends to after every candidate: those rows still enter the table, and a re-run resumes from them."""
    from dataclasses import replace

    from cudal1.candidates import Status, candidates_from_parquet, load_evaluations, save_evaluations
    from cudal1.config import load_params
    from cudal1.cross_gpu import PoolResult, partial_evaluations, table_rows
    from tasks.io import problems_from_parquet

    params = load_params(xg_repo / "params.yaml", "cross_gpu")
    source = next((xg_repo / "data/cross_gpu").glob("*/gpu-a100/measurements-*.parquet"))
    pool_dir = tmp_path / "gpu-a100"
    pool_dir.mkdir()
    finished = load_evaluations(source)
    save_evaluations(finished[:2], pool_dir / source.name)  # two of three finished
    candidates = candidates_from_parquet(xg_repo / "data/cross_gpu_inputs/candidates.parquet")
    kept = partial_evaluations(pool_dir, params.protocol, candidates)
    assert len(kept) == 2
    # the third's worker never started: the harness's failure, not a verdict, so not counted as measured
    failed = replace(finished[2], status=Status.TIMEOUT, speedup=None,
                     reason="harness failed: the worker's start, before the program was loaded: start exceeded 120 s")
    save_evaluations([failed], pool_dir / "measurements-b.parquet")
    assert {e.candidate_id for e in partial_evaluations(pool_dir, params.protocol, candidates)} == \
        {e.candidate_id for e in kept}
    problems = problems_from_parquet(xg_repo / "data/problems/problems.parquet")
    [row] = table_rows([PoolResult("gpu-a100", "A100", "timed_out", "killed", tuple(kept))], problems, 1.01)
    assert row["evaluations"] == 2 and row["total"] == 3 and row["status"] == "timed_out"
