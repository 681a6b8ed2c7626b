"""On the GPU, a re-check the history foretells uses the second worker loaded ahead (recheck.Twins), and a
batch with such workers beside its others still measures the reference against itself as honest.

Run on the device machine: ``PYTHONPATH=. python -m pytest -m gpu tests/gpu``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cudal1.candidates import Candidate, Status, load_evaluations
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.batch import evaluate_many
from cudal1.generation.templates import template_source
from cudal1.problems import load_starter_suite

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_a_foretold_re_check_runs_in_the_worker_loaded_ahead_on_the_gpu(tmp_path: Path) -> None:
    problems = [p for p in load_starter_suite() if p.name in ("Diag_matmul", "Square_matmul", "GELU")]
    candidates = [Candidate(p.problem_id, template_source(p, "baseline"), origin="control") for p in problems]
    config = EvalConfig(device="cuda:0", recheck_above=0.0)  # every ok speedup is re-checked
    first = evaluate_many(problems, candidates, config, results_path=tmp_path / "first.jsonl")
    second = evaluate_many(problems, candidates, config, results_path=tmp_path / "second.jsonl",
                           history=load_evaluations(tmp_path / "first.jsonl"))
    for runs, ahead in ((first, False), (second, True)):
        assert len(runs) == len(problems)
        for e in runs:
            # rejected only where no two of three measurements agree within 5% beyond their intervals
            assert e.status in (Status.OK, Status.REJECTED), (e.problem_id, e.reason)
            assert e.extra["recheck_ahead"] is ahead and len(e.extra["recheck_speedups"]) >= 2, e.extra
            assert all(0.7 <= s <= 1.4 for s in e.extra["recheck_speedups"]), (e.problem_id, e.extra)
