"""Calls per trial read again from the first trial (trials._pairs, RECALIBRATE): the two-call calibration
reads each side's cost from one or two calls, so one stall there left 0.1 ms kernels 3-14 calls a trial
on the GPU (docs/gpu-runs.md at 88f971b, 2026-11-29-fast-core-release). The trials here are scripted: what is tested
is which trials are kept and at how many calls, not a measurement."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from cudal1.evaluator import trials
from cudal1.evaluator.config import EvalConfig
from cudal1.evaluator.timing import TrialPair, calls_per_trial


def _scripted(monkeypatch: pytest.MonkeyPatch, first_calls: int, later_calls: int) -> list[int]:
    """Replace the timed trial by one that records the calls it was asked for and reports ``first_calls``
    as its own count the first time, ``later_calls`` after."""
    asked: list[int] = []

    def trial(run: object, iters: int, spot_check: bool = True) -> TrialPair:
        asked.append(iters)
        own = first_calls if len(asked) == 1 else later_calls
        # the parent's wall clock agrees with the calls' times (timing.forged_timing)
        return TrialPair([2.0] * iters, [1.0] * iters, 2e-3 * iters + 0.01, 1e-3 * iters + 0.01, calls_per_trial=own)

    monkeypatch.setattr(trials, "_trial", trial)
    return asked


def _run() -> SimpleNamespace:
    return SimpleNamespace(config=EvalConfig(timing_trials=5), flags=set(), trace=None)


def test_a_stalled_calibration_is_read_again_from_the_first_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _scripted(monkeypatch, first_calls=120, later_calls=118)
    run = _run()
    pairs, timed, iters = trials._pairs(run, 4, 0.0)  # type: ignore[arg-type]
    assert iters == 120 and asked == [4] + [120] * 5
    assert len(pairs) == 5 and all(len(p.reference_ms) == 120 for p in pairs)  # the short trial is not measured from
    assert len(timed) == 6 and len(timed[0].reference_ms) == 4  # ...but counted as timed
    assert "recalibrated" in run.flags


def test_calls_are_never_lowered_and_read_again_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fewer calls than calibrated, or under RECALIBRATE times as many: the calibration stands. A later
    trial that reads more does not change the count (one recalibration an evaluation)."""
    for first in (3, 50, 159):
        asked = _scripted(monkeypatch, first_calls=first, later_calls=200)
        run = _run()
        pairs, timed, iters = trials._pairs(run, 40, 0.0)  # type: ignore[arg-type]
        assert iters == 40 and asked == [40] * 5 and len(timed) == 5 and "recalibrated" not in run.flags
    asked = _scripted(monkeypatch, first_calls=160, later_calls=200)
    pairs, timed, iters = trials._pairs(_run(), 40, 0.0)  # type: ignore[arg-type]
    assert iters == 160 and asked == [40] + [160] * 5


def test_calls_per_trial_reads_only_finite_numbers_from_a_reply() -> None:
    """A candidate's reply comes from its own process: a ``call_ms`` that is not a list of finite numbers
    is left out instead of setting the count or failing the parent."""
    cfg = EvalConfig(target_trial_ms=40.0)
    ref = {"ms": [0.1, 0.1], "call_ms": [0.25]}
    assert calls_per_trial(cfg, [ref, {"ms": [0.1], "call_ms": [0.5]}]) == 80
    for forged in (["0.1"], [math.nan], [math.inf, 0.5], None, []):
        got = calls_per_trial(cfg, [ref, {"ms": [0.1], "call_ms": forged}])
        assert got == (80 if forged == [math.inf, 0.5] else 160), forged


def test_the_evaluation_records_both_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """``iters_per_trial`` is the count the measurement was made at; ``calibrated_iters`` what the
    calibration had set, only where the first trial changed it."""
    monkeypatch.setattr(trials, "_calibrate", lambda run: 4)
    _scripted(monkeypatch, first_calls=120, later_calls=120)
    best, extra = trials.measure(_run())  # type: ignore[arg-type]
    assert extra["iters_per_trial"] == 120 and extra["calibrated_iters"] == 4 and best.speedup == 2.0
    _scripted(monkeypatch, first_calls=5, later_calls=5)
    best, extra = trials.measure(_run())  # type: ignore[arg-type]
    assert extra["iters_per_trial"] == 4 and "calibrated_iters" not in extra


def test_the_calibration_reads_a_steady_iteration_not_only_the_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """The calibration batch has CALIBRATION_CALLS calls, so its replies carry two whole iterations: the
    first also draws the batch's fingerprint patterns (and sums in place where outputs are large), and
    does not set the count alone. The faster iteration sets it; both programs get the same seeds."""
    sent: list[dict] = []

    def reply(msg: dict) -> dict:
        sent.append(msg)
        calls = len(msg["seeds"])
        return {"ms": [0.05] * calls, "call_ms": [1.25] + [0.5] * (calls - 2)}

    run = SimpleNamespace(config=EvalConfig(target_trial_ms=40.0), device_draws=True,
                          reference=SimpleNamespace(time=lambda msg: (reply(msg), 0.0, {})))
    monkeypatch.setattr(trials, "time_candidate", lambda run, msg: (reply(msg), 0.0, {}))
    assert trials.CALIBRATION_CALLS == 3
    assert trials._calibrate(run) == 80  # 40 ms / 0.5 ms; the first iteration alone would give 32
    assert len(sent) == 2 and sent[0]["seeds"] == sent[1]["seeds"] and len(set(sent[0]["seeds"])) == 3
