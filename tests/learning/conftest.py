"""Fixtures of the learning-stage tests: a tiny project folder (params, problems, corpus) and the run's
shared real Prefect server (tests/conftest.py). Everything is real: TRL trains tiny Llamas on this CPU and
the evaluator runs the candidates."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from learning_helpers import LIGHT

from cudal1.generation.templates import template_source
from cudal1.problems import load_starter_suite

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

FAST_IDS = ("starter-L1-2", "starter-L1-3")  # ReLU and GELU: each evaluation takes about a second


@pytest.fixture(scope="session")
def problems():
    return [p for p in load_starter_suite() if p.problem_id in FAST_IDS]


def corpus_rows(problems) -> list[dict]:
    """Template-teacher programs (correct by construction) with made-up speedups: test input data."""
    rows = []
    for p in problems:
        for variant, speedup in (("no_grad", 1.05), ("inference_mode", 1.2)):
            rows.append({"problem_id": p.problem_id, "source": template_source(p, variant),
                         "origin": f"template:{variant}", "speedup": speedup})
    return rows


TINY_PARAMS = {
    "policy": {"model": "tiny", "vocab_size": 1024, "hidden": 64, "layers": 1, "max_positions": 1024},
    "sft": {"epochs": 3, "learning_rate": 0.003, "batch_size": 4, "copies": 1, "prompts": {"exemplars": 1}},
    "self_supervised": {"rounds": 2, "copies": 1, "sampling": {"samples": 2, "max_new_tokens": 48, "batch_size": 4},
                        "finetune": {"epochs": 1, "batch_size": 2}, "prompts": {"exemplars": 1}, "protocol": LIGHT},
    "contrastive_rl": {"epochs": 1, "num_generations": 2, "prompts_per_step": 2, "max_new_tokens": 48,
                       "iterations": 2, "prompts": {"exemplars": 1, "admit": "improving"}, "protocol": LIGHT},
}


@pytest.fixture(scope="module")
def tiny_project(tmp_path_factory: pytest.TempPathFactory, problems) -> Path:
    """A project folder the learning flows can run in: params.yaml with tiny sizes, the problems table
    and a corpus, at the paths the params name by default."""
    import polars as pl

    from tasks.io import problems_to_parquet

    root = tmp_path_factory.mktemp("learning-project")
    problems_to_parquet(problems, root / "data/problems/problems.parquet")
    (root / "data/augment").mkdir(parents=True)
    pl.DataFrame(corpus_rows(problems)).write_parquet(root / "data/augment/corpus.parquet")
    (root / "params.yaml").write_text(yaml.safe_dump(TINY_PARAMS, sort_keys=False))
    return root


@pytest.fixture(scope="session")
def prefect_harness(prefect_server: str) -> Iterator[None]:
    """The flows of these tests run in this process, as clients of the run's shared Prefect server."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: prefect_server}):
        yield
