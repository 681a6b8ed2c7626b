"""The registry, the promotion gate and DVC's remote and experiments on the default DAG (reduced suite): after
the shared pipeline run, then a push to the default remote and a pull into a fresh clone, then two `dvc exp
run -S` experiments, one whose policy is worse than the champion and one whose policy is better.

Real Prefect server, real MLflow store in the repository copy, real DVC, real tiny models. The tests share the
session's repository copy and run in file order; the last one leaves the copy as it found it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_helpers import edit_params, run, run_pipeline

pytestmark = pytest.mark.slow
MODEL = "cudal1-policy"
STAGES = ("problems", "augment", "evaluate", "report", "policy", "sft", "self_supervised", "contrastive_rl", "gate")


def client_of(repo: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{repo / 'mlruns.db'}")


def champion(repo: Path) -> str:
    return str(client_of(repo).get_model_version_by_alias(MODEL, "champion").version)


def dvc(repo: Path, env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    done = run([sys.executable, "-m", "dvc", *args], repo, env, timeout)
    assert done.returncode == 0, f"dvc {' '.join(args)}\n" + done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_default_pipeline_registers_one_champion_version_and_every_stage_run_has_artifacts(pipeline_repo, run_env):
    repo = pipeline_repo["repo"]
    assert pipeline_repo["result"].returncode == 0
    client = client_of(repo)
    versions = client.search_model_versions(f"name = '{MODEL}'")
    assert [str(v.version) for v in versions] == ["1"] and champion(repo) == "1"
    experiment = client.get_experiment_by_name("cudal1")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    runs = client.search_runs([experiment.experiment_id], max_results=200)
    parent = min((r for r in runs if r.data.tags.get("stage") == "pipeline"), key=lambda r: r.info.start_time)
    assert parent.data.metrics["gate.promoted"] == 1
    children = {r.data.tags["stage"]: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert set(children) == set(STAGES)
    for stage, child in children.items():
        assert child.info.run_name.startswith(f"{stage} | 3 problems"), child.info.run_name
        assert child.info.run_name.endswith(" UTC")
        assert client.list_artifacts(child.info.run_id), f"the {stage} run has no artifacts"
    tables = {a.path for a in client.list_artifacts(children["augment"].info.run_id, "tables")}
    assert tables == {"tables/candidates.parquet", "tables/evaluations.parquet", "tables/corpus.parquet"}
    assert "tables/evaluations.parquet" in {a.path for a in client.list_artifacts(children["evaluate"].info.run_id,
                                                                                   "tables")}
    # The policy trained on the data DVC recorded: the hashes in dvc.lock, on the run and on its model.
    lock = (repo / "dvc.lock").read_text()
    rl_tags = children["contrastive_rl"].data.tags
    assert rl_tags["data.data/problems/problems.parquet"] in lock and rl_tags["registered_version"] == "1"
    assert children["gate"].data.tags["gate.decision"] == "promoted"
    gate = json.loads((repo / "reports/gate.json").read_text())["gate"]
    assert gate["promoted"] == 1 and gate["new.problems"] == 3
    # The Prefect UI shows the gate's decision as a markdown artifact of its flow run.
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: run_env["PREFECT_API_URL"]}), get_client(sync_client=True) as prefect:
        found = prefect.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["promotion-gate"])))
    assert any(f"{MODEL} version 1" in (a.data or "") for a in found)


def test_dvc_push_to_the_default_remote_then_pull_into_a_fresh_clone_restores_every_output(
        pipeline_repo, run_env, tmp_path):
    repo = pipeline_repo["repo"]
    assert dvc(repo, run_env, "remote", "default").stdout.strip() == "storage"
    remote = tmp_path / "remote"
    dvc(repo, run_env, "remote", "modify", "--local", "storage", "url", str(remote))
    dvc(repo, run_env, "push")
    git = ["git", "-c", "user.name=cudal1-tests", "-c", "user.email=tests@cudal1.invalid"]
    for cmd in ([*git, "add", "-A"], [*git, "commit", "-qm", "pipeline outputs"]):
        assert run(cmd, repo, run_env).returncode == 0
    clone = tmp_path / "clone"
    assert run(["git", "clone", "-q", str(repo), str(clone)], tmp_path, run_env).returncode == 0
    assert not (clone / "models/contrastive_rl").exists()
    dvc(clone, run_env, "remote", "modify", "--local", "storage", "url", str(remote))
    dvc(clone, run_env, "pull")
    for out in ("data/augment/corpus.parquet", "models/contrastive_rl/config.json", "reports/gate.json",
                "data/contrastive_rl/registered.json"):
        assert (clone / out).read_bytes() == (repo / out).read_bytes(), out
    status = dvc(clone, run_env, "status")
    assert "up to date" in status.stdout  # nothing to re-run: the pulled outputs match dvc.lock


def test_a_stage_that_fails_keeps_earlier_outputs_and_the_next_run_starts_at_it(pipeline_repo, run_env):
    repo = pipeline_repo["repo"]
    kept = ("models/contrastive_rl/config.json", "data/contrastive_rl/registered.json", "reports/rl_metrics.json")
    before = {out: (repo / out).read_bytes() for out in kept}
    original = (repo / "params.yaml").read_text()
    try:
        # An alias MLflow refuses ("v<N>" names a version): the gate fails after measuring, when it promotes.
        edit_params(repo, {"gate": {"alias": "v7"}})
        failed = run_pipeline(repo, run_env)
    finally:
        (repo / "params.yaml").write_text(original)
    assert failed.returncode == 1, failed.stdout[-2000:] + failed.stderr[-2000:]
    assert "Running stage 'gate'" in failed.stdout and "dvc repro failed" in failed.stderr
    assert {out: (repo / out).read_bytes() for out in kept} == before
    resumed = run_pipeline(repo, run_env)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    # Only the gate: run again, or restored from DVC's run-cache (the same params and inputs ran before).
    ran = [s for s in STAGES if f"Running stage '{s}'" in resumed.stdout or f"Stage '{s}' is cached" in resumed.stdout]
    assert ran == ["gate"], resumed.stdout[-3000:]
    assert champion(repo) == "1" and json.loads((repo / "reports/gate.json").read_text())["gate"]["promoted"] == 1


def test_dvc_experiments_register_versions_and_the_gate_promotes_a_better_one_and_keeps_a_worse_one_out(
        pipeline_repo, run_env):
    repo = pipeline_repo["repo"]
    saved = {name: (repo / name).read_text() for name in ("params.yaml", "dvc.lock")}
    first = json.loads((repo / "reports/gate.json").read_text())["gate"]
    try:
        # Better: a policy of two layers of 128 and SFT long enough to learn the corpus programs (the reduced
        # run's one layer of 64 and three epochs stop far short of that): 60 epochs at 3e-3 solved 3 of 3;
        # 30 epochs at 5e-3, or one copy and one exemplar, solved none (the default's 4 x 256 took 3x longer).
        dvc(repo, run_env, "exp", "run", "-n", "sft60", "-S", "policy.vocab_size=4096", "-S", "policy.hidden=128",
            "-S", "policy.layers=2", "-S", "sft.epochs=60", "-S", "sft.learning_rate=0.003", "-S", "sft.copies=2",
            "-S", "sft.prompts.exemplars=2", "-S", "contrastive_rl.epochs=1")
        assert json.loads((repo / "data/contrastive_rl/registered.json").read_text())["version"] == "2"
        better = json.loads((repo / "reports/gate.json").read_text())["gate"]
        assert better["promoted"] == 1 and better["new.solved"] > better["champion.solved"], (first, better)
        assert champion(repo) == "2"
        # Worse: RL from the untrained base policy writes no program, while the champion solves problems.
        dvc(repo, run_env, "exp", "run", "-n", "untrained", "-S", "contrastive_rl.policy=models/policy")
        worse = json.loads((repo / "reports/gate.json").read_text())["gate"]
        assert worse["promoted"] == 0 and worse["new.solved"] == 0 < worse["champion.solved"], worse
        assert champion(repo) == "2"
        listed = run([sys.executable, "-m", "cudal1.cli", "models", "--repo", str(repo)], repo, run_env)
        assert listed.returncode == 0 and "champion" in listed.stdout and "kept out" in listed.stdout, listed.stderr

        shown = json.loads(dvc(repo, run_env, "exp", "show", "--json").stdout)
        experiments = {rev["name"]: rev for rev in revisions(shown) if rev.get("name") in ("sft60", "untrained")}
        assert set(experiments) == {"sft60", "untrained"}, json.dumps(shown)[:3000]
        for name, promoted in (("sft60", 1), ("untrained", 0)):
            metrics = experiments[name]["data"]["metrics"]
            assert "success_rate" in metrics["reports/rl_metrics.json"]["data"]["rl"]
            assert metrics["reports/gate.json"]["data"]["gate"]["promoted"] == promoted
        table = dvc(repo, run_env, "exp", "show", "--no-pager", "--md").stdout
        assert "success_rate" in table and "sft60" in table and "untrained" in table, table[:3000]
    finally:
        for name, text in saved.items():
            (repo / name).write_text(text)
        dvc(repo, run_env, "checkout", "--force")


def revisions(node):
    """Every revision record (a mapping with ``rev`` and ``data``) in `dvc exp show --json`'s nesting."""
    if isinstance(node, dict):
        if "rev" in node and "data" in node:
            yield node
        for value in node.values():
            yield from revisions(value)
    elif isinstance(node, list):
        for item in node:
            yield from revisions(item)
