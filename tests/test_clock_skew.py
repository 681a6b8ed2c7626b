"""A pass by a program that picks its path by its own clock is confirmed under clocks that make its
first-timed, then its last-timed variant win (cudal1/evaluator/clock_skew.py, recheck.confirm): L1-13's
float16 path, which a true clock picks only in some runs, is then taken in every run. The clocks alone,
then real workers on the CPU through the batch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cudal1.candidates import Candidate, Evaluation, Status
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.batch import evaluate_many
from cudal1.evaluator.clock_skew import READS, SKEWS, SkewedClock
from cudal1.problems import load_starter_suite
from tests.edge_problem import PROBLEM, REFERENCE


def _reads(values: list[float]) -> Iterator[float]:
    yield from values


@pytest.mark.parametrize(("real", "winner"), [([0.0, 0.5, 0.5, 0.6], "B"), ([0.0, 0.1, 0.1, 0.6], "A")])
def test_each_skew_decides_a_comparison_whatever_the_real_times(real: list[float], winner: str) -> None:
    """A then B timed with four reads: "first" makes A win and "last" B, whichever was really faster."""
    truly = "A" if real[1] - real[0] < real[3] - real[2] else "B"
    assert truly == winner
    for favour, expected in zip(SKEWS, ("A", "B")):
        reals = _reads(real)
        read = SkewedClock(favour).seconds(lambda: next(reals))  # noqa: B023 (used within the loop)
        t = [read() for _ in range(4)]
        assert t == sorted(t), "a skewed clock still never goes back"
        assert ("A" if t[1] - t[0] < t[3] - t[2] else "B") == expected


def test_the_minimum_of_several_variants_is_the_first_or_the_last() -> None:
    for favour, expected in zip(SKEWS, (0, 4)):
        clock = SkewedClock(favour)
        read, ms = clock.seconds(lambda: 0.0), clock.elapsed_ms(lambda start, end: 3.0)
        by_clock = [-(read() - read()) for _ in range(5)]  # each variant's interval, end minus start
        by_events = [ms(None, None) for _ in range(5)]
        assert by_clock.index(min(by_clock)) == expected and by_events.index(min(by_events)) == expected


def test_jumps_stop_after_their_reads_and_bad_names_are_refused() -> None:
    clock = SkewedClock("last", reads=3)
    read = clock.seconds(lambda: 0.0)
    values = [read() for _ in range(5)]
    assert values[3] == values[4] == values[2] > 0  # after three reads the clock runs true
    assert SkewedClock("first").nanoseconds(lambda: 10)() == 10 + 10**9
    assert READS >= 10_000
    with pytest.raises(ValueError, match="clock skew 'fast'"):
        SkewedClock("fast")


def _racer(wrong_first: bool, style: str = "module") -> Candidate:
    """Times an exact variant and a wrong one at its first call, each at its best of five, and keeps the
    faster; the wrong one is the slower in truth (100 extra passes), so a true clock keeps the exact one
    (with one timing each, a preemption on a busy CI host once made the exact one read slower). Each
    variant's five timings are read one after another, so the skewed clocks still decide the race."""
    clock = {"module": "time.perf_counter()", "name": "perf_counter()", "datetime": "datetime.now().timestamp()"}[style]
    order = '("wrong", "exact")' if wrong_first else '("exact", "wrong")'
    return Candidate(PROBLEM.problem_id, REFERENCE + f'''
import time
from datetime import datetime
from time import perf_counter


class ModelNew(Model):
    path = None

    def exact(self, x):
        return torch.relu(x) * 2.0

    def wrong(self, x):
        y = x
        for _ in range(100):
            y = torch.relu(x) * 2.0
        return y + 1.0

    def forward(self, x):
        if ModelNew.path is None:
            took = {{}}
            for name in {order}:
                runs = []
                for _ in range(5):
                    start = {clock}
                    getattr(self, name)(x)
                    runs.append({clock} - start)
                took[name] = min(runs)
            ModelNew.path = min(took, key=took.get)
        return getattr(self, ModelNew.path)(x)
''')


def _evaluate(candidate: Candidate, root: Path, **kw: object) -> Evaluation:
    cfg = EvalConfig(device="cpu", timing=False, correctness_trials=3, **kw)
    [result] = evaluate_many([PROBLEM], [candidate], cfg, extensions_root=root)
    return result


@pytest.mark.parametrize(("wrong_first", "style", "skew"), [(False, "module", "last"), (True, "name", "first"),
                                                           (False, "datetime", "last")])
def test_a_race_whose_other_path_is_wrong_is_incorrect(ext_root: Path, wrong_first: bool, style: str,
                                                       skew: str) -> None:
    racer = _racer(wrong_first, style)
    alone = _evaluate(racer, ext_root, confirm_clock=0)  # the true clock picks the exact path
    assert alone.status is Status.OK and "reads_clock" in alone.flags, alone.reason
    result = _evaluate(racer, ext_root)
    assert result.status is Status.INCORRECT, result
    assert "clock_confirm_failed" in result.flags and result.speedup is None
    assert f"{skew}-timed variant made to win" in result.reason, result.reason


def _timed_relu(clock: str, then: str) -> Candidate:
    """The reference's ReLU, exact on every path, timed by ``clock`` into ``start``; ``then`` runs after it."""
    return Candidate(PROBLEM.problem_id, REFERENCE + f'''
import time


class ModelNew(Model):
    def forward(self, x):
        start = {clock}
        out = torch.relu(x) * 2.0
        {then}
        return out
''')


def test_a_program_correct_on_every_path_is_confirmed_on_its_weights(ext_root: Path) -> None:
    steady = _timed_relu("time.monotonic_ns()", "self.took = time.monotonic_ns() - start")
    result = _evaluate(steady, ext_root)
    assert result.status is Status.OK and "clock_confirmed" in result.flags, result.reason
    assert len(result.extra["confirm_tolerance_used"]) == EvalConfig().confirm_clock == 2


def test_a_timeout_of_its_own_under_a_skewed_clock_is_not_held_against_it(ext_root: Path) -> None:
    """The "last" clock's first jumps are a day long: a program that gives up after 100 s raises under it."""
    patient = _timed_relu("time.time()", 'if time.time() - start > 100:\n            raise RuntimeError("gave up")')
    result = _evaluate(patient, ext_root)
    assert result.status is Status.OK, result.reason
    assert {"clock_confirmed", "clock_skew_error"} <= set(result.flags)


DIAG_RACER = '''
import time


class ModelNew(Model):
    path = None

    def exact(self, a, B):
        return a.unsqueeze(1) * B

    def wrong(self, a, B):  # the reference's matmul, three times, then off by one: slower in truth
        for _ in range(3):
            out = torch.diag(a) @ B
        return out + 1.0

    def forward(self, a, B):
        if ModelNew.path is None:
            took = {}
            for name in ("exact", "wrong"):
                start = time.perf_counter()
                getattr(self, name)(a, B)
                took[name] = time.perf_counter() - start
            ModelNew.path = min(took, key=took.get)
        return getattr(self, ModelNew.path)(a, B)
'''


@pytest.mark.slow
def test_a_re_measured_self_timing_pass_meets_the_deciding_clocks(ext_root: Path) -> None:
    """Its re-measurements ran with true clocks, which race as its first process did (L1-60, L1-70 read
    above 3x): the confirmations still follow them. diag(a) @ B by broadcasting is far above the re-check's
    threshold, set low here so every run is re-measured."""
    problem = next(p for p in load_starter_suite() if p.name == "Diag_matmul")
    racer = Candidate(problem.problem_id, problem.source + DIAG_RACER)
    cfg = EvalConfig(device="cpu", correctness_trials=2, timing_trials=3, recheck_above=1.5)
    [result] = evaluate_many([problem], [racer], cfg, extensions_root=ext_root)
    assert "recheck_speedups" in result.extra and "rechecked" in result.flags, result
    assert result.status is Status.INCORRECT and "clock_confirm_failed" in result.flags, result
    assert "last-timed variant made to win" in result.reason and result.speedup is None
