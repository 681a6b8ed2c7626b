"""A batch on a machine whose harness fails (say, workers that cannot use the GPU): it stops after a few
problems instead of recording a failure for every candidate, and a resumed batch measures those again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import cudal1.evaluator.batch as batch
import cudal1.evaluator.recheck as recheck
from cudal1.candidates import Candidate, Evaluation, Status, load_evaluations
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.references import ReferenceError
from cudal1.evaluator.workers import device_name
from cudal1.problems import Problem, load_starter_suite


def _measured(problem: Problem, c: Candidate, config: EvalConfig, **_: Any) -> Evaluation:
    return Evaluation(problem.problem_id, c.candidate_id, Status.OK, speedup=1.0, device=config.device,
                      device_name=device_name(config.device), config_hash=config.hash,
                      problem_sha256=problem.sha256, candidate_sha256=c.sha256)


def _failing(problem: Problem, c: Candidate, config: EvalConfig, **_: Any) -> Evaluation:
    raise ReferenceError(f"{problem.problem_id}: reference failed to start: the process exited with code 1")


def test_a_failing_harness_stops_the_batch_and_a_resumed_batch_measures_again(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    problems = load_starter_suite()[:batch.HARNESS_STREAK + 2]
    # Two candidates a problem: one problem's broken reference is not a broken machine.
    candidates = [Candidate(p.problem_id, f"# {p.problem_id} {i}\nx = {i}\n", candidate_id=f"{p.problem_id}.{i}")
                  for p in problems for i in range(2)]
    config = EvalConfig(device="cpu", static_checks=False)
    path = tmp_path / "measurements.jsonl"
    monkeypatch.setattr(recheck, "evaluate_candidate", _failing)
    with pytest.raises(RuntimeError, match=f"the evaluations of {batch.HARNESS_STREAK} problems in a row failed"):
        batch.evaluate_many(problems, candidates, config, results_path=path)
    kept = load_evaluations(path)
    # stopped at the first failure of the last problem of the streak
    assert len(kept) == 2 * (batch.HARNESS_STREAK - 1) + 1 and all(e.harness_failed for e in kept)

    monkeypatch.setattr(recheck, "evaluate_candidate", _measured)
    new = batch.evaluate_many(problems, candidates, config, results_path=path)
    assert len(new) == len(candidates)  # the harness failures were measured again, with the rest
    kept = load_evaluations(path)
    assert len(kept) == len(candidates) and all(e.ok for e in kept)  # and replaced
