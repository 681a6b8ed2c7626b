"""Stage inputs and outputs: problems, candidates and evaluations as parquet, written atomically so a
crash never leaves half a table where the next stage (or DVC) would read it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from cudal1.candidates import (
    Candidate,
    Evaluation,
    candidates_from_parquet,
    candidates_to_parquet,
    evaluations_from_parquet,
    evaluations_to_parquet,
)
from cudal1.config import ProblemsParams
from cudal1.problems import Problem, load_suites

PROBLEM_COLUMNS = ("problem_id", "level", "name", "source", "suite", "sha256")


def problems_to_parquet(problems: Sequence[Problem], path: str | Path) -> None:
    import polars as pl

    rows = [{"problem_id": p.problem_id, "level": p.level, "name": p.name, "source": p.source,
             "suite": p.suite, "sha256": p.sha256} for p in problems]
    schema = {"problem_id": pl.String, "level": pl.Int64, "name": pl.String, "source": pl.String,
              "suite": pl.String, "sha256": pl.String}
    _atomic(path, lambda tmp: pl.DataFrame(rows, schema=schema).write_parquet(tmp))


def problems_from_parquet(path: str | Path) -> list[Problem]:
    import polars as pl

    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no problems table; run the problems stage first (dvc repro problems)")
    df = pl.read_parquet(path)
    return [Problem(r["problem_id"], r["level"], r["name"], r["source"], r["suite"]) for r in df.iter_rows(named=True)]


def _atomic(path: str | Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    write(tmp)
    os.replace(tmp, path)


@task(cache_policy=NO_CACHE)
def load_suites_task(params: ProblemsParams) -> list[Problem]:
    return load_suites(params)


@task(cache_policy=NO_CACHE)
def write_problems_task(problems: list[Problem], path: str) -> None:
    problems_to_parquet(problems, path)


@task(cache_policy=NO_CACHE)
def read_problems_task(path: str) -> list[Problem]:
    return problems_from_parquet(path)


@task(cache_policy=NO_CACHE)
def read_candidates_task(path: str) -> list[Candidate]:
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no candidate table; run the stage that writes it first")
    return candidates_from_parquet(path)


@task(cache_policy=NO_CACHE)
def write_candidates_task(candidates: list[Candidate], path: str) -> None:
    _atomic(path, lambda tmp: candidates_to_parquet(candidates, tmp))


@task(cache_policy=NO_CACHE)
def write_evaluations_task(evaluations: list[Evaluation], path: str) -> None:
    _atomic(path, lambda tmp: evaluations_to_parquet(evaluations, tmp))


@task(cache_policy=NO_CACHE)
def read_evaluations_task(path: str) -> list[Evaluation]:
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no evaluation table; run the evaluate stage first")
    return evaluations_from_parquet(path)


def corpus_schema() -> dict:
    import polars as pl

    return {"problem_id": pl.String, "level": pl.Int64, "reference": pl.String, "candidate_id": pl.String,
            "origin": pl.String, "source": pl.String, "speedup": pl.Float64, "reference_ms": pl.Float64,
            "candidate_ms": pl.Float64, "device_name": pl.String, "config_hash": pl.String, "analysis": pl.String}


@task(cache_policy=NO_CACHE)
def write_corpus_task(rows: list[dict], path: str) -> None:
    """The corpus keeps its columns even when empty, so the learning stages can always read it."""
    import polars as pl

    _atomic(path, lambda tmp: pl.DataFrame(rows, schema=corpus_schema()).write_parquet(tmp))


@task(cache_policy=NO_CACHE)
def seed_measurements_task(cache: str, reuse: Sequence[str]) -> int:
    """Copy rows of earlier evaluation tables into ``cache`` so the evaluator skips what was measured
    already under the same protocol on the same hardware (the key it checks); returns rows added."""
    rows = evaluations_from_parquet(cache) if Path(cache).is_file() else []
    known = {e.key for e in rows}
    added = []
    for path in reuse:
        for e in evaluations_from_parquet(path) if Path(path).is_file() else []:
            if e.key not in known:
                known.add(e.key)
                added.append(e)
    if added:
        _atomic(cache, lambda tmp: evaluations_to_parquet(rows + added, tmp))
    return len(added)
