"""The host pace recorded with each evaluation (cudal1/evaluator/pace.py): the reference worker's reading
around each batch, the device's fast pace from its recent batches, and the ``host_slow`` flag on a GPU
when an evaluation's reference was timed well below that pace."""

from __future__ import annotations

from types import SimpleNamespace

from cudal1.evaluator import EvalConfig
from cudal1.evaluator.pace import SLOW_PACE, PaceFloor, floor_for, probe_ms
from cudal1.evaluator.timing import TrialPair
from cudal1.evaluator.trials import _host_pace


def _pairs(pace: float, n: int = 5) -> list[TrialPair]:
    return [TrialPair([2.0], [1.0], 0.01, 0.01, 0.0, 0.0, pace) for _ in range(n)]


def _run(device: str) -> SimpleNamespace:
    return SimpleNamespace(config=EvalConfig(device=device), flags=set())


def test_the_probe_reads_a_positive_time_that_grows_with_its_work() -> None:
    short = min(probe_ms(1000) for _ in range(5))
    long = min(probe_ms(20_000) for _ in range(5))
    assert 0 < short < long


def test_one_fast_reading_does_not_set_the_fast_pace() -> None:
    floor = PaceFloor()
    for pace in [0.05] + [0.2] * 40:  # one lucky reading among a steady pace
        floor.observe(pace)
    assert floor.fast() == 0.2 and not floor.slow(0.2)
    floor.observe(0.0)  # an unread batch is not a pace
    assert floor.fast() == 0.2


def test_an_evaluation_timed_in_a_slow_spell_is_flagged_on_a_gpu_only() -> None:
    for device in ("cuda:7", "cpu"):
        floor = floor_for(device)
        for _ in range(30):
            floor.observe(0.10)
    slow = 0.10 * SLOW_PACE * 1.2
    gpu = _run("cuda:7")
    extra = _host_pace(gpu, _pairs(slow), _pairs(slow))
    assert "host_slow" in gpu.flags and extra == {"host_pace_ms": round(slow, 4), "host_fast_pace_ms": 0.1}
    steady = _run("cuda:7")
    assert "host_slow" not in steady.flags | set(_host_pace(steady, _pairs(0.11), _pairs(0.11)))
    cpu = _run("cpu")
    assert _host_pace(cpu, _pairs(slow), _pairs(slow))["host_pace_ms"] == round(slow, 4)
    assert "host_slow" not in cpu.flags  # a CPU program is slowed with its reference: no flag there


def test_no_reading_no_record() -> None:
    run = _run("cuda:6")
    assert _host_pace(run, _pairs(0.0), _pairs(0.0)) == {} and not run.flags
