"""Correctness trials fetch the reference's next record while the candidate runs the trial before, when
records are small (core.RECORD_AHEAD_BYTES), and keep the self-test's second record for its trial: real
workers on the CPU, the reference session's records counted and placed in time."""

from __future__ import annotations

import threading
import time

import pytest

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import EvalConfig, core
from cudal1.evaluator.references import ReferenceSession
from cudal1.problems import Problem

REFERENCE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 3.0

def get_inputs():
    return [torch.randn(64, 64)]

def get_init_inputs():
    return []
'''
SLOW = '''
import time

class ModelNew(Model):
    def forward(self, x):
        time.sleep(0.3)  # a candidate trial long enough to see the reference's record fetched beside it
        return torch.relu(x) * 3.0
'''
WRONG_AT_TRIAL_3 = '''
class ModelNew(Model):
    calls = 0

    def forward(self, x):
        ModelNew.calls += 1
        return torch.relu(x) * (3.0 if ModelNew.calls < 3 else 2.0)
'''

PROBLEM = Problem("records-ahead", 1, "records ahead", REFERENCE, suite="test")
CONFIG = EvalConfig(device="cpu", correctness_trials=5, timing=False, static_checks=False)


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float, float]]:
    """Each records() call of any reference session: (thread name, start, end)."""
    calls: list[tuple[str, float, float]] = []
    records = ReferenceSession.records

    def counted(self: ReferenceSession, seeds: list[int]) -> list:
        t0 = time.perf_counter()
        got = records(self, seeds)
        calls.append((threading.current_thread().name, t0, time.perf_counter()))
        return got

    monkeypatch.setattr(ReferenceSession, "records", counted)
    return calls


def test_small_records_come_a_trial_ahead_beside_the_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy(monkeypatch)
    started = time.perf_counter()
    result = core.evaluate_candidate(PROBLEM, Candidate(PROBLEM.problem_id, REFERENCE + SLOW), CONFIG)
    wall = time.perf_counter() - started
    assert result.status is Status.OK and result.correctness_trials == 5, result.reason
    # five records for five trials: the self-test's second one is trial 2's (six before)
    assert len(calls) == 5, calls
    ahead = [c for c in calls if c[0].startswith("cudal1-records")]
    assert len(ahead) == 3, calls  # trials 3, 4 and 5, each fetched during the trial before
    # while the candidate slept through a trial: together the five trials took little more than 5 x 0.3 s
    assert wall < 5 * 0.3 + 4.0, wall


def test_large_records_come_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(core, "RECORD_AHEAD_BYTES", 0)
    calls = _spy(monkeypatch)
    result = core.evaluate_candidate(PROBLEM, Candidate(PROBLEM.problem_id, REFERENCE + SLOW), CONFIG)
    assert result.status is Status.OK, result.reason
    assert len(calls) == 6 and all(not c[0].startswith("cudal1-records") for c in calls), calls


def test_a_verdict_mid_trials_leaves_the_shared_reference_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The candidate goes wrong at trial 3 while trial 4's record is on its way: the verdict stands, and the
    batch's reference session serves the next candidate at once (no command of the last one left in it)."""
    calls = _spy(monkeypatch)
    with ReferenceSession(PROBLEM, CONFIG) as session:
        wrong = core.evaluate_candidate(PROBLEM, Candidate(PROBLEM.problem_id, REFERENCE + WRONG_AT_TRIAL_3), CONFIG,
                                        reference=session)
        assert wrong.status is Status.INCORRECT and "correctness trial 3" in wrong.reason, wrong.reason
        fetched = len(calls)
        assert fetched == 4, calls  # trials 1-3, and trial 4's, sent before trial 3 ran and waited for
        right = core.evaluate_candidate(PROBLEM, Candidate(PROBLEM.problem_id, REFERENCE + SLOW), CONFIG,
                                        reference=session)
        assert right.status is Status.OK, right.reason
        assert len(calls) == fetched + 5
