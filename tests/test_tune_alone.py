"""A program that tunes itself by timing (cuDNN's benchmark mode, its own clock) makes its first call alone
on its device: not among the loads ahead, but inside the batch's quiet
context right before its correctness trials; a failure of that call is still the program's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from cudal1.candidates import Status
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.batch import evaluate_many
from cudal1.evaluator.core import evaluate_candidate
from cudal1.evaluator.static import check_source, tunes_itself
from tests.scale_problem import FIRST_CALL_FAILS, PROBLEM, SAME, SCALE
from tests.scale_problem import candidate as _candidate

BENCHMARK = SCALE + "\ntorch.backends.cudnn.benchmark = True\n\nclass ModelNew(Model):\n    pass\n"
# Picks between two ways by its own clock at its first call, as L1-70 of the H100 release does
CLOCKED = SCALE + '''
import time

class ModelNew(Model):
    chosen = None

    def forward(self, x):
        if ModelNew.chosen is None:
            t0 = time.perf_counter()
            x * 2.0 + 1.0
            t1 = time.perf_counter()
            torch.addcmul(torch.ones_like(x), x, torch.full_like(x, 2.0))
            ModelNew.chosen = "mul" if t1 - t0 <= time.perf_counter() - t1 else "addcmul"
        if ModelNew.chosen == "mul":
            return x * 2.0 + 1.0
        return torch.addcmul(torch.ones_like(x), x, torch.full_like(x, 2.0))
'''
TUNED_FIRST_CALL_FAILS = FIRST_CALL_FAILS + "\ntorch.backends.cudnn.benchmark = True\n"


def test_the_static_flags_name_the_programs_that_tune_themselves() -> None:
    assert tunes_itself(check_source(BENCHMARK).flags)
    assert tunes_itself(check_source(CLOCKED).flags)
    assert not tunes_itself(check_source(SAME).flags)


def test_a_self_tuning_program_makes_its_first_call_alone_and_the_others_ahead() -> None:
    cfg = EvalConfig(device="cpu", timing=False)
    plain, benchmark, clocked = evaluate_many(
        [PROBLEM], [_candidate(SAME, "plain"), _candidate(BENCHMARK, "benchmark"), _candidate(CLOCKED, "clocked")], cfg)
    assert all(e.status == Status.OK for e in (plain, benchmark, clocked)), [e.reason for e in (plain, benchmark, clocked)]
    # The plain program's first call was made while it loaded ahead, as always
    assert "first_call_s" in plain.extra and "tuned_alone" not in plain.flags, (plain.extra, plain.flags)
    # The self-tuning ones were loaded ahead without it, and made it alone before their correctness trials
    for e in (benchmark, clocked):
        assert "first_call_s" not in e.extra and e.extra["tuned_first_call_s"] >= 0.0, e.extra
        assert "tuned_alone" in e.flags, e.flags


def test_the_call_alone_runs_inside_the_quiet_context_before_the_timing() -> None:
    """Outside a batch, the quiet context is the caller's: entered once for the first call, once for timing."""
    entered: list[tuple[float, float]] = []

    @contextmanager
    def quiet() -> Iterator[None]:
        start = time.perf_counter()
        yield None
        entered.append((start, time.perf_counter()))

    cfg = EvalConfig(device="cpu", timing_trials=2, remeasure=0, recheck_above=None)
    result = evaluate_candidate(PROBLEM, _candidate(BENCHMARK, "benchmark"), cfg, quiet=quiet)
    assert result.status == Status.OK, result.reason
    assert len(entered) == 2, entered  # the first call alone, then the timing
    (start, end), _timing = entered
    assert result.extra["tuned_first_call_s"] <= end - start + 0.0005  # rounded to the millisecond
    assert "tuned_alone" in result.flags
    # Without quiet (evaluate-one: nothing else runs) the first correctness trial is the first call
    alone = evaluate_candidate(PROBLEM, _candidate(BENCHMARK, "benchmark"), cfg)
    assert alone.status == Status.OK and "tuned_alone" not in alone.flags


def test_a_self_tuning_program_that_fails_its_first_call_alone_fails() -> None:
    cfg = EvalConfig(device="cpu", timing=False)
    (failed,) = evaluate_many([PROBLEM], [_candidate(TUNED_FIRST_CALL_FAILS, "fails")], cfg)
    assert failed.status == Status.RUNTIME_ERROR, (failed.status, failed.reason)
    assert failed.reason.startswith("first call:") and "lazy initialisation went wrong" in failed.reason, failed.reason
