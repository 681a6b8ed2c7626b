"""benchmarks/move_cost.py: what a move to another core costs the probe and the call after it. One short
real read on this machine's cores (the call is a CPU tensor's small ops here): every mode is measured,
every move is a real one, and the hop modes report where their calls ran."""

from __future__ import annotations

import os

from benchmarks.move_cost import MODES, measure


def test_every_mode_is_read_with_real_moves_and_the_cores_are_given_back() -> None:
    before = os.sched_getaffinity(0)
    cores = sorted(before)[:2] if len(before) >= 2 else sorted(before) * 2
    report = measure("cpu", cores, seconds=0.6, ops=3)
    assert set(report["modes"]) == set(MODES) and report["probe_floor_ms"] > 0
    for mode, entry in report["modes"].items():
        assert entry["call"]["n"] > 5 and entry["call"]["median"] > 0, mode
    assert report["modes"]["move"]["move_us"]["median"] > 0 and "move_us" not in report["modes"]["stay"]
    for mode in ("hop", "hop_warm"):
        entry = report["modes"][mode]
        assert entry["call_no_move"]["n"] + entry["call_moved"]["n"] == entry["call"]["n"]
        assert 0 <= entry["slow_share"] <= 1 and entry["moves"]["median"] <= 3
    assert os.sched_getaffinity(0) == before
