"""The learning stages' MLflow side on a tiny configuration: every stage logs its policy as an MLflow model
(loadable through its own loader, offline), contrastive_rl registers a version, the gate promotes the first
and keeps out a policy that never trained; `cudal1 models` lists them. Real Prefect (test harness), real
MLflow store in the project folder, real TRL and evaluator.

The tests share one project folder and run in file order."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from learning_helpers import LIGHT
from mlflow.tracking import MlflowClient

# slow: the module fixture runs every learning stage (about a minute on the 2-core machine)
pytestmark = [pytest.mark.usefixtures("prefect_harness"), pytest.mark.slow]
STAGES = ("policy", "sft", "self_supervised", "contrastive_rl")


def client_of(root) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{root / 'mlruns.db'}")


def edit(root, section: str, changes: dict) -> None:
    path = root / "params.yaml"
    data = yaml.safe_load(path.read_text())
    data.setdefault(section, {}).update(changes)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def all_artifacts(client: MlflowClient, run_id: str, path: str | None = None) -> set[str]:
    found = set()
    for item in client.list_artifacts(run_id, path):
        found |= all_artifacts(client, run_id, item.path) if item.is_dir else {item.path}
    return found


@pytest.fixture(scope="module")
def trained(tiny_project):
    """policy -> sft -> self_supervised -> contrastive_rl -> gate, once, as DVC would run them."""
    from flows.contrastive_rl import contrastive_rl_flow
    from flows.gate import gate_flow
    from flows.policy import policy_flow
    from flows.self_supervised import self_supervised_flow
    from flows.sft import sft_flow

    edit(tiny_project, "gate", {"protocol": LIGHT, "max_new_tokens": 48, "prompts": {"exemplars": 1}})
    params = str(tiny_project / "params.yaml")
    for stage_flow in (policy_flow, sft_flow, self_supervised_flow, contrastive_rl_flow):
        stage_flow(params_path=params)
    return {"root": tiny_project, "gate": gate_flow(params_path=params)}


def test_every_learning_stage_logs_its_policy_as_a_model_with_params_and_metrics(trained):
    root = trained["root"]
    client = client_of(root)
    experiment = client.get_experiment_by_name("cudal1")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    runs = {r.data.tags["stage"]: r for r in client.search_runs([experiment.experiment_id])}
    for stage in STAGES:
        run = runs[stage]
        assert run.info.run_name.startswith(f"{stage} | 2 problems | tiny 1x64 | 20"), run.info.run_name
        models = client.search_logged_models([experiment.experiment_id], filter_string=f"source_run_id = '{run.info.run_id}'")
        assert len(models) == 1, stage
        assert models[0].name == "policy" and models[0].params["out_dir"].endswith(f"models/{stage}")
    rl = client.search_logged_models([experiment.experiment_id],
                                     filter_string=f"source_run_id = '{runs['contrastive_rl'].info.run_id}'")[0]
    assert {m.key for m in rl.metrics} >= {"rl.success_rate", "rl.mean_reward", "rl.epochs"}
    sft = all_artifacts(client, runs["sft"].info.run_id)
    assert {"plots/sft_loss.csv", "plots/sft_loss.png"} <= sft
    rl_files = all_artifacts(client, runs["contrastive_rl"].info.run_id)
    assert {"plots/rl_epochs.csv", "plots/rl_epochs.png", "plots/rl_metrics.json", "tables/candidates.parquet",
            "tables/pool.parquet"} <= rl_files
    assert "tables/self_supervised_rounds.csv" in all_artifacts(client, runs["self_supervised"].info.run_id)


def test_the_registered_version_loads_offline_through_its_own_loader_and_writes_text(trained):
    from tasks.registry import load_policy_version

    registration = json.loads((trained["root"] / "data/contrastive_rl/registered.json").read_text())
    assert registration == {"registered_model": "cudal1-policy", "version": "1",
                            "model_uri": registration["model_uri"]}
    policy = load_policy_version(str(trained["root"]), "cudal1-policy", "1")
    [[text]] = policy.generate(["class Model"], 1, max_new_tokens=8)
    assert isinstance(text, str) and text


def test_the_first_version_becomes_the_champion(trained):
    root, gate = trained["root"], trained["gate"]
    assert gate["promoted"] and gate["champion_before"] is None and "first version" in gate["reason"]
    client = client_of(root)
    assert str(client.get_model_version_by_alias("cudal1-policy", "champion").version) == "1"
    version = client.get_model_version("cudal1-policy", "1")
    assert version.tags["gate.decision"] == "promoted" and "gate.new.success_rate" in version.tags
    metrics = json.loads((root / "reports/gate.json").read_text())["gate"]
    assert metrics["promoted"] == 1 and metrics["new.problems"] == 2


def test_a_policy_that_never_trained_is_kept_out(trained):
    from flows.contrastive_rl import contrastive_rl_flow
    from flows.gate import gate_flow

    root = trained["root"]
    params = str(root / "params.yaml")
    # RL from the untrained base policy, one epoch: it writes no program, so it solves nothing.
    edit(root, "contrastive_rl", {"policy": "models/policy", "epochs": 1})
    contrastive_rl_flow(params_path=params)
    decision = gate_flow(params_path=params)
    assert decision["version"] == "2" and decision["champion_before"] == "1"
    assert not decision["promoted"], decision["reason"]
    client = client_of(root)
    assert str(client.get_model_version_by_alias("cudal1-policy", "champion").version) == "1"
    assert client.get_model_version("cudal1-policy", "2").tags["gate.decision"] == "kept out"
    assert json.loads((root / "reports/gate.json").read_text())["gate"]["new.solved"] == 0


def test_cudal1_models_lists_versions_aliases_and_figures_and_moves_the_alias_by_hand(trained):
    root = trained["root"]
    listed = subprocess.run([sys.executable, "-m", "cudal1.cli", "models", "--repo", str(root)], capture_output=True,
                            text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr
    lines = [line for line in listed.stdout.splitlines() if "cudal1-policy" in line]
    assert len(lines) == 2
    assert "champion" in lines[1] and "promoted" in lines[1] and "kept out" in lines[0]  # newest first
    moved = subprocess.run([sys.executable, "-m", "cudal1.cli", "models", "--repo", str(root), "--name",
                            "cudal1-policy", "--set-champion", "2"], capture_output=True, text=True, timeout=300)
    assert moved.returncode == 0, moved.stderr
    assert str(client_of(root).get_model_version_by_alias("cudal1-policy", "champion").version) == "2"
