"""A batch's candidates get ready ahead: one loaded ahead makes its first call
there, and a failure of that call is still the program's; a program whose state the call moved meets a fresh
reference from a fresh start; a torch.compile program's worker makes torch.compile's start before its load."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import EvalConfig, batch
from cudal1.evaluator.batch import evaluate_many
from cudal1.evaluator.core import evaluate_candidate
from cudal1.problems import Problem
from tests.scale_problem import FIRST_CALL_FAILS, PROBLEM, SAME, SCALE
from tests.scale_problem import candidate as _candidate


def test_candidates_loaded_ahead_make_their_first_call_while_loading() -> None:
    cfg = EvalConfig(device="cpu", timing=False)
    first, second, third = evaluate_many([PROBLEM], [_candidate(SAME, f"copy {i}") for i in range(3)], cfg)
    assert all(e.status == Status.OK for e in (first, second, third)), [e.reason for e in (first, second, third)]
    # Every one is loaded ahead, with its first call: the first beside its reference's load
    # (RunAhead.start_group), the others while the one before them is checked.
    assert all(e.extra["first_call_s"] >= 0.0 for e in (first, second, third))
    # Every load says where its wall went: waiting for the worker's start, then the load command itself
    for e in (first, second, third):
        assert e.extra["ready_wait_s"] >= 0.0 and e.extra["load_cmd_s"] > 0.0, e.extra
        # the program's own import, a part of its worker's load (inputs plan and snapshot are the rest)
        assert 0.0 <= e.extra["import_s"] <= e.build_s, (e.extra, e.build_s)
        # and the harness's preparation before it, by phase, in order (the draws and graph are CUDA's: ~0 here)
        assert list(e.extra["prep_s"]) == ["reference", "plan", "draws", "graph"], e.extra
        assert all(v >= 0.0 for v in e.extra["prep_s"].values())
        assert sum(e.extra["prep_s"].values()) + e.extra["import_s"] <= e.build_s + 0.01, (e.extra, e.build_s)
    # The device's time between evaluations is booked on the next one: the wait for a ready group and its
    # reference's load once a group (the first group's reference loads on the device loop: not nothing),
    # the wait for a build and the start of what comes next for every candidate.
    assert first.extra["group_wait_s"] >= 0.0 and first.extra["reference_wait_s"] > 0.0, first.extra
    assert first.extra["prepare_s"] >= 0.0, first.extra
    for e in (second, third):
        assert "group_wait_s" not in e.extra and e.extra["build_wait_s"] >= 0.0 and e.extra["prepare_s"] >= 0.0, e.extra


def test_a_program_that_fails_its_first_call_fails_loaded_ahead_or_not() -> None:
    cfg = EvalConfig(device="cpu", timing=False)
    alone = evaluate_candidate(PROBLEM, _candidate(FIRST_CALL_FAILS, "alone"), cfg)
    assert alone.status == Status.RUNTIME_ERROR and "correctness trial 1" in alone.reason, alone.reason
    _, ahead = evaluate_many([PROBLEM], [_candidate(SAME, "before it"), _candidate(FIRST_CALL_FAILS, "ahead")], cfg)
    assert ahead.status == Status.RUNTIME_ERROR, ahead.reason
    assert "first call" in ahead.reason and "lazy initialisation went wrong" in ahead.reason


def test_a_call_counting_program_loaded_ahead_is_still_caught() -> None:
    """Catalogue #29 (correct for six calls, then zeros) loaded ahead: the warm-up call is one of its six,
    so it switches one call sooner, and the fingerprinted timed calls catch it as they do alone."""
    fixtures = Path(__file__).parent / "fixtures"
    problem = Problem("warm-matmul", 1, "matmul", (fixtures / "problems" / "matmul.py").read_text(), suite="test")
    honest = Candidate(problem.problem_id, problem.source + "\nclass ModelNew(Model):\n    pass\n", origin="control")
    switch = Candidate(problem.problem_id, (fixtures / "hacks" / "call_count_switch.py").read_text(), origin="hack")
    control, hack = evaluate_many([problem], [honest, switch], EvalConfig(device="cpu"))
    assert control.status == Status.OK, control.reason
    assert "first_call_s" in hack.extra and hack.status != Status.OK, hack


@pytest.mark.slow
def test_a_torch_compile_program_started_ahead_makes_torch_compiles_start_before_its_load(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Inductor's imports and the stand-in compile (seconds) come when the worker starts, not in the load
    that timing waits for, the first candidate's too (started beside its reference's load). That is a GPU's
    host's way; on a CPU device, whose cores also time, it comes in the load. The verdicts are the same."""
    assert not batch.compile_at_start(EvalConfig(device="cpu"))
    compiled = SCALE + "\nclass ModelNew(Model):\n    def __init__(self):\n        super().__init__()\n" \
        "        self.forward = torch.compile(super().forward)\n"
    cands = [_candidate(compiled, f"compiled {i}") for i in range(2)]
    off = evaluate_many([PROBLEM], cands, EvalConfig(device="cpu", timing=False))
    monkeypatch.setattr(batch, "compile_at_start", lambda config: True)  # as on a GPU's host
    on = evaluate_many([PROBLEM], cands, EvalConfig(device="cpu", timing=False))
    assert [e.status for e in on] == [e.status for e in off] == [Status.OK, Status.OK], [e.reason for e in on + off]
    assert [e.extra.get("compile_start") for e in on] == ["start", "start"]
    assert [e.extra.get("compile_start") for e in off] == ["load", "load"]
