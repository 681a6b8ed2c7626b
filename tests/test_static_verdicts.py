"""What the static checks settle (a syntax error, a rejected construct) is recorded by a batch before its
device loops start: no worker, no build, no device time, and the same verdict ``evaluate_candidate``
gives the candidate alone. An RL reward call is mostly such completions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import cudal1.evaluator.batch as batch
from cudal1.candidates import Candidate, Evaluation, Status, load_evaluations
from cudal1.evaluator import EvalConfig, evaluate_candidate
from cudal1.evaluator.schedule import expected_costs
from cudal1.evaluator.static import STATIC_KEY
from cudal1.problems import load_starter_suite

CONFIG = EvalConfig(device="cpu", correctness_trials=2, timing_trials=3, target_trial_ms=5.0, warmup_iters=1,
                    remeasure=0)


def _sources(problem_source: str) -> dict[str, str]:
    correct = problem_source.replace("class Model(", "class ModelNew(")
    return {
        "ok": correct,
        "syntax": correct[:60] + "\n  def (:\n",
        "subclass": correct + "\nclass T(torch.Tensor):\n    def __torch_function__(self, *a): pass\n",
        "no_model_new": problem_source,
    }


def test_a_batch_settles_static_verdicts_without_a_worker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    problem = load_starter_suite()[0]
    cands = {name: Candidate(problem.problem_id, src, origin=f"test:{name}")
             for name, src in _sources(problem.source).items()}
    started: list[str] = []
    real = batch.prepare_candidate_worker

    def recording(problem: Any, c: Candidate, *args: Any, **kwargs: Any) -> Any:
        started.append(c.candidate_id)
        return real(problem, c, *args, **kwargs)

    monkeypatch.setattr(batch, "prepare_candidate_worker", recording)
    seen: list[Evaluation] = []
    path = tmp_path / "results.jsonl"
    found = batch.evaluate_many([problem], list(cands.values()), CONFIG, results_path=path, progress=seen.append)
    by_name = {name: next(e for e in found if e.candidate_id == c.candidate_id) for name, c in cands.items()}

    assert started == [cands["ok"].candidate_id]  # the only candidate that reached a worker
    assert by_name["ok"].status == Status.OK and not by_name["ok"].extra.get(STATIC_KEY)
    assert by_name["syntax"].status == Status.COMPILE_ERROR
    assert by_name["subclass"].status == Status.REJECTED and by_name["no_model_new"].status == Status.REJECTED
    for name in ("syntax", "subclass", "no_model_new"):
        alone = evaluate_candidate(problem, cands[name], CONFIG)  # the candidate on its own: the same verdict
        got = by_name[name]
        assert (got.status, got.reason, got.flags) == (alone.status, alone.reason, alone.flags), name
        assert got.extra[STATIC_KEY] is True and got.config_hash == alone.config_hash
    # every verdict reached the progress callback and the results file, which a resumed batch skips
    assert sorted(e.candidate_id for e in seen) == sorted(c.candidate_id for c in cands.values())
    assert len(load_evaluations(path)) == 4
    assert batch.evaluate_many([problem], list(cands.values()), CONFIG, results_path=path) == []
    # the static verdicts took no device time, so they say nothing of what the problem's candidates cost
    assert set(expected_costs(found)) == {problem.problem_id}
    assert expected_costs(found)[problem.problem_id] == pytest.approx(by_name["ok"].extra["row_s"])


def test_a_batch_of_static_verdicts_only_starts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = load_starter_suite()[0]
    bad = [Candidate(problem.problem_id, f"def (:\n# {i}\n") for i in range(3)]

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("a device loop started for a batch the static checks settled")

    monkeypatch.setattr(batch, "_DeviceLoop", refuse)
    found = batch.evaluate_many([problem], bad, CONFIG)
    assert [e.status for e in found] == [Status.COMPILE_ERROR] * 3


def test_without_static_checks_nothing_is_settled_ahead() -> None:
    problem = load_starter_suite()[0]
    source = _sources(problem.source)["subclass"]
    (found,) = batch.evaluate_many([problem], [Candidate(problem.problem_id, source)],
                                   EvalConfig(device="cpu", static_checks=False, correctness_trials=2,
                                              timing_trials=3, target_trial_ms=5.0, remeasure=0))
    assert STATIC_KEY not in found.extra and "row_s" in found.extra  # it went through the device loop
