"""benchmarks/interleave.py times the same pair of forwards in two schemes that differ only in how the
calls alternate, with the same calls per trial, and reads each scheme's evaluations as two runs are read."""

from __future__ import annotations

import pytest
import torch
from scripts import load_script


def test_both_schemes_time_every_evaluation_with_the_same_calls_and_say_how_far_they_fall_apart() -> None:
    interleave = load_script("interleave")
    model = torch.nn.Linear(16, 16).eval()
    row = interleave.measure_row(model, [torch.randn(8, 16)], evaluations=3, trials=4, gap_s=0.0, cuda=False)
    assert 3 <= row["calls_per_trial"] <= 200
    for scheme in interleave.SCHEMES:
        got = row[scheme]
        assert len(got["evaluations"]) == 3 and got["agreement"]["pairs"] == 3
        for e in got["evaluations"]:
            assert e["speedup"] > 0 and e["a_ms"] > 0 and e["b_ms"] > 0 and e["trial_spread"] >= 0
        assert 0 <= got["agreement"]["median"] <= got["agreement"]["p95"]
    summary = interleave.summary({"x": row})
    assert set(summary) == set(interleave.SCHEMES) and summary["call"]["rows"] == 1


def test_a_trial_alternates_as_its_scheme_says_and_an_unknown_scheme_is_named() -> None:
    interleave = load_script("interleave")
    order: list[str] = []
    a, b = (lambda: order.append("a")), (lambda: order.append("b"))
    interleave.trial(a, b, 4, "call", lambda: None, lambda: None)
    # a warm-up call of each, then the pairs: never three calls of one program in a row
    assert order.count("a") == order.count("b") == 5
    assert all(order[i:i + 3] not in (["a"] * 3, ["b"] * 3) for i in range(len(order) - 2))
    order.clear()
    interleave.trial(a, b, 4, "batch", lambda: None, lambda: None)
    assert order in (["a"] * 5 + ["b"] * 5, ["b"] * 5 + ["a"] * 5)
    with pytest.raises(ValueError, match="unknown scheme 'rows'"):
        interleave.trial(a, b, 4, "rows", lambda: None, lambda: None)
