"""benchmarks/call_pace.py reads the host's pace right before each timed call and gives each evaluation's
figure twice: over every call and over the calls read at the fast pace."""

from __future__ import annotations

import torch
from scripts import load_script


def test_every_call_carries_its_probe_and_each_evaluation_has_both_figures() -> None:
    call_pace = load_script("call_pace")
    model = torch.nn.Linear(16, 16).eval()
    row = call_pace.measure_row(model, [torch.randn(8, 16)], evaluations=3, trials=4, gap_s=0.0, cuda=False,
                                probe_n=200)
    assert 3 <= row["calls_per_trial"] <= 200
    assert 0 < row["probe_us"]["p10"] <= row["probe_us"]["median"] <= row["probe_us"]["p90"]
    # (both recorded to 0.01 µs: the product of the rounded 10th percentile may differ in the last digit)
    assert abs(row["fast_probe_us"] - call_pace.FAST_SLACK * row["probe_us"]["p10"]) <= 0.02
    # at least the tenth of the probes at or below the 10th percentile read fast
    assert row["a_by_pace"]["fast_share"] >= 0.05 and row["a_by_pace"]["fast_ms"] > 0
    assert len(row["evaluations"]) == 3 and row["agreement"]["pairs"] == 3
    for e in row["evaluations"]:
        assert e["speedup"] > 0 and 0 <= e["fast_share"] <= 1 and 0 <= e["fast_trials"] <= 4
        assert (e["fast_speedup"] is None) == (e["fast_trials"] == 0)
    # every call kept, by evaluation, trial and program, as (probe µs, ms)
    calls = row["calls"]
    assert len(calls) == 3 and all(len(trials) == 4 for trials in calls)
    assert all(len(side) == row["calls_per_trial"] and all(p > 0 and ms >= 0 for p, ms in side)
               for trials in calls for pair in trials for side in pair)
    summary = call_pace.summary({"x": row})
    assert summary["rows"] == 1 and 0 <= summary["every_call"]["median"] <= summary["every_call"]["p95"]


def test_a_probe_precedes_each_call_outside_its_time() -> None:
    call_pace = load_script("call_pace")
    order: list[str] = []
    got = call_pace.probed_calls(lambda: order.append("call"), 3, lambda: order.append("sync"),
                                 lambda: order.append("flush"), probe_n=50)
    assert order == ["flush", "sync", "call", "sync"] * 3
    assert len(got) == 3 and all(p > 0 and ms >= 0 for p, ms in got)
