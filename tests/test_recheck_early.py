"""A re-measurement stops its trials once its interval agrees with an earlier measurement's
(trials._pairs): first with scripted trials (which trials are taken, not a
measurement), then what the re-check hands each re-measurement, then end to end with real workers on
the CPU."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from cudal1.candidates import Candidate, Evaluation, Status
from cudal1.evaluator import EvalConfig, recheck, timing, trials
from cudal1.evaluator.batch import evaluate_many
from cudal1.evaluator.timing import TrialPair
from cudal1.problems import load_starter_suite

# ratios 1.8 and 2.2 in turn: the interval of the median stays [1.8, 2.2], never within the 2% target,
# so a first measurement times to the ceiling (timing_trials * (remeasure + 1) = 15)
NOISY = [1.8, 2.2]


def _scripted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    asked: list[int] = []

    def trial(run: object, iters: int, spot_check: bool = True) -> TrialPair:
        ratio = NOISY[len(asked) % 2]
        asked.append(iters)
        # the parent's wall clock agrees with the calls' times (timing.forged_timing)
        return TrialPair([ratio] * iters, [1.0] * iters, ratio * 1e-3 * iters + 0.01, 1e-3 * iters + 0.01,
                         calls_per_trial=iters)

    monkeypatch.setattr(trials, "_trial", trial)
    return asked


def _run(agree_with: tuple = (), **config: object) -> SimpleNamespace:
    return SimpleNamespace(config=EvalConfig(device="cuda:0", timing_trials=5, **config), flags=set(), trace=None,
                           agree_with=agree_with)


@pytest.mark.parametrize(("agree_with", "taken"), [
    ((), 15),  # a first measurement: to the ceiling
    (((2.05, 1.98, 2.1),), 5),  # agrees with the first at once: stops at timing_trials
    (((4.0, 3.9, 4.1),), 15),  # far above it: no agreement, to the ceiling
    (((4.0, 3.9, 4.1), (2.1, 2.05, 2.3)), 5),  # a third measurement agreeing with the second
])
def test_a_re_measurement_stops_once_it_agrees(monkeypatch: pytest.MonkeyPatch, agree_with: tuple,
                                               taken: int) -> None:
    asked = _scripted(monkeypatch)
    run = _run(agree_with)
    pairs, timed, _ = trials._pairs(run, 4, time.perf_counter())  # type: ignore[arg-type]
    assert len(pairs) == len(timed) == len(asked) == taken
    assert ("agreed_early" in run.flags) == (taken == 5)


class _Session:
    def restart(self) -> None:
        raise AssertionError("no re-measurement here runs out of memory")


def test_each_re_measurement_is_handed_the_measurements_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = load_starter_suite()[0]
    candidate = Candidate(problem.problem_id, "class ModelNew: pass")
    first = Evaluation(problem.problem_id, candidate.candidate_id, Status.OK, speedup=10.0, speedup_low=9.8,
                       speedup_high=10.2, device="cuda:0", trials=15)
    later = iter([replace(first, speedup=5.0, speedup_low=4.9, speedup_high=5.1, trials=15),
                  replace(first, speedup=5.1, speedup_low=4.95, speedup_high=5.3, trials=5)])
    handed: list[tuple] = []

    def measured(*args: object, agree_with: tuple = (), **kwargs: object) -> Evaluation:
        handed.append(agree_with)
        return next(later)

    monkeypatch.setattr(recheck, "evaluate_candidate", measured)
    config = EvalConfig(device="cuda:0")
    result = recheck.recheck(first, problem, candidate, config, Path("/nonexistent"), _Session())  # type: ignore[arg-type]
    assert handed == [((10.0, 9.8, 10.2),), ((10.0, 9.8, 10.2), (5.0, 4.9, 5.1))]
    assert result.ok and result.speedup == 5.0 and result.extra["recheck_trials"] == [15, 15, 5], result


FAST = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, B):
        return a.unsqueeze(1) * B
'''


@pytest.mark.slow
def test_end_to_end_the_re_measurement_stops_at_the_least_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    """diag(a) @ B by broadcasting, far above 3x, on the CPU with an interval target no run meets: the first
    measurement times to its ceiling, the re-measurement of the same program agrees once it has its first
    three trials, and says it stopped so.

    What is asked is the plumbing (each re-measurement is handed the earlier figures through real workers,
    stops on agreeing, records it), not whether a loaded CPU repeats a figure or how contended trials are set
    aside (tests/test_contention.py): the agreement allowance is wide (10x beyond the intervals) and no trial
    counts as contended here. Agreement is asked only of trials not set aside, and on the 2-core CI machine,
    with the suite's other workers on both cores, most can be: fresh-clone runs of the suite read a
    re-measurement that stopped at its ceiling or its time limit before it had three, [False, False], once with
    a ceiling of 30 trials and again with 90. The rule's arithmetic is tested on scripted trials above."""
    monkeypatch.setattr(timing, "CONTENDED_SHARE", math.inf)
    problem = next(p for p in load_starter_suite() if p.name == "Diag_matmul")
    config = EvalConfig(device="cpu", correctness_trials=2, timing_trials=3, remeasure=9, static_checks=False,
                        recheck_above=3.0, recheck_tolerance=10.0, ci_target=1e-4, max_timing_s=60.0)
    (result,) = evaluate_many([problem], [Candidate(problem.problem_id, FAST, origin="test:fast")], config)
    shown = {k: v for k, v in result.extra.items() if k.startswith("recheck") or k == "contended_trials"}
    assert result.ok and "rechecked" in result.flags, (result.status, result.reason, result.flags, shown)
    assert result.extra["recheck_agreed_early"] == [False, True], (result.flags, shown)
    # its first three trials (one more where the first is recalibrated): never the ceiling a first
    # measurement times to
    assert 3 <= result.extra["recheck_trials"][1] < config.timing_trials * (config.remeasure + 1), shown
    assert result.speedup == min(result.extra["recheck_speedups"]), result
