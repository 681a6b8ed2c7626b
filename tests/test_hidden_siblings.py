"""benchmarks/hidden_siblings.py times the probe on a timed core with each other core idle and then busy,
and leaves nothing spinning behind it."""

from __future__ import annotations

import os

import psutil
from scripts import load_script


def test_every_other_core_is_loaded_in_turn_and_its_spinner_is_gone_after() -> None:
    siblings = load_script("hidden_siblings")
    allowed = sorted(os.sched_getaffinity(0))
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    try:
        table = siblings.slowdowns(allowed[-1], allowed[:-1], rounds=2, probes=3, settle_s=0.02)
    finally:
        os.sched_setaffinity(0, set(allowed))
    assert set(table) == set(allowed[:-1])
    assert all(len(r) == 2 and all(x > 0 for x in r) for r in table.values())
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_the_cores_tested_by_default_are_the_evaluators_timed_cores() -> None:
    from cudal1.evaluator.cores import timed_core

    siblings = load_script("hidden_siblings")
    allowed = sorted(os.sched_getaffinity(0))
    expected = timed_core("cuda:0")
    assert siblings.default_timed(1) == ([expected] if expected is not None else [allowed[-1]])
