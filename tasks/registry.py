"""The trained policy in MLflow: logged as a pyfunc model by every learning stage (``tasks/policy_model.py`` is
its loader), registered by ``contrastive_rl`` as a new version of the registered model its params name, and
promoted by the gate through the ``champion`` alias. Plus the data versions a policy was trained on: the
DVC hashes of its input files, read from ``dvc.lock``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.retry import io_only
from tasks.tracking import _client, flatten, tracking_uri

LOADER = Path(__file__).with_name("policy_model.py")
CHAMPION = "champion"
REGISTRATION = "registered.json"  # written by contrastive_rl into its data_dir: which version it made
_RETRY = {"retries": 2, "retry_delay_seconds": [1, 5], "retry_condition_fn": io_only, "cache_policy": NO_CACHE}


def data_versions(repo_root: str | Path, paths: Sequence[str | Path]) -> dict[str, str]:
    """``{relative path: DVC hash}`` of each input that an earlier stage wrote, as ``dvc.lock`` records it
    (a folder's hash ends in ``.dir``). Inputs DVC does not track (or no ``dvc.lock`` yet) are left out: a
    stage run by hand outside DVC has no recorded data version."""
    import yaml

    root = Path(repo_root).resolve()
    lock = root / "dvc.lock"
    if not lock.is_file():
        return {}
    outs: dict[str, str] = {}
    for stage in (yaml.safe_load(lock.read_text()) or {}).get("stages", {}).values():
        for out in stage.get("outs", []):
            outs[out["path"].rstrip("/")] = out.get("md5") or out.get("hash") or ""
    found = {}
    for path in paths:
        full = Path(path) if Path(path).is_absolute() else root / path
        if not full.resolve().is_relative_to(root):  # an input outside the repository: not DVC's
            continue
        rel = full.resolve().relative_to(root).as_posix()
        if rel in outs:
            found[rel] = outs[rel]
    return found


@contextmanager
def _fluent_store(repo_root: str | Path) -> Iterator[None]:
    """MLflow's fluent calls (``Model.log``, ``register_model``, ``pyfunc.load_model``) aimed at the store of
    ``repo_root``. ``mlflow.set_tracking_uri`` also writes ``MLFLOW_TRACKING_URI`` into the environment,
    which ``tracking_uri`` reads first: both are put back, or one project's store would capture the next."""
    import mlflow
    from mlflow.tracking._tracking_service import utils

    env, before = os.environ.get("MLFLOW_TRACKING_URI"), utils._tracking_uri
    mlflow.set_tracking_uri(tracking_uri(repo_root))
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before)
        if env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = env


def _numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in flatten(metrics).items() if isinstance(v, int | float) and not isinstance(v, bool)}


@task(**_RETRY)
def log_policy_model_task(run_id: str, policy_dir: str, repo_root: str, params: dict[str, Any],
                          metrics: dict[str, Any], data: dict[str, str]) -> str:
    """Log ``policy_dir`` as the run's model ``policy`` with the stage's params, the data versions (as model
    params ``data.<path>`` and as run tags) and its metrics. Returns the model's URI (``models:/m-...``)."""
    import mlflow

    client = _client(repo_root)
    with _fluent_store(repo_root):
        # Model.log creates the logged model in the current experiment: make it the run's.
        mlflow.set_experiment(experiment_id=client.get_run(run_id).info.experiment_id)
        info = _log_model(run_id, policy_dir, params, data)
        numbers = _numbers(metrics)
        if numbers:
            mlflow.log_metrics(numbers, model_id=info.model_id, run_id=run_id)
    from mlflow.entities import RunTag

    client.log_batch(run_id, tags=[RunTag(f"data.{path}", digest) for path, digest in data.items()])
    return info.model_uri


def _log_model(run_id: str, policy_dir: str, params: dict[str, Any], data: dict[str, str]) -> Any:
    import mlflow
    from mlflow.models import Model

    model_params = {k: json.dumps(v) if not isinstance(v, str) else v for k, v in flatten(params).items()}
    model_params |= {f"data.{path}": digest for path, digest in data.items()}
    return Model.log(
        artifact_path=None, name="policy", flavor=mlflow.pyfunc, run_id=run_id, python_model=str(LOADER),
        artifacts={"policy": str(policy_dir)}, model_config={"max_new_tokens": 160},
        # Listed, not inferred (inference imports and runs the model); cudal1 is installed from this repository.
        pip_requirements=["cudal1", "torch", "transformers"], params={k: v[:5000] for k, v in model_params.items()},
        model_type="policy",
    )


@task(**_RETRY)
def register_policy_task(model_uri: str, name: str, repo_root: str, tags: dict[str, str]) -> str:
    """A new version of registered model ``name`` (created on first use); returns the version number."""
    import mlflow
    from mlflow.exceptions import MlflowException

    client = _client(repo_root)
    try:
        client.create_registered_model(name, description="cudal1 policies: the `champion` alias marks the one in "
                                                          "use; the `gate` stage moves it (flows/gate.py).")
    except MlflowException as exc:  # it exists already: the usual case
        if "RESOURCE_ALREADY_EXISTS" not in str(exc.error_code):
            raise
    with _fluent_store(repo_root):
        version = mlflow.register_model(model_uri, name, tags=tags)
    return str(version.version)


def write_registration(path: str | Path, name: str, version: str, model_uri: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"registered_model": name, "version": version, "model_uri": model_uri},
                                     indent=2) + "\n")


def read_registration(path: str | Path) -> dict[str, str]:
    return json.loads(Path(path).read_text())


def champion_version(repo_root: str, name: str, alias: str = CHAMPION) -> str | None:
    from mlflow.exceptions import MlflowException

    try:
        return str(_client(repo_root).get_model_version_by_alias(name, alias).version)
    except MlflowException:
        return None


@task(**_RETRY)
def set_alias_task(repo_root: str, name: str, version: str, alias: str = CHAMPION) -> None:
    _client(repo_root).set_registered_model_alias(name, alias, version)


@task(**_RETRY)
def tag_version_task(repo_root: str, name: str, version: str, tags: dict[str, Any]) -> None:
    client = _client(repo_root)
    for key, value in tags.items():
        client.set_model_version_tag(name, version, key, str(value))


def load_policy_version(repo_root: str, name: str, version: str) -> Any:
    """The version's pyfunc model, through its own loader (``PolicyModel``): what a user of the registry gets."""
    import mlflow

    with _fluent_store(repo_root):
        return mlflow.pyfunc.load_model(f"models:/{name}/{version}").unwrap_python_model()


def list_versions(repo_root: str | Path, name: str | None = None) -> list[dict[str, Any]]:
    """Every version of the registered models (or of ``name``), newest first: aliases, the run that made it,
    its tags (the gate's ``gate.*`` figures) and the metrics of its logged model (``rl.*``)."""
    from datetime import datetime, timezone

    client = _client(repo_root)
    names = [name] if name else [m.name for m in client.search_registered_models()]
    rows = []
    for model in names:
        for found in client.search_model_versions(f"name = '{model}'"):
            v = client.get_model_version(model, found.version)  # search results leave the aliases out
            metrics = {}
            if v.source.startswith("models:/m-"):  # the logged model the version was made from
                logged = client.get_logged_model(v.source.removeprefix("models:/"))
                metrics = {m.key: m.value for m in logged.metrics or []}
            created = datetime.fromtimestamp(v.creation_timestamp / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M")
            rows.append({"name": model, "version": int(v.version), "aliases": sorted(v.aliases), "created": created,
                         "run_id": v.run_id, "tags": dict(v.tags), "metrics": metrics})
    return sorted(rows, key=lambda r: (r["name"], -r["version"]))


def log_policy(run: Any, params: Mapping[str, Any], policy_dir: str | Path, metrics: Mapping[str, Any],
               inputs: Sequence[str | Path]) -> str | None:
    """A learning stage's policy into its run ``run`` (a ``tasks.tracking.StageRun``): the model with the
    stage's params, the data versions of ``inputs`` and ``metrics``. A policy stage that only names a hub
    model has no folder to log (its pointer file is logged as an artifact instead): returns None then."""
    if not (Path(policy_dir) / "config.json").is_file():
        run.log_artifacts([Path(policy_dir)], artifact_path="policy_config")
        return None
    # The run's own artifacts show what was trained (the model files live with the logged model). Not under
    # "policy": MLflow 3 resolves runs:/<id>/policy to the logged model of that name, not to the folder.
    run.log_artifacts([f for f in Path(policy_dir).glob("*.json") if f.stat().st_size < 1_000_000],
                      artifact_path="policy_config")
    data = data_versions(run.repo_root, inputs)
    return log_policy_model_task(run.run_id, str(policy_dir), run.repo_root, dict(params), dict(metrics), data)
