"""The DAG end to end on a reduced suite: `python -m flows.pipeline` in a fresh copy of the repository,
then a no-op re-run, a params change that re-runs only its stage, and the MLflow runs it all left.

The tests in this module share one repository copy and run in file order."""

from __future__ import annotations

import json
import sys
import time

import polars as pl
import pytest
import yaml
from pipeline_helpers import edit_params, run, run_pipeline

from flows.pipeline import _up_to_date, stages_to_run_task

pytestmark = pytest.mark.slow  # the fixture runs the whole reduced pipeline (about 2 minutes)

STAGES = ("problems", "augment", "evaluate", "report", "policy", "sft", "self_supervised", "contrastive_rl", "gate")


def test_pipeline_runs_every_stage_from_a_fresh_copy(pipeline_repo):
    repo, result = pipeline_repo["repo"], pipeline_repo["result"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for stage in STAGES:
        assert f"Running stage '{stage}'" in result.stdout + result.stderr
    problems = pl.read_parquet(repo / "data/problems/problems.parquet")
    assert problems.height == 3
    candidates = pl.read_parquet(repo / "data/augment/candidates.parquet")
    assert set(candidates["origin"]) == {"template:baseline", "template:no_grad"}
    assert candidates.height == 6
    evaluations = pl.read_parquet(repo / "data/evaluate/evaluations.parquet")
    assert evaluations.height == 6 and set(evaluations["candidate_id"]) == set(candidates["candidate_id"])
    # Correct by construction; on a busy 2-core machine the evaluator may still reject a noisy timing.
    assert set(evaluations["status"]) <= {"ok", "rejected"}, evaluations.select("status", "reason")
    ok = evaluations.filter(pl.col("status") == "ok")
    corpus = pl.read_parquet(repo / "data/augment/corpus.parquet")
    assert set(corpus["origin"]) <= {"template:no_grad"}  # the baseline is the reference, not a lesson
    assert corpus["speedup"].min() > 0 and all("class ModelNew" in s for s in corpus["source"])
    metrics = json.loads((repo / "reports/metrics.json").read_text())
    assert metrics["overall"]["total"] == 3 and metrics["overall"]["success"] == ok["problem_id"].n_unique()
    assert metrics["overall"]["max"] == ok["speedup"].max()
    assert set(metrics["origins"]) == {"template:baseline", "template:no_grad"}
    report = (repo / "reports/report.md").read_text()
    assert "| Level 1 |" in report and "Speedup>1.01" in report
    for png in ("speedup_hist.png", "speedup_by_level.png"):
        assert (repo / "reports/plots" / png).read_bytes()[:4] == b"\x89PNG"
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    assert set(lock["stages"]) == set(STAGES)


def test_second_run_with_nothing_changed_skips_every_stage(pipeline_repo, run_env):
    repo = pipeline_repo["repo"]
    before = (repo / "data/augment/candidates.parquet").stat().st_mtime_ns
    started = time.monotonic()
    result = run_pipeline(repo, run_env)
    seconds = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    assert "up to date" in result.stdout
    assert seconds < 30, f"a no-op run took {seconds:.1f} s"
    assert (repo / "data/augment/candidates.parquet").stat().st_mtime_ns == before


def test_changed_params_rerun_only_their_stage(pipeline_repo, run_env):
    repo = pipeline_repo["repo"]
    outs = {stage: repo / path for stage, path in [("problems", "data/problems/problems.parquet"),
                                                   ("augment", "data/augment/evaluations.parquet"),
                                                   ("evaluate", "data/evaluate/evaluations.parquet")]}
    before = {stage: path.stat().st_mtime_ns for stage, path in outs.items()}
    edit_params(repo, {"report": {"threshold": 1.5}})
    result = run([sys.executable, "-m", "dvc", "repro"], repo, run_env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Running stage 'report'" in result.stdout
    for stage in ("problems", "augment", "evaluate", "policy", "sft", "self_supervised", "contrastive_rl", "gate"):
        assert f"Running stage '{stage}'" not in result.stdout
    for stage, path in outs.items():
        assert path.stat().st_mtime_ns == before[stage]
    assert "Speedup>1.5" in (repo / "reports/report.md").read_text()
    status = run([sys.executable, "-m", "dvc", "status"], repo, run_env)
    assert "up to date" in status.stdout


def test_a_target_is_stale_when_a_stage_it_depends_on_changed(pipeline_repo):
    """`python -m flows.pipeline report` after an augment param changed: DVC must re-run augment and
    what follows, not answer "up to date" because report's own inputs are unchanged."""
    repo = pipeline_repo["repo"]
    params = repo / "params.yaml"
    original = params.read_text()

    def up_to_date(*targets: str) -> bool:  # what `python -m flows.pipeline` asks DVC before it starts a flow
        return _up_to_date(str(repo), list(targets))

    assert up_to_date("report")
    try:
        edit_params(repo, {"augment": {"protocol": {"timing_trials": 9}}})
        assert not up_to_date("report")
        assert up_to_date("problems")  # upstream of the change: still up to date
        # what the flow then runs: the changed stage and what follows it among the target's dependencies (the
        # report reads the self-supervised rounds, whose policy learns from the corpus), read in the
        # repository, not in this process's working directory (`--repo` from elsewhere)
        assert stages_to_run_task.fn(str(repo), ["report"], False) == [
            "augment", "evaluate", "policy", "report", "self_supervised", "sft"]
    finally:
        params.write_text(original)
    assert up_to_date("report")


def test_mlflow_runs_nest_under_the_pipeline_run(pipeline_repo):
    from mlflow.tracking import MlflowClient

    repo = pipeline_repo["repo"]
    client = MlflowClient(tracking_uri=f"sqlite:///{repo / 'mlruns.db'}")
    experiment = client.get_experiment_by_name("cudal1")
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    # The first pipeline run is the fixture's; a no-op run logs nothing (later modules may add runs).
    parent = min((r for r in runs if r.data.tags.get("stage") == "pipeline"), key=lambda r: r.info.start_time)
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["overall.total"] == 3
    children = {r.data.tags["stage"]: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert set(children) == set(STAGES)
    for stage, child in children.items():
        assert child.info.status == "FINISHED", stage
    assert "last_epoch_mean_reward" in children["contrastive_rl"].data.metrics
    assert children["problems"].data.params["limit"] == "3"
    assert children["augment"].data.params["template.variants"] == '["baseline", "no_grad"]'
    assert children["augment"].data.metrics["candidates"] == 6
    report = children["report"]
    assert report.data.params["threshold"] == "1.01"
    assert report.data.metrics["overall.success"] == parent.data.metrics["overall.success"] >= 1
    assert "levels.level1.p50" in report.data.metrics
    artifacts = {a.path for a in client.list_artifacts(report.info.run_id, "report")}
    assert {"report/report.md", "report/metrics.json", "report/speedup_hist.png"} <= artifacts
    # The report re-run by plain `dvc repro` (previous test) is a top-level run of its own.
    standalone = [r for r in runs if r.data.tags.get("stage") == "report" and "mlflow.parentRunId" not in r.data.tags]
    assert "1.5" in {r.data.params["threshold"] for r in standalone}
    assert str(repo) in experiment.artifact_location
