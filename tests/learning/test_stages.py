"""Each learning stage on a tiny configuration, through its Prefect flow, in order (each reads the
previous one's outputs): tiny Llama, TRL SFT/GRPO on this CPU, the real evaluator, MLflow in the
project folder."""

from __future__ import annotations

import csv
import json

import pytest
import yaml
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.usefixtures("prefect_harness")


def runs(root, stage):
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlruns.db'}")
    found = client.search_runs(client.search_experiments()[0].experiment_id, f"tags.stage = '{stage}'")
    return client, found


def test_policy_stage(tiny_project):
    from flows.policy import policy_flow

    built = policy_flow(params_path=str(tiny_project / "params.yaml"))
    assert built["layers"] == 1 and (tiny_project / "models/policy/model.safetensors").exists()
    _, found = runs(tiny_project, "policy")
    assert found and found[0].info.status == "FINISHED"


# The stages after the policy train and sample in a chain of about 15 s (serial, idle machine): the slow
# tier. The policy stage keeps a real flow on the shared Prefect server in the fast tier.
@pytest.mark.slow
def test_sft_stage(tiny_project):
    from flows.sft import sft_flow

    summary = sft_flow(params_path=str(tiny_project / "params.yaml"))
    assert summary["examples"] == 4 and summary["last_loss"] < summary["first_loss"]
    assert (tiny_project / "models/sft/model.safetensors").exists()
    with open(tiny_project / "reports/learning/sft_loss.csv") as f:
        assert len(list(csv.DictReader(f))) == summary["steps"]
    client, found = runs(tiny_project, "sft")
    assert len(client.get_metric_history(found[0].info.run_id, "sft_loss")) == summary["steps"]


@pytest.mark.slow
def test_self_supervised_stage(tiny_project):
    from flows.self_supervised import self_supervised_flow

    rounds = self_supervised_flow(params_path=str(tiny_project / "params.yaml"))
    assert len(rounds) == 2 and all(r["samples"] == 4 for r in rounds)  # 2 problems x 2 samples, each round
    for r in range(2):
        assert (tiny_project / f"data/self_supervised/samples-round-{r}.parquet").exists()
        assert (tiny_project / f"models/self_supervised/rounds/round-{r}/config.json").exists()
    assert (tiny_project / "data/self_supervised/pool.parquet").exists()
    assert (tiny_project / "models/self_supervised/config.json").exists()
    # the corpus's growth: the 4 corpus programs, then whatever each round added
    assert rounds[0]["pool_correct"] == 4 + rounds[0]["new_correct"]
    assert rounds[1]["pool_correct"] == rounds[0]["pool_correct"] + rounds[1]["new_correct"]
    client, found = runs(tiny_project, "self_supervised")
    run_id = found[0].info.run_id
    for series in ("ssl_round_success_rate", "ssl_round_new_correct", "ssl_round_pool_correct"):
        assert [m.step for m in client.get_metric_history(run_id, series)] == [0, 1], series
    assert found[0].data.metrics["corpus_growth"] == rounds[0]["new_correct"] + rounds[1]["new_correct"]


@pytest.mark.slow
def test_contrastive_rl_stage_and_its_resume(tiny_project):
    from cudal1.pool import CandidatePool
    from flows.contrastive_rl import contrastive_rl_flow

    params = str(tiny_project / "params.yaml")
    epochs = contrastive_rl_flow(params_path=params)
    assert len(epochs) == 1 and epochs[0]["completions"] == 4  # 2 prompts x G=2
    for key in ("mean_reward", "max_reward", "success_rate", "mean_speedup", "median_speedup"):
        assert key in epochs[0]
    with open(tiny_project / "reports/rl_epochs.csv") as f:
        assert len(list(csv.DictReader(f))) == 1
    client, found = runs(tiny_project, "contrastive_rl")
    history = client.get_metric_history(found[0].info.run_id, "rl_epoch_mean_reward")
    assert [m.step for m in history] == [0]  # one point per epoch, its step the epoch
    assert not client.get_metric_history(found[0].info.run_id, "epoch_mean_reward")  # logged once, not twice
    pool = CandidatePool.load(tiny_project / "data/contrastive_rl/pool.parquet")
    assert len(pool) >= 4  # the starting pool (corpus) at least

    # One more epoch: the run resumes after epoch 0 instead of starting over.
    data = yaml.safe_load((tiny_project / "params.yaml").read_text())
    data["contrastive_rl"]["epochs"] = 2
    (tiny_project / "params.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    again = contrastive_rl_flow(params_path=params)
    same = json.dumps(again[0], sort_keys=True) == json.dumps(epochs[0], sort_keys=True)  # NaN-safe
    assert len(again) == 2 and same
    state = next((tiny_project / "data/cache/contrastive_rl").glob("*/state.json"))
    assert len(json.loads(state.read_text())["epochs"]) == 2
