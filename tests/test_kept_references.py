"""Reference workers kept warm from one ``evaluate_many`` call to the next (references.KeptReferences), as the learning stages'
reward calls use them: the same worker serves the next call's candidates with the same verdicts, and only a
healthy session that finished its problem cleanly is kept."""

from __future__ import annotations

import os
import signal
from dataclasses import replace

import pytest

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.batch import evaluate_many
from cudal1.evaluator.references import KeptReferences
from cudal1.problems import Problem, load_starter_suite
from cudal1.training.evaluation import evaluator_fn

CONFIG = EvalConfig(device="cpu", correctness_trials=2, timing_trials=3, target_trial_ms=5.0, warmup_iters=1,
                    remeasure=0)


def _correct(problem: Problem, tag: str) -> Candidate:
    """The reference renamed ModelNew, made new by a comment (a new program each call: nothing cached)."""
    return Candidate(problem.problem_id, problem.source.replace("class Model(", "class ModelNew(") + f"\n# {tag}\n")


def _pids(kept: KeptReferences) -> dict[str, int]:
    return {s.problem.problem_id: s.worker.pid for s in kept._held.values()}


def test_the_next_call_takes_the_same_reference_workers_and_gives_the_same_verdicts() -> None:
    problems = load_starter_suite()[:2]
    with KeptReferences() as kept:
        first = evaluate_many(problems, [_correct(p, "1") for p in problems], CONFIG, references=kept)
        pids = _pids(kept)
        assert sorted(pids) == sorted(p.problem_id for p in problems) and kept.taken == 0
        second = evaluate_many(problems, [_correct(p, "2") for p in problems], CONFIG, references=kept)
        assert kept.taken == 2 and _pids(kept) == pids  # the same processes served the second call
        for e in first + second:
            assert e.status == Status.OK, e.reason
        # the kept reference needed no start: its wait is what starting the candidates' workers takes
        assert max(e.extra["reference_wait_s"] for e in second) < max(e.extra["reference_wait_s"] for e in first)
        held = list(kept._held.values())
    assert all(s.worker.proc.poll() is not None for s in held)  # closing the pool ended them


def test_a_dead_worker_is_not_handed_out() -> None:
    problem = load_starter_suite()[0]
    with KeptReferences() as kept:
        evaluate_many([problem], [_correct(problem, "a")], CONFIG, references=kept)
        (session,) = kept._held.values()
        os.kill(session.worker.pid, signal.SIGKILL)
        session.worker.proc.wait(timeout=10)
        found = evaluate_many([problem], [_correct(problem, "b")], CONFIG, references=kept)
        assert found[0].status == Status.OK, found[0].reason
        assert kept.taken == 0  # a fresh reference served the call, and is kept in its place
        assert [s.worker.pid for s in kept._held.values()] != [session.worker.pid]


def test_another_config_or_device_gets_its_own_reference() -> None:
    problem = load_starter_suite()[0]
    with KeptReferences() as kept:
        evaluate_many([problem], [_correct(problem, "a")], CONFIG, references=kept)
        other = replace(CONFIG, timing_trials=4)
        found = evaluate_many([problem], [_correct(problem, "b")], other, references=kept)
        assert found[0].status == Status.OK and kept.taken == 0 and len(kept) == 2


def test_at_most_keep_references_are_held_the_oldest_closed() -> None:
    problems = load_starter_suite()[:2]
    with KeptReferences(keep=1) as kept:
        evaluate_many(problems[:1], [_correct(problems[0], "a")], CONFIG, references=kept)
        (oldest,) = kept._held.values()
        evaluate_many(problems[1:], [_correct(problems[1], "b")], CONFIG, references=kept)
        assert len(kept) == 1 and _pids(kept).keys() == {problems[1].problem_id}
        assert oldest.worker.proc.poll() is not None  # evicted, and its worker ended


def test_a_reference_that_fails_to_load_is_not_kept() -> None:
    source = "import torch\nclass Model(torch.nn.Module):\n    def __init__(self):\n        raise RuntimeError('no')\n" \
             "def get_inputs():\n    return [torch.ones(4)]\ndef get_init_inputs():\n    return []\n"
    broken = Problem("kept-broken", 1, "broken", source)
    with KeptReferences() as kept:
        found = evaluate_many([broken], [_correct(broken, "a")], CONFIG, references=kept)
        assert found[0].harness_failed and len(kept) == 0


def test_keep_must_be_positive() -> None:
    with pytest.raises(ValueError, match="keep=0"):
        KeptReferences(keep=0)


def test_the_stage_evaluator_keeps_its_references_until_closed() -> None:
    problem = load_starter_suite()[0]
    with evaluator_fn(CONFIG) as evaluate:
        for tag in ("a", "b"):
            (e,) = evaluate([problem], [_correct(problem, tag)])
            assert e.status == Status.OK, e.reason
        assert evaluate.references.taken == 1
        (session,) = evaluate.references._held.values()
    assert session.worker.proc.poll() is not None and len(evaluate.references) == 0
