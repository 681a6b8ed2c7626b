"""Evaluation as Prefect tasks. Each device's tag carries a concurrency limit of 1, so two flows (say
a scheduled pipeline and an ad-hoc evaluate deployment) never time candidates on one device at once."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from cudal1.candidates import Candidate, Evaluation, evaluations_from_parquet
from cudal1.evaluator.config import EvalConfig
from cudal1.generation.augment import dedupe, select_measured
from cudal1.problems import Problem
from tasks.progress import EvaluationProgress
from tasks.retry import io_only


def evaluator_fingerprint() -> str:
    """A hash of the evaluator's code. The evaluator resumes from a table keyed on the protocol's hash,
    which a fix to the evaluator itself does not change; naming the table after the code does."""
    import hashlib

    import cudal1.evaluator as package

    digest = hashlib.sha256()
    for path in sorted(Path(package.__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def cache_path(base: str) -> str:
    """``data/cache/augment-measurements.parquet`` -> ``data/cache/augment-measurements-<evaluator>.parquet``."""
    path = Path(base)
    return str(path.with_name(f"{path.stem}-{evaluator_fingerprint()}{path.suffix}"))


def device_tags(devices: Sequence[str]) -> list[str]:
    """One tag per physical device: the host name keeps cuda:0 of two machines apart."""
    host = socket.gethostname()
    return [f"device:{host}:{d}" for d in devices]  # no "/": limit names may not contain it


@task(retries=2, retry_delay_seconds=[1, 5], retry_condition_fn=io_only, cache_policy=NO_CACHE)
def ensure_device_limits_task(tags: list[str]) -> None:
    """Create the one-at-a-time limit for each device tag the first time the device is used."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        for tag in tags:
            try:
                client.read_concurrency_limit_by_tag(tag)
            except ObjectNotFound:
                client.create_concurrency_limit(tag=tag, concurrency_limit=1)


@task(cache_policy=NO_CACHE)
def evaluate_candidates_task(
    problems: list[Problem],
    candidates: list[Candidate],
    config: EvalConfig,
    devices: list[str],
    results_path: str,
    label: str = "evaluate",
) -> list[Evaluation]:
    """Evaluate what ``results_path`` does not hold yet; return the evaluation of every candidate.
    No retries: a verdict is deterministic, and an interrupted batch resumes from ``results_path``."""
    from cudal1.evaluator import evaluate_many

    logger = get_run_logger()
    unique = dedupe(candidates)
    known = select_measured(evaluations_from_parquet(results_path), problems, unique, config, devices)
    todo = len(unique) - len(known)
    logger.info(f"{label}: {len(unique)} candidates, {len(known)} already measured under protocol "
                f"{config.hash} (reused), {todo} to evaluate on {', '.join(devices)}")
    Path(results_path).parent.mkdir(parents=True, exist_ok=True)
    with EvaluationProgress(logger, todo, label) as progress:
        evaluate_many(problems, unique, config, devices=devices, results_path=results_path, progress=progress)
    # Every candidate, duplicates included: they share the one measurement of their source.
    return select_measured(evaluations_from_parquet(results_path), problems, candidates, config, devices)


def evaluate_candidates(
    problems: Sequence[Problem],
    candidates: Sequence[Candidate],
    config: EvalConfig,
    devices: Sequence[str],
    results_path: str,
    label: str = "evaluate",
) -> list[Evaluation]:
    """Flow-side entry: make sure the device limits exist, then run the task under the device tags."""
    if not candidates:
        return []
    tags = device_tags(devices)
    ensure_device_limits_task(tags)
    return evaluate_candidates_task.with_options(tags=tags)(
        list(problems), list(candidates), config, list(devices), cache_path(results_path), label
    )
