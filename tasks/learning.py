"""Prefect tasks of the learning stages (policy, sft, self_supervised, contrastive_rl): short wrappers over
``cudal1.training``, plus MLflow logging of step series (``tasks.tracking`` logs single values). Each stage
task takes its params section, whose paths ``load_params`` has resolved against the repository root."""

from __future__ import annotations

import csv
import json
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from cudal1.training.finetune import POINTER, policy_source
from tasks.retry import io_only
from tasks.tracking import flatten, tracking_uri


class SeriesBuffer:
    """A ``MetricSink`` that keeps (step, metrics) pairs in memory: a training step must not wait for a
    tracking server, so series are logged in one batch when a trainer finishes."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []

    def __call__(self, metrics: dict[str, float], step: int) -> None:
        self.rows.append((step, dict(metrics)))

    def drain(self) -> list[tuple[int, dict[str, float]]]:
        rows, self.rows = self.rows, []
        return rows


def log_series(run_id: str, rows: Sequence[tuple[int, Mapping[str, Any]]], repo_root: str) -> None:
    """Metrics with their step, so MLflow draws curves (loss per step, reward per epoch)."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    now = int(time.time() * 1000)
    values = [Metric(k, float(v), now, int(step)) for step, metrics in rows for k, v in flatten(metrics).items()
              if isinstance(v, int | float) and not isinstance(v, bool)]
    client = MlflowClient(tracking_uri=tracking_uri(repo_root))
    for start in range(0, len(values), 1000):  # the store's batch limit
        client.log_batch(run_id, metrics=values[start:start + 1000])


@task(retries=2, retry_delay_seconds=[1, 5], retry_condition_fn=io_only, cache_policy=NO_CACHE)
def log_series_task(run_id: str, rows: list[tuple[int, dict[str, float]]], repo_root: str) -> None:
    log_series(run_id, rows, repo_root)


def write_plot_csv(rows: Sequence[Mapping[str, Any]], path: str | Path, columns: Sequence[str]) -> None:
    """DVC plot data: one row per step/round/epoch, written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    with tmp.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def last_epoch_metrics(epochs: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The last RL epoch's figures under stable names (``rl.success_rate``...), finite values only: what
    ``dvc exp show`` lists for each experiment and what the logged policy carries."""
    import math

    if not epochs:
        return {}
    keep = ("mean_reward", "success_rate", "mean_speedup", "median_speedup", "max_speedup", "pool_correct",
            "pool_best_speedup")
    last = epochs[-1]
    return {f"rl.{k}": float(last[k]) for k in keep
            if isinstance(last.get(k), int | float) and math.isfinite(float(last[k]))} | {"rl.epochs": len(epochs)}


@task(cache_policy=NO_CACHE)
def write_metrics_task(metrics: dict[str, float], path: str) -> None:
    """A DVC metrics file, written atomically (nested: ``{"rl": {"success_rate": ...}}``)."""
    nested: dict[str, Any] = {}
    for key, value in metrics.items():
        head, _, tail = key.partition(".")
        nested.setdefault(head, {})[tail] = value
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(path).with_name(Path(path).name + ".partial")
    tmp.write_text(json.dumps(nested, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


@task(cache_policy=NO_CACHE)
def read_corpus_task(path: str) -> list:
    from cudal1.training.data import load_corpus

    return load_corpus(path)


@task(cache_policy=NO_CACHE)
def build_policy_task(params: Any, problems: list, corpus: list) -> dict[str, Any]:
    """The tiny policy, built here; or a pointer to the model the params name (weights are not copied)."""
    out_dir = params.out_dir
    if not params.is_tiny:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / POINTER).write_text(json.dumps({"model": params.model}) + "\n")
        return {"model": params.model}
    from cudal1.generation.tiny_policy import build_tiny_policy
    from cudal1.training.data import tokenizer_texts

    build_tiny_policy(Path(out_dir), tokenizer_texts(problems, corpus), vocab_size=params.vocab_size,
                      hidden=params.hidden, layers=params.layers, max_positions=params.max_positions, seed=params.seed)
    return json.loads((Path(out_dir) / "tiny_policy.json").read_text())


@task(cache_policy=NO_CACHE)
def sft_task(params: Any, problems: list, corpus: list, sink: SeriesBuffer) -> dict[str, Any]:
    from cudal1.training.data import fit_length, sft_examples
    from cudal1.training.finetune import finetune, load_policy, save_policy

    model, tokenizer = load_policy(policy_source(params.policy))
    rows = sft_examples({p.problem_id: p for p in problems}, corpus, params.prompts, params.seed, params.copies)
    rows, dropped = fit_length(rows, tokenizer, params.max_length)
    with tempfile.TemporaryDirectory(prefix="cudal1-sft-") as work:  # the trainer's scratch folder
        model, summary = finetune(model, tokenizer, rows, params, work, sink=sink)
    save_policy(model, tokenizer, params.out_dir)
    return summary | {"dropped_too_long": dropped}


@task(cache_policy=NO_CACHE)
def self_supervised_task(params: Any, problems: list, corpus: list, sink: SeriesBuffer) -> list[dict[str, Any]]:
    from cudal1.pool import CandidatePool
    from cudal1.training.evaluation import evaluator_fn
    from cudal1.training.finetune import load_policy, save_policy
    from cudal1.training.self_supervised import run_self_supervised

    model, tokenizer = load_policy(policy_source(params.policy))
    pool, cache = CandidatePool(corpus), CandidatePool.load(params.pool_cache)
    data = Path(params.data_dir)

    def on_round(r: int, model: Any, summary: dict[str, Any], samples: list[dict[str, Any]]) -> None:
        import polars as pl

        data.mkdir(parents=True, exist_ok=True)
        pl.DataFrame(samples, infer_schema_length=None).write_parquet(data / f"samples-round-{r}.parquet")
        save_policy(model, tokenizer, Path(params.out_dir) / "rounds" / f"round-{r}")

    with tempfile.TemporaryDirectory(prefix="cudal1-ssl-") as work, evaluator_fn(params.protocol, params.devices) as evaluate:
        model, summaries = run_self_supervised(
            model, tokenizer, {p.problem_id: p for p in problems}, pool,
            evaluate, params, work, pool_path=data / "pool.parquet",
            sink=sink, on_round=on_round, cache=cache, cache_path=params.pool_cache)
    pool.save(data / "pool.parquet")
    save_policy(model, tokenizer, params.out_dir)
    return summaries


def run_key(params: Any, policy: str, pool: str) -> str:
    """What an RL run's checkpoints depend on: its settings (not paths, devices, the epoch count or where vLLM
    runs), the starting policy's files and the starting pool. A rerun with the same key resumes (more epochs
    extend the run); anything else starts afresh."""
    import dataclasses
    import hashlib

    skip = {"epochs", "problems", "pool", "policy", "out_dir", "data_dir", "devices", "pool_cache", "work_dir",
            "plots", "metrics", "registered_model", "vllm_server_host", "vllm_server_port", "vllm_gpu_memory_utilization"}
    if not params.use_vllm:  # generation by model.generate: the vLLM settings play no part (and earlier keys hold)
        skip |= {"use_vllm", "vllm_mode"}
    settings = {k: v for k, v in dataclasses.asdict(params).items() if k not in skip}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    source = Path(policy_source(policy))
    files = sorted(source.glob("*")) if source.is_dir() else []
    for path in files + ([Path(pool)] if Path(pool).is_file() else []):
        if path.is_file():
            digest.update(path.name.encode() + hashlib.sha256(path.read_bytes()).digest())
    if not files:
        digest.update(str(source).encode())  # a hub id: its name is all we know
    return digest.hexdigest()[:16]


@task(cache_policy=NO_CACHE)
def contrastive_rl_task(params: Any, problems: list, run_id: str, repo_root: str) -> list[dict[str, float]]:
    """All epochs, resuming from ``params.work_dir/<run key>``; epoch metrics and TRL's step logs go to the
    MLflow run ``run_id`` of the store under ``repo_root`` as each epoch ends."""
    import shutil

    from cudal1.candidates import Candidate, candidates_to_parquet
    from cudal1.pool import CandidatePool
    from cudal1.training.evaluation import evaluator_fn
    from cudal1.training.finetune import load_policy, save_policy
    from cudal1.training.rl import run_contrastive_rl

    work = Path(params.work_dir) / run_key(params, params.policy, params.pool)
    work.mkdir(parents=True, exist_ok=True)
    pool = CandidatePool.load(work / "pool.parquet" if (work / "pool.parquet").exists() else params.pool)
    model, tokenizer = load_policy(policy_source(params.policy))
    sink = SeriesBuffer()

    def on_epoch(epoch: int, metrics: dict[str, float]) -> None:
        # The sink holds TRL's step logs (rl_loss, rl_reward...) and the epoch's metrics (rl_epoch_*, step =
        # epoch), which the core puts there itself; logging them again here made every curve appear twice.
        log_series(run_id, sink.drain(), repo_root)

    with evaluator_fn(params.protocol, params.devices) as evaluate:  # references kept warm between reward calls
        model, epochs = run_contrastive_rl(
            model, tokenizer, {p.problem_id: p for p in problems}, pool, evaluate,
            params, work, pool_path=work / "pool.parquet", sink=sink, on_epoch=on_epoch,
            load_model=lambda path: load_policy(path)[0], cache=CandidatePool.load(params.pool_cache),
            cache_path=params.pool_cache)
    save_policy(model, tokenizer, params.out_dir)
    data = Path(params.data_dir)
    data.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(work / "pool.parquet", data / "pool.parquet")
    # The RL candidates as a candidate table, so the `evaluate` stage can measure them with its protocol.
    mine = [Candidate(e.problem_id, e.source, e.origin, e.candidate_id) for e in pool.entries()
            if e.origin == "contrastive_rl"]
    candidates_to_parquet(mine, data / "candidates.parquet")
    return epochs
