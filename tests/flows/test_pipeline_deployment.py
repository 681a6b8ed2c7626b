"""The pipeline as a Prefect deployment: `prefect deploy` from prefect.yaml onto a process work pool, a
real worker, and a triggered run that re-runs the one stage whose params changed."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import yaml
from pipeline_helpers import REPO, VENV_BIN, deploy, edit_params, run, stop


def test_prefect_yaml_declares_the_scheduled_pipeline_and_the_evaluate_deployment():
    config = yaml.safe_load((REPO / "prefect.yaml").read_text())
    by_name = {d["name"]: d for d in config["deployments"]}
    pipeline = by_name["scheduled-retraining"]
    assert pipeline["entrypoint"] == "flows.pipeline.pipeline_flow"
    assert pipeline["schedules"][0]["cron"] and pipeline["work_pool"]["name"] == "cudal1-cpu"
    assert by_name["evaluate-gpu"]["entrypoint"] == "flows.evaluate.evaluate_flow"


@pytest.mark.slow
def test_a_worker_runs_the_pipeline_deployment(pipeline_repo, run_env, tmp_path):
    repo = pipeline_repo["repo"]
    assert pipeline_repo["result"].returncode == 0
    prefect = str(VENV_BIN / "prefect")
    created = run([prefect, "work-pool", "create", "--type", "process", "cudal1-cpu", "--overwrite"], repo, run_env)
    assert created.returncode == 0, created.stdout + created.stderr
    deployed = deploy(repo, run_env, "scheduled-retraining")
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    original = {name: (repo / name).read_text() for name in ("params.yaml", "dvc.lock")}
    edit_params(repo, {"report": {"title": "from the deployment"}})
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen([prefect, "worker", "start", "--pool", "cudal1-cpu"], cwd=tmp_path,
                              env=run_env | {"PREFECT_WORKER_QUERY_SECONDS": "1"}, stdout=log, stderr=subprocess.STDOUT)
    try:
        result = run([prefect, "deployment", "run", "pipeline/scheduled-retraining", "--watch",
                      "--watch-timeout", "400"], repo, run_env, timeout=450)
    finally:
        stop(worker, (signal.SIGINT, signal.SIGINT))  # a worker ignores its first SIGINT
        log.close()
    try:
        assert result.returncode == 0, result.stdout[-3000:] + (tmp_path / "worker.log").read_text()[-3000:]
        assert "Completed" in result.stdout
        assert (repo / "reports/report.md").read_text().startswith("# from the deployment")
        status = run([sys.executable, "-m", "dvc", "status"], repo, run_env)
        assert "up to date" in status.stdout
    finally:
        for name, text in original.items():
            (repo / name).write_text(text)
        # Leave the shared copy as the other tests expect it: the report matching params.yaml again. Its
        # earlier outputs are in DVC's cache, so a checkout restores them without running the stage again.
        run([sys.executable, "-m", "dvc", "checkout", "--force", "report"], repo, run_env)
