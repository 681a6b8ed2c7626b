"""MLflow tracking for the stages: one run per stage tagged ``stage=<name>``, nested under the pipeline's
run when the stage runs inside it (the parent's run id reaches the ``dvc repro`` subprocesses through
``CUDAL1_MLFLOW_PARENT_RUN_ID``).

The store is embedded by default: SQLite at ``<repo>/mlruns.db`` with artifacts in ``<repo>/mlartifacts``
(both git-ignored); ``MLFLOW_TRACKING_URI`` points the stages at a server instead. Calls go through
``MlflowClient`` with explicit run ids (no global active run), each wrapped in a task that retries on I/O.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.retry import io_only

PARENT_RUN_ENV = "CUDAL1_MLFLOW_PARENT_RUN_ID"
EXPERIMENT_ENV = "CUDAL1_MLFLOW_EXPERIMENT"
DEFAULT_EXPERIMENT = "cudal1"
# MLflow 3's UI opens an experiment by its kind: without this tag it guesses "GenAI" and shows an empty traces
# page; "custom_model_development" ("Machine learning" in the UI) opens on the runs and their charts.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
_RETRY = {"retries": 2, "retry_delay_seconds": [1, 5], "retry_condition_fn": io_only, "cache_policy": NO_CACHE}


def tracking_uri(repo_root: str | Path) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else SQLite at an absolute path inside the repository (a relative
    SQLite path would follow the working directory of whichever process logs)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(repo_root).resolve() / 'mlruns.db'}"


def _client(repo_root: str | Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri(repo_root))


def _experiment_id(client: Any, repo_root: str | Path) -> str:
    name = os.environ.get(EXPERIMENT_ENV, DEFAULT_EXPERIMENT)
    found = client.get_experiment_by_name(name)
    if found is not None:
        if found.tags.get("mlflow.experimentKind") != EXPERIMENT_KIND["mlflow.experimentKind"]:
            for key, value in EXPERIMENT_KIND.items():  # experiments made before the tag existed
                client.set_experiment_tag(found.experiment_id, key, value)
        return found.experiment_id
    # A server decides where artifacts go; the embedded store keeps them inside the repository.
    location = None
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        location = (Path(repo_root).resolve() / "mlartifacts").as_uri()
    return client.create_experiment(name, artifact_location=location, tags=EXPERIMENT_KIND)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings to dotted keys: {"overall": {"mean": 1}} -> {"overall.mean": 1}."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out |= flatten(value, name + ".")
        else:
            out[name] = value
    return out


def _param_value(value: Any) -> str:
    """Params as MLflow shows them: strings as they are, everything else as JSON (lists stay lists)."""
    import json

    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:6000]  # the store's limit on a param value


def _git_commit(repo_root: str | Path) -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo_root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@task(**_RETRY)
def start_run_task(stage: str, params: dict[str, Any], repo_root: str, run_name: str) -> str:
    client = _client(repo_root)
    tags = {"stage": stage}
    parent = os.environ.get(PARENT_RUN_ENV)
    if parent:
        tags["mlflow.parentRunId"] = parent
    commit = _git_commit(repo_root)
    if commit:
        tags["mlflow.source.git.commit"] = commit
    run = client.create_run(_experiment_id(client, repo_root), run_name=run_name, tags=tags)
    from mlflow.entities import Param

    flat = [Param(k, _param_value(v)) for k, v in flatten(params).items()]
    for start in range(0, len(flat), 100):  # the store takes at most 100 params per batch
        client.log_batch(run.info.run_id, params=flat[start:start + 100])
    return run.info.run_id


@task(**_RETRY)
def log_metrics_task(run_id: str, metrics: dict[str, Any], repo_root: str) -> None:
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    values = [Metric(k, float(v), now, 0) for k, v in flatten(metrics).items()
              if isinstance(v, (int, float)) and not isinstance(v, bool)]
    for start in range(0, len(values), 1000):
        _client(repo_root).log_batch(run_id, metrics=values[start:start + 1000])


@task(**_RETRY)
def log_artifacts_task(run_id: str, paths: list[str], repo_root: str, artifact_path: str | None = None) -> None:
    client = _client(repo_root)
    for path in paths:
        if Path(path).is_dir():
            client.log_artifacts(run_id, path, artifact_path)
        elif Path(path).is_file():
            client.log_artifact(run_id, path, artifact_path)


@task(**_RETRY)
def set_run_name_task(run_id: str, name: str, repo_root: str) -> None:
    _client(repo_root).update_run(run_id, name=name)


@task(**_RETRY)
def set_tags_task(run_id: str, tags: dict[str, str], repo_root: str) -> None:
    from mlflow.entities import RunTag

    _client(repo_root).log_batch(run_id, tags=[RunTag(k, str(v)[:5000]) for k, v in tags.items()])


def describe_run(stage: str, problems: int | None = None, model: str | None = None,
                 when: datetime | None = None) -> str:
    """What a run name says: ``sft | 15 problems | tiny 4x256 | 2026-11-24 10:02 UTC``."""
    parts = [stage]
    if problems is not None:
        parts.append(f"{problems} problem{'s' if problems != 1 else ''}")
    if model:
        parts.append(model)
    parts.append((when or datetime.now(timezone.utc)).strftime("%Y-%m-%d %H:%M UTC"))
    return " | ".join(parts)


@task(**_RETRY)
def end_run_task(run_id: str, status: str, repo_root: str) -> None:
    _client(repo_root).set_terminated(run_id, status)


@dataclass
class StageRun:
    run_id: str
    repo_root: str
    stage: str = ""

    def name(self, problems: int | None = None, model: str | None = None) -> None:
        """Rename the run once the stage knows what it works on (see ``describe_run``)."""
        set_run_name_task(self.run_id, describe_run(self.stage, problems, model), self.repo_root)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        set_tags_task(self.run_id, {k: str(v) for k, v in tags.items()}, self.repo_root)

    def log_metrics(self, metrics: Mapping[str, Any]) -> None:
        log_metrics_task(self.run_id, dict(metrics), self.repo_root)

    def log_artifacts(self, paths: Sequence[str | Path], artifact_path: str | None = None) -> None:
        log_artifacts_task(self.run_id, [str(p) for p in paths], self.repo_root, artifact_path)


@contextmanager
def stage_run(stage: str, params: Mapping[str, Any], repo_root: str | Path, run_name: str | None = None) -> Iterator[StageRun]:
    """An MLflow run around a stage; it ends FINISHED, or FAILED when the stage raises."""
    root = str(Path(repo_root).resolve())
    run = StageRun(start_run_task(stage, dict(params), root, run_name or describe_run(stage)), root, stage)
    try:
        yield run
    except BaseException:
        end_run_task(run.run_id, "FAILED", root)
        raise
    end_run_task(run.run_id, "FINISHED", root)
