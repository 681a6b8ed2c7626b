"""The host pace recorded with each evaluation (cudal1/evaluator/timed.py, probe_ms): the reference worker's reading
around each batch, the slower of the two kept per trial, their median per evaluation. A real evaluation
on the CPU carries it too (tests/test_trial_record.py)."""

from __future__ import annotations

from cudal1.evaluator.timed import probe_ms
from cudal1.evaluator.timing import TrialPair
from cudal1.evaluator.trials import _host_pace, _pace


def test_the_probe_reads_a_positive_time_that_grows_with_its_work() -> None:
    short = min(probe_ms(1000) for _ in range(5))
    long = min(probe_ms(20_000) for _ in range(5))
    assert 0 < short < long


def test_a_trial_keeps_the_slower_reading_and_an_evaluation_their_median() -> None:
    assert _pace({"pace_ms": [0.1, 0.25]}) == 0.25
    assert _pace({"pace_ms": ["0.9", None]}) == 0.0  # only numbers count: nothing read
    pairs = [TrialPair([2.0], [1.0], 0.01, 0.01, 0.0, 0.0, pace) for pace in (0.1, 0.3, 0.12)]
    assert _host_pace(pairs) == {"host_pace_ms": 0.12, "trial_pace_ms": [0.1, 0.3, 0.12]}


def test_no_reading_no_record() -> None:
    assert _host_pace([TrialPair([2.0], [1.0], 0.01, 0.01)]) == {}


def test_the_probe_is_harness_code_a_candidate_cannot_swap_unseen() -> None:
    from cudal1.evaluator import timed, worker
    assert worker._own_code()["timed.probe_ms"] is timed.probe_ms
