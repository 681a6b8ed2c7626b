"""The host pace recorded with each evaluation (cudal1/evaluator/pace.py): the reference worker's reading
around each batch, the slower of the two kept per trial, their median per evaluation. A real evaluation
on the CPU carries it too (tests/test_trial_record.py)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from cudal1.evaluator import EvalConfig, trials
from cudal1.evaluator.pace import probe_ms
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


def _timed_with(monkeypatch: pytest.MonkeyPatch, paces: list[float], config: EvalConfig) -> tuple[list, list, set]:
    """_pairs over trials whose reference read these paces in turn (ratio 2.0 at a fast pace, 1.0 slow)."""
    queue = iter(paces)

    def trial(run: object, iters: int, spot_check: bool = True) -> TrialPair:
        pace = next(queue)
        return TrialPair([2.0 if pace < 0.15 else 1.0], [1.0], 0.02, 0.02, 0.0, 0.0, pace)

    monkeypatch.setattr(trials, "_trial", trial)
    run = SimpleNamespace(config=config, flags=set())
    used, timed = trials._pairs(run, 10, time.perf_counter())  # type: ignore[arg-type]
    return used, timed, run.flags


def test_a_gpu_trial_read_at_a_slow_pace_is_timed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = EvalConfig(device="cuda:0", pace_slack=1.25)
    paces = [0.10, 0.20, 0.11, 0.21, 0.10, 0.10, 0.12, 0.10]
    used, timed, flags = _timed_with(monkeypatch, paces, gpu)
    assert [p.pace_ms for p in used] == [0.10, 0.11, 0.10, 0.10, 0.12] and len(timed) == 7
    assert {p.speedup for p in used} == {2.0} and "host_slow" not in flags


def test_where_the_ceilings_come_first_the_fastest_paced_make_up_the_number(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = EvalConfig(device="cuda:0", pace_slack=1.25, remeasure=0)  # five trials at most
    used, timed, flags = _timed_with(monkeypatch, [0.10, 0.20, 0.30, 0.19, 0.10], gpu)
    assert sorted(p.pace_ms for p in used) == [0.10, 0.10, 0.19, 0.20, 0.30] and "host_slow" in flags
    assert "contended" not in flags


def test_off_by_default_and_on_a_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    for config in (EvalConfig(device="cuda:0"), EvalConfig(device="cpu", pace_slack=1.25)):
        used, timed, flags = _timed_with(monkeypatch, [0.10, 0.20, 0.11, 0.21, 0.10] * 3, config)
        assert used == timed and 0.20 in {p.pace_ms for p in used} and not flags


def test_pace_slack_must_be_a_factor_above_one() -> None:
    with pytest.raises(ValueError, match="pace_slack=1.0"):
        EvalConfig(pace_slack=1.0)
